//! The one check of an environment variable's name, with the rule each consumer needs.
//!
//! A name a plugin gives for a sandbox's or a process's environment ends up in one of
//! three places, and each takes a different set of names:
//!
//! - [`Rule::Exec`]: an `execve` environment (a host process, a Docker container or
//!   exec), written `NAME=value`. A name with `=` would be split there (`A=B` with
//!   value `c` is `A` with value `B=c`), and one with NUL cut short, so both are
//!   refused, as is the empty name.
//! - [`Rule::Shell`]: a name the host writes into a shell script (`export NAME=...`,
//!   the Kubernetes exec preamble): the POSIX portable name, `[A-Za-z_][A-Za-z0-9_]*`,
//!   so no name can be shell syntax (`X;id`).
//! - [`Rule::Kubernetes`]: a key of a pod's environment Secret read with `envFrom`,
//!   as the API server validates it: letters, digits, `_`, `-` or `.`, not starting
//!   with a digit.
//!
//! Names the host sets itself (the egress proxy's variables) are handled by each
//! consumer where it sets them: they replace a plugin's value, never fail it.

/// Which names a consumer can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Any name an `execve` environment holds as itself: not empty, no `=`, no NUL.
    Exec,
    /// A POSIX portable name, safe to write into a shell script.
    Shell,
    /// A name the Kubernetes API server takes for a container's environment.
    Kubernetes,
}

/// A name its consumer cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidName {
    #[error("{name:?} is not a valid variable name")]
    Invalid { name: String },
    #[error("{name:?} is not a variable name a pod can have (letters, digits, _, - or ., not starting with a digit)")]
    NotForPod { name: String },
}

/// Whether `name` is a variable name under `rule`.
pub fn check(name: &str, rule: Rule) -> Result<(), InvalidName> {
    let bytes = name.as_bytes();
    let starts_with_digit = bytes.first().is_some_and(u8::is_ascii_digit);
    let valid = !bytes.is_empty()
        && match rule {
            Rule::Exec => !bytes.iter().any(|&b| b == b'=' || b == 0),
            Rule::Shell => {
                !starts_with_digit
                    && bytes
                        .iter()
                        .all(|&b| b == b'_' || b.is_ascii_alphanumeric())
            }
            Rule::Kubernetes => {
                !starts_with_digit
                    && bytes
                        .iter()
                        .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            }
        };
    match (valid, rule) {
        (true, _) => Ok(()),
        (false, Rule::Kubernetes) => Err(InvalidName::NotForPod {
            name: name.to_owned(),
        }),
        (false, _) => Err(InvalidName::Invalid {
            name: name.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_takes_its_names() {
        let cases: [(&str, [bool; 3]); 12] = [
            // name, [Exec, Shell, Kubernetes]
            ("PATH", [true, true, true]),
            ("_x1", [true, true, true]),
            ("a.b-c", [true, false, true]),
            ("1A", [true, false, false]),
            ("A B", [true, false, false]),
            ("X;id", [true, false, false]),
            ("é", [true, false, false]),
            ("", [false, false, false]),
            ("A=B", [false, false, false]),
            ("A\0B", [false, false, false]),
            ("=", [false, false, false]),
            ("-x", [true, false, true]),
        ];
        for (name, expected) in cases {
            let got = [Rule::Exec, Rule::Shell, Rule::Kubernetes].map(|r| check(name, r).is_ok());
            assert_eq!(got, expected, "{name:?}");
        }
    }

    #[test]
    fn messages_are_those_each_consumer_gave() {
        assert_eq!(
            check("A=B", Rule::Exec).unwrap_err().to_string(),
            r#""A=B" is not a valid variable name"#
        );
        assert_eq!(
            check("1BAD=", Rule::Kubernetes).unwrap_err().to_string(),
            r#""1BAD=" is not a variable name a pod can have (letters, digits, _, - or ., not starting with a digit)"#
        );
    }
}
