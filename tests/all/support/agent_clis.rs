//! The real agent CLIs (Claude Code, Codex) at the versions pinned in
//! `tests/agent-clis/`, installed once per machine into `target/agent-clis`, and the
//! Docker image the glibc-linked Claude Code binary runs in.
//!
//! Why here: the driver tests (`tests/all/agents_cli.rs`) and the egress tests
//! (`tests/all/egress_bypass.rs`) run the same CLIs, installed the same way.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::repo_root;

/// Where `target/agent-clis` (the npm prefix; Node resolves Codex's platform package
/// through its `node_modules`) appears in the sandbox.
pub const CLIS_IN_SANDBOX: &str = "/opt/agent-clis";

/// `target/agent-clis`, with both CLIs at the pinned versions in `node_modules`, installed on
/// first use; `None` (after a loud message) when npm is missing outside CI.
pub fn clis() -> Option<&'static Path> {
    static CLIS: OnceLock<Option<PathBuf>> = OnceLock::new();
    CLIS.get_or_init(install_clis).as_deref()
}

fn install_clis() -> Option<PathBuf> {
    let pins = repo_root().join("tests/agent-clis");
    let dir = repo_root().join("target/agent-clis");
    let modules = dir.join("node_modules");
    let wanted = std::fs::read_to_string(pins.join("package-lock.json")).unwrap();
    let installed = std::fs::read_to_string(dir.join("package-lock.json")).unwrap_or_default();
    let have_bins = modules.join(".bin/claude").exists() && modules.join(".bin/codex").exists();
    if !(have_bins && installed == wanted) {
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pins.join(file), dir.join(file)).unwrap();
        }
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status();
        match status {
            Ok(s) if s.success() => {}
            other => {
                let why = format!("`npm ci` in {} failed: {other:?}", dir.display());
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("CI=true and the agent CLIs cannot be installed: {why}");
                }
                eprintln!("\n!!! SKIPPING agent CLI test: {why} (install node and npm)\n");
                return None;
            }
        }
    }
    Some(dir)
}

/// busybox, bash and the glibc libraries the Claude Code binary links.
pub const GLIBC_IMAGE: &str = "agentgate-test/glibc-busybox:1";

/// Builds [`GLIBC_IMAGE`] from this machine's files unless the engine has it.
pub fn build_glibc_image() -> Result<(), String> {
    let present = Command::new("docker")
        .args(["image", "inspect", GLIBC_IMAGE])
        .output();
    if present.is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    let context = tempfile::tempdir().unwrap();
    let copy = |from: &str, to: &str| -> Result<(), String> {
        let target = context.path().join(to);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(from, &target)
            .map(|_| ())
            .map_err(|e| format!("copying {from}: {e}"))
    };
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or("busybox is not installed (apt-get install busybox-static)")?;
    copy(busybox, "busybox")?;
    copy("/bin/bash", "bash")?;
    copy("/lib64/ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2")?;
    for lib in [
        "libc.so.6",
        "libm.so.6",
        "librt.so.1",
        "libdl.so.2",
        "libpthread.so.0",
        "libtinfo.so.6",
    ] {
        copy(
            &format!("/lib/x86_64-linux-gnu/{lib}"),
            &format!("lib/x86_64-linux-gnu/{lib}"),
        )?;
    }
    std::fs::write(
        context.path().join("Dockerfile"),
        "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n\
         COPY lib /lib\nCOPY lib64 /lib64\nCOPY bash /bin/bash\n\
         RUN [\"/bin/busybox\", \"mkdir\", \"-p\", \"/tmp\", \"/usr/bin\"]\n\
         RUN [\"/bin/busybox\", \"ln\", \"-s\", \"/bin/env\", \"/usr/bin/env\"]\n",
    )
    .unwrap();
    let out = Command::new("docker")
        .args(["build", "-q", "-t", GLIBC_IMAGE])
        .arg(context.path())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "building {GLIBC_IMAGE} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
