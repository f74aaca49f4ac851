//! The tools the model may call, and running them inside the run's sandbox.
//!
//! Commands (`bash`, `grep`) run through the host's `sandbox` capability with the
//! sandbox's isolation, network mode and limits; file tools use the capability's file
//! operations, which the host confines to the workspace. Nothing a tool does touches
//! the plugin's own state. Which tools exist for a run follows `agent.capabilities`
//! (`shell`, `fileSystem`) and `agent.tools`.

use agentgate_plugin_sdk::agent_driver::driver::{AgentCapabilities, ToolSetting};
use agentgate_plugin_sdk::{error, Error};
use serde_json::{json, Value};

/// A tool of this driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Bash,
    ReadFile,
    WriteFile,
    EditFile,
    List,
    Glob,
    Grep,
}

impl Tool {
    pub const ALL: [Tool; 7] = [
        Tool::Bash,
        Tool::ReadFile,
        Tool::WriteFile,
        Tool::EditFile,
        Tool::List,
        Tool::Glob,
        Tool::Grep,
    ];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Bash => "bash",
            Tool::ReadFile => "read_file",
            Tool::WriteFile => "write_file",
            Tool::EditFile => "edit_file",
            Tool::List => "list",
            Tool::Glob => "glob",
            Tool::Grep => "grep",
        }
    }

    /// Claude Code's name for the same tool, so TaskSpecs written for it work here.
    fn claude_code_name(self) -> &'static str {
        match self {
            Tool::Bash => "Bash",
            Tool::ReadFile => "Read",
            Tool::WriteFile => "Write",
            Tool::EditFile => "Edit",
            Tool::List => "LS",
            Tool::Glob => "Glob",
            Tool::Grep => "Grep",
        }
    }

    fn by_name(name: &str) -> Option<Tool> {
        Tool::ALL
            .into_iter()
            .find(|t| t.name() == name || t.claude_code_name() == name)
    }

    /// The capability that must be on for the tool to exist.
    fn needs(self) -> (&'static str, fn(&AgentCapabilities) -> bool) {
        match self {
            Tool::Bash => ("shell", |c| c.shell),
            _ => ("fileSystem", |c| c.file_system),
        }
    }

    /// The tool's definition for the Messages API.
    pub fn definition(self) -> Value {
        let path = json!({"type": "string", "description": "Path relative to the workspace root."});
        let (description, properties, required): (&str, Value, &[&str]) = match self {
            Tool::Bash => (
                "Run a shell command (sh -c) in the workspace, inside the sandbox. Returns its exit code, stdout and stderr.",
                json!({"command": {"type": "string"}, "timeout_ms": {"type": "integer", "minimum": 1}}),
                &["command"],
            ),
            Tool::ReadFile => (
                "Read a text file of the workspace.",
                json!({"path": path}),
                &["path"],
            ),
            Tool::WriteFile => (
                "Create or overwrite a file of the workspace with the given content.",
                json!({"path": path, "content": {"type": "string"}}),
                &["path", "content"],
            ),
            Tool::EditFile => (
                "Replace old_string with new_string in a file. old_string must occur exactly once unless replace_all is true.",
                json!({"path": path, "old_string": {"type": "string"}, "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}}),
                &["path", "old_string", "new_string"],
            ),
            Tool::List => (
                "List a directory of the workspace (default: its root).",
                json!({"path": path}),
                &[],
            ),
            Tool::Glob => (
                "Find files of the workspace whose path matches a glob such as src/**/*.rs.",
                json!({"pattern": {"type": "string"}, "path": path}),
                &["pattern"],
            ),
            Tool::Grep => (
                "Search file contents for an extended regular expression (grep -rnE).",
                json!({"pattern": {"type": "string"}, "path": path}),
                &["pattern"],
            ),
        };
        json!({
            "name": self.name(),
            "description": description,
            "input_schema": {"type": "object", "properties": properties, "required": required},
        })
    }
}

/// The tools of a run: every tool its capabilities allow, less those `agent.tools`
/// disables. Enabling a tool its capabilities forbid, or naming an unknown tool, is an
/// error that says which entry and why.
pub fn select(
    capabilities: &AgentCapabilities,
    settings: &[ToolSetting],
) -> Result<Vec<Tool>, Error> {
    let mut tools: Vec<Tool> = Tool::ALL
        .into_iter()
        .filter(|t| (t.needs().1)(capabilities))
        .collect();
    for (i, setting) in settings.iter().enumerate() {
        let Some(tool) = Tool::by_name(&setting.name) else {
            let names: Vec<_> = Tool::ALL.iter().map(|t| t.name()).collect();
            return Err(error::invalid_spec(
                format!("tools[{i}].name"),
                format!(
                    "unknown tool {:?} for claude-agent-sdk; expected one of {} (or Claude Code's Bash, Read, Write, Edit, LS, Glob, Grep)",
                    setting.name,
                    names.join(", ")
                ),
            ));
        };
        let (capability, allowed) = tool.needs();
        if setting.enabled && !allowed(capabilities) {
            return Err(error::invalid_spec(
                format!("tools[{i}].enabled"),
                format!(
                    "tool {:?} is enabled but capabilities.{capability} is false; set one of them differently",
                    setting.name
                ),
            ));
        }
        if !setting.enabled {
            tools.retain(|t| *t != tool);
        }
    }
    Ok(tools)
}

/// The most of a tool's output the model is shown.
const MAX_OUTPUT_CHARS: usize = 30_000;

/// `text`, cut to `MAX_OUTPUT_CHARS` with a note saying so.
pub fn truncate(text: String) -> String {
    if text.len() <= MAX_OUTPUT_CHARS {
        return text;
    }
    let mut cut = MAX_OUTPUT_CHARS;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n[output truncated: {} bytes in all]",
        &text[..cut],
        text.len()
    )
}

/// Replaces `old` by `new` in `text`: exactly one occurrence unless `all`.
pub fn edit(text: &str, old: &str, new: &str, all: bool) -> Result<String, String> {
    if old.is_empty() {
        return Err("old_string is empty; give the text to replace".into());
    }
    match text.matches(old).count() {
        0 => Err("old_string does not occur in the file".into()),
        1 => Ok(text.replacen(old, new, 1)),
        n if all => {
            let _ = n;
            Ok(text.replace(old, new))
        }
        n => Err(format!(
            "old_string occurs {n} times; give more context to make it unique, or set replace_all"
        )),
    }
}

/// A string field of a tool's input.
pub fn field<'a>(input: &'a Value, name: &str) -> Result<&'a str, String> {
    input[name]
        .as_str()
        .ok_or_else(|| format!("the input needs a string field {name:?}"))
}

/// Runs one tool; `Ok` is its output, `Err` an error the model is told about.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub fn run(tool: Tool, input: &Value, command_timeout_ms: u64) -> Result<String, String> {
    use agentgate_plugin_sdk::host::sandbox;
    let shown = |e: Error| crate::describe_error(&e);
    let path = || {
        input["path"]
            .as_str()
            .filter(|p| !p.is_empty())
            .unwrap_or(".")
    };
    match tool {
        Tool::Bash => {
            let command = field(input, "command")?;
            let timeout = input["timeout_ms"]
                .as_u64()
                .map_or(command_timeout_ms, |t| t.min(command_timeout_ms));
            exec(vec!["sh".into(), "-c".into(), command.into()], timeout)
        }
        Tool::ReadFile => {
            let bytes = sandbox::read_file(field(input, "path")?).map_err(shown)?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        }
        Tool::WriteFile => {
            let path = field(input, "path")?;
            let content = field(input, "content")?;
            sandbox::write_file(path, content.as_bytes()).map_err(shown)?;
            Ok(format!("wrote {} bytes to {path}", content.len()))
        }
        Tool::EditFile => {
            let path = field(input, "path")?;
            let bytes = sandbox::read_file(path).map_err(shown)?;
            let text = String::from_utf8(bytes).map_err(|_| format!("{path} is not UTF-8 text"))?;
            let all = input["replace_all"].as_bool().unwrap_or(false);
            let edited = edit(
                &text,
                field(input, "old_string")?,
                field(input, "new_string")?,
                all,
            )?;
            sandbox::write_file(path, edited.as_bytes()).map_err(shown)?;
            Ok(format!("edited {path}"))
        }
        Tool::List => {
            let entries = sandbox::list_dir(path()).map_err(shown)?;
            Ok(entries
                .iter()
                .map(|e| {
                    if e.is_dir {
                        format!("{}/", e.name)
                    } else {
                        format!("{} ({} bytes)", e.name, e.size)
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"))
        }
        Tool::Glob => {
            let pattern = field(input, "pattern")?;
            let mut found = Vec::new();
            walk(path(), &mut |p| {
                let relative = p.strip_prefix("./").unwrap_or(p);
                if glob_match::glob_match(pattern, relative) {
                    found.push(relative.to_string());
                }
            })?;
            found.sort();
            Ok(if found.is_empty() {
                "no files match".into()
            } else {
                found.join("\n")
            })
        }
        Tool::Grep => {
            let pattern = field(input, "pattern")?;
            let argv = ["grep", "-rnE", "--", pattern, path()];
            exec(
                argv.iter().map(|s| s.to_string()).collect(),
                command_timeout_ms,
            )
        }
    }
}

/// Most directory entries `glob` visits.
const MAX_WALK: usize = 20_000;

/// Visits every file below `dir` (workspace-relative), skipping `.git`.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn walk(dir: &str, visit: &mut dyn FnMut(&str)) -> Result<(), String> {
    use agentgate_plugin_sdk::host::sandbox;
    let mut pending = vec![dir.trim_end_matches('/').to_string()];
    let mut seen = 0;
    while let Some(dir) = pending.pop() {
        let entries = sandbox::list_dir(&dir).map_err(|e| crate::describe_error(&e))?;
        for entry in entries {
            seen += 1;
            if seen > MAX_WALK {
                return Err(format!("more than {MAX_WALK} entries; narrow the path"));
            }
            let path = if dir == "." {
                entry.name.clone()
            } else {
                format!("{dir}/{}", entry.name)
            };
            if entry.is_dir {
                if entry.name != ".git" {
                    pending.push(path);
                }
            } else {
                visit(&path);
            }
        }
    }
    Ok(())
}

/// Runs `argv` in the sandbox; the output says how it ended.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn exec(argv: Vec<String>, timeout_ms: u64) -> Result<String, String> {
    use agentgate_plugin_sdk::host::execution::Output;
    use agentgate_plugin_sdk::host::{sandbox, types::ExecRequest, types::OutputPipe};
    let execution = sandbox::exec(&ExecRequest {
        argv,
        env: vec![],
        cwd: None,
        stdin: None,
        keep_stdin_open: false,
        timeout_ms: Some(timeout_ms),
    })
    .map_err(|e| crate::describe_error(&e))?;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let status = loop {
        match execution.read(1_000) {
            Output::Idle => {}
            Output::Chunk(chunk) => {
                let buffer = match chunk.pipe {
                    OutputPipe::Stdout => &mut stdout,
                    OutputPipe::Stderr => &mut stderr,
                };
                // Keep reading past the cap so the command is not blocked on a full pipe.
                if buffer.len() < 4 * MAX_OUTPUT_CHARS {
                    buffer.extend_from_slice(&chunk.data);
                }
            }
            Output::Exited(status) => break status,
        }
    };
    let ended = match (status.timed_out, status.code, status.signal) {
        (true, _, _) => format!("timed out after {timeout_ms} ms"),
        (_, Some(code), _) => format!("exit code {code}"),
        (_, None, Some(signal)) => format!("killed by signal {signal}"),
        _ => "ended".into(),
    };
    let mut text = ended;
    for (name, bytes) in [("stdout", stdout), ("stderr", stderr)] {
        if !bytes.is_empty() {
            text.push_str(&format!("\n{name}:\n{}", String::from_utf8_lossy(&bytes)));
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(shell: bool, file_system: bool) -> AgentCapabilities {
        AgentCapabilities {
            file_system,
            network: false,
            shell,
            browser: false,
        }
    }

    fn setting(name: &str, enabled: bool) -> ToolSetting {
        ToolSetting {
            name: name.into(),
            enabled,
            config: "{}".into(),
        }
    }

    #[test]
    fn capabilities_and_settings_choose_the_tools() {
        assert_eq!(select(&caps(true, true), &[]).unwrap(), Tool::ALL);
        let no_shell = select(&caps(false, true), &[]).unwrap();
        assert!(!no_shell.contains(&Tool::Bash) && no_shell.len() == 6);
        assert_eq!(select(&caps(true, false), &[]).unwrap(), [Tool::Bash]);
        assert!(select(&caps(false, false), &[]).unwrap().is_empty());
        let tools = select(
            &caps(true, true),
            &[setting("Write", false), setting("grep", false)],
        )
        .unwrap();
        assert!(!tools.contains(&Tool::WriteFile) && !tools.contains(&Tool::Grep));
        assert_eq!(tools.len(), 5);
    }

    #[test]
    fn a_tool_setting_that_cannot_hold_names_the_entry() {
        let err = select(
            &caps(true, true),
            &[setting("bash", true), setting("browser", true)],
        )
        .unwrap_err();
        let text = format!("{err:?}");
        assert!(
            text.contains("tools[1].name") && text.contains("unknown tool \\\"browser\\\""),
            "{text}"
        );
        let err = select(&caps(false, true), &[setting("Bash", true)]).unwrap_err();
        let text = format!("{err:?}");
        assert!(
            text.contains("tools[0].enabled") && text.contains("capabilities.shell is false"),
            "{text}"
        );
    }

    #[test]
    fn edits_need_a_unique_match_unless_all() {
        assert_eq!(edit("a b a", "b", "c", false).unwrap(), "a c a");
        assert!(edit("a b a", "a", "c", false)
            .unwrap_err()
            .contains("2 times"));
        assert_eq!(edit("a b a", "a", "c", true).unwrap(), "c b c");
        assert!(edit("a", "z", "c", false)
            .unwrap_err()
            .contains("does not occur"));
        assert!(edit("a", "", "c", false).is_err());
    }

    #[test]
    fn long_output_is_cut_on_a_char_boundary() {
        let text = "é".repeat(MAX_OUTPUT_CHARS);
        let cut = truncate(text);
        assert!(cut.ends_with(&format!(
            "[output truncated: {} bytes in all]",
            2 * MAX_OUTPUT_CHARS
        )));
        assert_eq!(truncate("short".into()), "short");
    }

    #[test]
    fn definitions_are_valid_tool_objects() {
        for tool in Tool::ALL {
            let d = tool.definition();
            assert_eq!(d["name"], tool.name());
            assert_eq!(d["input_schema"]["type"], "object");
        }
    }
}
