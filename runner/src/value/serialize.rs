//! Serialising a Rust value straight into a [`Value`], as `serde_json::to_value` would
//! into its JSON, without building that JSON first: a cell's `set` and a list's `push`
//! (every message of a dialog) then allocate each object and key once, not twice.
//!
//! The result is exactly `Value::from(serde_json::to_value(x)?)`: a number that is not
//! finite is `null`, map keys are strings (numbers and booleans written as text), and an
//! enum is tagged as serde's attributes say.

use std::sync::Arc;

use imbl::OrdMap;
use serde::ser::{self, Error as _, Impossible, Serialize};

use super::{Array, Value};

type Error = serde_json::Error;

/// The serializer whose output is a [`Value`].
pub(super) struct ValueSerializer;

/// An array being serialised (a sequence, a tuple, or the fields of a tuple variant, then
/// wrapped in an object under `variant`).
pub(super) struct Items {
    items: Vec<Value>,
    variant: Option<&'static str>,
}

/// An object being serialised (a map or a struct, or the fields of a struct variant, then
/// wrapped in an object under `variant`); `key` waits for its value.
pub(super) struct Fields {
    fields: OrdMap<Arc<str>, Value>,
    key: Option<Arc<str>>,
    variant: Option<&'static str>,
}

/// `{variant: value}`: how serde_json writes an externally tagged variant with data.
fn tagged(variant: Option<&'static str>, value: Value) -> Value {
    match variant {
        Some(variant) => Value::Object(OrdMap::unit(Arc::from(variant), value)),
        None => value,
    }
}

fn out_of_range() -> Error {
    Error::custom("number out of range")
}

/// The methods of [`ValueSerializer`] for the integers every JSON number holds.
macro_rules! as_number {
    ($($method:ident: $type:ty),*) => {$(
        fn $method(self, v: $type) -> Result<Value, Error> {
            Ok(Value::Number(v.into()))
        }
    )*};
}

impl ser::Serializer for ValueSerializer {
    type Ok = Value;
    type Error = Error;
    type SerializeSeq = Items;
    type SerializeTuple = Items;
    type SerializeTupleStruct = Items;
    type SerializeTupleVariant = Items;
    type SerializeMap = Fields;
    type SerializeStruct = Fields;
    type SerializeStructVariant = Fields;

    fn serialize_bool(self, v: bool) -> Result<Value, Error> {
        Ok(Value::Bool(v))
    }
    as_number!(
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64
    );

    fn serialize_i128(self, v: i128) -> Result<Value, Error> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(v), _) => self.serialize_i64(v),
            (_, Ok(v)) => self.serialize_u64(v),
            _ => Err(out_of_range()),
        }
    }
    fn serialize_u128(self, v: u128) -> Result<Value, Error> {
        u64::try_from(v).map_err(|_| out_of_range()).and_then(|v| self.serialize_u64(v))
    }
    fn serialize_f32(self, v: f32) -> Result<Value, Error> {
        Ok(serde_json::Number::from_f64(v.into()).map_or(Value::Null, Value::Number))
    }
    fn serialize_f64(self, v: f64) -> Result<Value, Error> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn serialize_char(self, v: char) -> Result<Value, Error> {
        Ok(Value::String(v.to_string().into()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, Error> {
        Ok(Value::String(v.into()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Value, Error> {
        Ok(Value::Array(Arc::new(v.iter().map(|b| Value::Number((*b).into())).collect())))
    }
    fn serialize_none(self) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Value, Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Value, Error> {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<Value, Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<Value, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Value, Error> {
        Ok(tagged(Some(variant), value.serialize(self)?))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Items, Error> {
        Ok(Items { items: Vec::with_capacity(len.unwrap_or(0)), variant: None })
    }
    fn serialize_tuple(self, len: usize) -> Result<Items, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Items, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Items, Error> {
        Ok(Items { items: Vec::with_capacity(len), variant: Some(variant) })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Fields, Error> {
        Ok(Fields { fields: OrdMap::new(), key: None, variant: None })
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Fields, Error> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Fields, Error> {
        Ok(Fields { fields: OrdMap::new(), key: None, variant: Some(variant) })
    }
}

impl Items {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.items.push(value.serialize(ValueSerializer)?);
        Ok(())
    }

    fn finish(self) -> Result<Value, Error> {
        let array: Array = self.items.into_iter().collect();
        Ok(tagged(self.variant, Value::Array(Arc::new(array))))
    }
}

/// The four serde traits of a sequence, alike for [`Items`]: each element goes to
/// `push`, and `end` makes the array.
macro_rules! items {
    ($($serialize:ident :: $element:ident),*) => {$(
        impl ser::$serialize for Items {
            type Ok = Value;
            type Error = Error;
            fn $element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.push(value)
            }
            fn end(self) -> Result<Value, Error> {
                self.finish()
            }
        }
    )*};
}

items!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl Fields {
    fn insert<T: Serialize + ?Sized>(&mut self, key: Arc<str>, value: &T) -> Result<(), Error> {
        self.fields.insert(key, value.serialize(ValueSerializer)?);
        Ok(())
    }

    fn finish(self) -> Result<Value, Error> {
        Ok(tagged(self.variant, Value::Object(self.fields)))
    }
}

impl ser::SerializeMap for Fields {
    type Ok = Value;
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.key = Some(key.serialize(KeySerializer)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let key = self.key.take().ok_or_else(|| Error::custom("a map value was given before its key"))?;
        self.insert(key, value)
    }
    fn end(self) -> Result<Value, Error> {
        self.finish()
    }
}

/// The two serde traits of a struct, alike for [`Fields`]: each field goes to `insert`,
/// and `end` makes the object.
macro_rules! fields {
    ($($serialize:ident),*) => {$(
        impl ser::$serialize for Fields {
            type Ok = Value;
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
                self.insert(key.into(), value)
            }
            fn end(self) -> Result<Value, Error> {
                self.finish()
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

/// A map key: JSON keys are strings, so numbers and booleans are written as text, and
/// anything else is refused, as serde_json does.
struct KeySerializer;

fn key_must_be_a_string() -> Error {
    Error::custom("key must be a string")
}

/// A float key as serde_json writes it: the shortest text of the number in its own width
/// (`0.1` for an `f32` 0.1, not the `f64` it widens to); never NaN or infinity.
fn float_key<F: Serialize>(finite: bool, v: &F) -> Result<Arc<str>, Error> {
    if !finite {
        return Err(Error::custom("float key must be finite"));
    }
    serde_json::to_string(v).map(Arc::from)
}

/// The methods of [`KeySerializer`] that write a key as its text.
macro_rules! as_text {
    ($($method:ident: $type:ty),*) => {$(
        fn $method(self, v: $type) -> Result<Arc<str>, Error> {
            Ok(v.to_string().into())
        }
    )*};
}

impl ser::Serializer for KeySerializer {
    type Ok = Arc<str>;
    type Error = Error;
    type SerializeSeq = Impossible<Arc<str>, Error>;
    type SerializeTuple = Impossible<Arc<str>, Error>;
    type SerializeTupleStruct = Impossible<Arc<str>, Error>;
    type SerializeTupleVariant = Impossible<Arc<str>, Error>;
    type SerializeMap = Impossible<Arc<str>, Error>;
    type SerializeStruct = Impossible<Arc<str>, Error>;
    type SerializeStructVariant = Impossible<Arc<str>, Error>;

    as_text!(
        serialize_bool: bool,
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_i128: i128,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64,
        serialize_u128: u128,
        serialize_char: char
    );

    fn serialize_f32(self, v: f32) -> Result<Arc<str>, Error> {
        float_key(v.is_finite(), &v)
    }
    fn serialize_f64(self, v: f64) -> Result<Arc<str>, Error> {
        float_key(v.is_finite(), &v)
    }
    fn serialize_str(self, v: &str) -> Result<Arc<str>, Error> {
        Ok(v.into())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<Arc<str>, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_none(self) -> Result<Arc<str>, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<Arc<str>, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit(self) -> Result<Arc<str>, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Arc<str>, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<Arc<str>, Error> {
        Ok(variant.into())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Arc<str>, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<Arc<str>, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self::SerializeTupleStruct, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self::SerializeStruct, Error> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(key_must_be_a_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde::Serialize;

    use super::super::Value;

    /// Serialises `x` both ways and checks they agree (values, or both refuse).
    fn agrees<T: Serialize + std::fmt::Debug>(x: &T) {
        let direct = Value::from_serialize(x);
        let through_json = serde_json::to_value(x).map(Value::from);
        match (direct, through_json) {
            (Ok(direct), Ok(json)) => {
                assert!(direct == json, "{x:?}: {:?} against {:?}", direct.to_json(), json.to_json())
            }
            (Err(_), Err(_)) => {}
            (direct, json) => panic!("{x:?}: {direct:?} against {json:?}"),
        }
    }

    #[derive(Serialize, Debug)]
    struct Unit;

    #[derive(Serialize, Debug)]
    struct Newtype(i32);

    #[derive(Serialize, Debug)]
    struct Pair(u8, String);

    #[derive(Serialize, Debug)]
    enum External {
        Plain,
        Wrapped(f64),
        Tuple(i8, bool),
        Fields { a: Option<u64>, b: Vec<char> },
    }

    #[derive(Serialize, Debug)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Internal {
        Text { text: String },
        Call { id: String, input: serde_json::Value },
    }

    #[derive(Serialize, Debug)]
    #[serde(untagged)]
    enum Untagged {
        Number(i64),
        Words(Vec<String>),
    }

    #[derive(Serialize, Debug)]
    struct Everything {
        unit: Unit,
        newtype: Newtype,
        pair: Pair,
        externals: Vec<External>,
        internals: Vec<Internal>,
        untagged: [Untagged; 2],
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        #[serde(flatten)]
        extra: BTreeMap<String, i32>,
        bytes: serde_bytes_like::Bytes,
    }

    /// `serialize_bytes` without another crate.
    mod serde_bytes_like {
        #[derive(Debug)]
        pub struct Bytes(pub Vec<u8>);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
    }

    #[test]
    fn serialising_directly_gives_what_serialising_through_json_gives() {
        let everything = Everything {
            unit: Unit,
            newtype: Newtype(-7),
            pair: Pair(255, "two".into()),
            externals: vec![
                External::Plain,
                External::Wrapped(f64::NAN),
                External::Wrapped(1.5),
                External::Tuple(-1, true),
                External::Fields { a: Some(u64::MAX), b: vec!['é', '日'] },
                External::Fields { a: None, b: vec![] },
            ],
            internals: vec![
                Internal::Text { text: "hi".into() },
                Internal::Call { id: "c1".into(), input: serde_json::json!({"n": [1, {"deep": null}]}) },
            ],
            untagged: [Untagged::Number(i64::MIN), Untagged::Words(vec!["a".into(), "b".into()])],
            skipped: None,
            extra: BTreeMap::from([("zeta".to_string(), 1), ("alpha".to_string(), 2)]),
            bytes: serde_bytes_like::Bytes(vec![0, 7, 255]),
        };
        agrees(&everything);
        agrees(&(1u8, -2i16, 3.25f32, 'x', "text", (), Some(()), None::<i32>));
        agrees(&[f32::INFINITY as f64, -0.0, 1e300]);
        agrees(&i128::from(i64::MIN));
        agrees(&u128::from(u64::MAX));
    }

    #[test]
    fn map_keys_are_written_as_serde_json_writes_them() {
        agrees(&HashMap::from([(1i64, "one"), (-2, "minus two")]));
        agrees(&BTreeMap::from([(true, 1), (false, 0)]));
        agrees(&BTreeMap::from([('k', 1)]));
        agrees(&FloatKeys(vec![(0.1, 0.1), (2.5, -1e-7)]));
        agrees(&FloatKeys(vec![(f32::NAN, 1.0)]));
        agrees(&FloatKeys::<f64>(vec![(f64::INFINITY, 1.0)]));
    }

    /// A map with float keys (no std map holds them).
    #[derive(Debug)]
    struct FloatKeys<F>(Vec<(F, F)>);

    impl<F: Serialize> Serialize for FloatKeys<F> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
        }
    }

    #[test]
    fn what_serde_json_refuses_is_refused() {
        // Keys that are not strings, numbers or booleans, and numbers JSON cannot hold.
        agrees(&BTreeMap::from([(vec![1], 1)]));
        agrees(&BTreeMap::from([((), 1)]));
        agrees(&BTreeMap::from([(Some(1), 1)]));
        agrees(&(i128::MAX, 0));
        agrees(&u128::MAX);
        assert!(Value::from_serialize(&BTreeMap::from([(vec![1], 1)])).is_err());
        assert!(Value::from_serialize(&u128::MAX).is_err());
    }
}
