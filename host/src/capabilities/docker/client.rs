//! The connection to the Docker engine, and what its errors mean to a plugin.
//!
//! The engine is found like the `docker` CLI finds it: `DOCKER_HOST` when set, the
//! local unix socket otherwise. The API version is negotiated with the engine, so an
//! older engine (Debian's 20.10 speaks API 1.41) is not refused for being older than
//! the client, once per process and engine address (the version is remembered). A
//! connection belongs to the async runtime that made it, so each
//! container keeps its own and other calls open a fresh one (a unix-socket connect).

use std::path::PathBuf;
use std::sync::Mutex;

use bollard::errors::Error as BollardError;
use bollard::{ClientVersion, Docker};

use crate::wit::types::Error;

const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// Where the engine is, for messages.
pub fn engine_address() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| format!("unix://{DEFAULT_SOCKET}"))
}

/// The engine's socket when it is on this machine.
pub fn local_socket() -> Option<PathBuf> {
    let address = engine_address();
    address.strip_prefix("unix://").map(PathBuf::from)
}

/// A connection to the engine, its API version agreed.
pub async fn connect() -> Result<Docker, Error> {
    // The version agreed with the engine at an address, so that only the first
    // connection of a process pays the round trip that asks for it.
    static AGREED: Mutex<Option<(String, ClientVersion)>> = Mutex::new(None);
    let address = engine_address();
    let agreed = AGREED.lock().unwrap().clone();
    let socket = address.strip_prefix("unix://");
    if let (Some((_, version)), Some(socket)) = (agreed.filter(|(at, _)| *at == address), socket) {
        return Docker::connect_with_unix(socket, CLIENT_TIMEOUT_SECS, &version)
            .map_err(unreachable);
    }
    let docker = Docker::connect_with_defaults().map_err(unreachable)?;
    let docker = docker.negotiate_version().await.map_err(unreachable)?;
    *AGREED.lock().unwrap() = Some((address, docker.client_version()));
    Ok(docker)
}

/// bollard's own default for a request's timeout.
const CLIENT_TIMEOUT_SECS: u64 = 120;

/// How to make the engine reachable.
pub const ENGINE_FIX: &str = "start it (`sudo dockerd &`, `systemctl start docker` or Docker \
    Desktop), make sure this user may use its socket (e.g. membership of the `docker` group), \
    or point DOCKER_HOST at it";

/// The engine could not be reached at all.
fn unreachable(e: BollardError) -> Error {
    // The client's error hides why a connect failed; a socket this user may not open
    // is the common case, and worth naming.
    let closed = local_socket()
        .filter(|socket| {
            use rustix::fs::{access, Access};
            socket.exists() && access(socket, Access::READ_OK | Access::WRITE_OK).is_err()
        })
        .map(|socket| format!(" ({} is not open to this user)", socket.display()))
        .unwrap_or_default();
    crate::capabilities::lacking(format!(
        "cannot reach the Docker engine at {}: {e}{closed}; {ENGINE_FIX}",
        engine_address()
    ))
}

/// The HTTP status of an engine error, when the engine answered.
pub fn status(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// An engine call failed while doing `what`.
pub fn failed(what: &str, e: BollardError) -> Error {
    match e {
        BollardError::DockerResponseServerError { message, .. } => {
            Error::Failed(format!("{what}: the Docker engine said: {message}"))
        }
        BollardError::HyperResponseError { .. }
        | BollardError::HyperLegacyError { .. }
        | BollardError::SocketNotFoundError(_)
        | BollardError::IOError { .. }
        | BollardError::RequestTimeoutError => unreachable(e),
        other => Error::Failed(format!("{what}: {other}")),
    }
}
