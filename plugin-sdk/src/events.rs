//! Report progress and agent activity through the host's `events` capability.
//!
//! Calling any of these makes the plugin import `events`, which the operator must grant.

use crate::host::events::{emit, Event, LogLevel, Progress, ToolCall, ToolResult};
use crate::host::types::{OutputPipe, Usage};

pub fn progress(phase: &str, message: impl Into<String>) {
    emit(&Event::Progress(Progress {
        phase: phase.to_string(),
        message: message.into(),
        current: None,
        total: None,
    }));
}

pub fn log(level: LogLevel, message: impl Into<String>) {
    emit(&Event::Log((level, message.into())));
}

pub fn info(message: impl Into<String>) {
    log(LogLevel::Info, message);
}

pub fn warn(message: impl Into<String>) {
    log(LogLevel::Warn, message);
}

pub fn agent_message(text: impl Into<String>) {
    emit(&Event::AgentMessage(text.into()));
}

pub fn tool_call(id: impl Into<String>, name: impl Into<String>, input_json: impl Into<String>) {
    emit(&Event::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        input: input_json.into(),
    }));
}

pub fn tool_result(id: impl Into<String>, output: impl Into<String>, is_error: bool) {
    emit(&Event::ToolResult(ToolResult {
        id: id.into(),
        output: output.into(),
        is_error,
    }));
}

pub fn usage(usage: Usage) {
    emit(&Event::Usage(usage));
}

pub fn output_line(pipe: OutputPipe, line: impl Into<String>) {
    emit(&Event::Output((pipe, line.into())));
}
