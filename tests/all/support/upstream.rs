//! Upstream servers on 127.0.0.x for the egress tests, plain HTTP or HTTPS under a
//! test CA, that record every connection they accept.
//!
//! Why: a refused attempt must leave its upstream untouched, so each test asks the
//! upstream what it saw (connections, request heads), not only what the client got.
//! Each server answers one request per connection with a body of a chosen size (the
//! byte counts of the proxy's report are checked against it); a request that asks for
//! `Upgrade: websocket` gets `101` and an echo of what follows. It runs on a thread
//! with its own Tokio runtime, so blocking tests can use it too; dropping it stops it.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A certificate authority made for one test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: with rcgen's default, the CA and its leaves share a
        // subject, and OpenSSL clients (curl, pip, git) take a leaf for self-signed.
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "agentgate egress test CA");
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        TestCa { issuer }
    }

    /// The CA certificate, PEM (for clients such as curl, git, pip).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server configuration with a certificate for `names`.
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let chain = vec![cert.der().clone(), self.issuer.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Arc::new(
            rustls::ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        )
    }

    /// A client configuration trusting only this CA.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.issuer.der().to_vec()))
            .unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }
}

impl Default for TestCa {
    fn default() -> TestCa {
        TestCa::new()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What an upstream saw.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// TCP connections accepted.
    pub connections: usize,
    /// Request heads read, as text.
    pub requests: Vec<String>,
}

pub struct Upstream {
    address: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Upstream {
    /// Plain HTTP on `ip` (a free port), answering with `body_len` bytes.
    pub fn http(ip: IpAddr, body_len: usize) -> Upstream {
        Upstream::start(ip, None, body_len)
    }

    /// HTTPS on `ip` with a certificate of `ca` for `names`.
    pub fn https(ip: IpAddr, ca: &TestCa, names: &[&str], body_len: usize) -> Upstream {
        Upstream::start(ip, Some(ca.server_config(names)), body_len)
    }

    fn start(ip: IpAddr, tls: Option<Arc<rustls::ServerConfig>>, body_len: usize) -> Upstream {
        let listener = std::net::TcpListener::bind(SocketAddr::new(ip, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let recorder = seen.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
                let serve = async {
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        recorder.lock().unwrap().connections += 1;
                        let recorder = recorder.clone();
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            match acceptor {
                                None => serve_http(stream, &recorder, body_len).await,
                                Some(acceptor) => {
                                    if let Ok(tls) = acceptor.accept(stream).await {
                                        serve_http(tls, &recorder, body_len).await;
                                    }
                                }
                            }
                        });
                    }
                };
                tokio::select! {
                    _ = serve => {}
                    _ = stopped => {}
                }
            });
        });
        Upstream {
            address,
            seen,
            stop: Some(stop),
        }
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The response head an upstream sends before a body of `body_len` bytes.
pub fn response_head(body_len: usize) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\nConnection: close\r\n\r\n")
}

async fn serve_http(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    seen: &Mutex<Seen>,
    body_len: usize,
) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    seen.lock().unwrap().requests.push(text.clone());
    if text.to_ascii_lowercase().contains("\r\nupgrade: websocket") {
        let _ = stream
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .await;
        let mut buffer = [0u8; 4096];
        while let Ok(n @ 1..) = stream.read(&mut buffer).await {
            if stream.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
        return;
    }
    if stream
        .write_all(response_head(body_len).as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let chunk = vec![b'x'; 64 * 1024];
    let mut left = body_len;
    while left > 0 {
        let n = left.min(chunk.len());
        if stream.write_all(&chunk[..n]).await.is_err() {
            return;
        }
        left -= n;
    }
    let _ = stream.shutdown().await;
}
