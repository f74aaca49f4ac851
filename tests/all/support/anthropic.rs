//! A local server that speaks the Anthropic Messages API, for tests of the agents that
//! call it (the real Claude Code CLI, the agent-SDK loop plugin).
//!
//! Why: api.anthropic.com is unreachable from the test machines, and the point of the
//! tests is that the real agent completes real tool-use turns. The server answers
//! `POST /v1/messages` (with or without `?beta=true`) from a script of [`Reply`]s, one per
//! model request, streaming SSE exactly as the API documents (`message_start`,
//! `content_block_*`, `message_delta`, `message_stop`, `error`) or returning one JSON
//! message when the request does not ask for `stream`. `HEAD /` (Claude Code's
//! connectivity probe) answers 200. Errors are injectable: an HTTP status with the API's
//! error body (401, 429, 500, 529, ...), an in-stream `error` event, and a stall that
//! never finishes (for timeouts and killing the client mid-stream).
//!
//! Requests that carry no `tools` (side requests such as title generation) get a short
//! text answer without consuming the script. When the script runs out, its last reply
//! repeats, so `[Reply::status(401)]` answers every retry with 401.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::http::{self, Ending, Request, Server};

/// Tokens reported for every scripted reply, so tests can check the accounting.
pub const INPUT_TOKENS: u64 = 100;
pub const OUTPUT_TOKENS: u64 = 20;

/// What the model does on one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Says `text` and ends its turn (`end_turn`).
    Text(String),
    /// Says `text` (when not empty), then calls tool `name` with `input` (`tool_use`).
    Tool {
        text: String,
        name: String,
        input: Value,
    },
    /// Answers the HTTP request with this status and the API's error body.
    Status(u16),
    /// Starts the stream, then sends an `error` event of this API error type
    /// (`overloaded_error`, `api_error`, ...) and ends.
    StreamError(String),
    /// Starts the stream (`message_start`, a text block start) and then stays silent
    /// until the client hangs up.
    Stall,
}

impl Reply {
    pub fn text(text: &str) -> Reply {
        Reply::Text(text.into())
    }

    /// Claude Code's `Bash` tool running `command`.
    pub fn bash(command: &str) -> Reply {
        Reply::Tool {
            text: format!("Running `{command}`."),
            name: "Bash".into(),
            input: json!({"command": command, "description": "scripted step"}),
        }
    }

    pub fn tool(name: &str, input: Value) -> Reply {
        Reply::Tool {
            text: String::new(),
            name: name.into(),
            input,
        }
    }

    pub fn status(code: u16) -> Reply {
        Reply::Status(code)
    }
}

/// The API's error `type` for an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// A running Messages server. Dropping it stops it.
pub struct AnthropicServer {
    server: Server,
    served: Arc<Mutex<usize>>,
}

impl AnthropicServer {
    /// Serves `script` on 127.0.0.1.
    pub fn start(script: Vec<Reply>) -> AnthropicServer {
        AnthropicServer::start_on(std::net::Ipv4Addr::LOCALHOST.into(), script)
    }

    /// Serves `script` on `ip`.
    pub fn start_on(ip: std::net::IpAddr, script: Vec<Reply>) -> AnthropicServer {
        assert!(
            !script.is_empty(),
            "a Messages script needs at least one reply"
        );
        let served = Arc::new(Mutex::new(0usize));
        let counter = served.clone();
        let server = Server::start_on(ip, move |req| {
            if req.method == "HEAD" || (req.method == "GET" && req.path == "/") {
                return http::full(200, "text/plain", "");
            }
            if req.method != "POST" || req.path != "/v1/messages" {
                return error_response(404, &format!("no route {} {}", req.method, req.path));
            }
            let body = req.json();
            let model = body["model"]
                .as_str()
                .unwrap_or("claude-sonnet-4-5")
                .to_string();
            let stream = body["stream"].as_bool().unwrap_or(false);
            let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
            let reply = if has_tools {
                let mut n = counter.lock().unwrap();
                let reply = script[(*n).min(script.len() - 1)].clone();
                *n += 1;
                reply
            } else {
                Reply::text("ok")
            };
            answer(&reply, &model, stream, message_id())
        });
        AnthropicServer { server, served }
    }

    /// The base URL for `ANTHROPIC_BASE_URL`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Every request received, probes included.
    pub fn requests(&self) -> Vec<Request> {
        self.server.requests()
    }

    /// The model requests (POST /v1/messages), in order.
    pub fn message_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == "/v1/messages")
            .collect()
    }

    /// How many requests the script has answered (side requests without tools excluded).
    pub fn scripted_requests(&self) -> usize {
        *self.served.lock().unwrap()
    }
}

/// The `tool_result` blocks of a request's last user message, as `(tool_use_id, text)`.
pub fn tool_results(request: &Request) -> Vec<(String, String)> {
    let body = request.json();
    let Some(last) = body["messages"].as_array().and_then(|m| m.last()) else {
        return Vec::new();
    };
    let Some(blocks) = last["content"].as_array() else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            let text = match &b["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                other => other.to_string(),
            };
            (b["tool_use_id"].as_str().unwrap_or("").to_string(), text)
        })
        .collect()
}

fn message_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("msg_local{n:06}")
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn error_response(status: u16, message: &str) -> hyper::Response<http::Body> {
    let mut response = http::json(status, &error_body(error_type(status), message));
    if status == 429 || status == 529 {
        // Clients honour retry-after; zero keeps retry tests fast.
        response
            .headers_mut()
            .insert("retry-after", hyper::header::HeaderValue::from_static("0"));
    }
    response
}

/// The content blocks and stop reason of a reply that produces a message.
fn blocks(reply: &Reply, id: &str) -> (Vec<Value>, &'static str) {
    match reply {
        Reply::Text(text) => (vec![json!({"type": "text", "text": text})], "end_turn"),
        Reply::Tool { text, name, input } => {
            let mut blocks = Vec::new();
            if !text.is_empty() {
                blocks.push(json!({"type": "text", "text": text}));
            }
            blocks.push(json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": name, "input": input}));
            (blocks, "tool_use")
        }
        _ => (Vec::new(), "end_turn"),
    }
}

fn usage(output_tokens: u64) -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0
    })
}

fn answer(reply: &Reply, model: &str, stream: bool, id: String) -> hyper::Response<http::Body> {
    if let Reply::Status(code) = reply {
        return error_response(*code, &format!("scripted {code}"));
    }
    let (content, stop_reason) = blocks(reply, &id);
    if !stream {
        return match reply {
            Reply::StreamError(kind) => error_response(500, kind),
            Reply::Stall => http::sse(Vec::new(), Ending::Stall),
            _ => http::json(
                200,
                &json!({
                    "id": id, "type": "message", "role": "assistant", "model": model,
                    "content": content, "stop_reason": stop_reason, "stop_sequence": null,
                    "usage": usage(OUTPUT_TOKENS)
                }),
            ),
        };
    }
    let event = |name: &str, data: Value| (name.to_string(), data);
    let mut events = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": usage(1)
        }}),
    )];
    match reply {
        Reply::StreamError(kind) => {
            events.push(event("ping", json!({"type": "ping"})));
            events.push(event(
                "error",
                error_body(kind, &format!("scripted in-stream {kind}")),
            ));
            return http::sse(events, Ending::Finish);
        }
        Reply::Stall => {
            events.push(event(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ));
            return http::sse(events, Ending::Stall);
        }
        _ => {}
    }
    for (index, block) in content.iter().enumerate() {
        let start = match block["type"].as_str() {
            Some("tool_use") => {
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}})
            }
            _ => json!({"type": "text", "text": ""}),
        };
        events.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        let delta = match block["type"].as_str() {
            Some("tool_use") => {
                json!({"type": "input_json_delta", "partial_json": block["input"].to_string()})
            }
            _ => json!({"type": "text_delta", "text": block["text"]}),
        };
        events.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
        events.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push(event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": OUTPUT_TOKENS}}),
    ));
    events.push(event("message_stop", json!({"type": "message_stop"})));
    http::sse(events, Ending::Finish)
}
