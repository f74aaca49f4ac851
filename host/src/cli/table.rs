//! Tables for people, as `docker ps` prints them: columns padded to their widest
//! cell, ages as "5 minutes ago".

use std::time::Duration;

use crate::registry::now_ms;

/// `rows` under `header`, each column as wide as its widest cell. Cells must already
/// be safe for a terminal.
pub fn render(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    lines.extend(rows);
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// "5 minutes ago", as `docker ps` says it.
pub fn ago(ms: u64) -> String {
    let elapsed = Duration::from_millis(now_ms().saturating_sub(ms)).as_secs();
    let (n, unit) = match elapsed {
        0 => return "Less than a second ago".into(),
        s if s < 60 => (s, "second"),
        s if s < 3600 => (s / 60, "minute"),
        s if s < 86_400 => (s / 3600, "hour"),
        s => (s / 86_400, "day"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_docker_ps() {
        assert_eq!(ago(now_ms() - 90_000), "1 minute ago");
        assert_eq!(ago(now_ms() - 7_200_000), "2 hours ago");
    }

    #[test]
    fn columns_are_padded_to_the_widest_cell() {
        let text = render(
            &["A", "LONG HEADER", "C"],
            vec![vec!["wide cell".into(), "x".into(), String::new()]],
        );
        assert_eq!(text, "A           LONG HEADER   C\nwide cell   x\n");
    }
}
