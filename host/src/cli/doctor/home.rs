//! Checks of what every run needs whatever its sandbox: agentgate's home (where runs
//! are recorded), the plugin caches, the plugins and their grants, as the runtime a
//! run loads sees them; and git support for git workspaces.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::wit::types::PluginKind;

use super::{Check, Cli, EVERY_PROVIDER, NO_PROVIDER};

/// libgit2 (built in) and the git program (for agents, which see the host's programs).
pub fn git_checks() -> Vec<Check> {
    const GROUP: &str = "git";
    let libgit2 = git2::Version::get();
    let (major, minor, rev) = libgit2.libgit2_version();
    let transports: Vec<&str> = [("https", libgit2.https()), ("ssh", libgit2.ssh())]
        .into_iter()
        .filter_map(|(name, built)| built.then_some(name))
        .collect();
    let found = format!(
        "libgit2 {major}.{minor}.{rev} with {}",
        if transports.is_empty() {
            "no network transports".to_string()
        } else {
            transports.join(" and ")
        }
    );
    let libgit2 = if transports.len() == 2 {
        Check::ok("libgit2", GROUP, NO_PROVIDER, found)
    } else {
        Check::warn(
            "libgit2",
            GROUP,
            NO_PROVIDER,
            format!("{found}: git workspaces cannot clone over the others"),
            "build agentgate with git2's `https` and `ssh` features (its default build has both)",
        )
    };
    let program = match std::process::Command::new("git").arg("--version").output() {
        Ok(out) if out.status.success() => Check::ok(
            "git",
            GROUP,
            NO_PROVIDER,
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ),
        _ => Check::warn(
            "git",
            GROUP,
            NO_PROVIDER,
            "no `git` program on PATH: agentgate clones with libgit2, but agents in a \
             `subprocess` or `none` sandbox use the host's programs, and most expect git",
            "install git (Debian/Ubuntu: apt-get install git)",
        ),
    };
    vec![libgit2, program]
}

/// The home, the caches, the plugin directories and the plugins.
pub async fn checks(cli: &Cli, provider: &str) -> Vec<Check> {
    let mut checks = vec![home(cli.home()), caches(cli)];
    checks.extend(plugin_dirs(cli));
    checks.extend(plugins(cli, provider).await);
    checks
}

/// The home must be writable by this user (runs, the registry) and by nobody else
/// (grants, caches).
fn home(home: &Path) -> Check {
    const GROUP: &str = "home";
    let shown = home.display();
    let meta = match std::fs::metadata(home) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // The first run creates it: the nearest folder that exists must let it.
            let parent = home.ancestors().skip(1).find(|a| a.exists());
            return match parent {
                Some(parent) if writable(parent) => Check::ok(
                    "home",
                    GROUP,
                    EVERY_PROVIDER,
                    format!("{shown} does not exist yet; the first run creates it (mode 0700)"),
                ),
                _ => Check::fail(
                    "home",
                    GROUP,
                    EVERY_PROVIDER,
                    format!("{shown} does not exist and this user cannot create it"),
                    "create it (`mkdir -m 700 DIR`) or choose another with --home or \
                     AGENTGATE_HOME",
                ),
            };
        }
        Err(e) => {
            return Check::fail(
                "home",
                GROUP,
                EVERY_PROVIDER,
                format!("cannot read {shown}: {e}"),
                "choose a home this user owns with --home or AGENTGATE_HOME",
            )
        }
    };
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mode = meta.mode() & 0o7777;
    let found = format!("{shown} (owner uid {}, mode {mode:04o})", meta.uid());
    if !meta.is_dir() {
        return Check::fail(
            "home",
            GROUP,
            EVERY_PROVIDER,
            format!("{shown} is not a directory"),
            "choose a directory with --home or AGENTGATE_HOME",
        );
    }
    if !writable(home) {
        return Check::fail(
            "home",
            GROUP,
            EVERY_PROVIDER,
            format!("{found}: this user (uid {uid}) cannot write there, so no run can be recorded"),
            format!("`chown -R {uid} {shown}`, or choose another with --home or AGENTGATE_HOME"),
        );
    }
    if meta.uid() != uid || mode & 0o022 != 0 {
        return Check::warn(
            "home",
            GROUP,
            NO_PROVIDER,
            format!("{found}: others may change what is there (grants, caches, run records)"),
            format!("`chown {uid} {shown} && chmod 700 {shown}`"),
        );
    }
    Check::ok("home", GROUP, EVERY_PROVIDER, found)
}

/// Whether this user may create files in `dir`.
fn writable(dir: &Path) -> bool {
    rustix::fs::access(
        dir,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .is_ok()
}

/// What the plugin caches hold against their bound, and whether they are used at all.
fn caches(cli: &Cli) -> Check {
    const GROUP: &str = "home";
    let cache = cli.cache();
    let compiled = cache.compiled_entries();
    let compiled_bytes: u64 = compiled.iter().map(|e| e.bytes).sum();
    let found = format!(
        "compile cache {}: {} entries, {} of {}; {} cached descriptions",
        cache.compiled_dir().display(),
        compiled.len(),
        super::super::plugins::mib(compiled_bytes),
        super::super::plugins::mib(cache.max_bytes()),
        cache.described_entries().len()
    );
    let unprotected = cache.unprotected_dirs();
    if unprotected.is_empty() {
        return Check::ok("caches", GROUP, NO_PROVIDER, found);
    }
    let dirs: Vec<String> = unprotected
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    Check::warn(
        "caches",
        GROUP,
        NO_PROVIDER,
        format!(
            "{found}; not used, since others own or may write to {}: every plugin is compiled \
             again each time",
            dirs.join(", ")
        ),
        format!(
            "make them yours alone (`chmod 700 {}`), or `agentgate plugins cache --clear`",
            dirs.join(" ")
        ),
    )
}

/// Each plugin directory the runtime would read.
fn plugin_dirs(cli: &Cli) -> Vec<Check> {
    const GROUP: &str = "plugins";
    let dirs = cli.plugin_dirs();
    if dirs.is_empty() {
        return vec![Check::ok(
            "plugin-dirs",
            GROUP,
            NO_PROVIDER,
            "none (built-in plugins only; --plugin-dir or AGENTGATE_PLUGIN_PATH add some)",
        )];
    }
    let (usable, missing): (Vec<_>, Vec<_>) = dirs.iter().partition(|d| d.is_dir());
    let list = |dirs: &[&std::path::PathBuf]| {
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if missing.is_empty() {
        return vec![Check::ok("plugin-dirs", GROUP, NO_PROVIDER, list(&usable))];
    }
    // The runtime refuses to start without every directory it was given.
    vec![Check::fail(
        "plugin-dirs",
        GROUP,
        EVERY_PROVIDER,
        format!(
            "not directories, so no run can load its plugins: {}",
            list(&missing)
        ),
        "create them, or fix the paths given with --plugin-dir or in AGENTGATE_PLUGIN_PATH",
    )]
}

/// The plugins as a run loads them: grants applied, refusals and broken files named,
/// and the plugin that serves `provider`.
async fn plugins(cli: &Cli, provider: &str) -> Vec<Check> {
    const GROUP: &str = "plugins";
    let runtime = match cli.runtime().await {
        Ok(runtime) => runtime,
        Err(e) => {
            return vec![Check::fail(
                "plugins",
                GROUP,
                EVERY_PROVIDER,
                format!("the plugins cannot be loaded: {e}"),
                "mend what the message names (a plugin directory, the grants file, a --grant \
                 flag, ANTHROPIC_BASE_URL)",
            )]
        }
    };
    let catalog = runtime.catalog();
    let loaded = catalog.plugins().count();
    let mut problems: Vec<String> = catalog
        .plugins()
        .filter_map(|p| {
            p.refusal()
                .map(|refusal| format!("{} ({}) is refused: {refusal}", p.name(), p.origin()))
        })
        .collect();
    problems.extend(
        catalog
            .broken()
            .iter()
            .map(|b| format!("{} is not loaded: {}", b.origin, b.reason)),
    );
    let summary = if problems.is_empty() {
        Check::ok(
            "plugins",
            GROUP,
            NO_PROVIDER,
            format!("{loaded} plugins loaded, none refused"),
        )
    } else {
        Check::warn(
            "plugins",
            GROUP,
            NO_PROVIDER,
            format!("{loaded} plugins loaded; {}", problems.join("; ")),
            "grant what a refused plugin imports (--grant or grants.yaml), or remove the \
             files you do not use from the plugin directory",
        )
    };
    let provider_plugin = match catalog.resolve(PluginKind::SandboxProvider, provider) {
        Ok(plugin) => Check::ok(
            "provider-plugin",
            GROUP,
            &[provider],
            format!(
                "`sandbox.provider: {provider}` is served by {} {} ({})",
                plugin.name(),
                plugin.info().version,
                plugin.origin()
            ),
        ),
        Err(e) => Check::fail(
            "provider-plugin",
            GROUP,
            &[provider],
            e.to_string(),
            "name a provider that is listed, or add the plugin that serves it (--plugin-dir)",
        ),
    };
    vec![summary, provider_plugin]
}
