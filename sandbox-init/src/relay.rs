//! The sandbox's side of the host's egress proxy.
//!
//! A sandbox with an egress allowlist has only loopback; the host binds its proxy's
//! Unix socket in. Clients inside expect TCP, so the init listens on loopback before
//! it runs the command and hands every connection to that socket:
//!
//! - `127.0.0.1:3128`, the address the proxy variables name, is relayed as is (the
//!   client speaks the proxy protocol itself);
//! - each allowed `name:port` gets an address of its own, `127.1.x.y` (the sandbox's
//!   `/etc/hosts` maps the name to it), and a listener on it that opens
//!   `CONNECT name:port` on the client's behalf, so a client that ignores the proxy
//!   variables still reaches exactly that destination, through the proxy.
//!
//! The relays decide nothing: the proxy checks every destination again.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the proxy variables point inside the sandbox.
pub const PROXY_ADDRESS: &str = "127.0.0.1:3128";

/// What the relays need: the proxy's socket inside the sandbox and the allowlist.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Egress {
    pub socket: PathBuf,
    pub allow: Vec<String>,
}

/// The names (not IP literals, not wildcards) of `allow` with the port and the
/// loopback address each is given inside the sandbox, in allowlist order.
pub fn transparent_names(allow: &[String]) -> Vec<(String, u16, Ipv4Addr)> {
    let mut names = Vec::new();
    for entry in allow {
        let Some((host, port)) = entry.rsplit_once(':') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        let is_name = !host.is_empty()
            && !host.starts_with('*')
            && !host.starts_with('[')
            && host.parse::<std::net::IpAddr>().is_err();
        if !is_name {
            continue;
        }
        let host = host.to_ascii_lowercase();
        let address = match names
            .iter()
            .find(|(h, _, _): &&(String, u16, Ipv4Addr)| *h == host)
        {
            Some((_, _, address)) => *address,
            None => {
                let n = names
                    .iter()
                    .map(|(_, _, a): &(String, u16, Ipv4Addr)| *a)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
                    + 1;
                Ipv4Addr::new(127, 1, (n >> 8) as u8, (n & 0xff) as u8)
            }
        };
        names.push((host, port, address));
    }
    names
}

/// The sandbox's `/etc/hosts`: loopback, and each allowed name at its address.
pub fn hosts_file(allow: &[String]) -> String {
    let mut text = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost\n");
    let mut seen = std::collections::BTreeSet::new();
    for (name, _, address) in transparent_names(allow) {
        if seen.insert(name.clone()) {
            text.push_str(&format!("{address}\t{name}\n"));
        }
    }
    text
}

/// Listeners bound before the command runs, so it never finds them missing.
pub struct Relays {
    socket: PathBuf,
    listeners: Vec<(TcpListener, Option<String>)>,
}

impl Relays {
    pub fn bind(egress: &Egress) -> std::io::Result<Relays> {
        let mut listeners = vec![(TcpListener::bind(PROXY_ADDRESS)?, None)];
        for (name, port, address) in transparent_names(&egress.allow) {
            let listener = TcpListener::bind(SocketAddr::from((address, port)))?;
            listeners.push((listener, Some(format!("{name}:{port}"))));
        }
        Ok(Relays {
            socket: egress.socket.clone(),
            listeners,
        })
    }

    /// Serves every listener until the process is killed.
    pub fn serve(self) -> ! {
        let socket: Arc<Path> = self.socket.into();
        for (listener, target) in self.listeners {
            let socket = socket.clone();
            std::thread::spawn(move || {
                for client in listener.incoming().flatten() {
                    let socket = socket.clone();
                    let target = target.clone();
                    std::thread::spawn(move || relay(client, &socket, target.as_deref()));
                }
            });
        }
        loop {
            std::thread::park();
        }
    }
}

/// One connection: to the proxy, through a `CONNECT` when `target` is set, then both
/// ways until either side closes.
fn relay(client: TcpStream, socket: &Path, target: Option<&str>) {
    let Ok(mut proxy) = UnixStream::connect(socket) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    if let Some(target) = target {
        if connect(&mut proxy, target).is_err() {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
    }
    let (Ok(mut client_read), Ok(mut proxy_write)) = (client.try_clone(), proxy.try_clone()) else {
        return;
    };
    let upstream = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_read, &mut proxy_write);
        let _ = proxy_write.shutdown(Shutdown::Write);
    });
    let (mut proxy_read, mut client_write) = (proxy, client);
    let _ = std::io::copy(&mut proxy_read, &mut client_write);
    let _ = client_write.shutdown(Shutdown::Write);
    let _ = upstream.join();
}

/// Opens a tunnel to `target`; Ok once the proxy answered 2xx, with nothing after
/// its head consumed.
fn connect(proxy: &mut UnixStream, target: &str) -> std::io::Result<()> {
    write!(proxy, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")?;
    // Read byte by byte so nothing of the tunnel is taken with the head.
    let mut reader = BufReader::with_capacity(1, &mut *proxy);
    let mut status = String::new();
    reader.read_line(&mut status)?;
    let ok = status
        .split_whitespace()
        .nth(1)
        .is_some_and(|code| code.starts_with('2'));
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::other(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_loopback_addresses_and_ip_literals_none() {
        let allow: Vec<String> = [
            "a.test:443",
            "a.test:80",
            "b.test:8080",
            "192.0.2.1:80",
            "*.c.test:443",
        ]
        .map(String::from)
        .into();
        let names = transparent_names(&allow);
        let a = Ipv4Addr::new(127, 1, 0, 1);
        let b = Ipv4Addr::new(127, 1, 0, 2);
        assert_eq!(
            names,
            [
                ("a.test".to_string(), 443, a),
                ("a.test".to_string(), 80, a),
                ("b.test".to_string(), 8080, b)
            ]
        );
        assert_eq!(
            hosts_file(&allow),
            "127.0.0.1\tlocalhost\n::1\tlocalhost\n127.1.0.1\ta.test\n127.1.0.2\tb.test\n"
        );
    }
}
