//! Quantities written as text in a TaskSpec: CPU cores, byte sizes, durations and money.
//!
//! The reference system kept these as strings and never converted them; here each is parsed
//! once, strictly, into the number the host enforces (millicores, bytes, a `Duration`, USD).
//! Each parser returns the message a person sees when the value is wrong.

use std::time::Duration;

const BYTE_SUFFIXES: [(&str, u64); 4] = [
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
];

const DURATION_UNITS: [(&str, u64); 4] = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)];

/// Regular expressions for the JSON Schema, matching what the parsers accept.
pub(crate) const BYTES_PATTERN: &str = "^[0-9]+(Ki|Mi|Gi|Ti)?$";
pub(crate) const DURATION_PATTERN: &str = "^[0-9]+[smhd]$";
pub(crate) const COST_PATTERN: &str = r"^\$?[0-9]+(\.[0-9]{1,2})?$";

/// `"4Gi"` → 4 × 2³⁰. Plain digits are bytes. Must be more than zero.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let (digits, multiplier) = BYTE_SUFFIXES
        .iter()
        .find_map(|(suffix, multiplier)| Some((text.strip_suffix(suffix)?, *multiplier)))
        .unwrap_or((text, 1));
    let bytes = parse_digits(digits)
        .and_then(|count| count.checked_mul(multiplier))
        .ok_or_else(|| {
            format!(
                "\"{text}\" is not a byte quantity; \
                 expected an integer with Ki, Mi, Gi or Ti (e.g. \"4Gi\")"
            )
        })?;
    if bytes == 0 {
        return Err(format!(
            "\"{text}\" is zero; a byte quantity must be more than 0"
        ));
    }
    Ok(bytes)
}

/// `"30m"` → 30 minutes. A unit is required; must be more than zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let seconds = DURATION_UNITS
        .iter()
        .find_map(|(unit, scale)| Some((text.strip_suffix(unit)?, *scale)))
        .and_then(|(digits, scale)| parse_digits(digits)?.checked_mul(scale))
        .ok_or_else(|| {
            format!(
                "\"{text}\" is not a duration; \
                 expected an integer with s, m, h or d (e.g. \"30m\")"
            )
        })?;
    if seconds == 0 {
        return Err(format!(
            "\"{text}\" is zero; a duration must be more than 0"
        ));
    }
    Ok(Duration::from_secs(seconds))
}

/// The shortest exact form of a duration parsed by `parse_duration`, e.g. `"2h"`.
pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    DURATION_UNITS
        .iter()
        .find(|(_, scale)| seconds.is_multiple_of(*scale))
        .map(|(unit, scale)| format!("{}{unit}", seconds / scale))
        .unwrap_or_else(|| format!("{seconds}s"))
}

/// A number of cores from 0.1 to 64 → millicores.
pub fn cpu_millicores(cores: f64) -> Result<u32, String> {
    if !(0.1..=64.0).contains(&cores) {
        return Err(format!("{cores} cores is out of range; expected 0.1 to 64"));
    }
    // In range, so the rounded product fits in a u32.
    Ok((cores * 1000.0).round() as u32)
}

/// `"$5.00"`, `"$5"` or `"5.00"` → 5.0 US dollars. Must be more than zero.
pub fn parse_cost(text: &str) -> Result<f64, String> {
    let amount = text.strip_prefix('$').unwrap_or(text);
    let (whole, cents) = amount.split_once('.').unwrap_or((amount, "0"));
    let well_formed = parse_digits(whole).is_some()
        && (1..=2).contains(&cents.len())
        && cents.bytes().all(|b| b.is_ascii_digit());
    let usd = amount
        .parse::<f64>()
        .ok()
        .filter(|_| well_formed)
        .ok_or_else(|| {
            format!("\"{text}\" is not an amount of money; expected US dollars such as \"$5.00\"")
        })?;
    if usd <= 0.0 {
        return Err(format!(
            "\"{text}\" is zero; a cost limit must be more than $0"
        ));
    }
    Ok(usd)
}

/// ASCII digits only (no sign, no spaces) as a u64.
fn parse_digits(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes() {
        assert_eq!(parse_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_bytes("4Gi"), Ok(4 << 30));
        assert_eq!(parse_bytes("1Ti"), Ok(1 << 40));
        assert_eq!(parse_bytes("1Ki"), Ok(1024));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        for bad in [
            "4Gb",
            "4G",
            "-1",
            "0",
            "",
            "Gi",
            "1.5Gi",
            " 4Gi",
            "99999999999Ti",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(
            parse_bytes("4Gb").unwrap_err(),
            "\"4Gb\" is not a byte quantity; expected an integer with Ki, Mi, Gi or Ti (e.g. \"4Gi\")"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        for bad in ["1.5h", "10", "1w", "0s", "h", "-1h", ""] {
            assert!(parse_duration(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn durations_format_back() {
        for text in ["90s", "30m", "2h", "1d"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }

    #[test]
    fn cpu() {
        assert_eq!(cpu_millicores(0.5), Ok(500));
        assert_eq!(cpu_millicores(0.1), Ok(100));
        assert_eq!(cpu_millicores(64.0), Ok(64_000));
        for bad in [0.0, 0.05, 65.0, -1.0, f64::NAN] {
            assert!(cpu_millicores(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn cost() {
        assert_eq!(parse_cost("$5.00"), Ok(5.0));
        assert_eq!(parse_cost("$5"), Ok(5.0));
        assert_eq!(parse_cost("0.5"), Ok(0.5));
        for bad in ["$", "five", "$5.000", "$-5", "$0", "5$", "$5."] {
            assert!(parse_cost(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
