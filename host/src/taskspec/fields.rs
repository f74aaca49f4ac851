//! Deserializers for fields whose value must be checked (units, ranges, absolute paths).
//!
//! Each check runs inside the visit of the YAML scalar, so a bad value is reported with its
//! own line; checking after deserialization would only know the enclosing mapping. Used from
//! the model through `#[serde(deserialize_with = "...")]`.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::units::{self, QuantityError};

pub(crate) const API_VERSION: &str = "agentgate.io/v1";
pub(crate) const KIND: &str = "TaskSpec";

/// A YAML scalar as the visitor saw it.
pub(crate) enum Scalar<'a> {
    Str(&'a str),
    Int(i128),
    Float(f64),
    Bool(bool),
}

impl Scalar<'_> {
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match *self {
            Scalar::Int(n) => Some(n as f64),
            Scalar::Float(x) => Some(x),
            _ => None,
        }
    }
}

impl fmt::Display for Scalar<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Scalar::Str(text) => write!(f, "{text:?}"),
            Scalar::Int(n) => write!(f, "{n}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// Why a scalar field's value is refused. serde carries it on as text (its errors are
/// strings), and [`super::SpecError`] adds the field's path and line.
#[derive(Debug, thiserror::Error)]
enum FieldError {
    #[error("{value} is not {what}; expected a quoted string")]
    NotText { value: String, what: &'static str },
    #[error("{value} is out of range; expected {min} to {max}")]
    OutOfRange {
        value: String,
        min: String,
        max: String,
    },
    #[error("{0} is not an integer")]
    NotInteger(String),
    #[error("{value} is not supported; expected \"{expected}\"")]
    Unsupported {
        value: String,
        expected: &'static str,
    },
    #[error("{value} has {length} characters; expected {min} to {max}")]
    Length {
        value: String,
        length: usize,
        min: usize,
        max: usize,
    },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("{0} is not a number of cores; expected a number such as 2 or 0.5")]
    NotCores(String),
    #[error("{0} is not a number")]
    NotNumber(String),
    #[error("{0} is not an absolute path; expected a path starting with /")]
    NotAbsolute(String),
    #[error(transparent)]
    Quantity(#[from] QuantityError),
}

/// Visits one scalar and hands it to `check`, whose error message becomes the field's error.
struct Checked<F> {
    expecting: &'static str,
    check: F,
}

impl<'de, T, Msg: fmt::Display, F: FnOnce(Scalar) -> Result<T, Msg>> Visitor<'de> for Checked<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        (self.check)(Scalar::Str(text)).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<T, E> {
        (self.check)(Scalar::Int(n.into())).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<T, E> {
        (self.check)(Scalar::Int(n.into())).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, x: f64) -> Result<T, E> {
        (self.check)(Scalar::Float(x)).map_err(E::custom)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<T, E> {
        (self.check)(Scalar::Bool(b)).map_err(E::custom)
    }
}

fn checked<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    expecting: &'static str,
    check: impl FnOnce(Scalar) -> Result<T, FieldError>,
) -> Result<T, D::Error> {
    checked_by(deserializer, expecting, check)
}

/// Reads one scalar and checks it with `check`. The check runs inside the scalar's visit,
/// so its error (a module's own `thiserror` enum) is reported at the field's path and
/// line. The other TaskSpec modules build their field checks on this.
pub(crate) fn checked_by<'de, D: Deserializer<'de>, T, E: fmt::Display>(
    deserializer: D,
    expecting: &'static str,
    check: impl FnOnce(Scalar) -> Result<T, E>,
) -> Result<T, D::Error> {
    deserializer.deserialize_any(Checked { expecting, check })
}

fn text<'a>(value: &Scalar<'a>, what: &'static str) -> Result<&'a str, FieldError> {
    match *value {
        Scalar::Str(text) => Ok(text),
        _ => Err(FieldError::NotText {
            value: value.to_string(),
            what,
        }),
    }
}

/// A string of `min` to `max` characters (a gate's name).
pub(crate) fn string_in<'de, D: Deserializer<'de>>(
    d: D,
    what: &'static str,
    min: usize,
    max: usize,
) -> Result<String, D::Error> {
    checked(d, what, |value| string_of_length(value, what, min, max))
}

/// An integer from `min` to `max`, for a field whose range is its own.
pub(crate) fn integer<'de, D: Deserializer<'de>>(
    d: D,
    what: &'static str,
    min: u64,
    max: u64,
) -> Result<u64, D::Error> {
    checked(d, what, |value| integer_in(value, min, max))
}

/// A number from `min` to `max` (a threshold, a multiplier).
pub(crate) fn number<'de, D: Deserializer<'de>>(
    d: D,
    what: &'static str,
    min: f64,
    max: f64,
) -> Result<f64, D::Error> {
    checked(d, what, |value| number_in(value, min, max))
}

fn number_in(value: Scalar, min: f64, max: f64) -> Result<f64, FieldError> {
    match value.as_f64() {
        Some(x) if (min..=max).contains(&x) => Ok(x),
        Some(_) => Err(FieldError::OutOfRange {
            value: value.to_string(),
            min: min.to_string(),
            max: max.to_string(),
        }),
        None => Err(FieldError::NotNumber(value.to_string())),
    }
}

fn integer_in(value: Scalar, min: u64, max: u64) -> Result<u64, FieldError> {
    match value {
        Scalar::Int(n) if (i128::from(min)..=i128::from(max)).contains(&n) => Ok(n as u64),
        Scalar::Int(_) => Err(FieldError::OutOfRange {
            value: value.to_string(),
            min: min.to_string(),
            max: max.to_string(),
        }),
        _ => Err(FieldError::NotInteger(value.to_string())),
    }
}

pub(crate) fn api_version<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked(d, "an API version", |value| match value {
        Scalar::Str(API_VERSION) => Ok(Some(API_VERSION.to_string())),
        _ => Err(FieldError::Unsupported {
            value: value.to_string(),
            expected: API_VERSION,
        }),
    })
}

pub(crate) fn kind<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked(d, "a kind", |value| match value {
        Scalar::Str(KIND) => Ok(Some(KIND.to_string())),
        _ => Err(FieldError::Unsupported {
            value: value.to_string(),
            expected: KIND,
        }),
    })
}

fn string_of_length(
    value: Scalar,
    what: &'static str,
    min: usize,
    max: usize,
) -> Result<String, FieldError> {
    let text = text(&value, what)?;
    let length = text.chars().count();
    if !(min..=max).contains(&length) {
        return Err(FieldError::Length {
            value: value.to_string(),
            length,
            min,
            max,
        });
    }
    Ok(text.to_string())
}

pub(crate) fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked(d, "a name", |value| {
        string_of_length(value, "a name", 1, 128)
    })
}

pub(crate) fn namespace<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked(d, "a namespace", |value| {
        string_of_length(value, "a name", 1, 64)
    })
    .map(Some)
}

pub(crate) fn prompt<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked(d, "a prompt", |value| match text(&value, "a prompt")? {
        blank if blank.trim().is_empty() => Err(FieldError::EmptyPrompt),
        prompt => Ok(prompt.to_string()),
    })
}

pub(crate) fn max_iterations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    checked(d, "an iteration count", |value| {
        integer_in(value, 1, 10_000)
    })
    .map(|n| Some(n as u32))
}

pub(crate) fn tokens<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    checked(d, "a number of tokens", |value| {
        integer_in(value, 1, units::MAX_TOKENS)
    })
}

pub(crate) fn tokens_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    tokens(d).map(Some)
}

pub(crate) fn depth<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    checked(d, "a clone depth", |value| {
        integer_in(value, 1, u32::MAX.into())
    })
    .map(|n| Some(n as u32))
}

pub(crate) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    checked(d, "a duration", |value| match value {
        Scalar::Str(text) => Ok(units::parse_duration(text)?),
        _ => Ok(units::parse_duration(&value.to_string())?),
    })
}

pub(crate) fn duration_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

pub(crate) fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    checked(d, "a byte quantity", |value| match value {
        Scalar::Str(text) => Ok(units::parse_bytes(text)?),
        _ => Ok(units::parse_bytes(&value.to_string())?),
    })
    .map(Some)
}

pub(crate) fn cpu<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    checked(d, "a number of cores", |value| match value.as_f64() {
        Some(cores) => Ok(units::cpu_millicores(cores)?),
        None => Err(FieldError::NotCores(value.to_string())),
    })
    .map(Some)
}

pub(crate) fn cost<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    checked(d, "an amount of money", |value| match value {
        Scalar::Str(text) => Ok(units::parse_cost(text)?),
        _ => Ok(units::parse_cost(&value.to_string())?),
    })
    .map(Some)
}

pub(crate) fn temperature<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number(d, "a temperature", 0.0, 2.0).map(Some)
}

/// A path that must be absolute (inside the sandbox, or on the host for a local workspace).
pub(crate) fn absolute_path<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    checked(d, "an absolute path", |value| {
        match text(&value, "a path")? {
            path if path.starts_with('/') => Ok(path.to_string()),
            _ => Err(FieldError::NotAbsolute(value.to_string())),
        }
    })
}

pub(crate) fn absolute_path_opt<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    absolute_path(d).map(Some)
}

/// A string→string map whose YAML values may be numbers or booleans (`CI: true`); they are
/// kept as the text YAML gives them.
pub(crate) fn string_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    struct StringMap;

    impl<'de> Visitor<'de> for StringMap {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of names to strings")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                let value = map.next_value::<StringLike>()?;
                out.insert(key, value.0);
            }
            Ok(out)
        }
    }

    d.deserialize_map(StringMap)
}

/// A string, number or boolean, as text.
struct StringLike(String);

impl<'de> Deserialize<'de> for StringLike {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        checked(
            d,
            "a string, number or boolean",
            |value| -> Result<_, FieldError> {
                Ok(StringLike(match value {
                    Scalar::Str(text) => text.to_string(),
                    other => other.to_string(),
                }))
            },
        )
    }
}

/// Reads a mapping as the derived struct `Raw`, then converts it with `TryFrom`. The conversion
/// runs inside the mapping's visit, so its error carries the mapping's line; `fields` (the keys
/// of `Raw`) lets the `strict` adapter reject a typo with a suggestion.
pub(crate) fn converted<'de, D, Raw, T>(
    deserializer: D,
    fields: &'static [&'static str],
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    Raw: Deserialize<'de>,
    T: TryFrom<Raw>,
    T::Error: fmt::Display,
{
    struct Converted<Raw, T>(PhantomData<(Raw, T)>);

    impl<'de, Raw: Deserialize<'de>, T: TryFrom<Raw>> Visitor<'de> for Converted<Raw, T>
    where
        T::Error: fmt::Display,
    {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a mapping")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            let raw = Raw::deserialize(de::value::MapAccessDeserializer::new(map))?;
            T::try_from(raw).map_err(de::Error::custom)
        }
    }

    deserializer.deserialize_struct("", fields, Converted(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<'a, T>(
        yaml: &'a str,
        f: impl FnOnce(serde_yaml::Deserializer<'a>) -> Result<T, serde_yaml::Error>,
    ) -> Result<T, serde_yaml::Error> {
        f(serde_yaml::Deserializer::from_str(yaml))
    }

    #[test]
    fn unit_fields_accept_yaml_numbers() {
        assert_eq!(run("1000", bytes).unwrap(), Some(1000));
        assert_eq!(run("0.5", cpu).unwrap(), Some(500));
        assert_eq!(run("2", cpu).unwrap(), Some(2000));
        assert_eq!(run("5", cost).unwrap(), Some(5.0));
        assert!(run("10", duration).is_err());
    }

    #[test]
    fn ranges_are_named() {
        let error = run("3", temperature).unwrap_err().to_string();
        assert!(
            error.starts_with("3 is out of range; expected 0 to 2"),
            "{error}"
        );
        let error = run("0", max_iterations).unwrap_err().to_string();
        assert!(
            error.starts_with("0 is out of range; expected 1 to 10000"),
            "{error}"
        );
        assert!(run("0", tokens).is_err());
        let error = run("18446744073709551615", tokens).unwrap_err().to_string();
        assert!(
            error.starts_with("18446744073709551615 is out of range; expected 1 to 1000000000"),
            "{error}"
        );
    }

    #[test]
    fn strings_maps_stringify_scalars() {
        let map = run("{CI: true, N: 3, S: x}", string_map).unwrap();
        assert_eq!(map["CI"], "true");
        assert_eq!(map["N"], "3");
        assert_eq!(map["S"], "x");
    }

    #[test]
    fn paths_must_be_absolute() {
        assert!(run("/abs", absolute_path).is_ok());
        assert!(run("rel/path", absolute_path).is_err());
    }
}
