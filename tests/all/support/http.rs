//! A small HTTP/1.1 server on 127.0.0.1 for the local stand-ins of model APIs
//! (Anthropic Messages, OpenAI Responses), built on hyper.
//!
//! Why: the real APIs are unreachable from the test machines, and the agents under test
//! (real CLIs, the agent-SDK loop) must talk real HTTP and SSE to something. The server
//! runs on a thread of its own with its own Tokio runtime, so blocking tests can use it;
//! dropping the `Server` stops it and closes every connection, stalled ones included.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};

/// The body type every handler answers with.
pub type Body = BoxBody<Bytes, Infallible>;

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// How a server-sent-event stream ends after its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The response ends normally.
    Finish,
    /// The connection stays open and silent until the client gives up (timeouts).
    Stall,
}

/// A complete response with a body.
pub fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> hyper::Response<Body> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()).boxed())
        .unwrap()
}

/// A JSON response.
pub fn json(status: u16, value: &serde_json::Value) -> hyper::Response<Body> {
    full(status, "application/json", value.to_string())
}

/// A `text/event-stream` response: `events` as `(event name, JSON data)`, sent as separate
/// chunks a few milliseconds apart so clients see a real stream, then `ending`.
pub fn sse(events: Vec<(String, serde_json::Value)>, ending: Ending) -> hyper::Response<Body> {
    let frames = futures_util::stream::iter(events).then(|(name, data)| async move {
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok::<_, Infallible>(Frame::data(Bytes::from(format!(
            "event: {name}\ndata: {data}\n\n"
        ))))
    });
    let body: Body = match ending {
        Ending::Finish => BodyExt::boxed(StreamBody::new(frames)),
        Ending::Stall => BodyExt::boxed(StreamBody::new(
            frames.chain(futures_util::stream::pending()),
        )),
    };
    hyper::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap()
}

type Handler = dyn Fn(&Request) -> hyper::Response<Body> + Send + Sync;

/// A running server. Every request is recorded, in arrival order.
pub struct Server {
    addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts serving `handler` on a free port of 127.0.0.1.
    pub fn start(
        handler: impl Fn(&Request) -> hyper::Response<Body> + Send + Sync + 'static,
    ) -> Server {
        Server::start_on(std::net::Ipv4Addr::LOCALHOST.into(), handler)
    }

    /// Starts serving `handler` on a free port of `ip` (e.g. the Docker bridge's
    /// gateway, which containers reach and the host's loopback is not).
    pub fn start_on(
        ip: std::net::IpAddr,
        handler: impl Fn(&Request) -> hyper::Response<Body> + Send + Sync + 'static,
    ) -> Server {
        let handler: Arc<Handler> = Arc::new(handler);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let listener =
            std::net::TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("binding {ip}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let recorded = requests.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let accept = async {
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        let handler = handler.clone();
                        let recorded = recorded.clone();
                        tokio::spawn(async move {
                            let service = hyper::service::service_fn(move |req| {
                                let handler = handler.clone();
                                let recorded = recorded.clone();
                                async move {
                                    let request = read_request(req).await;
                                    recorded.lock().unwrap().push(request.clone());
                                    Ok::<_, Infallible>(handler(&request))
                                }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime cancels every connection task, stalled streams included.
        });
        Server {
            addr,
            requests,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn read_request(req: hyper::Request<hyper::body::Incoming>) -> Request {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    Request {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    }
}
