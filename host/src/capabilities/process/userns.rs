//! User namespaces, as the kernel allows them.
//!
//! bubblewrap makes a new user namespace for every sealed process, so a kernel that
//! refuses them refuses every sandbox. The kernel says so in its sysctls, which are
//! read before bubblewrap starts: the spawn then fails with the reason and the fix
//! rather than with bubblewrap's exit. AppArmor's restriction (Ubuntu 23.10 and later)
//! is only reported: a profile may exempt bubblewrap, so only trying tells.

/// Why this process may not create user namespaces, and how to allow them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    pub fix: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; {}", self.reason, self.fix)
    }
}

/// What the kernel's sysctls say; `None` where the file does not exist (the kernel has
/// no such knob, which means no such restriction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserNamespaces {
    /// `/proc/sys/user/max_user_namespaces`: 0 forbids them to everyone.
    pub max: Option<u64>,
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian's older kernels): 0 forbids
    /// them to users without `CAP_SYS_ADMIN`.
    pub unprivileged_clone: Option<u64>,
    /// `/proc/sys/kernel/apparmor_restrict_unprivileged_userns`: 1 lets unprivileged
    /// programs create them only under an AppArmor profile that allows it.
    pub apparmor_restricted: Option<u64>,
    /// This process runs as root.
    pub privileged: bool,
}

impl UserNamespaces {
    pub fn of_this_kernel() -> UserNamespaces {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.trim().parse().ok())
        };
        UserNamespaces {
            max: read("/proc/sys/user/max_user_namespaces"),
            unprivileged_clone: read("/proc/sys/kernel/unprivileged_userns_clone"),
            apparmor_restricted: read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
            // SAFETY: geteuid has no preconditions.
            privileged: unsafe { libc::geteuid() } == 0,
        }
    }

    /// What was found when this process may create user namespaces; otherwise why not
    /// and how to allow them.
    pub fn check(&self) -> Result<String, Refusal> {
        if self.max == Some(0) {
            return Err(Refusal {
                reason: "the kernel allows no user namespaces (user.max_user_namespaces = 0), \
                         and bubblewrap needs one per sandbox"
                    .into(),
                fix: "allow them with `sysctl -w user.max_user_namespaces=15000` (and in \
                      /etc/sysctl.d to keep it)"
                    .into(),
            });
        }
        if self.unprivileged_clone == Some(0) && !self.privileged {
            return Err(Refusal {
                reason: "the kernel allows user namespaces to root only \
                         (kernel.unprivileged_userns_clone = 0), and bubblewrap needs one per \
                         sandbox"
                    .into(),
                fix: "allow them with `sysctl -w kernel.unprivileged_userns_clone=1`, or run \
                      agentgate as root"
                    .into(),
            });
        }
        Ok(match self.max {
            Some(max) => format!("allowed (user.max_user_namespaces = {max})"),
            None => "allowed".into(),
        })
    }

    /// AppArmor's restriction, when it applies to this process.
    pub fn apparmor_restriction(&self) -> Option<Refusal> {
        (self.apparmor_restricted == Some(1) && !self.privileged).then(|| Refusal {
            reason: "AppArmor restricts unprivileged user namespaces \
                     (kernel.apparmor_restrict_unprivileged_userns = 1): bubblewrap works only \
                     under a profile that grants it `userns`"
                .into(),
            fix: "give the bwrap binary such a profile (as Ubuntu's bwrap-userns-restrict \
                  does), or lift the restriction with \
                  `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
                .into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(max: Option<u64>, clone: Option<u64>, privileged: bool) -> UserNamespaces {
        UserNamespaces {
            max,
            unprivileged_clone: clone,
            apparmor_restricted: Some(1),
            privileged,
        }
    }

    #[test]
    fn none_allowed_fails_for_everyone_with_the_sysctl_to_set() {
        for privileged in [true, false] {
            let error = kernel(Some(0), None, privileged).check().unwrap_err();
            assert!(
                error.fix.contains("user.max_user_namespaces=15000"),
                "{error}"
            );
        }
    }

    #[test]
    fn root_only_namespaces_fail_for_users_and_pass_for_root() {
        let error = kernel(Some(100), Some(0), false).check().unwrap_err();
        assert!(error.fix.contains("unprivileged_userns_clone=1"), "{error}");
        assert!(kernel(Some(100), Some(0), true).check().is_ok());
    }

    #[test]
    fn apparmors_restriction_is_reported_to_users_only() {
        assert!(kernel(Some(100), None, false)
            .apparmor_restriction()
            .is_some_and(|r| r.fix.contains("apparmor_restrict_unprivileged_userns=0")));
        assert_eq!(kernel(Some(100), None, true).apparmor_restriction(), None);
    }

    #[test]
    fn this_kernel_allows_them() {
        let found = UserNamespaces::of_this_kernel().check().unwrap();
        assert!(found.starts_with("allowed"), "{found}");
    }
}
