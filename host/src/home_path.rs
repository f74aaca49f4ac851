//! `~` in the host paths people write: TaskSpec mounts, the folders and scopes of
//! `grants.yaml`, a git credential's `sshKey`.
//!
//! One expansion for all of them, so a path means the same folder whoever wrote it.
//! It lives here rather than in `taskspec` because the operator's files and the
//! capabilities use it too, and none of them is a TaskSpec. The environment is passed
//! in: a TaskSpec is parsed with the environment its caller chose (the same one its
//! `${VAR}`s come from), and tests pass a fixed one. A [`HomePathError`] says only what
//! is wrong with the path; each caller puts it in its own typed error, with the field
//! or line it came from.

use std::path::PathBuf;

/// A host path that cannot be used as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HomePathError {
    #[error("cannot expand \"~\": HOME is not set")]
    NoHome,
    #[error("is not an absolute path: write one starting with / or ~/")]
    NotAbsolute,
}

/// `~` or `~/…` → `$HOME`, `$HOME/…`; any other path (`~user/…` included) as written.
/// Fails only when the path starts with `~` and `env` has no `HOME`.
pub fn expand_home(
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, HomePathError> {
    let rest = match path.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ => return Ok(path.to_string()),
    };
    let home = env("HOME").ok_or(HomePathError::NoHome)?;
    Ok(format!("{}{rest}", home.trim_end_matches('/')))
}

/// [`expand_home`], then required to be absolute: for the host folders an operator
/// names, which must not depend on the directory agentgate was started in.
pub fn absolute_host_path(
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, HomePathError> {
    let expanded = expand_home(path, env)?;
    if expanded.starts_with('/') {
        Ok(PathBuf::from(expanded))
    } else {
        Err(HomePathError::NotAbsolute)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_home_only_at_the_start() {
        let env = |name: &str| (name == "HOME").then(|| "/home/me/".to_string());
        assert_eq!(expand_home("~/.npm", &env).unwrap(), "/home/me/.npm");
        assert_eq!(expand_home("~", &env).unwrap(), "/home/me");
        assert_eq!(expand_home("./x~", &env).unwrap(), "./x~");
        assert_eq!(expand_home("~other/x", &env).unwrap(), "~other/x");
        assert_eq!(expand_home("/k", &|_| None).unwrap(), "/k");
        assert!(expand_home("~/x", &|_| None).is_err());
    }

    #[test]
    fn host_paths_must_be_absolute_once_expanded() {
        let env = |name: &str| (name == "HOME").then(|| "/home/me".to_string());
        assert_eq!(
            absolute_host_path("~/src", &env).unwrap(),
            PathBuf::from("/home/me/src")
        );
        assert_eq!(
            absolute_host_path("/srv", &env).unwrap(),
            PathBuf::from("/srv")
        );
        let err = absolute_host_path("src", &env).unwrap_err();
        assert!(err.to_string().contains("absolute"), "{err}");
        assert!(absolute_host_path("~/src", &|_| None).is_err());
    }
}
