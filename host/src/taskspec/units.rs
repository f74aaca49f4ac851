//! Quantities written as text in a TaskSpec: CPU cores, byte sizes, durations and money.
//!
//! The reference system kept these as strings and never converted them; here each is parsed
//! once, strictly, into the number the host enforces (millicores, bytes, a `Duration`, USD).
//! Each parser returns a [`QuantityError`] whose message a person sees when the value is wrong, and bounds its value,
//! so that no quantity a document names can overflow the arithmetic that later uses it
//! (`Instant + timeout`, a cgroup limit, a cost sum).

use std::time::Duration;

const BYTE_SUFFIXES: [(&str, u64); 4] = [
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
];

const DURATION_UNITS: [(&str, u64); 4] = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)];

/// The longest duration accepted (a timeout or a wall-clock limit): 30 days.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 86_400);

/// The largest byte quantity accepted (memory, disk): 1024Ti, far above any machine, and far
/// below where a byte count overflows the signed 64-bit limits of cgroups and Docker.
pub const MAX_BYTES: u64 = 1 << 50;

/// The most cores accepted.
pub const MAX_CORES: f64 = 64.0;

/// The largest cost limit accepted, in US dollars.
pub const MAX_COST_USD: f64 = 1_000_000.0;

/// The largest token budget accepted.
pub const MAX_TOKENS: u64 = 1_000_000_000;

/// Regular expressions for the JSON Schema, matching what the parsers accept.
pub(crate) const BYTES_PATTERN: &str = "^[0-9]+(Ki|Mi|Gi|Ti)?$";
pub(crate) const DURATION_PATTERN: &str = "^[0-9]+[smhd]$";
pub(crate) const COST_PATTERN: &str = r"^\$?[0-9]+(\.[0-9]{1,2})?$";

/// A quantity that does not parse or is out of its range; the message names the text
/// written and what is expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantityError {
    /// The text (carried) is not digits with an optional Ki, Mi, Gi or Ti suffix.
    #[error(
        "\"{0}\" is not a byte quantity; expected an integer with Ki, Mi, Gi or Ti (e.g. \"4Gi\")"
    )]
    NotBytes(String),
    /// The byte quantity (text carried) is zero or above `MAX_BYTES`.
    #[error("\"{0}\" is out of range; expected 1 to 1024Ti")]
    BytesOutOfRange(String),
    /// The text (carried) is not digits followed by s, m, h or d.
    #[error("\"{0}\" is not a duration; expected an integer with s, m, h or d (e.g. \"30m\")")]
    NotDuration(String),
    /// The duration (text carried) is zero or longer than `MAX_DURATION`.
    #[error("\"{0}\" is out of range; expected 1s to {max}", max = format_duration(MAX_DURATION))]
    DurationOutOfRange(String),
    /// The number of cores (carried) is below 0.1 or above `MAX_CORES`.
    #[error("{0} cores is out of range; expected 0.1 to {MAX_CORES}")]
    CoresOutOfRange(f64),
    /// The text (carried) is not dollars with at most two decimals, with or without `$`.
    #[error("\"{0}\" is not an amount of money; expected US dollars such as \"$5.00\"")]
    NotMoney(String),
    /// The cost limit (text carried) is zero.
    #[error("\"{0}\" is zero; a cost limit must be more than $0")]
    ZeroCost(String),
    /// The cost limit (text carried) is above `MAX_COST_USD`.
    #[error("\"{0}\" is out of range; expected $0.01 to ${MAX_COST_USD}")]
    CostOutOfRange(String),
}

/// `"4Gi"` → 4 × 2³⁰. Plain digits are bytes. From 1 byte to `MAX_BYTES`.
pub fn parse_bytes(text: &str) -> Result<u64, QuantityError> {
    let (digits, multiplier) = BYTE_SUFFIXES
        .iter()
        .find_map(|(suffix, multiplier)| Some((text.strip_suffix(suffix)?, *multiplier)))
        .unwrap_or((text, 1));
    if !is_digits(digits) {
        return Err(QuantityError::NotBytes(text.to_string()));
    }
    let bytes = digits
        .parse::<u64>()
        .ok()
        .and_then(|count| count.checked_mul(multiplier))
        .filter(|bytes| (1..=MAX_BYTES).contains(bytes))
        .ok_or_else(|| QuantityError::BytesOutOfRange(text.to_string()))?;
    Ok(bytes)
}

/// `"30m"` → 30 minutes. A unit is required; from 1s to `MAX_DURATION`.
pub fn parse_duration(text: &str) -> Result<Duration, QuantityError> {
    let (digits, scale) = DURATION_UNITS
        .iter()
        .find_map(|(unit, scale)| Some((text.strip_suffix(unit)?, *scale)))
        .filter(|(digits, _)| is_digits(digits))
        .ok_or_else(|| QuantityError::NotDuration(text.to_string()))?;
    let seconds = digits
        .parse::<u64>()
        .ok()
        .and_then(|count| count.checked_mul(scale))
        .filter(|seconds| (1..=MAX_DURATION.as_secs()).contains(seconds))
        .ok_or_else(|| QuantityError::DurationOutOfRange(text.to_string()))?;
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

/// A number of cores from 0.1 to `MAX_CORES` → millicores.
pub fn cpu_millicores(cores: f64) -> Result<u32, QuantityError> {
    if !(0.1..=MAX_CORES).contains(&cores) {
        return Err(QuantityError::CoresOutOfRange(cores));
    }
    // In range, so the rounded product fits in a u32.
    Ok((cores * 1000.0).round() as u32)
}

/// `"$5.00"`, `"$5"` or `"5.00"` → 5.0 US dollars. More than zero, at most `MAX_COST_USD`.
pub fn parse_cost(text: &str) -> Result<f64, QuantityError> {
    let amount = text.strip_prefix('$').unwrap_or(text);
    let (whole, cents) = amount.split_once('.').unwrap_or((amount, "0"));
    let well_formed = is_digits(whole)
        && (1..=2).contains(&cents.len())
        && cents.bytes().all(|b| b.is_ascii_digit());
    let usd = amount
        .parse::<f64>()
        .ok()
        .filter(|_| well_formed)
        .ok_or_else(|| QuantityError::NotMoney(text.to_string()))?;
    if usd <= 0.0 {
        return Err(QuantityError::ZeroCost(text.to_string()));
    }
    if usd > MAX_COST_USD {
        return Err(QuantityError::CostOutOfRange(text.to_string()));
    }
    Ok(usd)
}

/// One or more ASCII digits, nothing else (no sign, no spaces).
fn is_digits(digits: &str) -> bool {
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
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
            parse_bytes("4Gb").unwrap_err().to_string(),
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
    fn quantities_are_bounded_and_never_overflow() {
        let error = parse_duration("9223372036854775807s").unwrap_err();
        assert_eq!(
            error.to_string(),
            "\"9223372036854775807s\" is out of range; expected 1s to 30d"
        );
        assert_eq!(parse_duration("30d"), Ok(MAX_DURATION));
        for bad in [
            "31d",
            "721h",
            "99999999999999999999999d",
            "18446744073709551615s",
        ] {
            assert!(
                parse_duration(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("out of range"),
                "{bad}"
            );
        }
        assert_eq!(parse_bytes("1024Ti"), Ok(MAX_BYTES));
        for bad in [
            "1025Ti",
            "18446744073709551615",
            "99999999999999999999999Ki",
        ] {
            assert!(
                parse_bytes(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("out of range"),
                "{bad}"
            );
        }
        assert!(parse_cost(&"9".repeat(400))
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert_eq!(parse_cost("$1000000"), Ok(MAX_COST_USD));
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
