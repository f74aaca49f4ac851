//! Claude Code's `--output-format stream-json --verbose` output, one JSON object a line,
//! turned into typed messages.
//!
//! Why a module of its own: this is the contract with a program we do not control, so
//! it is parsed leniently (unknown fields ignored, unknown message types and non-JSON
//! lines kept as [`Message::Raw`]) and tested natively against lines the real CLI
//! printed. Nothing here fails: a line the parser does not understand is still recorded.

use serde_json::Value;

/// The final `result` line: what the CLI reports about the whole session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Final {
    /// `success`, `error_max_turns`, `error_during_execution`, ...
    pub subtype: String,
    pub is_error: bool,
    /// The HTTP status of the model API error that ended the session, when one did.
    pub api_error_status: Option<u16>,
    pub num_turns: Option<u32>,
    pub session_id: Option<String>,
    pub total_cost_usd: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// The final answer, or the error text when `is_error`.
    pub result: Option<String>,
}

/// One thing the CLI reported.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// `system/init`: the session started.
    Init {
        session_id: Option<String>,
        model: Option<String>,
        version: Option<String>,
        permission_mode: Option<String>,
    },
    /// `system/api_retry`: the CLI retries a failed model request.
    Retry(String),
    /// Text the assistant said.
    Text(String),
    ToolUse {
        id: String,
        name: String,
        /// The tool's input as JSON text.
        input: String,
    },
    ToolResult {
        id: String,
        output: String,
        is_error: bool,
    },
    Final(Final),
    /// A line of a type this driver does not know, or not JSON at all: kept verbatim.
    Raw(String),
}

/// Parses one stdout line into the messages it carries (an assistant line may carry
/// several content blocks). Never fails.
pub fn parse_line(line: &str) -> Vec<Message> {
    let raw = || vec![Message::Raw(line.to_string())];
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return raw();
    };
    let str_of = |v: &Value| v.as_str().map(str::to_string);
    match (value["type"].as_str(), value["subtype"].as_str()) {
        (Some("system"), Some("init")) => vec![Message::Init {
            session_id: str_of(&value["session_id"]),
            model: str_of(&value["model"]),
            version: str_of(&value["claude_code_version"]),
            permission_mode: str_of(&value["permissionMode"]),
        }],
        (Some("system"), Some("api_retry")) => vec![Message::Retry(retry_text(&value))],
        (Some("assistant"), _) => {
            let messages: Vec<Message> = blocks(&value)
                .filter_map(|block| match block["type"].as_str() {
                    Some("text") => str_of(&block["text"]).map(Message::Text),
                    Some("tool_use") => Some(Message::ToolUse {
                        id: str_of(&block["id"]).unwrap_or_default(),
                        name: str_of(&block["name"]).unwrap_or_default(),
                        input: block["input"].to_string(),
                    }),
                    // Thinking and other blocks are not events of their own.
                    _ => None,
                })
                .collect();
            messages
        }
        (Some("user"), _) => blocks(&value)
            .filter(|block| block["type"] == "tool_result")
            .map(|block| Message::ToolResult {
                id: str_of(&block["tool_use_id"]).unwrap_or_default(),
                output: content_text(&block["content"]),
                is_error: block["is_error"].as_bool().unwrap_or(false),
            })
            .collect(),
        (Some("result"), _) => vec![Message::Final(final_of(&value))],
        _ => raw(),
    }
}

fn blocks(value: &Value) -> impl Iterator<Item = &Value> {
    value["message"]["content"]
        .as_array()
        .map(|a| a.iter())
        .into_iter()
        .flatten()
}

/// A tool result's content: a string, or a list of text parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn retry_text(value: &Value) -> String {
    let field = |name: &str| match &value[name] {
        Value::Null => None,
        Value::String(s) => Some(format!("{name}={s}")),
        other => Some(format!("{name}={other}")),
    };
    let parts: Vec<String> = [
        "attempt",
        "max_retries",
        "retry_delay_ms",
        "error_status",
        "error",
    ]
    .iter()
    .filter_map(|n| field(n))
    .collect();
    format!("model API request failed, retrying ({})", parts.join(", "))
}

fn final_of(value: &Value) -> Final {
    let usage = &value["usage"];
    let tokens = |name: &str| usage[name].as_u64().unwrap_or(0);
    Final {
        subtype: value["subtype"].as_str().unwrap_or("").to_string(),
        is_error: value["is_error"].as_bool().unwrap_or(false),
        api_error_status: value["api_error_status"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok()),
        num_turns: value["num_turns"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok()),
        session_id: value["session_id"].as_str().map(str::to_string),
        total_cost_usd: value["total_cost_usd"].as_f64(),
        input_tokens: tokens("input_tokens"),
        output_tokens: tokens("output_tokens"),
        cache_read_tokens: tokens("cache_read_input_tokens"),
        cache_write_tokens: tokens("cache_creation_input_tokens"),
        result: value["result"].as_str().map(str::to_string),
    }
}

impl Final {
    /// Whether the session did what was asked.
    pub fn succeeded(&self) -> bool {
        !self.is_error && self.subtype == "success"
    }

    /// A one-paragraph account for `result.json`: the answer, or what went wrong.
    pub fn summary(&self) -> Option<String> {
        if self.succeeded() {
            return self.result.clone();
        }
        let mut text = String::from("Claude Code reported an error");
        if self.subtype != "success" && !self.subtype.is_empty() {
            text.push_str(&format!(" ({})", self.subtype));
        }
        if let Some(status) = self.api_error_status {
            text.push_str(&format!(": model API answered HTTP {status}"));
        }
        if let Some(result) = self.result.as_deref().filter(|r| !r.is_empty()) {
            text.push_str(&format!(": {result}"));
        }
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines as the real CLI (2.1.197) printed them, shortened to the fields that matter.
    const INIT: &str = r#"{"type":"system","subtype":"init","cwd":"/workspace","session_id":"s-1","tools":["Bash"],"model":"claude-sonnet-4-5","permissionMode":"bypassPermissions","apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.1.197"}"#;
    const TOOL_USE: &str = r#"{"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","role":"assistant","stop_reason":null,"content":[{"type":"text","text":"Listing."},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls","description":"list"}}]},"parent_tool_use_id":null,"session_id":"s-1"}"#;
    const TOOL_RESULT: &str = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"a.txt\nb.txt","is_error":false}]},"session_id":"s-1","tool_use_result":{"stdout":"a.txt\nb.txt","stderr":"","interrupted":false}}"#;
    const RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":2100,"num_turns":4,"result":"Done.","stop_reason":"end_turn","session_id":"s-1","total_cost_usd":0.0123,"usage":{"input_tokens":400,"cache_creation_input_tokens":7,"cache_read_input_tokens":9,"output_tokens":80},"modelUsage":{},"permission_denials":[],"terminal_reason":"completed"}"#;
    const ERROR_401: &str = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"duration_ms":615,"num_turns":1,"result":"Invalid API key · Fix external API key","session_id":"s-2","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}"#;

    #[test]
    fn init_line() {
        assert_eq!(
            parse_line(INIT),
            [Message::Init {
                session_id: Some("s-1".into()),
                model: Some("claude-sonnet-4-5".into()),
                version: Some("2.1.197".into()),
                permission_mode: Some("bypassPermissions".into()),
            }]
        );
    }

    #[test]
    fn assistant_line_gives_text_and_tool_use_in_order() {
        assert_eq!(
            parse_line(TOOL_USE),
            [
                Message::Text("Listing.".into()),
                Message::ToolUse {
                    id: "toolu_1".into(),
                    name: "Bash".into(),
                    input: r#"{"command":"ls","description":"list"}"#.into(),
                }
            ]
        );
    }

    #[test]
    fn tool_result_as_string_or_parts() {
        assert_eq!(
            parse_line(TOOL_RESULT),
            [Message::ToolResult {
                id: "toolu_1".into(),
                output: "a.txt\nb.txt".into(),
                is_error: false,
            }]
        );
        let parts = r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","is_error":true,"content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}]}}"#;
        assert_eq!(
            parse_line(parts),
            [Message::ToolResult {
                id: "t".into(),
                output: "x\ny".into(),
                is_error: true,
            }]
        );
    }

    #[test]
    fn result_line_carries_cost_turns_usage_session() {
        let [Message::Final(f)] = &parse_line(RESULT)[..] else {
            panic!("not a final");
        };
        assert!(f.succeeded());
        assert_eq!(f.num_turns, Some(4));
        assert_eq!(f.session_id.as_deref(), Some("s-1"));
        assert_eq!(f.total_cost_usd, Some(0.0123));
        assert_eq!(
            (
                f.input_tokens,
                f.output_tokens,
                f.cache_read_tokens,
                f.cache_write_tokens
            ),
            (400, 80, 9, 7)
        );
        assert_eq!(f.summary().as_deref(), Some("Done."));
    }

    #[test]
    fn api_error_result_is_an_error_with_its_status() {
        let [Message::Final(f)] = &parse_line(ERROR_401)[..] else {
            panic!("not a final");
        };
        assert!(!f.succeeded());
        assert_eq!(f.api_error_status, Some(401));
        let summary = f.summary().unwrap();
        assert!(summary.contains("HTTP 401"), "{summary}");
        assert!(summary.contains("Invalid API key"), "{summary}");
    }

    #[test]
    fn max_turns_is_not_success() {
        let line =
            r#"{"type":"result","subtype":"error_max_turns","is_error":false,"num_turns":2}"#;
        let [Message::Final(f)] = &parse_line(line)[..] else {
            panic!("not a final");
        };
        assert!(!f.succeeded());
        assert!(f.summary().unwrap().contains("error_max_turns"));
    }

    #[test]
    fn retry_line_names_status_and_attempt() {
        let line = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":2,"retry_delay_ms":500,"error_status":529,"error":"overloaded"}"#;
        let [Message::Retry(text)] = &parse_line(line)[..] else {
            panic!("not a retry");
        };
        assert!(text.contains("error_status=529"), "{text}");
        assert!(text.contains("attempt=1"), "{text}");
    }

    #[test]
    fn unknown_types_and_garbage_are_raw_never_errors() {
        for line in [
            r#"{"type":"stream_event","event":{}}"#,
            r#"{"type":"system","subtype":"compact_boundary"}"#,
            "not json at all",
            r#"{"no_type":1}"#,
            "",
        ] {
            assert_eq!(parse_line(line), [Message::Raw(line.into())], "{line}");
        }
    }

    #[test]
    fn thinking_blocks_are_not_events() {
        let line =
            r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm"}]}}"#;
        assert!(parse_line(line).is_empty());
    }
}
