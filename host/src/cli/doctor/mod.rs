//! `agentgate doctor [--json]`: every check a run depends on, at once.
//!
//! A user who lacks a prerequisite (bubblewrap, user namespaces, a writable cgroup,
//! slirp4netns, `/dev/net/tun`, the Docker engine) would otherwise learn about it one
//! failed run at a time. Each check asks the code a run asks (the capability's own
//! lookup, probe or limit), never a copy of it, so the two cannot drift; where a run
//! would fail, the check fails with what was found and the exact fix.
//!
//! The exit code answers one question: can runs with the provider checked for (by
//! default the TaskSpec's, `docker`; `--provider` to ask about another) start here?
//! 0 yes, 1 no. Checks for other providers, git and the caches are reported too but
//! only decide the exit code when the checked provider needs them.

mod engine;
mod home;
mod sandbox;

use std::process::ExitCode;

use serde::Serialize;

use super::Cli;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the report as one JSON object instead of a checklist.
    #[arg(long)]
    json: bool,
    /// The sandbox provider whose runs decide the exit code.
    #[arg(long, value_name = "NAME", default_value = crate::taskspec::DEFAULT_PROVIDER)]
    provider: String,
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Runs work, but something is weaker or slower than it could be.
    Warn,
    /// Runs that need this fail.
    Fail,
    /// Not checked, because something it builds on failed.
    Skip,
}

/// The providers whose runs need a check: these fail when it fails.
const EVERY_PROVIDER: &[&str] = &["*"];
const SUBPROCESS: &[&str] = &["subprocess"];
const DOCKER: &[&str] = &["docker"];
/// A check no provider needs (it only warns).
const NO_PROVIDER: &[&str] = &[];

/// One check, as the report shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// Stable name, e.g. `bubblewrap`, `cgroups`, `docker-engine`.
    pub id: &'static str,
    /// What the check is about: `subprocess`, `docker`, `git`, `home`, `plugins`.
    pub group: &'static str,
    pub status: Status,
    /// What was found (null when skipped).
    pub found: Option<String>,
    /// Why the check was skipped (null otherwise).
    pub reason: Option<String>,
    /// How to mend a `fail` or `warn` (null when there is nothing to do).
    pub fix: Option<String>,
    /// Providers whose runs fail when this check fails; `*` is every provider.
    pub needed_by: Vec<String>,
}

impl Check {
    fn new(id: &'static str, group: &'static str, needed_by: &[&str], status: Status) -> Check {
        Check {
            id,
            group,
            status,
            found: None,
            reason: None,
            fix: None,
            needed_by: needed_by.iter().map(|p| p.to_string()).collect(),
        }
    }

    pub fn ok(
        id: &'static str,
        group: &'static str,
        needed_by: &[&str],
        found: impl Into<String>,
    ) -> Check {
        Check {
            found: Some(found.into()),
            ..Check::new(id, group, needed_by, Status::Ok)
        }
    }

    pub fn fail(
        id: &'static str,
        group: &'static str,
        needed_by: &[&str],
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            found: Some(found.into()),
            fix: Some(fix.into()),
            ..Check::new(id, group, needed_by, Status::Fail)
        }
    }

    pub fn warn(
        id: &'static str,
        group: &'static str,
        needed_by: &[&str],
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            status: Status::Warn,
            ..Check::fail(id, group, needed_by, found, fix)
        }
    }

    pub fn skip(
        id: &'static str,
        group: &'static str,
        needed_by: &[&str],
        reason: impl Into<String>,
    ) -> Check {
        Check {
            reason: Some(reason.into()),
            ..Check::new(id, group, needed_by, Status::Skip)
        }
    }

    /// A failure that keeps runs with `provider` from starting.
    fn blocks(&self, provider: &str) -> bool {
        self.status == Status::Fail && self.needed_by.iter().any(|p| p == "*" || p == provider)
    }
}

/// The whole report: `--json` prints it as is.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    /// The provider the exit code is about.
    provider: String,
    /// Whether runs with `provider` can start here (exit 0).
    ready: bool,
    checks: Vec<Check>,
}

pub async fn run(cli: &Cli, args: &DoctorArgs) -> ExitCode {
    let mut checks = Vec::new();
    checks.extend(sandbox::checks().await);
    checks.extend(engine::checks().await);
    checks.extend(home::git_checks());
    checks.extend(home::checks(cli, &args.provider).await);
    let ready = !checks.iter().any(|c| c.blocks(&args.provider));
    let report = Report {
        provider: args.provider.clone(),
        ready,
        checks,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serializes")
        );
    } else {
        print!("{}", human(&report));
    }
    ExitCode::from(if ready { 0 } else { 1 })
}

/// The checklist: one line per check (✓ ok, ! warn, ✗ fail, - skipped) with what was
/// found, then the fix below it; a verdict at the end.
fn human(report: &Report) -> String {
    let mut out = String::new();
    let mut group = "";
    for check in &report.checks {
        if check.group != group {
            group = check.group;
            out.push_str(&format!("{}\n", group_title(group)));
        }
        let (mark, text) = match check.status {
            Status::Ok => ("✓", check.found.as_deref()),
            Status::Warn => ("!", check.found.as_deref()),
            Status::Fail => ("✗", check.found.as_deref()),
            Status::Skip => ("-", check.reason.as_deref()),
        };
        let text = text.unwrap_or_default();
        let text = if check.status == Status::Skip {
            format!("skipped: {text}")
        } else {
            text.to_string()
        };
        out.push_str(&format!("  {mark} {:<16} {text}\n", check.id));
        if let Some(fix) = &check.fix {
            out.push_str(&format!("      fix: {fix}\n"));
        }
    }
    let blocking: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| c.blocks(&report.provider))
        .map(|c| c.id)
        .collect();
    if blocking.is_empty() {
        out.push_str(&format!(
            "\nruns with `sandbox.provider: {}` can start here (exit 0)\n",
            report.provider
        ));
    } else {
        out.push_str(&format!(
            "\nruns with `sandbox.provider: {}` cannot start here: fix {} (exit 1); \
             `--provider NAME` checks for another provider\n",
            report.provider,
            blocking.join(", ")
        ));
    }
    out
}

fn group_title(group: &str) -> &str {
    match group {
        "subprocess" => "sandbox provider `subprocess` (bubblewrap, namespaces, cgroups)",
        "docker" => "sandbox provider `docker` (the Docker engine)",
        "git" => "git workspaces",
        "home" => "agentgate's home and caches",
        "plugins" => "plugins",
        other => other,
    }
}

/// What a capability's error says, without the `unavailable:` a run's error starts
/// with: in a check, that is what `fail` means.
fn said(error: &crate::wit::types::Error) -> String {
    match error {
        crate::wit::types::Error::Unavailable(message) => message.clone(),
        other => crate::runtime::instance::error_text(other),
    }
}

/// `message` up to where `fix` (or the doctor hint) starts: the check shows the fix
/// on its own line, so what was found need not repeat it.
fn before_fix(message: &str, fix: &str) -> String {
    let message = crate::capabilities::without_doctor_hint(message);
    let cut = message.find(fix).map_or(message, |at| &message[..at]);
    cut.trim_end_matches([' ', ';', ':', ',']).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_of_checks_the_provider_needs_block_it() {
        let checks = [
            Check::fail("a", "subprocess", SUBPROCESS, "x", "y"),
            Check::warn("b", "home", EVERY_PROVIDER, "x", "y"),
            Check::skip("c", "docker", DOCKER, "x"),
        ];
        assert!(checks[0].blocks("subprocess"));
        assert!(!checks[0].blocks("docker"));
        assert!(!checks[1].blocks("docker"));
        assert!(!checks[2].blocks("docker"));
        assert!(Check::fail("d", "home", EVERY_PROVIDER, "x", "y").blocks("anything"));
        assert!(!Check::fail("e", "git", NO_PROVIDER, "x", "y").blocks("docker"));
    }

    #[test]
    fn found_leaves_the_fix_and_the_hint_to_their_own_lines() {
        let message = format!(
            "bwrap is not on PATH; install it; {}",
            crate::capabilities::DOCTOR_HINT
        );
        assert_eq!(before_fix(&message, "install it"), "bwrap is not on PATH");
        assert_eq!(before_fix("nothing to cut", "fix"), "nothing to cut");
    }
}
