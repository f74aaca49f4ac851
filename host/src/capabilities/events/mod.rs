//! The host side of `agentgate:plugin/events`: a plugin's events go into the run's
//! [`EventSink`](crate::record::EventSink), which masks, bounds and records them.

pub(crate) mod unit;

use crate::capabilities::PluginView;
use crate::record::EventBody;
use crate::wit::events::{Event, Host, LogLevel};
use crate::wit::types::OutputPipe;

fn pipe_name(pipe: OutputPipe) -> &'static str {
    match pipe {
        OutputPipe::Stdout => "stdout",
        OutputPipe::Stderr => "stderr",
    }
}

fn level_name(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Trace => "trace",
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    }
}

/// The contract's event as the record keeps it. Strings are taken whole: the sink
/// masks them before it truncates them.
fn record_body(event: Event) -> EventBody {
    match event {
        Event::Progress(p) => EventBody::Progress {
            phase: p.phase,
            message: p.message,
            current: p.current,
            total: p.total,
        },
        Event::Log((level, message)) => EventBody::Log {
            level: level_name(level),
            message,
        },
        Event::AgentMessage(text) => EventBody::AgentMessage { text },
        Event::ToolCall(call) => EventBody::ToolCall {
            id: call.id,
            name: call.name,
            input: call.input,
        },
        Event::ToolResult(result) => EventBody::ToolResult {
            id: result.id,
            output: result.output,
            is_error: result.is_error,
        },
        Event::Usage(u) => EventBody::Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_usd: u.cost_usd,
        },
        Event::Output((pipe, line)) => EventBody::Output {
            pipe: pipe_name(pipe),
            line,
        },
    }
}

impl Host for PluginView<'_> {
    async fn emit(&mut self, event: Event) -> wasmtime::Result<()> {
        self.run.ensure_active()?;
        self.run.events.emit(&self.plugin, record_body(event));
        Ok(())
    }
}
