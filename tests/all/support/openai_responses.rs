//! A local server that speaks the OpenAI Responses API (`POST /v1/responses`, SSE), for
//! tests of the real Codex CLI.
//!
//! Why: api.openai.com is unreachable from the test machines, and Codex only completes
//! tool-use turns against something that streams Responses events: `response.created`,
//! `response.output_item.added` / `.done` (assistant `message`, `function_call`),
//! `response.output_text.delta`, then `response.completed` with usage, or
//! `response.failed`. Replies come from a script, one per model request (requests that
//! carry no `tools` do not consume it); when it runs out its last reply repeats.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::http::{self, Ending, Request, Server};

pub const INPUT_TOKENS: u64 = 200;
pub const OUTPUT_TOKENS: u64 = 30;

/// What the model does on one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Says `text`; the turn ends.
    Text(String),
    /// Calls Codex's shell tool `exec_command` with `{"cmd": cmd}`.
    Exec(String),
    /// Answers the HTTP request with this status and an OpenAI error body.
    Status(u16),
}

impl Reply {
    pub fn text(text: &str) -> Reply {
        Reply::Text(text.into())
    }

    pub fn exec(cmd: &str) -> Reply {
        Reply::Exec(cmd.into())
    }
}

/// A running Responses server. Dropping it stops it.
pub struct ResponsesServer {
    server: Server,
    served: Arc<Mutex<usize>>,
}

impl ResponsesServer {
    pub fn start(script: Vec<Reply>) -> ResponsesServer {
        assert!(
            !script.is_empty(),
            "a Responses script needs at least one reply"
        );
        let served = Arc::new(Mutex::new(0usize));
        let counter = served.clone();
        let server = Server::start(move |req| {
            if req.method != "POST" || req.path != "/v1/responses" {
                return error_response(404, &format!("no route {} {}", req.method, req.path));
            }
            let body = req.json();
            let model = body["model"].as_str().unwrap_or("gpt-5-codex").to_string();
            let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
            let (n, reply) = {
                let mut n = counter.lock().unwrap();
                let reply = if has_tools {
                    script[(*n).min(script.len() - 1)].clone()
                } else {
                    Reply::text("ok")
                };
                *n += usize::from(has_tools);
                (*n, reply)
            };
            answer(&reply, &model, n)
        });
        ResponsesServer { server, served }
    }

    /// The base URL for a Codex provider's `base_url` (ends in `/v1`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.url())
    }

    pub fn requests(&self) -> Vec<Request> {
        self.server.requests()
    }

    pub fn scripted_requests(&self) -> usize {
        *self.served.lock().unwrap()
    }
}

/// The `function_call_output` items of a request, as `(call_id, output)`.
pub fn function_outputs(request: &Request) -> Vec<(String, String)> {
    let body = request.json();
    body["input"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|i| i["type"] == "function_call_output")
                .map(|i| {
                    let output = match &i["output"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (i["call_id"].as_str().unwrap_or("").to_string(), output)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn error_response(status: u16, message: &str) -> hyper::Response<http::Body> {
    let code = match status {
        401 => "invalid_api_key",
        429 => "rate_limit_exceeded",
        _ => "server_error",
    };
    http::json(
        status,
        &json!({"error": {"message": message, "type": code, "param": null, "code": code}}),
    )
}

fn answer(reply: &Reply, model: &str, n: usize) -> hyper::Response<http::Body> {
    let id = format!("resp_local{n:04}");
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": id, "object": "response", "created_at": 0, "status": status,
               "model": model, "output": output, "usage": usage})
    };
    let event = |data: Value| (data["type"].as_str().unwrap().to_string(), data);
    let mut events = vec![event(json!({
        "type": "response.created",
        "response": response("in_progress", json!([]), Value::Null)
    }))];
    let item = match reply {
        Reply::Status(code) => return error_response(*code, &format!("scripted {code}")),
        Reply::Text(text) => json!({
            "type": "message", "id": format!("msg_{n}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]
        }),
        Reply::Exec(cmd) => json!({
            "type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
            "name": "exec_command", "arguments": json!({"cmd": cmd}).to_string(),
            "status": "completed"
        }),
    };
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    if added["type"] == "message" {
        added["content"] = json!([]);
    }
    events.push(event(
        json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
    ));
    if let Some(text) = item["content"][0]["text"].as_str() {
        events.push(event(json!({
            "type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
            "content_index": 0, "delta": text
        })));
    }
    events.push(event(
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    ));
    let usage = json!({
        "input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS
    });
    events.push(event(json!({
        "type": "response.completed",
        "response": response("completed", json!([item]), usage)
    })));
    http::sse(events, Ending::Finish)
}
