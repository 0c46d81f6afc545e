//! A [`Value`] read from any serde format (JSON text when a document loads): built as the
//! text is read, with no `serde_json::Value` in between. A loaded document is read once
//! into a map of its own (no ordered map of owned strings to copy from and drop), and an
//! object's keys become shared texts straight from the text.

use std::fmt;
use std::sync::Arc;

use imbl::OrdMap;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::Value;

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

/// Builds a [`Value`] from whatever the format holds, as `serde_json::Value` would read it
/// (a float that is not finite reads as null; a key given twice keeps its last value).
struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.into()))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Value::Array(Arc::new(items.into_iter().collect())))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = OrdMap::new();
        while let Some(Key(key)) = map.next_key::<Key>()? {
            let value = map.next_value::<Value>()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// An object's key, read straight into the shared text a [`Value::Object`] keys by.
struct Key(Arc<str>);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }

            fn visit_str<E>(self, s: &str) -> Result<Key, E> {
                Ok(Key(s.into()))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `text` both ways: straight into a value, and through serde_json's value.
    fn both(text: &str) -> (Value, Value) {
        let direct: Value = serde_json::from_str(text).expect("direct");
        let through: serde_json::Value = serde_json::from_str(text).expect("through serde_json");
        (direct, Value::from(through))
    }

    #[test]
    fn text_reads_as_it_reads_through_serde_json() {
        for text in [
            "null",
            "true",
            "-12",
            "18446744073709551615",
            "2.5e-3",
            r#""a \"quoted\" \u00e9 text""#,
            "[]",
            "{}",
            r#"{"b": [1, {"c": null}], "a": "x", "\u00e9t\u00e9": 2}"#,
            r#"{"k": 1, "k": 2}"#,
            r#"[[[[{"deep": [true, false]}]]]]"#,
        ] {
            let (direct, through) = both(text);
            assert_eq!(direct, through, "{text}");
        }
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value_and_bad_text_is_refused() {
        let (direct, _) = both(r#"{"k": 1, "k": 2}"#);
        assert_eq!(direct.at(&[Arc::from("k")]), Some(&Value::from(2)));
        assert!(serde_json::from_str::<Value>(r#"{"k": }"#).is_err());
        assert!(serde_json::from_str::<Value>(r#"{1: 2}"#).is_err(), "keys are texts");
    }
}
