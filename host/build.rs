//! Builds the plugins and the sandbox init that ship inside the binary.
//!
//! Every crate under `plugins/` is compiled to a `wasm32-wasip2` component and embedded
//! with `include_bytes!`, so a plain `cargo build` gives a binary that works with no
//! plugin directory. `sandbox-init` is compiled for the host's own target and embedded
//! the same way (see `capabilities::process::landlock`). The test fixture plugins under `tests/fixtures/plugins/` are built
//! alongside (not embedded) for the integration tests. Each crate is built on its own
//! because each enables a different world feature of the SDK.
//!
//! The built-ins are also compiled to native code and described here, by
//! `agentgate-precompile` (host/precompile) with the host's own engine configuration,
//! so that no run, not even the first in a fresh `AGENTGATE_HOME`, compiles or
//! describes them: the binary embeds the code, the descriptions and the key of the
//! engine configuration (see `runtime::builtin`).
//!
//! First of all, the toolchain gets the `wasm32-wasip2` target if it lacks it
//! (`.cargo/wasm32-wasip2-target`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    ensure_wasm_target(&root);
    for dir in [
        "wit",
        "plugin-sdk",
        "sandbox-init",
        "plugins",
        "tests/fixtures/plugins",
        "host/precompile",
        "host/src/runtime/engine_config.rs",
        "host/src/runtime/description.rs",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let target_dir = std::env::var("AGENTGATE_PLUGIN_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target").join("plugins"));

    // The binary embeds a copy of its own: the init under target/plugins is rebuilt by
    // any build (`cargo clippy` too) without this script running again for the others,
    // so embedding it by that path could pair its new bytes with the old key.
    let built_init = build_sandbox_init(&root, &target_dir);
    let init_bytes = std::fs::read(&built_init).expect("reading the sandbox init");
    let init = out_dir.join("agentgate-sandbox-init");
    std::fs::write(&init, &init_bytes).expect("copying the sandbox init");
    println!("cargo:rustc-env=AGENTGATE_SANDBOX_INIT={}", init.display());
    println!(
        "cargo:rustc-env=AGENTGATE_SANDBOX_INIT_KEY={}",
        content_key(&init_bytes)
    );
    pack_relative_relocations();

    let builtins = build_all(&root, &root.join("plugins"), &target_dir);
    let fixtures = build_all(&root, &root.join("tests/fixtures/plugins"), &target_dir);

    let precompiled = out_dir.join("precompiled");
    precompile_builtins(&root, &target_dir, &precompiled, &builtins);
    let read = |path: PathBuf| {
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    };
    let mut table = format!(
        "/// The key of the engine configuration the built-ins were precompiled for.\n\
         pub static PRECOMPILED_FOR: &str = {:?};\n\
         /// The built-in plugins.\n\
         pub static BUILTIN_PLUGINS: &[Builtin] = &[\n",
        read(precompiled.join("engine-key"))
    );
    for (name, wasm) in &builtins {
        let file = |ext: &str| precompiled.join(format!("{name}.{ext}"));
        table.push_str(&format!(
            "    Builtin {{ crate_name: {name:?}, wasm: include_bytes!({:?}), sha256: {:?}, \
             description: include_str!({:?}), precompiled: include_bytes!({:?}) }},\n",
            wasm.display().to_string(),
            read(file("sha256")),
            file("json").display().to_string(),
            file("cwasm").display().to_string(),
        ));
    }
    table.push_str("];\n");
    std::fs::write(out_dir.join("builtin_plugins.rs"), table).unwrap();

    // The fixtures get a directory of their own, so a test can use it as a plugin dir.
    let fixture_dir = target_dir.join("fixtures");
    std::fs::create_dir_all(&fixture_dir).unwrap();
    for (name, wasm) in &fixtures {
        std::fs::copy(wasm, fixture_dir.join(format!("{name}.wasm"))).unwrap();
    }
    println!(
        "cargo:rustc-env=AGENTGATE_FIXTURE_PLUGIN_DIR={}",
        fixture_dir.display()
    );
}

/// Adds the `wasm32-wasip2` target to the toolchain cargo builds with, through the
/// rustup that manages it, when the target is missing; exits with the command to run
/// when it cannot. Cargo ran the same script before compiling anything (it is the
/// workspace's rustc wrapper) and stopped there if no rustup could add the target; it
/// runs again here because the wrapper may have been replaced (`cargo clippy`) and
/// because cargo shows this script's warnings, not the wrapper's.
fn ensure_wasm_target(root: &Path) {
    let script = root.join(".cargo/wasm32-wasip2-target");
    println!("cargo:rerun-if-changed={}", script.display());
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let status = Command::new(&script)
        .arg("--add")
        .arg(rustc)
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    if !status.success() {
        // The script said what is missing and how to add it.
        std::process::exit(1);
    }
}

/// Builds every crate in `dir`; returns (crate name, .wasm path) sorted by name.
fn build_all(root: &Path, dir: &Path, target_dir: &Path) -> Vec<(String, PathBuf)> {
    let mut crates: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join("Cargo.toml").is_file())
                .collect()
        })
        .unwrap_or_default();
    crates.sort();
    crates
        .iter()
        .map(|krate| {
            let name = krate.file_name().unwrap().to_string_lossy().into_owned();
            (name.clone(), build_plugin(root, &name, target_dir))
        })
        .collect()
}

fn build_plugin(root: &Path, name: &str, target_dir: &Path) -> PathBuf {
    let status = nested_cargo(root, target_dir)
        .args([
            "rustc",
            "--quiet",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--crate-type",
            "cdylib",
            "-p",
            name,
        ])
        .status()
        .expect("running cargo to build a plugin");
    if !status.success() {
        panic!("building plugin {name} for wasm32-wasip2 failed");
    }
    let wasm = target_dir
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    assert!(wasm.is_file(), "{} was not produced", wasm.display());
    wasm
}

/// Builds `agentgate-precompile` and runs it on the built-ins, writing their native
/// code, descriptions and digests into `out`. It is built with the dev profile, whose
/// overrides optimise cranelift: its output does not depend on the profile, and
/// building wasmtime unoptimised costs the cold build less.
fn precompile_builtins(root: &Path, target_dir: &Path, out: &Path, builtins: &[(String, PathBuf)]) {
    let status = nested_cargo(root, target_dir)
        .args(["build", "--quiet", "-p", "agentgate-precompile"])
        .status()
        .expect("running cargo to build the precompiler");
    assert!(status.success(), "building agentgate-precompile failed");
    let tool = target_dir.join("debug/agentgate-precompile");
    let status = Command::new(&tool)
        .arg(out)
        .args(
            builtins
                .iter()
                .map(|(name, wasm)| format!("{name}={}", wasm.display())),
        )
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    assert!(status.success(), "precompiling the built-in plugins failed");
}

/// Builds `agentgate-sandbox-init` for the target this host is built for.
fn build_sandbox_init(root: &Path, target_dir: &Path) -> PathBuf {
    let target = std::env::var("TARGET").unwrap();
    // Static, so that it also runs in Docker images without the host's C library.
    let status = nested_cargo(root, target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static")
        .args(["build", "--quiet", "--release", "--target", &target])
        .args([
            "-p",
            "agentgate-sandbox-init",
            "--bin",
            "agentgate-sandbox-init",
        ])
        .status()
        .expect("running cargo to build the sandbox init");
    assert!(status.success(), "building agentgate-sandbox-init failed");
    let binary = target_dir
        .join(&target)
        .join("release/agentgate-sandbox-init");
    assert!(binary.is_file(), "{} was not produced", binary.display());
    binary
}

/// A name for `bytes` that changes with them: the host names its copy of the sandbox
/// init by it, so that it need not hash 1.7 MB on every start. Not a security check:
/// the host compares the copy's contents in full before any sandbox uses it.
fn content_key(bytes: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Links the host with packed relative relocations (`DT_RELR`) where the linker and
/// the C library have them (GNU ld 2.38, glibc 2.36). The binary is position
/// independent, so the loader applies ~95,000 relative relocations at every start;
/// packed, their table shrinks from 1.8 MB to 20 KB and `agentgate --version` starts
/// about 0.4 ms sooner (BENCHMARKS.md). Probed by linking a small C program with it, so
/// an older toolchain builds the usual way.
fn pack_relative_relocations() {
    const FLAG: &str = "-Wl,-z,pack-relative-relocs";
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || std::env::var("TARGET") != std::env::var("HOST")
    {
        return;
    }
    let probe_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("relr-probe");
    std::fs::create_dir_all(&probe_dir).unwrap();
    let source = probe_dir.join("probe.c");
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".into());
    let linked = Command::new(&linker)
        .arg("-pie")
        .arg("-fPIE")
        .arg(FLAG)
        .arg(&source)
        .arg("-o")
        .arg(probe_dir.join("probe"))
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    // The C library must also load what the linker made.
    if linked
        && Command::new(probe_dir.join("probe"))
            .status()
            .is_ok_and(|status| status.success())
    {
        println!("cargo:rustc-link-arg-bins={FLAG}");
    } else {
        println!("cargo:warning=the linker or C library lacks packed relative relocations ({FLAG}); agentgate starts slightly slower");
    }
}

/// A cargo command for a build of its own inside this one, in `target_dir`.
fn nested_cargo(root: &Path, target_dir: &Path) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(root);
    // The outer build's settings (clippy wrapper, host RUSTFLAGS) must not leak in.
    for var in [
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
    ] {
        command.env_remove(var);
    }
    command.env("CARGO_TARGET_DIR", target_dir);
    command
}
