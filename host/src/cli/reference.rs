//! The CLI reference, `docs/cli.md`, rendered from the clap definition of [`super::Cli`].
//!
//! The flags, their help, defaults and environment variables are written once, in the
//! derive; the book's reference is produced from them and a test fails when the two
//! differ, so the documentation cannot drift from the binary. The rendering is plain
//! Markdown wrapped at a fixed width, independent of the terminal, so it is the same on
//! every machine.

use std::fmt::Write as _;

use clap::{Arg, Command, CommandFactory};

/// Where help text is wrapped: a fixed width, so the file does not depend on a terminal.
const WIDTH: usize = 88;

/// The whole reference: every command and subcommand, depth first, in clap's order.
pub(crate) fn render() -> String {
    let root = super::Cli::command();
    let mut out = String::new();
    out.push_str("# CLI reference\n\n");
    out.push_str(
        "<!-- Generated from the clap definition by host/src/cli/reference.rs; do not edit.\n     \
         Regenerate with: AGENTGATE_BLESS=1 cargo test -p agentgate --lib cli::reference -->\n\n",
    );
    paragraph(&mut out, &about(&root));
    paragraph(
        &mut out,
        "Every command also takes `-h`/`--help`; `agentgate --version` prints the version. \
         What each command does in depth, and the exit codes, are in \
         [Using the CLI](commands.md).",
    );
    out.push_str("## Options for every command\n\n");
    paragraph(
        &mut out,
        "These options are global: they may follow any command.",
    );
    options(&mut out, &root);
    for command in visible(root.get_subcommands()) {
        render_command(&mut out, command, &[root.get_name()]);
    }
    out
}

fn render_command(out: &mut String, command: &Command, parents: &[&str]) {
    let mut path: Vec<&str> = parents.to_vec();
    path.push(command.get_name());
    let _ = writeln!(out, "## `{}`\n", path.join(" "));
    paragraph(out, &about(command));
    let _ = writeln!(out, "Usage: `{}`\n", usage(command, &path));
    let positionals: Vec<&Arg> = visible(command.get_positionals()).collect();
    if !positionals.is_empty() {
        out.push_str("Arguments:\n\n");
        for arg in positionals {
            item(out, &format!("`{}`", value_names(arg)), arg);
        }
        out.push('\n');
    }
    if visible(command.get_opts()).next().is_some() {
        out.push_str("Options:\n\n");
        options(out, command);
    }
    let subcommands: Vec<&Command> = visible(command.get_subcommands()).collect();
    if !subcommands.is_empty() {
        out.push_str("Commands:\n\n");
        for sub in &subcommands {
            let about = sentence(&sub.get_about().map(|s| s.to_string()).unwrap_or_default());
            let name = format!("`{} {}`", path.join(" "), sub.get_name());
            list_item(out, &name, &about);
        }
        out.push('\n');
        for sub in subcommands {
            render_command(out, sub, &path);
        }
    }
}

/// The options (flags and named arguments) of `command`, one list item each.
fn options(out: &mut String, command: &Command) {
    for arg in visible(command.get_opts()) {
        let mut name = String::new();
        if let Some(short) = arg.get_short() {
            let _ = write!(name, "-{short}, ");
        }
        if let Some(long) = arg.get_long() {
            let _ = write!(name, "--{long}");
        }
        if arg.get_action().takes_values() {
            let _ = write!(name, " {}", value_names(arg));
        }
        item(out, &format!("`{name}`"), arg);
    }
    out.push('\n');
}

/// One list item: the argument's name, its help, and what the derive says beyond it.
fn item(out: &mut String, name: &str, arg: &Arg) {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut text = sentence(&help);
    let mut facts: Vec<String> = Vec::new();
    if arg.is_required_set() && arg.get_long().is_some() {
        facts.push("Required.".to_string());
    }
    let repeatable = matches!(
        arg.get_action(),
        clap::ArgAction::Append | clap::ArgAction::Count
    );
    if repeatable && !help.to_lowercase().contains("repeatable") {
        facts.push("Repeatable.".to_string());
    }
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() && arg.get_action().takes_values() {
        facts.push(format!("Values: {}.", values.join(", ")));
    }
    if arg.get_action().takes_values() && !arg.get_default_values().is_empty() {
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| default_value(&v.to_string_lossy()))
            .collect();
        facts.push(format!("Default: {}.", defaults.join(", ")));
    }
    if let Some(env) = arg.get_env() {
        facts.push(format!("Environment: `{}`.", env.to_string_lossy()));
    }
    if !facts.is_empty() {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&facts.join(" "));
    }
    list_item(out, name, &text);
}

/// `- NAME: TEXT`, wrapped, later paragraphs indented under the item.
fn list_item(out: &mut String, name: &str, text: &str) {
    let first = if text.trim().is_empty() {
        format!("- {name}")
    } else {
        format!("- {name}: ")
    };
    let mut paragraphs = text.trim().split("\n\n");
    let mut lines = wrap(
        &one_line(paragraphs.next().unwrap_or("")),
        WIDTH,
        first.len(),
        2,
    );
    if let Some(head) = lines.first_mut() {
        head.insert_str(0, &first);
    }
    for line in lines.iter_mut().skip(1) {
        line.insert_str(0, "  ");
    }
    for paragraph in paragraphs {
        lines.push(String::new());
        lines.extend(
            wrap(&one_line(paragraph), WIDTH, 2, 2)
                .into_iter()
                .map(|l| format!("  {l}")),
        );
    }
    for line in lines {
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// A default as the reader should see it: the home's default is `~/.agentgate` on every
/// machine, not the path of whoever rendered the file.
fn default_value(value: &str) -> String {
    if std::path::Path::new(value) == super::default_home() {
        "`~/.agentgate` (`./.agentgate` where `HOME` is not set)".to_string()
    } else {
        format!("`{value}`")
    }
}

/// `agentgate plugins install [OPTIONS] <REF>`: options first, then the positionals.
fn usage(command: &Command, path: &[&str]) -> String {
    let mut usage = path.join(" ");
    if visible(command.get_opts()).next().is_some() {
        usage.push_str(" [OPTIONS]");
    }
    for arg in visible(command.get_positionals()) {
        usage.push(' ');
        let names = value_names(arg);
        if arg.is_required_set() {
            usage.push_str(&names);
        } else {
            let _ = write!(usage, "[{names}]");
        }
    }
    if command.has_subcommands() {
        usage.push_str(" <COMMAND>");
    }
    usage
}

/// `<NAME>`, `<NAME>...` for a list.
fn value_names(arg: &Arg) -> String {
    let names: Vec<String> = match arg.get_value_names() {
        Some(names) => names.iter().map(|n| format!("<{n}>")).collect(),
        None => vec![format!("<{}>", arg.get_id().as_str().to_uppercase())],
    };
    let mut text = names.join(" ");
    let many = arg
        .get_num_args()
        .is_some_and(|range| range.max_values() > 1)
        || matches!(arg.get_action(), clap::ArgAction::Append) && arg.is_positional();
    if many {
        text.push_str("...");
    }
    text
}

fn about(command: &Command) -> String {
    sentence(
        &command
            .get_long_about()
            .or(command.get_about())
            .map(|s| s.to_string())
            .unwrap_or_default(),
    )
}

/// `text` ending as a sentence: clap drops the period a one-line doc comment ends with.
fn sentence(text: &str) -> String {
    let mut text = text.trim().to_string();
    if text.ends_with(|c: char| c.is_alphanumeric() || c == '`' || c == ')') {
        text.push('.');
    }
    text
}

/// Writes `text` as wrapped paragraphs.
fn paragraph(out: &mut String, text: &str) {
    for paragraph in text.trim().split("\n\n").filter(|p| !p.trim().is_empty()) {
        for line in wrap(&one_line(paragraph), WIDTH, 0, 0) {
            let _ = writeln!(out, "{line}");
        }
        out.push('\n');
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Greedy word wrap; `first` columns of the first line and `rest` of the others are
/// taken by a prefix.
fn wrap(text: &str, width: usize, first: usize, rest: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    let mut used = first;
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && used + 1 + word.len() > width {
            lines.push(word.to_string());
            used = rest + word.len();
        } else {
            if !line.is_empty() {
                line.push(' ');
                used += 1;
            }
            line.push_str(word);
            used += word.len();
        }
    }
    lines
}

fn visible<'a, T: Visible + 'a>(items: impl Iterator<Item = &'a T>) -> impl Iterator<Item = &'a T> {
    items.filter(|item| !item.hidden())
}

trait Visible {
    fn hidden(&self) -> bool;
}

impl Visible for Arg {
    fn hidden(&self) -> bool {
        self.is_hide_set()
    }
}

impl Visible for Command {
    fn hidden(&self) -> bool {
        self.is_hide_set()
    }
}

#[cfg(test)]
mod tests {
    /// The book's copy, as committed.
    const COMMITTED: &str = include_str!("../../../docs/cli.md");

    #[test]
    fn docs_cli_md_is_the_rendered_reference() {
        let rendered = super::render();
        if rendered == COMMITTED {
            return;
        }
        if std::env::var_os("AGENTGATE_BLESS").is_some_and(|v| !v.is_empty()) {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
            std::fs::write(&path, &rendered).expect("write docs/cli.md");
            return;
        }
        let line = rendered
            .lines()
            .zip(COMMITTED.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| rendered.lines().count().min(COMMITTED.lines().count()));
        panic!(
            "docs/cli.md is not the reference the CLI renders (first difference at line {}); \
             regenerate it with `AGENTGATE_BLESS=1 cargo test -p agentgate --lib cli::reference`",
            line + 1
        );
    }

    #[test]
    fn wrap_is_greedy_and_keeps_long_words() {
        assert_eq!(super::wrap("a bb ccc", 4, 0, 0), ["a bb", "ccc"]);
        assert_eq!(super::wrap("abcdefgh x", 4, 2, 0), ["abcdefgh", "x"]);
        assert_eq!(super::wrap("a b c", 4, 0, 2), ["a b", "c"]);
    }
}
