//! Credentials written into a TaskSpec in clear.
//!
//! A TaskSpec is shared, committed and shown (`taskspec.json`, the report); a key
//! written into it literally (`ANTHROPIC_API_KEY: "sk-ant-…"`) travels with it. The
//! run masks such values like any secret; `validate` and `run` also say where each
//! one is, so it can be moved to `--secret-env` or a `${VAR}`.

/// A value under `spec.execution.sandbox.environment` whose name says it is a
/// credential and which the document writes in clear (no `${VAR}` in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiteralCredential {
    /// `spec.execution.sandbox.environment.NAME`.
    pub field: String,
    /// The variable's name.
    pub name: String,
    /// 1-based, when the name's line could be found.
    pub line: Option<usize>,
}

impl std::fmt::Display for LiteralCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.field)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        write!(
            f,
            ": a credential written in clear; the run masks it, but it belongs outside the \
             TaskSpec: pass it with `--secret-env {name}` (and `{name}: ${{{name}}}`), or as a \
             `${{VAR}}` of the environment",
            name = self.name
        )
    }
}

/// The literal credentials of `text` (an already parsed document), by
/// `is_credential` on each variable's name.
pub fn literal_credentials(
    text: &str,
    is_credential: &dyn Fn(&str) -> bool,
) -> Vec<LiteralCredential> {
    let Ok(document) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
        return Vec::new();
    };
    let Some(environment) = ["spec", "execution", "sandbox", "environment"]
        .iter()
        .try_fold(&document, |value, key| value.get(key))
        .and_then(serde_yaml::Value::as_mapping)
    else {
        return Vec::new();
    };
    environment
        .iter()
        .filter_map(|(name, value)| Some((name.as_str()?, value.as_str()?)))
        .filter(|(name, value)| is_credential(name) && !value.contains("${"))
        .map(|(name, _)| LiteralCredential {
            field: format!("spec.execution.sandbox.environment.{name}"),
            name: name.to_string(),
            line: line_of_key(text, name),
        })
        .collect()
}

/// The line of the first `NAME:` key after an `environment:` key.
fn line_of_key(text: &str, name: &str) -> Option<usize> {
    let key = |line: &str, key: &str| {
        let line = line.trim_start();
        line.strip_prefix(key)
            .or_else(|| line.strip_prefix(&format!("\"{key}\"")))
            .or_else(|| line.strip_prefix(&format!("'{key}'")))
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
    };
    let start = text.lines().position(|line| key(line, "environment"))?;
    text.lines()
        .enumerate()
        .skip(start + 1)
        .find(|(_, line)| key(line, name))
        .map(|(index, _)| index + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(name: &str) -> bool {
        name.ends_with("_KEY") || name.ends_with("_TOKEN")
    }

    #[test]
    fn only_literal_values_of_credential_names_are_found_with_their_lines() {
        let text = "\
apiVersion: agentgate.dev/v1
kind: TaskSpec
spec:
  execution:
    sandbox:
      environment:
        NODE_ENV: production
        ANTHROPIC_API_KEY: \"sk-ant-literal\"
        GH_TOKEN: ${GH_TOKEN}
        'OPENAI_API_KEY': sk-other
";
        let found = literal_credentials(text, &credential);
        assert_eq!(
            found,
            vec![
                LiteralCredential {
                    field: "spec.execution.sandbox.environment.ANTHROPIC_API_KEY".into(),
                    name: "ANTHROPIC_API_KEY".into(),
                    line: Some(8),
                },
                LiteralCredential {
                    field: "spec.execution.sandbox.environment.OPENAI_API_KEY".into(),
                    name: "OPENAI_API_KEY".into(),
                    line: Some(10),
                },
            ]
        );
        let message = found[0].to_string();
        assert!(
            message.contains("--secret-env ANTHROPIC_API_KEY"),
            "{message}"
        );
        assert!(!message.contains("sk-ant-literal"), "{message}");
        assert!(literal_credentials("spec: {}", &credential).is_empty());
    }
}
