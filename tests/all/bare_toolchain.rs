//! A Rust toolchain without the wasm32-wasip2 target, the one the built-in plugins are
//! compiled for (a new user's, or one rustup did not finish setting up).
//!
//! Where no rustup can add the target, `cargo build` must stop at its first rustc call,
//! before anything compiles, and name the command that fixes it
//! (`.cargo/wasm32-wasip2-target`). The toolchain here is real: this one's own rustc,
//! in a sysroot of its own holding every file of this toolchain but wasm32-wasip2's
//! standard library. Adding the target with rustup needs a download and is proven by
//! `.ci/run` ("Build a clean clone on a toolchain without wasm32-wasip2").

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::repo_root;

const TARGET: &str = "wasm32-wasip2";

fn script() -> PathBuf {
    repo_root().join(".cargo/wasm32-wasip2-target")
}

/// A PATH with the system's tools and no rustup.
const PATH_WITHOUT_RUSTUP: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// This toolchain's sysroot, which has the target (the build of this test needed it).
fn sysroot() -> PathBuf {
    let output = Command::new("rustc")
        .arg("--print")
        .arg("sysroot")
        .output()
        .unwrap();
    assert!(output.status.success());
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// Links (or copies) `from` to `to`. rustc finds its sysroot from the real path of
/// its driver library, so the binaries are hard links, never symlinks.
fn link(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

/// A sysroot in `dir` with this toolchain's rustc and host standard library, and no
/// wasm32-wasip2. Returns its rustc.
fn toolchain_without_target(dir: &Path) -> PathBuf {
    let real = sysroot();
    assert!(real.join("lib/rustlib").join(TARGET).is_dir());
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("lib/rustlib")).unwrap();
    link(&real.join("bin/rustc"), &dir.join("bin/rustc"));
    for entry in std::fs::read_dir(real.join("lib")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            link(&path, &dir.join("lib").join(path.file_name().unwrap()));
        }
    }
    for entry in std::fs::read_dir(real.join("lib/rustlib")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name != TARGET {
            std::os::unix::fs::symlink(&path, dir.join("lib/rustlib").join(name)).unwrap();
        }
    }
    let rustc = dir.join("bin/rustc");
    let reported = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&reported.stdout).trim(),
        dir.to_str().unwrap(),
        "the copied rustc must report its own sysroot"
    );
    rustc
}

/// `command` with no rustup to be found and nothing of the outer build's toolchain
/// choice, running `rustc`.
fn without_rustup(mut command: Command, rustc: &Path) -> Output {
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTUP_HOME",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTFLAGS",
        // cargo test points it at this toolchain's libraries, which would make the
        // copied rustc load the real one's driver and report the real sysroot.
        "LD_LIBRARY_PATH",
    ] {
        command.env_remove(var);
    }
    let home = tempfile::tempdir().unwrap();
    command
        .current_dir(repo_root())
        .env("PATH", PATH_WITHOUT_RUSTUP)
        .env("HOME", home.path())
        .env("RUSTC", rustc)
        .output()
        .unwrap()
}

fn assert_names_the_fix(output: &Output, sysroot: &Path) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{} lacks the {TARGET} target", sysroot.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --target {TARGET}"
        )),
        "{stderr}"
    );
}

#[test]
fn without_the_target_and_without_rustup_the_build_stops_before_compiling_anything() {
    assert!(
        PATH_WITHOUT_RUSTUP
            .split(':')
            .all(|dir| !Path::new(dir).join("rustup").exists()),
        "a rustup on {PATH_WITHOUT_RUSTUP}"
    );
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let sysroot = scratch.path().join("toolchain");
    let rustc = toolchain_without_target(&sysroot);
    let target_dir = scratch.path().join("target");

    // The cargo of this toolchain, by its path: there is no rustup proxy to find it.
    let cargo = std::env::var_os("CARGO").expect("cargo sets CARGO for tests");
    let mut build = Command::new(cargo);
    build
        .args(["build", "-p", "agentgate"])
        .env("CARGO_TARGET_DIR", &target_dir);
    let output = without_rustup(build, &rustc);

    assert_names_the_fix(&output, &sysroot);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("Compiling"), "{stderr}");
    // Nothing was compiled: no build output at all.
    assert!(!target_dir.join("debug").exists(), "{stderr}");
}

#[test]
fn the_build_script_step_refuses_too_and_passes_where_the_target_is_installed() {
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let sysroot = scratch.path().join("toolchain");
    let rustc = toolchain_without_target(&sysroot);

    let mut add = Command::new(script());
    add.arg("--add").arg(&rustc);
    let output = without_rustup(add, &rustc);
    assert_names_the_fix(&output, &sysroot);
    assert!(output.stdout.is_empty(), "no cargo:warning of an addition");

    // This toolchain has the target: nothing to do, nothing said.
    let output = Command::new(script())
        .arg("--add")
        .arg("rustc")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.stdout.is_empty() && output.stderr.is_empty());
}
