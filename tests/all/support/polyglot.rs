//! The Python (componentize-py) and JavaScript (jco / componentize-js) example plugins,
//! built from `wit/` by `examples/plugins/build.sh` with pinned toolchains, for the tests
//! that load them (tests/all/polyglot.rs) and publish them (tests/all/marketplace.rs).
//!
//! The components are built once per test binary. Without `python3 -m venv`, node or
//! npm the tests skip with a loud message, except under `CI=true`, where that is a
//! failure. A Python or JavaScript component takes seconds to compile, so the first
//! test to need them warms a compile cache (`target/polyglot-home`, kept between runs,
//! so unchanged builds compile once) that every test's home starts from.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::{repo_root, stderr, Home};

/// What each example plugin is, and the only capabilities its component may import.
pub const PLUGINS: [(&str, &[&str]); 4] = [
    ("py-shell", &["events", "sandbox"]),
    ("py-sealed", &["events", "process"]),
    ("js-shell", &["events", "sandbox"]),
    ("js-sealed", &["events", "process"]),
];

pub struct Built {
    /// All four components.
    pub dir: PathBuf,
    /// A compile cache (`components` dir) holding all of them, for each test's home
    /// to start from.
    pub cache: PathBuf,
}

static BUILT: OnceLock<Option<Built>> = OnceLock::new();

/// The built components, or `None` (after a loud message) when a toolchain is missing
/// outside CI.
pub fn built() -> Option<&'static Built> {
    BUILT.get_or_init(build).as_ref()
}

fn build() -> Option<Built> {
    let missing: Vec<&str> = [
        ("python3 -m venv", &["python3", "-m", "venv", "--help"][..]),
        ("node", &["node", "--version"][..]),
        ("npm", &["npm", "--version"][..]),
    ]
    .into_iter()
    .filter(|(_, argv)| {
        !Command::new(argv[0])
            .args(&argv[1..])
            .output()
            .is_ok_and(|o| o.status.success())
    })
    .map(|(name, _)| name)
    .collect();
    if !missing.is_empty() {
        let message = format!(
            "the Python/JavaScript plugin toolchains need {}; install Debian's python3-venv, \
             nodejs and npm",
            missing.join(", ")
        );
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{message}");
        }
        eprintln!("\n*** SKIPPING polyglot plugin tests: {message} ***\n");
        return None;
    }
    let dir = repo_root().join("target").join("polyglot-plugins");
    let status = Command::new("bash")
        .arg(repo_root().join("examples/plugins/build.sh"))
        .arg(&dir)
        .status()
        .expect("running examples/plugins/build.sh");
    assert!(
        status.success(),
        "examples/plugins/build.sh failed ({status})"
    );
    // Load every component once, granted, so the compile cache holds all of them. The
    // cache lives under target/, so later test runs skip compiling unchanged builds.
    let warm_home = repo_root().join("target").join("polyglot-home");
    let mut args = vec![
        "plugins",
        "list",
        "--home",
        warm_home.to_str().unwrap(),
        "--plugin-dir",
        dir.to_str().unwrap(),
    ];
    let grants: Vec<String> = PLUGINS
        .iter()
        .map(|(name, caps)| format!("{name}={}", caps.join(",")))
        .collect();
    for grant in &grants {
        args.extend(["--grant", grant]);
    }
    let out = Home::new().agentgate(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let cache = warm_home.join("cache").join("components");
    Some(Built { dir, cache })
}

/// A home whose compile cache already holds the example plugins, and a plugin directory
/// in it holding only `plugins`.
pub fn home_with(built: &Built, plugins: &[&str]) -> (Home, PathBuf) {
    let home = Home::new();
    let cache = home.dir.path().join("cache").join("components");
    std::fs::create_dir_all(&cache).unwrap();
    // The cache refuses a directory others may write to.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    let plugin_dir = home.dir.path().join("plugins");
    std::fs::create_dir(&plugin_dir).unwrap();
    for name in plugins {
        let file = format!("{name}.wasm");
        std::fs::copy(built.dir.join(&file), plugin_dir.join(&file)).unwrap();
        // Entries are named by the component's sha256; copy this build's only.
        let digest = hex::encode(Sha256::digest(
            std::fs::read(built.dir.join(&file)).unwrap(),
        ));
        for entry in std::fs::read_dir(&built.cache).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name().to_string_lossy().starts_with(&digest) {
                std::fs::copy(entry.path(), cache.join(entry.file_name())).unwrap();
            }
        }
    }
    (home, plugin_dir)
}

/// The grant flag for `name`: exactly the capabilities it is expected to import.
pub fn grant(name: &str) -> String {
    let (_, caps) = PLUGINS.iter().find(|(n, _)| *n == name).unwrap();
    format!("{name}={}", caps.join(","))
}
