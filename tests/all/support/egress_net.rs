//! More of the hermetic network for the end-to-end egress tests (`egress_bypass.rs`):
//! upstreams that answer on any address or put TLS in front of a local server (a
//! package index, a git server, the Messages API stand-in), a UDP sink, and the
//! variables that make sandboxed clients trust the test CA. The CA and the DNS server
//! the egress proxy's resolver asks are `upstream::TestCa` and `dns::TestDns`.
//!
//! Why: an egress test must prove two things from the host — that an allowed client got
//! through, and that a refused one reached *nothing*. So every upstream records each
//! connection the moment it is accepted (before a byte is read), and every name a test
//! uses is answered by `dns::TestDns` (grants.yaml `egress.nameserver`), never by a real
//! resolver. Nothing here listens on or
//! dials an address outside this machine: upstreams are on 127.0.0.x or on the host's
//! own address ([`host_address`]), which a sandbox with a real network could reach and
//! a sandbox held to its allowlist must not.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::upstream::TestCa;

/// The host's own address on its default route (not loopback): reachable from a sandbox
/// with `network: bridge`, so an upstream there sees a bypass that gets out.
pub fn host_address() -> IpAddr {
    let socket = UdpSocket::bind("0.0.0.0:0").unwrap();
    socket.connect("10.255.255.255:9").unwrap();
    socket.local_addr().unwrap().ip()
}

/// The variables that make curl, git, Python (requests, pip), Node and npm trust the
/// test CA ([`TestCa`]) whose certificate is at `ca_path` inside the sandbox.
pub fn client_ca_environment(ca_path: &str) -> Vec<(&'static str, String)> {
    [
        "SSL_CERT_FILE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "REQUESTS_CA_BUNDLE",
        "PIP_CERT",
        "NODE_EXTRA_CA_CERTS",
        "npm_config_cafile",
    ]
    .into_iter()
    .map(|name| (name, ca_path.to_string()))
    .collect()
}

/// One connection an [`Upstream`] accepted.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The TLS server name the client sent, for a TLS upstream.
    pub sni: Option<String>,
    /// The request head, for an upstream that answers itself (empty when forwarding).
    pub head: String,
}

/// What an [`Upstream`] does with a connection once it has recorded it.
pub enum Behind {
    /// Reads the request head and answers `200` with the body `upstream-reached`.
    Answer,
    /// Carries the (decrypted) bytes both ways to a local plain-text server: TLS in
    /// front of a package index or a git server.
    Forward(SocketAddr),
}

/// What an upstream that answers itself sends back.
pub const UPSTREAM_BODY: &str = "upstream-reached";

/// A TCP server on a chosen address that records every connection it accepts.
pub struct Upstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Upstream {
    /// Plain TCP on a free port of `ip`.
    pub fn plain(ip: IpAddr, behind: Behind) -> Upstream {
        Upstream::start((ip, 0).into(), None, behind)
    }

    /// TLS on a free port of `ip`, presenting a certificate for `names` signed by `ca`.
    pub fn tls(ip: IpAddr, ca: &TestCa, names: &[&str], behind: Behind) -> Upstream {
        Upstream::start((ip, 0).into(), Some(ca.server_config(names)), behind)
    }

    /// On exactly `addr` (e.g. port 53 or 443 of a test address).
    pub fn start(
        addr: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
        behind: Behind,
    ) -> Upstream {
        let listener =
            std::net::TcpListener::bind(addr).unwrap_or_else(|e| panic!("binding {addr}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = seen.clone();
        let behind = Arc::new(behind);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
                let accept = async {
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        let index = {
                            let mut seen = recorded.lock().unwrap();
                            seen.push(Seen {
                                sni: None,
                                head: String::new(),
                            });
                            seen.len() - 1
                        };
                        let recorded = recorded.clone();
                        let behind = behind.clone();
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            match acceptor {
                                None => serve(stream, &behind, &recorded, index).await,
                                Some(acceptor) => {
                                    let Ok(stream) = acceptor.accept(stream).await else {
                                        return;
                                    };
                                    let sni = stream.get_ref().1.server_name().map(str::to_string);
                                    recorded.lock().unwrap()[index].sni = sni;
                                    serve(stream, &behind, &recorded, index).await
                                }
                            }
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
        });
        Upstream {
            addr,
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every connection accepted so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Panics, naming `attack` and what arrived, unless no connection was accepted.
    pub fn assert_saw_nothing(&self, attack: &str) {
        let seen = self.seen();
        assert!(
            seen.is_empty(),
            "{attack}: the upstream at {} saw {} connection(s): {seen:?}",
            self.addr,
            seen.len()
        );
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve<S>(mut stream: S, behind: &Behind, recorded: &Mutex<Vec<Seen>>, index: usize)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    match behind {
        Behind::Forward(backend) => {
            let Ok(mut backend) = tokio::net::TcpStream::connect(backend).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut stream, &mut backend).await;
        }
        Behind::Answer => {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            let read_head = async {
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(5), read_head).await;
            recorded.lock().unwrap()[index].head = String::from_utf8_lossy(&head).into_owned();
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{UPSTREAM_BODY}",
                UPSTREAM_BODY.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    }
}

/// A datagram a [`UdpSink`] received, with its sender.
pub type Datagram = (SocketAddr, Vec<u8>);

/// A UDP socket that records every datagram it receives: the target of a DNS query
/// sent past the sandbox's resolver.
pub struct UdpSink {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Datagram>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UdpSink {
    /// On `port` of `ip` when it is free (53 for a DNS query), else on a free port.
    pub fn bind(ip: IpAddr, port: u16) -> UdpSink {
        let socket = UdpSocket::bind((ip, port))
            .or_else(|_| UdpSocket::bind((ip, 0)))
            .unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let received = received.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, peer)) = socket.recv_from(&mut buf) {
                        received.lock().unwrap().push((peer, buf[..n].to_vec()));
                    }
                }
            })
        };
        UdpSink {
            addr,
            received,
            stop,
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn received(&self) -> Vec<Datagram> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for UdpSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
