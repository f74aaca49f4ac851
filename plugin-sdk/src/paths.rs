//! Map a working directory from an `exec-request` onto the host, for sandbox providers
//! that run commands on the host's own filesystem (`sandbox-none`, `sandbox-subprocess`).
//!
//! A driver names directories as the sandbox sees them: relative to the workdir, or
//! absolute under the TaskSpec's `workdir` (default `/workspace`). Without a container
//! there is no such path, so it is mapped onto the workspace's host path. Mapping is
//! lexical and never leaves the workspace: `..` that climbs out of it is refused.

use crate::host::types::Error;

/// Resolves `cwd` (from an `exec-request`) to an absolute host directory.
///
/// - `None` → `host_root`.
/// - A relative path → joined onto `host_root`.
/// - An absolute path under `workdir` (the sandbox's view) or under `host_root` itself
///   (what the provider reported as its workdir) → the same place under `host_root`.
/// - Anything else, or a `..` that leaves the workspace → `invalid-spec` at `cwd`.
pub fn host_cwd(host_root: &str, workdir: &str, cwd: Option<&str>) -> Result<String, Error> {
    let Some(cwd) = cwd else {
        return Ok(normalize(host_root));
    };
    let rest = if !cwd.starts_with('/') {
        Some(cwd)
    } else {
        strip_dir_prefix(cwd, workdir).or_else(|| strip_dir_prefix(cwd, host_root))
    };
    let Some(rest) = rest else {
        return Err(crate::error::invalid_spec(
            "cwd",
            format!(
                "`{cwd}` is outside the workspace; use a path relative to it or under `{workdir}`"
            ),
        ));
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(crate::error::invalid_spec(
                        "cwd",
                        format!("`{cwd}` climbs out of the workspace"),
                    ));
                }
            }
            other => parts.push(other),
        }
    }
    let root = normalize(host_root);
    if parts.is_empty() {
        Ok(root)
    } else if root == "/" {
        Ok(format!("/{}", parts.join("/")))
    } else {
        Ok(format!("{root}/{}", parts.join("/")))
    }
}

/// `path` with `dir` removed when `path` is `dir` or lies below it (whole components
/// only: `/workspace2` is not under `/workspace`).
fn strip_dir_prefix<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    let dir = dir.trim_end_matches('/');
    let rest = path.strip_prefix(dir)?;
    if rest.is_empty() || rest.starts_with('/') || dir.is_empty() {
        Some(rest)
    } else {
        None
    }
}

/// Drops trailing slashes (but keeps `/`).
fn normalize(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".to_string()
    } else {
        trimmed.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/home/u/proj";

    fn ok(cwd: Option<&str>) -> String {
        host_cwd(ROOT, "/workspace", cwd).unwrap()
    }

    fn err_path(cwd: &str) -> String {
        match host_cwd(ROOT, "/workspace", Some(cwd)).unwrap_err() {
            Error::InvalidSpec(e) => e.path,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn none_is_the_root() {
        assert_eq!(ok(None), ROOT);
        assert_eq!(host_cwd("/home/u/proj/", "/workspace", None).unwrap(), ROOT);
    }

    #[test]
    fn relative_joins_the_root() {
        assert_eq!(ok(Some("src")), "/home/u/proj/src");
        assert_eq!(ok(Some("./src/../lib/")), "/home/u/proj/lib");
        assert_eq!(ok(Some(".")), ROOT);
    }

    #[test]
    fn workdir_maps_onto_the_root() {
        assert_eq!(ok(Some("/workspace")), ROOT);
        assert_eq!(ok(Some("/workspace/")), ROOT);
        assert_eq!(ok(Some("/workspace/a/b")), "/home/u/proj/a/b");
        assert_eq!(
            host_cwd(ROOT, "/workspace/", Some("/workspace/a")).unwrap(),
            "/home/u/proj/a"
        );
    }

    #[test]
    fn host_path_is_accepted_as_is() {
        assert_eq!(ok(Some("/home/u/proj/x")), "/home/u/proj/x");
    }

    #[test]
    fn outside_paths_are_refused() {
        assert_eq!(err_path("/etc"), "cwd");
        assert_eq!(err_path("/workspace2"), "cwd");
        assert_eq!(err_path("/home/u/project"), "cwd");
        assert_eq!(err_path(".."), "cwd");
        assert_eq!(err_path("a/../../b"), "cwd");
        assert_eq!(err_path("/workspace/../etc"), "cwd");
    }

    #[test]
    fn root_workspace() {
        assert_eq!(
            host_cwd("/", "/workspace", Some("/workspace/a")).unwrap(),
            "/a"
        );
    }
}
