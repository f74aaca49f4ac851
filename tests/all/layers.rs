//! The layering stated in `docs/architecture.md` is the code's: every `crate::` path
//! in `host/src` names a module on a lower line of the document's `layers` block.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `layers` block: module name → its line (0 is the lowest).
fn stated_layers() -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(repository().join("docs/architecture.md"))
        .expect("docs/architecture.md");
    let block = text
        .split("```layers\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/architecture.md has a ```layers block");
    let mut layers = BTreeMap::new();
    for (line, modules) in block.lines().enumerate() {
        for module in modules.split_whitespace() {
            assert!(
                layers.insert(module.to_string(), line).is_none(),
                "{module} is listed twice in the layers block"
            );
        }
    }
    layers
}

/// The top-level modules of the library (`host/src/X.rs` or `host/src/X/`).
fn modules(src: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(src)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| {
            let name = path.file_stem()?.to_str()?.to_string();
            (path.is_dir() || path.extension().is_some_and(|e| e == "rs")).then_some(name)
        })
        .filter(|name| name != "lib" && name != "main")
        .collect();
    names.sort();
    names.dedup();
    names
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's code outside comments and outside its trailing `#[cfg(test)]` module.
fn code_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
    {
        return None;
    }
    let text = std::fs::read_to_string(path).unwrap();
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines.peek().is_some_and(|next| {
                next.trim_start().starts_with("mod ") && next.trim_end().ends_with('{')
            })
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    Some(code)
}

/// The top-level modules a piece of code names through `crate::`, including inside
/// `use crate::{a, b::c}` groups.
fn named_modules(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            // Top-level entries of the group: split on commas outside nested braces.
            let mut depth = 0;
            let mut entry = String::new();
            for c in group[..end].chars().chain([',']) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let first = entry.trim().split("::").next().unwrap_or("").to_string();
                        if !first.is_empty() {
                            names.push(first);
                        }
                        entry.clear();
                        continue;
                    }
                    _ => {}
                }
                entry.push(c);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.push(name);
        }
    }
    names
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let layers = stated_layers();
    let src = repository().join("host/src");
    let mut problems = Vec::new();
    let present = modules(&src);
    for module in &present {
        if !layers.contains_key(module) {
            problems.push(format!(
                "host/src/{module} is not in the layers block of docs/architecture.md"
            ));
        }
    }
    for module in layers.keys() {
        if !present.contains(module) {
            problems.push(format!(
                "the layers block lists {module}, which host/src does not have"
            ));
        }
    }
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let owner = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let owner = owner.strip_suffix(".rs").unwrap_or(owner);
        let Some(&own_layer) = layers.get(owner) else {
            continue;
        };
        let Some(code) = code_of(&file) else { continue };
        let mut seen = Vec::new();
        for used in named_modules(&code) {
            if used == owner || seen.contains(&used) {
                continue;
            }
            seen.push(used.clone());
            match layers.get(&used) {
                Some(&layer) if layer < own_layer => {}
                Some(_) => problems.push(format!(
                    "host/src/{} ({owner}) uses crate::{used}, which is not below {owner} in docs/architecture.md",
                    relative.display()
                )),
                None => {}
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} layering problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
