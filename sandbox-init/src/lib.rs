//! The sandbox init: the first program that runs inside a sealed sandbox.
//!
//! Landlock must be raised by the sandboxed process itself, after bubblewrap has built
//! the mount tree (a Landlocked process may not mount). So bubblewrap runs this small
//! program first: it restricts itself to exactly the view, then execs the command.
//!
//! It is a crate of its own so that what runs inside every sandbox is a few hundred
//! kilobytes that start in well under a millisecond, not the whole host binary. The
//! host builds it (see `host/build.rs`), embeds it, and hands it to bubblewrap; this
//! library is the one place that defines its arguments, for both sides.

use std::ffi::OsString;
use std::path::PathBuf;

use landlock::{
    path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    ABI,
};

/// Where the init is placed inside the view.
pub const PATH_IN_SANDBOX: &str = "/.agentgate/init";

/// Exit code of the init when it cannot raise the fence or start the command.
pub const INIT_FAILED: i32 = 126;

/// What the init is asked to do: allow reading beneath `readable`, everything beneath
/// `writable`, nothing else, then run `command`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub readable: Vec<PathBuf>,
    pub writable: Vec<PathBuf>,
    pub command: Vec<OsString>,
}

impl Fence {
    /// The init's whole argv, program path first.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args = vec![OsString::from(PATH_IN_SANDBOX)];
        for (flag, paths) in [("--read", &self.readable), ("--write", &self.writable)] {
            for path in paths {
                args.push(flag.into());
                args.push(path.into());
            }
        }
        args.push("--".into());
        args.extend(self.command.iter().cloned());
        args
    }

    /// Parses the arguments after the program path.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Fence, String> {
        let mut fence = Fence {
            readable: Vec::new(),
            writable: Vec::new(),
            command: Vec::new(),
        };
        let mut rest = args.into_iter();
        loop {
            let flag = rest.next();
            match flag.as_ref().and_then(|a| a.to_str()) {
                Some("--read") => fence.readable.push(path_after(&mut rest, "--read")?),
                Some("--write") => fence.writable.push(path_after(&mut rest, "--write")?),
                Some("--") => break,
                other => return Err(format!("unexpected init argument {other:?}")),
            }
        }
        fence.command = rest.collect();
        if fence.command.is_empty() {
            return Err("no command to run".into());
        }
        Ok(fence)
    }

    /// Restricts the calling thread (and what it execs) to the fence. Best effort
    /// across ABIs: a kernel without Landlock is left as it is, and says so.
    pub fn raise(&self) -> Result<RulesetStatus, String> {
        let abi = ABI::V5;
        let status = Ruleset::default()
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.create())
            .and_then(|r| r.add_rules(path_beneath_rules(&self.readable, AccessFs::from_read(abi))))
            .and_then(|r| r.add_rules(path_beneath_rules(&self.writable, AccessFs::from_all(abi))))
            .and_then(|r| r.restrict_self())
            .map_err(|e| e.to_string())?;
        Ok(status.ruleset)
    }
}

fn path_after(rest: &mut impl Iterator<Item = OsString>, flag: &str) -> Result<PathBuf, String> {
    rest.next()
        .map(PathBuf::from)
        .ok_or_else(|| format!("{flag} needs a path"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip() {
        let fence = Fence {
            readable: vec!["/usr".into(), "/data".into()],
            writable: vec!["/workspace".into()],
            command: vec!["sh".into(), "-c".into(), "--read x".into()],
        };
        let args = fence.to_args();
        let text: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            text,
            [
                PATH_IN_SANDBOX,
                "--read",
                "/usr",
                "--read",
                "/data",
                "--write",
                "/workspace",
                "--",
                "sh",
                "-c",
                "--read x"
            ]
        );
        assert_eq!(Fence::parse(args.into_iter().skip(1)).unwrap(), fence);
    }

    #[test]
    fn malformed_arguments_are_refused() {
        let parse = |args: &[&str]| Fence::parse(args.iter().map(OsString::from));
        assert!(parse(&["--read"])
            .unwrap_err()
            .contains("--read needs a path"));
        assert!(parse(&["--read", "/usr", "--"])
            .unwrap_err()
            .contains("no command"));
        assert!(parse(&["--frobnicate", "--", "true"]).is_err());
        assert!(parse(&["true"]).is_err());
    }
}
