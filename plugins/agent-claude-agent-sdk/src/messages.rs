//! The Anthropic Messages API, as far as the loop needs it: the request body, the
//! streamed answer assembled into one assistant turn, error bodies, and usage.
//!
//! Stream events are typed; event types this version does not know (the API adds
//! some over time) are skipped, never a failure.

use serde::Deserialize;
use serde_json::{json, Value};

/// One request of the loop.
pub struct Request<'a> {
    pub model: &'a str,
    pub max_tokens: u64,
    pub temperature: Option<f64>,
    pub system: Option<&'a str>,
    pub tools: &'a [Value],
    pub messages: &'a [Value],
}

impl Request<'_> {
    /// The JSON body, streaming.
    pub fn body(&self) -> Value {
        let mut body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": self.messages,
            "stream": true,
        });
        if let Some(t) = self.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(system) = self.system.filter(|s| !s.is_empty()) {
            body["system"] = json!(system);
        }
        if !self.tools.is_empty() {
            body["tools"] = json!(self.tools);
        }
        body
    }
}

/// Token counts, summed over turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Tokens {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Tokens {
    /// Every token the turns consumed or produced, cached input included.
    pub fn total(&self) -> u64 {
        self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
    }

    pub fn add(&mut self, other: &Tokens) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
    }
}

/// An `error` object, in an error response or an in-stream `error` event.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ApiError {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub message: String,
}

/// The error of a non-2xx response body, when it is the API's JSON.
pub fn error_of_body(body: &[u8]) -> Option<ApiError> {
    #[derive(Deserialize)]
    struct Body {
        error: ApiError,
    }
    serde_json::from_slice::<Body>(body).ok().map(|b| b.error)
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent {
    MessageStart {
        message: MessageStart,
    },
    ContentBlockStart {
        index: usize,
        content_block: Value,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    ContentBlockStop {
        #[allow(dead_code)]
        index: usize,
    },
    MessageDelta {
        delta: MessageDelta,
        #[serde(default)]
        usage: Option<Value>,
    },
    MessageStop,
    Ping,
    Error {
        error: ApiError,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
struct MessageStart {
    #[serde(default)]
    id: String,
    #[serde(default)]
    usage: Tokens,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// A content block while it streams.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        /// The input's JSON text as it arrived.
        json: String,
    },
    /// A block type the loop does not act on, kept as it started.
    Other(Value),
}

/// What went wrong in a stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamError {
    /// The API sent an `error` event.
    Api(ApiError),
    /// A `data` line that is not the JSON of an event.
    Malformed { event: String, reason: String },
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::Api(e) => write!(
                f,
                "the API sent an error mid-stream: {} ({})",
                e.message, e.kind
            ),
            StreamError::Malformed { event, reason } => {
                write!(f, "the API sent a malformed {event:?} event: {reason}")
            }
        }
    }
}

/// One assistant turn, assembled from its stream events.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Turn {
    pub message_id: String,
    pub blocks: Vec<Block>,
    pub stop_reason: Option<String>,
    pub usage: Tokens,
    /// Whether `message_stop` arrived.
    pub complete: bool,
}

/// A block the turn finished, for events as they happen.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

impl Turn {
    /// Applies one SSE event (`event` name, `data` text). Returns the block a
    /// `content_block_stop` finished, if any.
    pub fn apply(&mut self, event: &str, data: &str) -> Result<Option<Finished>, StreamError> {
        let parsed: StreamEvent =
            serde_json::from_str(data).map_err(|e| StreamError::Malformed {
                event: event.to_string(),
                reason: e.to_string(),
            })?;
        match parsed {
            StreamEvent::MessageStart { message } => {
                self.message_id = message.id;
                self.usage = message.usage;
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let block = match content_block["type"].as_str() {
                    Some("text") => {
                        Block::Text(content_block["text"].as_str().unwrap_or_default().into())
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: content_block["id"].as_str().unwrap_or_default().into(),
                        name: content_block["name"].as_str().unwrap_or_default().into(),
                        json: String::new(),
                    },
                    _ => Block::Other(content_block),
                };
                if self.blocks.len() <= index {
                    self.blocks.resize(index + 1, Block::Other(Value::Null));
                }
                self.blocks[index] = block;
            }
            StreamEvent::ContentBlockDelta { index, delta } => {
                match (self.blocks.get_mut(index), delta) {
                    (Some(Block::Text(text)), Delta::Text { text: more }) => text.push_str(&more),
                    (Some(Block::ToolUse { json, .. }), Delta::InputJson { partial_json }) => {
                        json.push_str(&partial_json)
                    }
                    _ => {}
                }
            }
            StreamEvent::ContentBlockStop { index } => {
                return Ok(match self.blocks.get(index) {
                    Some(Block::Text(text)) => Some(Finished::Text(text.clone())),
                    Some(Block::ToolUse { id, name, json }) => Some(Finished::ToolUse {
                        id: id.clone(),
                        name: name.clone(),
                        input: tool_input(json),
                    }),
                    _ => None,
                });
            }
            StreamEvent::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                // The counts in `message_delta` are cumulative for the message.
                if let Some(usage) = usage {
                    let set = |field: &str, slot: &mut u64| {
                        if let Some(n) = usage[field].as_u64() {
                            *slot = n;
                        }
                    };
                    set("output_tokens", &mut self.usage.output_tokens);
                    set("input_tokens", &mut self.usage.input_tokens);
                    set(
                        "cache_creation_input_tokens",
                        &mut self.usage.cache_creation_input_tokens,
                    );
                    set(
                        "cache_read_input_tokens",
                        &mut self.usage.cache_read_input_tokens,
                    );
                }
            }
            StreamEvent::MessageStop => self.complete = true,
            StreamEvent::Ping | StreamEvent::Unknown => {}
            StreamEvent::Error { error } => return Err(StreamError::Api(error)),
        }
        Ok(None)
    }

    /// The assistant message for the conversation history.
    pub fn message(&self) -> Value {
        let content: Vec<Value> = self
            .blocks
            .iter()
            .filter_map(|block| match block {
                Block::Text(text) if text.is_empty() => None,
                Block::Text(text) => Some(json!({"type": "text", "text": text})),
                Block::ToolUse { id, name, json } => Some(json!({
                    "type": "tool_use", "id": id, "name": name, "input": tool_input(json),
                })),
                Block::Other(Value::Null) => None,
                Block::Other(value) => Some(value.clone()),
            })
            .collect();
        json!({"role": "assistant", "content": content})
    }

    /// The tool calls of the turn, in order.
    pub fn tool_uses(&self) -> Vec<(String, String, Value)> {
        self.blocks
            .iter()
            .filter_map(|block| match block {
                Block::ToolUse { id, name, json } => {
                    Some((id.clone(), name.clone(), tool_input(json)))
                }
                _ => None,
            })
            .collect()
    }

    /// The turn's text, blocks joined.
    pub fn text(&self) -> String {
        self.blocks
            .iter()
            .filter_map(|block| match block {
                Block::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A tool's input from its streamed JSON; an empty input is `{}`. Text that is not
/// JSON is kept as a string, so the tool can report the problem to the model.
fn tool_input(json: &str) -> Value {
    if json.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(json).unwrap_or_else(|_| Value::String(json.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool-use turn as the API streams it (shapes from the Messages streaming docs).
    const TOOL_TURN: &[(&str, &str)] = &[
        (
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"usage":{"input_tokens":25,"output_tokens":1,"cache_read_input_tokens":7}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        ("ping", r#"{"type":"ping"}"#),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"look."}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"bash","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"command\": \"l"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"s\"}"}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":1}"#,
        ),
        ("some_future_event", r#"{"type":"some_future_event","x":1}"#),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ];

    #[test]
    fn a_tool_use_turn_is_assembled() {
        let mut turn = Turn::default();
        let mut finished = Vec::new();
        for (event, data) in TOOL_TURN {
            finished.extend(turn.apply(event, data).unwrap());
        }
        assert!(turn.complete);
        assert_eq!(turn.message_id, "msg_1");
        assert_eq!(turn.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(turn.usage.input_tokens, 25);
        assert_eq!(turn.usage.output_tokens, 42);
        assert_eq!(turn.usage.cache_read_input_tokens, 7);
        assert_eq!(turn.text(), "Let me look.");
        assert_eq!(
            finished,
            [
                Finished::Text("Let me look.".into()),
                Finished::ToolUse {
                    id: "toolu_1".into(),
                    name: "bash".into(),
                    input: json!({"command": "ls"})
                }
            ]
        );
        assert_eq!(
            turn.message(),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
            ]})
        );
    }

    #[test]
    fn an_error_event_and_malformed_data_are_errors_that_say_so() {
        let mut turn = Turn::default();
        let err = turn
            .apply(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the API sent an error mid-stream: Overloaded (overloaded_error)"
        );
        let err = turn.apply("message_start", "{not json").unwrap_err();
        assert!(
            err.to_string().contains("malformed \"message_start\""),
            "{err}"
        );
    }

    #[test]
    fn error_bodies_are_read() {
        let body = br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        let error = error_of_body(body).unwrap();
        assert_eq!(error.kind, "authentication_error");
        assert_eq!(error.message, "invalid x-api-key");
        assert!(error_of_body(b"<html>bad gateway</html>").is_none());
    }

    #[test]
    fn the_request_body_carries_only_what_is_set() {
        let messages = [json!({"role": "user", "content": "hi"})];
        let body = Request {
            model: "m",
            max_tokens: 100,
            temperature: None,
            system: None,
            tools: &[],
            messages: &messages,
        }
        .body();
        assert_eq!(
            body,
            json!({"model": "m", "max_tokens": 100, "messages": messages, "stream": true})
        );
        let tools = [json!({"name": "bash"})];
        let body = Request {
            model: "m",
            max_tokens: 1,
            temperature: Some(0.5),
            system: Some("be brief"),
            tools: &tools,
            messages: &messages,
        }
        .body();
        assert_eq!(body["temperature"], json!(0.5));
        assert_eq!(body["system"], json!("be brief"));
        assert_eq!(body["tools"], json!(tools));
    }
}
