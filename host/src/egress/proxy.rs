//! The proxy server: a Unix socket, one task per client connection, every decision an
//! event.
//!
//! The socket lives in a folder only the host's user may enter (0700, checked), so
//! nothing on the host but the sandbox it is bound into reaches it; the socket itself is
//! 0666 so the sandbox's user, whatever its uid, can connect through the bind mount.
//!
//! A connection goes: request head (bounded, timed) → destination allowed by the
//! TaskSpec (and not refused by name in the operator's cap) → name resolved once → the
//! first address the operator's cap permits (its address entries checked on the
//! address, with the port) and that is either public or listed itself with that port →
//! for CONNECT, `200`, then the tunnel's first bytes checked ([`super::sniff`])
//! → only then the upstream is dialed, at the resolved address, and bytes are relayed
//! until both sides close or the connection is idle too long, every client byte through
//! a [`Guard`] (each later HTTP request checked too; a TLS tunnel stays TLS). A
//! refusal before the tunnel is a `403` with the reason in `X-Agentgate-Egress` and the
//! body; a refusal after `200` closes the tunnel (the client has nothing left to read a
//! status from).
//! No refused connection reaches an upstream.

use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::address::special_range;
use super::allowlist::{Target, TargetHost};
use super::guard::Guard;
use super::policy::Policy;
use super::report::{Ledger, Traffic};
use super::request::{self, printable, target_parts, BadRequest, ProxyRequest};
use super::sniff::{check_tunnel_start, Carried, Mismatch};
use crate::record::{EgressReport, EventBody, EventSink};

/// The event source of the proxy's decisions: its own, so an agent flooding the proxy
/// exhausts only this source's event budget, never the host's.
pub const EVENT_SOURCE: &str = "host:egress";

/// Bytes read at once in each direction of a relay: large reads keep a bulk download's
/// syscalls few (see bench/egress_proxy.sh).
const RELAY_BUFFER: usize = 128 * 1024;

/// Bounds on what one client may make the proxy hold.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Client connections served at once; more are answered `503` at once.
    pub max_connections: usize,
    /// Longest request head, and longest first tunnel message (a ClientHello).
    pub max_header_bytes: usize,
    /// Time for the request head and the tunnel's first message.
    pub handshake_timeout: Duration,
    /// Time to dial the upstream.
    pub connect_timeout: Duration,
    /// A relayed connection with no bytes either way this long is closed.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 256,
            max_header_bytes: 32 * 1024,
            handshake_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The socket's folder is missing, not a folder, not owned by the host's user, or open
    /// to others.
    #[error(
        "the proxy's socket folder {folder} must be a folder only its owner can enter (mode 0700, owned by uid {uid}): {problem}"
    )]
    SocketFolder {
        /// The folder the socket would be in.
        folder: PathBuf,
        /// The host's effective user id, which must own the folder.
        uid: u32,
        /// What is wrong with the folder.
        #[source]
        problem: FolderProblem,
    },
    /// Binding the socket, or making it writable for the sandbox, failed.
    #[error("cannot listen on {path}: {source}")]
    Listen {
        /// The socket's path.
        path: PathBuf,
        /// The error from binding the socket or setting its mode.
        source: std::io::Error,
    },
}

/// What is wrong with the proxy's socket folder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FolderProblem {
    #[error("{0}")]
    Unreadable(#[from] std::io::Error),
    #[error("not a folder")]
    NotAFolder,
    #[error("owned by uid {0}")]
    Owner(u32),
    #[error("its mode is {0:o}")]
    Mode(u32),
}

/// A running egress proxy. Dropping it without [`Proxy::stop`] stops it too (its tasks
/// end with the runtime or when the stop signal's sender drops).
pub struct Proxy {
    socket_path: PathBuf,
    ledger: Arc<Ledger>,
    stop: watch::Sender<bool>,
    server: Option<tokio::task::JoinHandle<()>>,
}

struct Shared {
    policy: Policy,
    limits: Limits,
    ledger: Arc<Ledger>,
    events: Arc<EventSink>,
}

impl Proxy {
    /// Listens on `socket_path` (in a 0700 folder of the host's user) with default
    /// [`Limits`]. Must be called within a Tokio runtime.
    pub async fn start(
        policy: Policy,
        socket_path: &Path,
        events: Arc<EventSink>,
    ) -> Result<Proxy, ProxyError> {
        Proxy::start_with_limits(policy, socket_path, events, Limits::default()).await
    }

    /// Like [`Proxy::start`], with the given limits.
    pub async fn start_with_limits(
        policy: Policy,
        socket_path: &Path,
        events: Arc<EventSink>,
        limits: Limits,
    ) -> Result<Proxy, ProxyError> {
        check_socket_folder(socket_path)?;
        let listen_error = |source| ProxyError::Listen {
            path: socket_path.to_path_buf(),
            source,
        };
        let listener = UnixListener::bind(socket_path).map_err(listen_error)?;
        std::fs::set_permissions(socket_path, std::fs::Permissions::from_mode(0o666))
            .map_err(listen_error)?;
        let ledger = Arc::new(Ledger::default());
        let shared = Arc::new(Shared {
            policy,
            limits,
            ledger: ledger.clone(),
            events,
        });
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(serve(listener, shared, stopped));
        Ok(Proxy {
            socket_path: socket_path.to_path_buf(),
            ledger,
            stop,
            server: Some(server),
        })
    }

    /// The socket clients connect to.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// What the proxy has seen so far.
    pub fn report(&self) -> EgressReport {
        self.ledger.report()
    }

    /// Closes the socket and every connection; returns the final report.
    pub async fn stop(mut self) -> EgressReport {
        let _ = self.stop.send(true);
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        let _ = std::fs::remove_file(&self.socket_path);
        self.ledger.report()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(server) = self.server.take() {
            server.abort();
            let _ = std::fs::remove_file(&self.socket_path);
        }
    }
}

fn check_socket_folder(socket_path: &Path) -> Result<(), ProxyError> {
    let uid = rustix::process::geteuid().as_raw();
    let folder = socket_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let problem = |problem: FolderProblem| ProxyError::SocketFolder {
        folder: folder.to_path_buf(),
        uid,
        problem,
    };
    let meta = std::fs::symlink_metadata(folder).map_err(|e| problem(e.into()))?;
    if !meta.is_dir() {
        return Err(problem(FolderProblem::NotAFolder));
    }
    if meta.uid() != uid {
        return Err(problem(FolderProblem::Owner(meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(problem(FolderProblem::Mode(meta.mode() & 0o777)));
    }
    Ok(())
}

async fn serve(listener: UnixListener, shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(shared.limits.max_connections));
    // Dropped (every connection aborted) when the server returns.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => return,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else {
                    // Out of descriptors or similar: wait rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let shared = shared.clone();
                match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        connections.spawn(async move {
                            handle(client, &shared).await;
                            drop(slot);
                        });
                    }
                    Err(_) => {
                        connections.spawn(async move { too_many(client, &shared).await });
                    }
                }
            }
        }
    }
}

/// A decision not to connect, with its short code and what to tell the client.
struct Refusal {
    code: &'static str,
    detail: String,
    target: Option<Target>,
    /// The address the refusal was decided on, when it was one.
    address: Option<SocketAddr>,
}

impl From<BadRequest> for Refusal {
    fn from(bad: BadRequest) -> Refusal {
        Refusal {
            code: bad.code,
            detail: bad.detail,
            target: bad.target,
            address: None,
        }
    }
}

impl Shared {
    fn record_refusal(&self, refusal: &Refusal) {
        let (host, port) = target_parts(refusal.target.as_ref());
        self.ledger
            .refused(&host, port, refusal.address, refusal.code);
        self.events.emit(
            EVENT_SOURCE,
            EventBody::Egress {
                host,
                port,
                address: refusal.address.map(|a| a.to_string()),
                allowed: false,
                // The detail may quote what the client sent.
                reason: format!("{}: {}", refusal.code, printable(&refusal.detail)),
            },
        );
    }

    /// Records a refusal decided after the connection was let through (the tunnel's
    /// first message, or a later one the guard refused); the connection is closed.
    fn record_mismatch(&self, mismatch: Mismatch, target: &Target, address: SocketAddr) {
        self.record_refusal(&Refusal {
            code: mismatch.code,
            detail: mismatch.detail,
            target: Some(target.clone()),
            address: Some(address),
        });
    }

    fn record_allowed(&self, target: &Target, address: SocketAddr, what: &str) -> Arc<Traffic> {
        self.events.emit(
            EVENT_SOURCE,
            EventBody::Egress {
                host: target.host.to_string(),
                port: Some(target.port),
                address: Some(address.to_string()),
                allowed: true,
                reason: format!("allowed: {what} to {address}"),
            },
        );
        self.ledger.connection(target, address)
    }
}

async fn too_many(mut client: UnixStream, shared: &Shared) {
    let refusal = Refusal {
        code: "too-many-connections",
        detail: format!(
            "{} connections are open; try again later",
            shared.limits.max_connections
        ),
        target: None,
        address: None,
    };
    shared.record_refusal(&refusal);
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        answer(&mut client, 503, "Service Unavailable", &refusal),
    )
    .await;
}

async fn handle(mut client: UnixStream, shared: &Shared) {
    let limits = &shared.limits;
    let mut buffer = Vec::new();
    let head = tokio::time::timeout(
        limits.handshake_timeout,
        request::read_head(&mut client, &mut buffer, limits.max_header_bytes),
    )
    .await
    .unwrap_or_else(|_| {
        Err(BadRequest {
            code: "request-timeout",
            detail: format!(
                "no complete request head within {}s",
                limits.handshake_timeout.as_secs()
            ),
            target: None,
        })
    })
    .and_then(|end| request::parse(&buffer[..end]).map(|request| (end, request)));
    let (end, request) = match head {
        Ok(parsed) => parsed,
        Err(bad) => return refuse(&mut client, shared, bad.into()).await,
    };
    let after_head = buffer.split_off(end);
    match request {
        ProxyRequest::Connect { target } => {
            let address = match decide(shared, &target).await {
                Ok(address) => address,
                Err(refusal) => return refuse(&mut client, shared, refusal).await,
            };
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            let mut first = after_head;
            let carried = match check_tunnel_start(
                &mut client,
                &mut first,
                &target,
                limits.max_header_bytes,
                limits.handshake_timeout,
            )
            .await
            {
                Ok(carried) => carried,
                Err(mismatch) => {
                    // After `200` there is no status to send: record, then close.
                    return shared.record_mismatch(mismatch, &target, address);
                }
            };
            let Some(upstream) = dial(shared, &target, address).await else {
                return;
            };
            let guard = match carried {
                Carried::Tls => Guard::tls(),
                Carried::Http => Guard::http_tunnel(&target, limits.max_header_bytes),
            };
            let traffic = shared.record_allowed(&target, address, "tunnel");
            relay(
                client,
                upstream,
                first,
                guard,
                &traffic,
                limits.idle_timeout,
                |mismatch| shared.record_mismatch(mismatch, &target, address),
            )
            .await;
        }
        ProxyRequest::Forward {
            target,
            head,
            upgrade,
            body,
        } => {
            let address = match decide(shared, &target).await {
                Ok(address) => address,
                Err(refusal) => return refuse(&mut client, shared, refusal).await,
            };
            let Some(mut upstream) = dial(shared, &target, address).await else {
                let refusal = Refusal {
                    code: "upstream-unreachable",
                    detail: format!("cannot connect to {target} at {address}"),
                    target: Some(target),
                    address: Some(address),
                };
                let _ = answer(&mut client, 502, "Bad Gateway", &refusal).await;
                return;
            };
            let what = if upgrade {
                "HTTP upgrade"
            } else {
                "HTTP request"
            };
            let traffic = shared.record_allowed(&target, address, what);
            // The head was checked whole; the guard takes over after it.
            match tokio::time::timeout(limits.idle_timeout, upstream.write_all(&head)).await {
                Ok(Ok(())) => traffic
                    .bytes_up
                    .fetch_add(head.len() as u64, Ordering::Relaxed),
                _ => return,
            };
            let guard = Guard::forwarded(&target, limits.max_header_bytes, body, upgrade);
            relay(
                client,
                upstream,
                after_head,
                guard,
                &traffic,
                limits.idle_timeout,
                |mismatch| shared.record_mismatch(mismatch, &target, address),
            )
            .await;
        }
    }
}

/// Whether `target` may be reached, and at which address: the first address it
/// resolves to that the operator's cap permits and that is public or listed itself, with
/// its port. Every check that involves an address is made on the address dialed.
async fn decide(shared: &Shared, target: &Target) -> Result<SocketAddr, Refusal> {
    let policy = &shared.policy;
    let refusal = |code, detail, address| Refusal {
        code,
        detail,
        target: Some(target.clone()),
        address,
    };
    if !policy.allow.allows(target) {
        return Err(refusal(
            "not-allowed",
            format!("{target} is not in the task's egress allowlist"),
            None,
        ));
    }
    if policy.cap.refuses_name(target) {
        return Err(refusal(
            "operator-denied",
            format!("the operator's grants.yaml does not permit {target}"),
            None,
        ));
    }
    let addresses = match &target.host {
        TargetHost::Ip(ip) => vec![*ip],
        TargetHost::Name(name) => policy
            .resolver
            .resolve(name)
            .await
            .map_err(|e| refusal("resolve-failed", e.to_string(), None))?,
    };
    let mut first_refusal = None;
    for ip in addresses {
        let address = SocketAddr::new(ip, target.port);
        let refused = if !policy.cap.permits(target, address) {
            refusal(
                "operator-denied",
                format!(
                    "{} resolves to {address}, which the operator's grants.yaml does not permit",
                    target.host
                ),
                Some(address),
            )
        } else if let Some(range) =
            special_range(ip).filter(|_| !policy.allow.lists_address(address))
        {
            refusal(
                "special-address",
                format!(
                    "{} resolves to {ip}, a {range} address; list that address itself with \
                     its port ({address}) to allow it",
                    target.host
                ),
                Some(address),
            )
        } else {
            return Ok(address);
        };
        first_refusal.get_or_insert(refused);
    }
    Err(first_refusal
        .unwrap_or_else(|| refusal("resolve-failed", format!("{target}: no address"), None)))
}

/// Dials the resolved address; a failure is recorded as a refusal.
async fn dial(shared: &Shared, target: &Target, address: SocketAddr) -> Option<TcpStream> {
    let failure = match tokio::time::timeout(
        shared.limits.connect_timeout,
        TcpStream::connect(address),
    )
    .await
    {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            return Some(stream);
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer in time".to_string(),
    };
    shared.record_refusal(&Refusal {
        code: "upstream-unreachable",
        detail: format!("cannot connect to {address}: {failure}"),
        target: Some(target.clone()),
        address: Some(address),
    });
    None
}

async fn refuse(client: &mut UnixStream, shared: &Shared, refusal: Refusal) {
    shared.record_refusal(&refusal);
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        answer(client, 403, "Forbidden", &refusal),
    )
    .await;
}

async fn answer(
    client: &mut UnixStream,
    status: u16,
    phrase: &str,
    refusal: &Refusal,
) -> std::io::Result<()> {
    let body = format!(
        "agentgate egress proxy: {}: {}\n",
        refusal.code,
        printable(&refusal.detail)
    );
    let response = format!(
        "HTTP/1.1 {status} {phrase}\r\nX-Agentgate-Egress: {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        refusal.code,
        body.len()
    );
    client.write_all(response.as_bytes()).await?;
    client.shutdown().await
}

/// Relays bytes both ways, `first` (already read from the client) before the rest,
/// every client byte through `guard`, counting them, until both sides close or nothing
/// moves for `idle`. A refusal of the guard goes to `refused` while both sides are still
/// open (so it is recorded before the client sees the close), then both are closed.
async fn relay(
    client: UnixStream,
    upstream: TcpStream,
    first: Vec<u8>,
    mut guard: Guard,
    traffic: &Traffic,
    idle: Duration,
    refused: impl FnOnce(Mismatch),
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let outcome: Result<(), Mismatch> = async {
        let mut checked = Vec::with_capacity(RELAY_BUFFER);
        guard.feed(&first, &mut checked)?;
        if !send(&mut upstream_write, &checked, &traffic.bytes_up, idle).await {
            return Ok(());
        }
        let mut up = vec![0u8; RELAY_BUFFER];
        let mut down = vec![0u8; RELAY_BUFFER];
        let (mut client_open, mut upstream_open) = (true, true);
        while client_open || upstream_open {
            checked.clear();
            tokio::select! {
                read = client_read.read(&mut up), if client_open && !guard.waits_for_upstream() => match read {
                    Ok(n) if n > 0 => {
                        guard.feed(&up[..n], &mut checked)?;
                        if !send(&mut upstream_write, &checked, &traffic.bytes_up, idle).await {
                            return Ok(());
                        }
                    }
                    _ => {
                        client_open = false;
                        let _ = upstream_write.shutdown().await;
                    }
                },
                read = upstream_read.read(&mut down), if upstream_open => match read {
                    Ok(n) if n > 0 => {
                        guard.upstream(&down[..n], &mut checked)?;
                        if !send(&mut client_write, &down[..n], &traffic.bytes_down, idle).await
                            || !send(&mut upstream_write, &checked, &traffic.bytes_up, idle).await
                        {
                            return Ok(());
                        }
                    }
                    _ => {
                        if guard.waits_for_upstream() {
                            // Closed without answering the upgrade: nothing more to relay.
                            return Ok(());
                        }
                        upstream_open = false;
                        let _ = client_write.shutdown().await;
                    }
                },
                _ = tokio::time::sleep(idle) => return Ok(()),
            }
        }
        Ok(())
    }
    .await;
    if let Err(mismatch) = outcome {
        refused(mismatch);
    }
}

/// Writes `bytes` (if any) within `idle` and counts them; false when the side is gone.
async fn send(
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    bytes: &[u8],
    count: &std::sync::atomic::AtomicU64,
    idle: Duration,
) -> bool {
    if bytes.is_empty() {
        return true;
    }
    match tokio::time::timeout(idle, to.write_all(bytes)).await {
        Ok(Ok(())) => {
            count.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            true
        }
        _ => false,
    }
}
