//! Workspace source `fresh`: a new, empty directory, optionally scaffolded from a
//! project template (node-typescript, node-javascript, python, rust, go, empty).
//!
//! The plugin only decides what goes in it. The host creates the root (refusing one
//! that exists and is not empty) and writes the template's files through a handle
//! confined to the root, so this plugin needs no capabilities. Templates are small but
//! real projects whose build and test commands work as generated; `projectName` is
//! rewritten into a valid name for each ecosystem (`My App` → npm `my-app`, Python
//! `my_app`, Cargo `my-app`).

mod templates;

use agentgate_plugin_sdk::workspace_source::source::{
    Guest as Source, Lifetime, PreparedWorkspace, RootKind, ScaffoldFile, WorkspaceRequest,
};
use agentgate_plugin_sdk::workspace_source::Guest;
use agentgate_plugin_sdk::{error, options, Error, PluginInfo, PluginKind};
use serde::Deserialize;
use templates::{Naming, Template, TEMPLATES};

/// The `workspace` section for `source: fresh`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FreshSection {
    #[allow(dead_code)]
    source: Option<String>,
    dest_path: Option<String>,
    template: Option<String>,
    project_name: Option<String>,
    #[allow(dead_code)]
    options: Option<serde_json::Value>,
}

/// Lowercase ASCII words of `raw`; everything else separates words.
fn words(raw: &str) -> Vec<String> {
    raw.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

const PYTHON_KEYWORDS: &[&str] = &[
    "false", "none", "true", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield", "test", "tests",
];

/// Names Cargo refuses for a package: Rust keywords and the standard crates.
const CARGO_RESERVED: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    "try",
    "gen",
    "std",
    "core",
    "alloc",
    "test",
    "proc-macro",
];

/// `(name, module)` for `project_name` in an ecosystem: see the `templates` module.
fn names(project_name: &str, naming: Naming) -> (String, String) {
    let words = words(project_name);
    let words = if words.is_empty() {
        vec!["project".to_string()]
    } else {
        words
    };
    let kebab = words.join("-");
    let snake = words.join("_");
    match naming {
        // npm: lowercase, URL-safe, at most 214 characters.
        Naming::Npm | Naming::Go => {
            let name: String = kebab.chars().take(214).collect();
            let name = name.trim_end_matches('-').to_string();
            (name, snake)
        }
        // PyPI and import name alike: a valid, non-keyword identifier.
        Naming::Python => {
            let mut module = snake;
            if module.starts_with(|c: char| c.is_ascii_digit()) {
                module = format!("pkg_{module}");
            }
            if PYTHON_KEYWORDS.contains(&module.as_str()) {
                module.push_str("_pkg");
            }
            (module.clone(), module)
        }
        // Cargo: must not start with a digit or be a keyword or standard crate.
        Naming::Cargo => {
            let mut name = kebab;
            if name.starts_with(|c: char| c.is_ascii_digit()) {
                name = format!("app-{name}");
            }
            if CARGO_RESERVED.contains(&name.as_str()) {
                name.push_str("-app");
            }
            let module = name.replace('-', "_");
            (name, module)
        }
    }
}

/// One line of `raw` with runs of whitespace and control characters made single spaces.
fn title(raw: &str) -> String {
    raw.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The template's files for `project_name`. Pure, so it is tested natively.
fn render(template: &Template, project_name: &str) -> Vec<ScaffoldFile> {
    let (name, module) = names(project_name, template.naming);
    let title = match title(project_name) {
        t if t.is_empty() => name.clone(),
        t => t,
    };
    let fill = |text: &str| {
        text.replace("{{name}}", &name)
            .replace("{{module}}", &module)
            .replace("{{title}}", &title)
    };
    template
        .files
        .iter()
        .map(|(path, contents)| ScaffoldFile {
            path: fill(path),
            contents: fill(contents).into_bytes(),
            executable: false,
        })
        .collect()
}

fn find_template(name: &str) -> Result<&'static Template, Error> {
    TEMPLATES.iter().find(|t| t.name == name).ok_or_else(|| {
        let known: Vec<_> = TEMPLATES.iter().map(|t| t.name).collect();
        error::invalid_spec(
            "template",
            format!(
                "unknown template `{name}`; expected one of: {}",
                known.join(", ")
            ),
        )
    })
}

/// Turns the section into the workspace. Pure, so it is tested natively.
fn prepare(section_json: &str, scratch_dir: &str) -> Result<PreparedWorkspace, Error> {
    let section: FreshSection = options::parse("", section_json)?;
    let template = find_template(section.template.as_deref().unwrap_or("empty"))?;
    let root = match &section.dest_path {
        Some(dest) if !dest.starts_with('/') => {
            return Err(error::invalid_spec(
                "destPath",
                format!("`{dest}` is not absolute; give the full path of the new directory"),
            ))
        }
        Some(dest) => match dest.trim_end_matches('/') {
            "" => {
                return Err(error::invalid_spec(
                    "destPath",
                    "`/` cannot be a fresh workspace",
                ))
            }
            trimmed => trimmed.to_string(),
        },
        None => scratch_dir.trim_end_matches('/').to_string(),
    };
    let project_name = match &section.project_name {
        Some(name) => name.clone(),
        None => match &section.dest_path {
            Some(_) => root.rsplit('/').next().unwrap_or("project").to_string(),
            None => "project".to_string(),
        },
    };
    let scaffold = render(template, &project_name);
    let description = if template.files.is_empty() {
        format!("fresh empty directory {root}")
    } else {
        format!(
            "fresh {} project {} in {root}",
            template.name,
            title(&project_name)
        )
    };
    Ok(PreparedWorkspace {
        root,
        root_kind: RootKind::Create,
        readonly: false,
        lifetime: Lifetime::Kept,
        scaffold,
        description,
    })
}

struct Fresh;

impl Guest for Fresh {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "workspace-fresh".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            kind: PluginKind::WorkspaceSource,
            serves: vec!["fresh".into()],
            summary: "A new directory (`destPath` or a scratch dir), scaffolded from a project `template`"
                .into(),
            options_schema: None,
        }
    }
}

impl Source for Fresh {
    fn prepare(request: WorkspaceRequest) -> Result<PreparedWorkspace, Error> {
        prepare(&request.section, &request.scratch_dir)
    }

    fn release(_workspace: PreparedWorkspace) -> Result<(), Error> {
        // The new project is the run's product: it is kept.
        Ok(())
    }
}

agentgate_plugin_sdk::workspace_source::export_workspace_source!(Fresh);

#[cfg(test)]
mod tests {
    use super::*;

    fn file<'a>(files: &'a [ScaffoldFile], path: &str) -> &'a str {
        let f = files
            .iter()
            .find(|f| f.path == path)
            .unwrap_or_else(|| panic!("no {path}"));
        std::str::from_utf8(&f.contents).unwrap()
    }

    fn paths(files: &[ScaffoldFile]) -> Vec<&str> {
        files.iter().map(|f| f.path.as_str()).collect()
    }

    #[test]
    fn every_template_renders_completely() {
        for template in TEMPLATES {
            let files = render(template, "My App");
            for f in &files {
                let text = std::str::from_utf8(&f.contents).unwrap();
                assert!(
                    !f.path.contains("{{") && !text.contains("{{"),
                    "{}: {}",
                    template.name,
                    f.path
                );
                assert!(
                    !f.path.starts_with('/') && !f.path.contains(".."),
                    "{}",
                    f.path
                );
            }
            if template.name != "empty" {
                assert!(paths(&files).contains(&"README.md"), "{}", template.name);
                assert!(paths(&files).contains(&".gitignore"), "{}", template.name);
                assert!(file(&files, "README.md").starts_with("# My App\n"));
            }
        }
    }

    #[test]
    fn names_follow_each_ecosystem() {
        assert_eq!(names("My App", Naming::Npm).0, "my-app");
        assert_eq!(
            names("My App", Naming::Python),
            ("my_app".into(), "my_app".into())
        );
        assert_eq!(
            names("My App", Naming::Cargo),
            ("my-app".into(), "my_app".into())
        );
        assert_eq!(names("My App", Naming::Go).0, "my-app");
        assert_eq!(
            names("  @scope/Cool--Thing! ", Naming::Npm).0,
            "scope-cool-thing"
        );
        assert_eq!(names("2048 game", Naming::Python).0, "pkg_2048_game");
        assert_eq!(names("2048 game", Naming::Cargo).0, "app-2048-game");
        assert_eq!(names("class", Naming::Python).0, "class_pkg");
        assert_eq!(names("test", Naming::Cargo).0, "test-app");
        assert_eq!(names("日本", Naming::Npm).0, "project");
        assert_eq!(names(&"x".repeat(300), Naming::Npm).0.len(), 214);
    }

    #[test]
    fn node_typescript_uses_the_npm_name() {
        let files = render(find_template("node-typescript").unwrap(), "My App");
        assert_eq!(
            paths(&files),
            [
                "package.json",
                "tsconfig.json",
                "src/index.ts",
                "src/index.test.ts",
                ".gitignore",
                "README.md"
            ]
        );
        let pkg: serde_json::Value = serde_json::from_str(file(&files, "package.json")).unwrap();
        assert_eq!(pkg["name"], "my-app");
        assert!(pkg["scripts"]["build"].is_string() && pkg["scripts"]["test"].is_string());
        serde_json::from_str::<serde_json::Value>(file(&files, "tsconfig.json")).unwrap();
    }

    #[test]
    fn python_uses_the_module_name_in_paths() {
        let files = render(find_template("python").unwrap(), "My App");
        assert_eq!(
            paths(&files),
            [
                "pyproject.toml",
                "src/my_app/__init__.py",
                "tests/test_my_app.py",
                ".gitignore",
                "README.md"
            ]
        );
        assert!(file(&files, "pyproject.toml").contains("name = \"my_app\""));
        assert!(file(&files, "tests/test_my_app.py").contains("from my_app import greet"));
    }

    #[test]
    fn rust_and_go_use_their_names() {
        let files = render(find_template("rust").unwrap(), "My App");
        assert!(file(&files, "Cargo.toml").contains("name = \"my-app\""));
        let files = render(find_template("go").unwrap(), "My App");
        assert!(file(&files, "go.mod").starts_with("module my-app\n"));
    }

    #[test]
    fn dest_path_names_the_project() {
        let ws = prepare(
            r#"{"source":"fresh","destPath":"/tmp/Cool Tool/","template":"rust"}"#,
            "/s",
        )
        .unwrap();
        assert_eq!(ws.root, "/tmp/Cool Tool");
        assert_eq!(ws.root_kind, RootKind::Create);
        assert_eq!(ws.lifetime, Lifetime::Kept);
        assert!(!ws.readonly);
        assert!(file(&ws.scaffold, "Cargo.toml").contains("name = \"cool-tool\""));
        assert_eq!(
            ws.description,
            "fresh rust project Cool Tool in /tmp/Cool Tool"
        );
    }

    #[test]
    fn defaults_to_an_empty_scratch_dir() {
        let ws = prepare(r#"{"source":"fresh"}"#, "/runs/r1/scratch").unwrap();
        assert_eq!(ws.root, "/runs/r1/scratch");
        assert_eq!(ws.root_kind, RootKind::Create);
        assert!(ws.scaffold.is_empty());
        assert_eq!(ws.description, "fresh empty directory /runs/r1/scratch");

        let ws = prepare(r#"{"template":"go"}"#, "/s").unwrap();
        assert!(file(&ws.scaffold, "go.mod").starts_with("module project\n"));
    }

    #[test]
    fn project_name_wins_over_dest_path() {
        let ws = prepare(
            r#"{"destPath":"/tmp/x","template":"node-javascript","projectName":"My App"}"#,
            "/s",
        )
        .unwrap();
        let pkg: serde_json::Value =
            serde_json::from_str(file(&ws.scaffold, "package.json")).unwrap();
        assert_eq!(pkg["name"], "my-app");
    }

    #[test]
    fn unknown_template_lists_the_six() {
        match prepare(r#"{"template":"java"}"#, "/s").unwrap_err() {
            Error::InvalidSpec(e) => {
                assert_eq!(e.path, "template");
                for name in [
                    "node-typescript",
                    "node-javascript",
                    "python",
                    "rust",
                    "go",
                    "empty",
                ] {
                    assert!(e.message.contains(name), "{}", e.message);
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn relative_dest_path_is_refused() {
        assert!(matches!(
            prepare(r#"{"destPath":"new"}"#, "/s"),
            Err(Error::InvalidSpec(e)) if e.path == "destPath"
        ));
    }
}
