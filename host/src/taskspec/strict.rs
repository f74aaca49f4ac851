//! A serde `Deserializer` adapter that every TaskSpec is read through.
//!
//! It wraps serde_yaml's deserializer and does two things as serde walks the document:
//! - substitutes `${NAME}` in every string scalar (after YAML parsing, so a value cannot inject
//!   structure), and
//! - rejects a key that is not a field of the struct being read, with a "did you mean".
//!
//! Both raise their errors from inside serde_yaml's visit of the offending node, so serde_yaml
//! attaches that node's line and column. Doing the key check here, rather than with
//! `#[serde(deny_unknown_fields)]`, gives every struct the same helpful message.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Visitor};

use super::error::unknown_key;
use super::interpolate::Interpolator;

/// Where a node sits, which decides what the adapter checks.
#[derive(Clone, Copy)]
enum Role {
    /// An ordinary value.
    Value,
    /// A mapping read as a struct with these fields: its keys are checked.
    Struct(&'static [&'static str]),
    /// A key of such a mapping: must be one of these fields.
    Key(&'static [&'static str]),
}

/// The adapter around a deserializer `D`.
pub(crate) struct Strict<'e, D> {
    inner: D,
    env: &'e Interpolator<'e>,
    role: Role,
}

impl<'e, D> Strict<'e, D> {
    pub(crate) fn new(inner: D, env: &'e Interpolator<'e>) -> Self {
        Self {
            inner,
            env,
            role: Role::Value,
        }
    }
}

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            let visitor = Wrap { inner: visitor, env: self.env, role: self.role };
            self.inner.$method($($arg,)* visitor)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<'_, D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = Wrap {
            inner: visitor,
            env: self.env,
            role: Role::Struct(fields),
        };
        self.inner.deserialize_struct(name, fields, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// Wraps a visitor so that strings are substituted and nested nodes stay wrapped.
struct Wrap<'e, V> {
    inner: V,
    env: &'e Interpolator<'e>,
    role: Role,
}

impl<'e, V> Wrap<'e, V> {
    fn string<'s, E: de::Error>(&self, text: &'s str) -> Result<Cow<'s, str>, E> {
        let text = self.env.interpolate(text).map_err(E::custom)?;
        if let Role::Key(fields) = self.role {
            if !fields.contains(&text.as_ref()) {
                return Err(E::custom(unknown_key(&text, fields)));
            }
        }
        Ok(text)
    }

    fn seed<S>(&self, seed: S, role: Role) -> WrapSeed<'e, S> {
        WrapSeed {
            inner: seed,
            env: self.env,
            role,
        }
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, value: $ty) -> Result<Self::Value, E> {
            self.inner.$method(value)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Self::Value, E> {
        match self.string(value)? {
            Cow::Borrowed(text) => self.inner.visit_str(text),
            Cow::Owned(text) => self.inner.visit_string(text),
        }
    }

    fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Self::Value, E> {
        match self.string(value)? {
            Cow::Borrowed(text) => self.inner.visit_borrowed_str(text),
            Cow::Owned(text) => self.inner.visit_string(text),
        }
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Self::Value, E> {
        let text = self.string(&value)?.into_owned();
        self.inner.visit_string(text)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, inner: D) -> Result<Self::Value, D::Error> {
        let env = self.env;
        self.inner.visit_some(Strict {
            inner,
            env,
            role: self.role,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, inner: D) -> Result<Self::Value, D::Error> {
        let env = self.env;
        self.inner.visit_newtype_struct(Strict {
            inner,
            env,
            role: self.role,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let env = self.env;
        self.inner.visit_seq(Wrap {
            inner: seq,
            env,
            role: Role::Value,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let env = self.env;
        self.inner.visit_map(Wrap {
            inner: map,
            env,
            role: self.role,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        let env = self.env;
        self.inner.visit_enum(Wrap {
            inner: data,
            env,
            role: Role::Value,
        })
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        self.inner.next_element_seed(self.seed(seed, Role::Value))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A mapping; when it is read as a struct (`Role::Struct`), its keys are checked.
impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        let role = match self.role {
            Role::Struct(fields) => Role::Key(fields),
            _ => Role::Value,
        };
        self.inner.next_key_seed(self.seed(seed, role))
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.inner.next_value_seed(self.seed(seed, Role::Value))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, 'e, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<'e, A> {
    type Error = A::Error;
    type Variant = Wrap<'e, A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let env = self.env;
        let seed = self.seed(seed, Role::Value);
        let (value, variant) = self.inner.variant_seed(seed)?;
        Ok((
            value,
            Wrap {
                inner: variant,
                env,
                role: Role::Value,
            },
        ))
    }
}

impl<'de, A: de::VariantAccess<'de>> de::VariantAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        let seed = self.seed(seed, Role::Value);
        self.inner.newtype_variant_seed(seed)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let visitor = Wrap {
            inner: visitor,
            env: self.env,
            role: Role::Value,
        };
        self.inner.tuple_variant(len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let visitor = Wrap {
            inner: visitor,
            env: self.env,
            role: Role::Struct(fields),
        };
        self.inner.struct_variant(fields, visitor)
    }
}

/// Wraps a seed so that the deserializer it is given is wrapped too.
struct WrapSeed<'e, S> {
    inner: S,
    env: &'e Interpolator<'e>,
    role: Role,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for WrapSeed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, inner: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Strict {
            inner,
            env: self.env,
            role: self.role,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Point {
        x: String,
        #[serde(default)]
        tags: BTreeMap<String, String>,
    }

    fn read<T: for<'de> Deserialize<'de>>(yaml: &str) -> Result<T, serde_yaml::Error> {
        let env = |name: &str| (name == "X").then(|| "from-env".to_string());
        let de = serde_yaml::Deserializer::from_str(yaml);
        let interpolator = Interpolator::new(&env);
        T::deserialize(Strict::new(de, &interpolator))
    }

    #[test]
    fn substitutes_strings_everywhere() {
        let point: Point = read("x: ${X}\ntags: {a: \"<${X}>\"}").unwrap();
        assert_eq!(point.x, "from-env");
        assert_eq!(point.tags["a"], "<from-env>");
    }

    #[test]
    fn rejects_unknown_struct_keys_with_line() {
        let error = read::<Point>("x: a\ny: b\n").unwrap_err().to_string();
        assert!(error.contains("unknown key \"y\""), "{error}");
        assert!(error.contains("line 2"), "{error}");
    }

    #[test]
    fn map_keys_are_free() {
        let point: Point = read("x: a\ntags: {anything: b}").unwrap();
        assert_eq!(point.tags.len(), 1);
    }
}
