//! The README and the `docs/` book hold together: every relative link reaches a file,
//! every `#anchor` a heading of it, external links are well formed, the README stays a
//! front page (at most 12 KiB) and no line is too long to read in a diff.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The README is a front page: what is longer belongs in the book.
const README_MAX_BYTES: usize = 12 * 1024;
/// Longer lines do not read in a review or a diff: break them.
const LINE_MAX_CHARS: usize = 400;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// Every `*.md` of the repository (the README, the book, the crates' and folders'
/// READMEs), outside build output, dependencies and hidden folders; sorted.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !name.starts_with('.') && !["target", "node_modules"].contains(&name) {
                    walk(&path, found);
                }
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(&repository(), &mut found);
    found.sort();
    found
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The document's lines with whether each is inside a fenced code block (fences
/// included).
fn lines_with_fences(text: &str) -> Vec<(usize, &str, bool)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => {
                fence = Some(m);
                lines.push((index + 1, line, true));
            }
            (Some(open), Some(m)) if open == m => {
                fence = None;
                lines.push((index + 1, line, true));
            }
            (Some(_), _) => lines.push((index + 1, line, true)),
            (None, None) => lines.push((index + 1, line, false)),
        }
    }
    lines
}

/// `line` without its inline code spans, which hold no links.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Every inline link target in `text` (`[label](target)`), with its line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line, in_code) in lines_with_fences(text) {
        if in_code {
            continue;
        }
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            // Balanced parentheses: a target may hold a pair (rare, but legal).
            let mut depth = 0usize;
            let mut end = None;
            for (i, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = Some(i);
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let Some(end) = end else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push((number, target.to_string()));
            rest = &after[end + 1..];
        }
    }
    found
}

/// GitHub's anchor for a heading's text: lower case, punctuation dropped, spaces as
/// `-`; link labels count, their targets do not.
fn anchor(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(start) = rest.find("](") {
        let Some(end) = rest[start..].find(')') else {
            break;
        };
        text.push_str(&rest[..start]);
        rest = &rest[start + end + 1..];
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// The anchors of a document's headings, with GitHub's `-1`, `-2` for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line, in_code) in lines_with_fences(text) {
        if in_code || !line.starts_with('#') {
            continue;
        }
        let level = line.chars().take_while(|&c| c == '#').count();
        if level > 6 || !line[level..].starts_with(' ') {
            continue;
        }
        let base = anchor(&line[level..]);
        let mut candidate = base.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

fn well_formed_url(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        && !url
            .chars()
            .any(|c| c.is_whitespace() || c == '<' || c == '>')
}

#[test]
fn every_link_in_the_repositorys_documents_reaches_its_target() {
    let root = repository();
    let mut broken = Vec::new();
    for document in documents() {
        let text = read(&document);
        let shown = document
            .strip_prefix(&root)
            .unwrap_or(&document)
            .display()
            .to_string();
        for (line, target) in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                if !well_formed_url(&target) {
                    broken.push(format!(
                        "{shown}:{line}: `{target}` is not a well-formed URL"
                    ));
                }
                continue;
            }
            if target.contains("://") || target.starts_with("mailto:") {
                broken.push(format!(
                    "{shown}:{line}: `{target}`: only http(s) and relative links"
                ));
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                document.clone()
            } else if path.starts_with('/') {
                broken.push(format!(
                    "{shown}:{line}: `{target}` is absolute; link relatively"
                ));
                continue;
            } else {
                document
                    .parent()
                    .expect("a document has a folder")
                    .join(path)
            };
            if !file.exists() {
                broken.push(format!("{shown}:{line}: `{target}`: no such file"));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if file.extension().is_none_or(|e| e != "md") {
                broken.push(format!(
                    "{shown}:{line}: `{target}`: an anchor into a file that is not Markdown"
                ));
                continue;
            }
            if !anchors(&read(&file)).contains(fragment) {
                broken.push(format!(
                    "{shown}:{line}: `{target}`: no heading with that anchor"
                ));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_front_page() {
    let size = read(&repository().join("README.md")).len();
    assert!(
        size <= README_MAX_BYTES,
        "README.md is {size} bytes, more than {README_MAX_BYTES}: move the detail into docs/ and link it"
    );
}

#[test]
fn no_line_of_the_repositorys_documents_is_too_long() {
    let root = repository();
    let mut long = Vec::new();
    for document in documents() {
        let text = read(&document);
        let shown = document
            .strip_prefix(&root)
            .unwrap_or(&document)
            .display()
            .to_string();
        for (number, line) in text.lines().enumerate() {
            let chars = line.chars().count();
            if chars > LINE_MAX_CHARS {
                long.push(format!("{shown}:{}: {chars} characters", number + 1));
            }
        }
    }
    assert!(
        long.is_empty(),
        "lines longer than {LINE_MAX_CHARS} characters (break them; a table cell that long belongs in a list):\n{}",
        long.join("\n")
    );
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(anchor(" How a run works"), "how-a-run-works");
    assert_eq!(
        anchor(" `agentgate plugins install`"),
        "agentgate-plugins-install"
    );
    assert_eq!(
        anchor(" Git and GitHub workspaces"),
        "git-and-github-workspaces"
    );
    assert_eq!(
        anchor(" Egress: the allow-list (v2)"),
        "egress-the-allow-list-v2"
    );
    assert_eq!(anchor(" See [the docs](x.md)"), "see-the-docs");
    let repeated = anchors("# A\n## A\n```\n# A\n```\n### A\n");
    assert_eq!(repeated, ["a", "a-1", "a-2"].map(String::from).into());
}

#[test]
fn links_skip_code() {
    let found = links("a [x](y.md#z) `[no](code)` b\n```\n[no](fence)\n```\n[c](d \"t\")\n");
    assert_eq!(found, [(1, "y.md#z".to_string()), (5, "d".to_string())]);
}
