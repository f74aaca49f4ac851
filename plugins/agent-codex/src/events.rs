//! `codex exec --json` output, one JSON event a line, turned into typed messages.
//!
//! Why a module of its own: the JSONL format belongs to a program we do not control, so
//! it is parsed leniently (unknown fields ignored; unknown event and item types, and
//! lines that are not JSON, kept as [`Message::Raw`]) and tested natively.

use serde_json::Value;

/// Token counts of one `turn.completed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnUsage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// `thread.started`: the session id.
    ThreadStarted(String),
    /// A shell command started (`item.started`, `command_execution`).
    CommandStarted {
        id: String,
        command: String,
    },
    /// A shell command ended (`item.completed`, `command_execution`).
    CommandDone {
        id: String,
        output: String,
        exit_code: Option<i32>,
    },
    /// Files the agent changed (`file_change`), as JSON text.
    FileChange {
        id: String,
        changes: String,
    },
    /// Text the agent said (`agent_message`).
    Text(String),
    /// The agent's reasoning summary.
    Reasoning(String),
    /// An `error` item: Codex reports a problem but goes on.
    ItemError(String),
    TurnCompleted(TurnUsage),
    /// `turn.failed` or a top-level `error`: the run failed.
    Failed(String),
    /// Anything else, verbatim.
    Raw(String),
}

/// Parses one stdout line. Never fails.
pub fn parse_line(line: &str) -> Vec<Message> {
    let raw = || vec![Message::Raw(line.to_string())];
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return raw();
    };
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let item = &value["item"];
    let id = text(&item["id"]);
    let message = match (value["type"].as_str(), item["type"].as_str()) {
        (Some("thread.started"), _) => Message::ThreadStarted(text(&value["thread_id"])),
        (Some("turn.started"), _) => return Vec::new(),
        (Some("item.started"), Some("command_execution")) => Message::CommandStarted {
            id,
            command: text(&item["command"]),
        },
        (Some("item.completed"), Some("command_execution")) => Message::CommandDone {
            id,
            output: text(&item["aggregated_output"]),
            exit_code: item["exit_code"]
                .as_i64()
                .and_then(|c| i32::try_from(c).ok()),
        },
        (Some("item.completed"), Some("file_change")) => Message::FileChange {
            id,
            changes: item["changes"].to_string(),
        },
        (Some("item.completed"), Some("agent_message")) => Message::Text(text(&item["text"])),
        (Some("item.completed"), Some("reasoning")) => Message::Reasoning(text(&item["text"])),
        (Some("item.completed"), Some("error")) => Message::ItemError(text(&item["message"])),
        // Started/updated items other than commands are reported once, when complete.
        (Some("item.started" | "item.updated"), Some(_)) => return Vec::new(),
        (Some("turn.completed"), _) => {
            let usage = &value["usage"];
            let n = |name: &str| usage[name].as_u64().unwrap_or(0);
            Message::TurnCompleted(TurnUsage {
                input_tokens: n("input_tokens"),
                cached_input_tokens: n("cached_input_tokens"),
                output_tokens: n("output_tokens"),
            })
        }
        (Some("turn.failed"), _) => Message::Failed(text(&value["error"]["message"])),
        (Some("error"), _) => Message::Failed(text(&value["message"])),
        _ => return raw(),
    };
    vec![message]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_and_turn_lifecycle() {
        assert_eq!(
            parse_line(r#"{"type":"thread.started","thread_id":"0199-abc"}"#),
            [Message::ThreadStarted("0199-abc".into())]
        );
        assert!(parse_line(r#"{"type":"turn.started"}"#).is_empty());
        assert_eq!(
            parse_line(
                r#"{"type":"turn.completed","usage":{"input_tokens":200,"cached_input_tokens":50,"output_tokens":30}}"#
            ),
            [Message::TurnCompleted(TurnUsage {
                input_tokens: 200,
                cached_input_tokens: 50,
                output_tokens: 30
            })]
        );
    }

    #[test]
    fn command_execution_items() {
        assert_eq!(
            parse_line(
                r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"bash -lc ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#
            ),
            [Message::CommandStarted {
                id: "item_0".into(),
                command: "bash -lc ls".into()
            }]
        );
        assert_eq!(
            parse_line(
                r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"bash -lc ls","aggregated_output":"a\n","exit_code":2,"status":"failed"}}"#
            ),
            [Message::CommandDone {
                id: "item_0".into(),
                output: "a\n".into(),
                exit_code: Some(2)
            }]
        );
    }

    #[test]
    fn messages_reasoning_errors_and_failures() {
        assert_eq!(
            parse_line(
                r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Done."}}"#
            ),
            [Message::Text("Done.".into())]
        );
        assert_eq!(
            parse_line(
                r#"{"type":"item.completed","item":{"id":"i","type":"reasoning","text":"think"}}"#
            ),
            [Message::Reasoning("think".into())]
        );
        assert_eq!(
            parse_line(
                r#"{"type":"item.completed","item":{"id":"i","type":"error","message":"retrying"}}"#
            ),
            [Message::ItemError("retrying".into())]
        );
        assert_eq!(
            parse_line(r#"{"type":"turn.failed","error":{"message":"unexpected status 401"}}"#),
            [Message::Failed("unexpected status 401".into())]
        );
        assert_eq!(
            parse_line(r#"{"type":"error","message":"stream disconnected"}"#),
            [Message::Failed("stream disconnected".into())]
        );
    }

    #[test]
    fn file_changes_keep_their_list() {
        let [Message::FileChange { id, changes }] = &parse_line(
            r#"{"type":"item.completed","item":{"id":"i9","type":"file_change","changes":[{"path":"a.txt","kind":"add"}],"status":"completed"}}"#,
        )[..] else {
            panic!("not a file change")
        };
        assert_eq!(id, "i9");
        assert!(changes.contains("a.txt"));
    }

    #[test]
    fn unknown_and_garbage_are_raw() {
        for line in [
            r#"{"type":"item.completed","item":{"type":"todo_list","items":[]}}"#,
            r#"{"type":"session.configured"}"#,
            "WARNING: proceeding",
            "{",
        ] {
            assert_eq!(parse_line(line), [Message::Raw(line.into())], "{line}");
        }
    }
}
