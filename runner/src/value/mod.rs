//! Persistent JSON values: cheap to snapshot, cheap to update at a path.
//!
//! A [`Value`] is JSON whose arrays and objects are `imbl` persistent collections, so
//! cloning a whole document is O(1) and writing at a path copies only the nodes on that
//! path. Convert to and from `serde_json::Value` at the edges (CLI, models); JSON text
//! (a stored document) reads straight into a `Value` (`parse`).

use std::fmt;
use std::sync::Arc;

use imbl::OrdMap;
use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::DeserializeOwned;
use serde::de::{IntoDeserializer, Visitor};
use serde::{Serialize, Serializer};

mod array;
mod parse;
mod serialize;

pub use array::Array;
use array::Items;

/// A persistent JSON value.
#[derive(Clone, PartialEq, Default)]
pub enum Value {
    /// JSON `null` (also what an absent path reads as).
    #[default]
    Null,
    /// JSON boolean.
    Bool(bool),
    /// JSON number.
    Number(serde_json::Number),
    /// JSON string.
    String(Arc<str>),
    /// JSON array. Behind a reference count: a vector's inline storage would make every
    /// value, a number too, as large as the vector (64 bytes rather than 32), and values
    /// are copied on every read.
    Array(Arc<Array>),
    /// JSON object, keys in sorted order.
    Object(OrdMap<Arc<str>, Value>),
}

/// One step of a [`Path`]: an object key or (as decimal digits) an array index.
pub type Segment = Arc<str>;

/// A location inside a document: the keys to follow from its root.
///
/// The root holds no shared slice: it is the most common path (whole-document cells), and
/// copying it then touches no reference count.
#[derive(Clone, Eq, PartialOrd, Ord, Default)]
pub struct Path(Option<Arc<[Segment]>>);

/// Whether two shared texts are equal: the same text first (handles share their ids and
/// keys, and comparing `Arc<str>`s compares their bytes even when they are one).
pub(crate) fn same_text(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

impl PartialEq for Path {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                Arc::ptr_eq(a, b) || (a.len() == b.len() && a.iter().zip(b.iter()).all(|(a, b)| same_text(a, b)))
            }
            _ => false,
        }
    }
}

// By content, as equality is (it only looks at the addresses first).
impl std::hash::Hash for Path {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.segments().hash(state);
    }
}

impl Path {
    /// The document root.
    pub const fn root() -> Self {
        Path(None)
    }

    /// A path from its segments.
    pub fn new<S: Into<Segment>>(segments: impl IntoIterator<Item = S>) -> Self {
        Path::of(segments.into_iter().map(Into::into).collect())
    }

    /// The path of `segments` (the root holds none; see [`Path`]).
    fn of(segments: Vec<Segment>) -> Self {
        Path((!segments.is_empty()).then(|| segments.into()))
    }

    /// This path with one more segment.
    pub fn child(&self, segment: impl Into<Segment>) -> Self {
        // Collected straight into the shared slice: one allocation, not a Vec and a copy.
        Path(Some(self.segments().iter().cloned().chain(std::iter::once(segment.into())).collect()))
    }

    /// This path followed by `rest`.
    pub fn join(&self, rest: &[Segment]) -> Self {
        let mut v = self.segments().to_vec();
        v.extend_from_slice(rest);
        Path::of(v)
    }

    /// The segments.
    #[inline]
    pub fn segments(&self) -> &[Segment] {
        self.0.as_deref().unwrap_or_default()
    }

    /// Whether one path is a prefix of the other, i.e. a write at one can change a read
    /// at the other.
    #[inline]
    pub fn overlaps(&self, other: &Path) -> bool {
        self.segments().iter().zip(other.segments()).all(|(a, b)| same_text(a, b))
    }

    /// The address of the segments, shared by the clones of this path (0 for the root,
    /// which is one path however it was made).
    #[inline]
    pub(crate) fn address(&self) -> usize {
        self.0.as_ref().map_or(0, |segments| Arc::as_ptr(segments).cast::<u8>() as usize)
    }

    /// Whether this is the document root.
    #[inline]
    pub fn is_root(&self) -> bool {
        self.0.is_none()
    }
}

impl fmt::Debug for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            return f.write_str("/");
        }
        for s in self.segments() {
            write!(f, "/{s}")?;
        }
        Ok(())
    }
}

/// Writing at a path failed because the path crosses a value that is not a container.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("cannot write at {path}: `{segment}` is inside a {found}, not an object or array")]
pub struct PathError {
    /// The path being written.
    pub path: Path,
    /// The segment that could not be entered.
    pub segment: Segment,
    /// The kind of value found there.
    pub found: &'static str,
}

impl Value {
    /// The value at `path`, without following links.
    pub fn at(&self, path: &[Segment]) -> Option<&Value> {
        let mut cur = self;
        for seg in path {
            cur = cur.child(seg)?;
        }
        Some(cur)
    }

    /// The direct child at one segment.
    pub fn child(&self, seg: &str) -> Option<&Value> {
        match self {
            Value::Object(map) => map.get(seg),
            Value::Array(items) => seg.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        }
    }

    /// Writes `value` at `path`, creating objects on the way; shares all untouched nodes.
    /// Writing index `len` of an array appends.
    pub fn set_at(&mut self, path: &[Segment], value: Value) -> Result<(), PathError> {
        self.set_inner(path, 0, value)
    }

    fn set_inner(&mut self, path: &[Segment], depth: usize, value: Value) -> Result<(), PathError> {
        let Some(seg) = path.get(depth) else {
            *self = value;
            return Ok(());
        };
        if matches!(self, Value::Null) {
            *self = Value::Object(OrdMap::new());
        }
        let error = |found| PathError { path: Path::new(path.iter().cloned()), segment: seg.clone(), found };
        match self {
            Value::Object(map) => {
                let slot = map.entry(seg.clone()).or_insert(Value::Null);
                slot.set_inner(path, depth + 1, value)
            }
            Value::Array(items) => {
                let index = seg.parse::<usize>().map_err(|_| error("array"))?;
                let items = Arc::make_mut(items);
                if index == items.len() {
                    items.push_back(Value::Null);
                }
                match items.get_mut(index) {
                    Some(slot) => slot.set_inner(path, depth + 1, value),
                    None => Err(error("array (index out of range)")),
                }
            }
            other => Err(error(other.kind())),
        }
    }

    /// The name of the value's JSON type (`null`, `boolean`, `number`, `string`, `array`,
    /// `object`), for messages. Use this one function wherever a JSON type is named, so
    /// that every message names types alike.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    /// The object's map, if this is an object.
    pub fn as_object(&self) -> Option<&OrdMap<Arc<str>, Value>> {
        match self {
            Value::Object(map) => Some(map),
            _ => None,
        }
    }

    /// The string, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// Converts to `serde_json::Value` (an O(size) copy: use at the edges).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.clone()),
            Value::String(s) => serde_json::Value::String(s.to_string()),
            Value::Array(items) => Items::of(items).map(Value::to_json).collect(),
            Value::Object(map) => {
                serde_json::Value::Object(map.iter().map(|(k, v)| (k.to_string(), v.to_json())).collect())
            }
        }
    }

    /// `T` read from this value, as `T::deserialize(&value)` reads it; a list already read
    /// as `T` is copied from that read instead (see [`Array`]).
    pub fn read_as<T>(&self) -> Result<T, serde_json::Error>
    where
        T: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        match self {
            Value::Array(array) => array.read_as(|| T::deserialize(self)),
            Value::Number(n) => number_as(n).map_or_else(|| T::deserialize(self), Ok),
            _ => T::deserialize(self),
        }
    }

    /// Whether this equals `other`: as `==`, with the scalars (what an output or a
    /// counter mostly is) compared inline rather than in a call.
    #[inline]
    pub(crate) fn same_as(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Number(a), Value::Number(b)) => a == b,
            (Value::Null | Value::Bool(_) | Value::Number(_), _)
            | (_, Value::Null | Value::Bool(_) | Value::Number(_)) => false,
            _ => self == other,
        }
    }

    /// `T` read from this value when `T` is `i64` or `f64` and this is such a number,
    /// without serde and without a call (see [`Value::read_as`] for every other read).
    #[inline]
    pub(crate) fn number_as<T: Clone + 'static>(&self) -> Option<T> {
        match self {
            Value::Number(n) => number_as(n),
            _ => None,
        }
    }

    /// Serialises any `Serialize` value into a `Value`: the same value as
    /// `Value::from(serde_json::to_value(value)?)`, without making that JSON first.
    pub fn from_serialize<T: Serialize + ?Sized>(value: &T) -> Result<Value, serde_json::Error> {
        value.serialize(serialize::ValueSerializer)
    }

    /// [`Value::from_serialize`] of a value of a known type, as a cell's `set` and a
    /// derived value's every run write it: an `i64` or `f64` is made without serde (the
    /// same value: a float that is not finite is `null`, as JSON has no such number).
    ///
    /// ```
    /// use trellis_runner::Value;
    /// for n in [0, -3, i64::MAX, i64::MIN] {
    ///     assert_eq!(Value::from_typed(&n)?, Value::from_serialize(&n)?);
    /// }
    /// for x in [0.5, -2.0, 1e300, f64::NAN, f64::INFINITY] {
    ///     assert_eq!(Value::from_typed(&x)?, Value::from_serialize(&x)?);
    /// }
    /// assert_eq!(Value::from_typed(&f64::NAN)?, Value::Null);
    /// assert_eq!(Value::from_typed(&vec!["a"])?, Value::from_serialize(&["a"])?);
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    #[inline]
    pub fn from_typed<T: Serialize + 'static>(value: &T) -> Result<Value, serde_json::Error> {
        let any: &dyn std::any::Any = value;
        if let Some(n) = any.downcast_ref::<i64>() {
            return Ok(Value::Number((*n).into()));
        }
        if let Some(x) = any.downcast_ref::<f64>() {
            return Ok(serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number));
        }
        Self::from_serialize(value)
    }
}

/// `n` as `T` when `T` is `i64` or `f64` and `n` is one, without going through serde:
/// counters and sums are read many times per settle.
fn number_as<T: Clone + 'static>(n: &serde_json::Number) -> Option<T> {
    typed_number(|| n.as_i64(), || n.as_f64())
}

/// `T` from a number's `int` or `float` form when `T` is `i64` or `f64` (the other
/// form is not asked for); `None` for any other `T`. The type test is a constant once
/// `T` is known, so for other types this is nothing.
#[inline(always)]
pub(crate) fn typed_number<T: Clone + 'static>(
    int: impl FnOnce() -> Option<i64>,
    float: impl FnOnce() -> Option<f64>,
) -> Option<T> {
    use std::any::{Any, TypeId};
    let (whole, fraction): (i64, f64);
    let number: &dyn Any = if TypeId::of::<T>() == TypeId::of::<i64>() {
        whole = int()?;
        &whole
    } else if TypeId::of::<T>() == TypeId::of::<f64>() {
        fraction = float()?;
        &fraction
    } else {
        return None;
    };
    number.downcast_ref::<T>().cloned()
}

impl From<serde_json::Value> for Value {
    fn from(json: serde_json::Value) -> Self {
        match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => Value::Number(n),
            serde_json::Value::String(s) => Value::String(s.into()),
            serde_json::Value::Array(items) => Value::Array(Arc::new(items.into_iter().map(Value::from).collect())),
            serde_json::Value::Object(map) => {
                Value::Object(map.into_iter().map(|(k, v)| (Arc::from(k), Value::from(v))).collect())
            }
        }
    }
}

impl From<&Value> for serde_json::Value {
    fn from(value: &Value) -> Self {
        value.to_json()
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Number(n.into())
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.into())
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Number(n) => n.serialize(serializer),
            Value::String(s) => serializer.serialize_str(s),
            Value::Array(items) => serializer.collect_seq(Items::of(items)),
            Value::Object(map) => serializer.collect_map(map.iter().map(|(k, v)| (&**k, v))),
        }
    }
}

/// Reading a Rust type straight out of a value (`T::deserialize(&value)`), as
/// `serde_json::from_value` would from its JSON, without building that JSON first: a
/// cell's typed read costs a walk of what the type reads, not a copy of the whole value.
impl<'de> serde::Deserializer<'de> for &'de Value {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => n.deserialize_any(visitor),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(Items::of(items));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Object(map) => {
                let mut entries = MapDeserializer::new(map.iter().map(|(k, v)| (&**k, v)));
                let value = visitor.visit_map(&mut entries)?;
                entries.end()?;
                Ok(value)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    /// Enums are read as serde_json reads them (externally tagged: a string, or an object
    /// of one key), from the JSON of this value: they are rare in cells and small.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.to_json().deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, serde_json::Error> for &'de Value {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::to_string(self) {
            Ok(s) => f.write_str(&s),
            Err(_) => Err(fmt::Error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(s: &[&str]) -> Vec<Segment> {
        s.iter().map(|s| Arc::from(*s)).collect()
    }

    #[test]
    fn numbers_read_as_serde_reads_them() {
        let number = |j: serde_json::Value| Value::from(j);
        assert_eq!(number(json!(-7)).read_as::<i64>().expect("i64"), -7);
        assert_eq!(number(json!(7)).read_as::<f64>().expect("f64"), 7.0);
        assert_eq!(number(json!(1.5)).read_as::<f64>().expect("f64"), 1.5);
        assert_eq!(number(json!(7)).read_as::<u8>().expect("u8"), 7, "other types go through serde");
        // What the quick way cannot read, serde refuses with its own words.
        for (value, expected) in [(json!(1.5), "floating point"), (json!(u64::MAX), "18446744073709551615")] {
            let error = number(value.clone()).read_as::<i64>().expect_err("not an i64").to_string();
            let serde = serde_json::from_value::<i64>(value).expect_err("serde too");
            assert!(error.contains(expected), "{error}");
            assert_eq!(error, serde.to_string());
        }
    }

    #[test]
    fn round_trips_json() {
        let j = json!({"a": [1, 2, {"b": null}], "c": "x", "d": true, "e": 1.5});
        assert_eq!(Value::from(j.clone()).to_json(), j);
    }

    #[test]
    fn set_at_creates_objects_and_shares_the_rest() {
        let mut v = Value::from(json!({"keep": {"big": [1, 2, 3]}}));
        let before = v.clone();
        v.set_at(&path(&["x", "y"]), Value::from(5)).unwrap();
        assert_eq!(v.to_json(), json!({"keep": {"big": [1, 2, 3]}, "x": {"y": 5}}));
        assert_eq!(before.to_json(), json!({"keep": {"big": [1, 2, 3]}}), "snapshot unchanged");
        let (Value::Object(a), Value::Object(b)) = (&v, &before) else { panic!() };
        let (Some(Value::Object(ka)), Some(Value::Object(kb))) = (a.get("keep"), b.get("keep")) else { panic!() };
        assert!(ka.ptr_eq(kb), "untouched subtree is shared, not copied");
    }

    #[test]
    fn arrays_index_and_append() {
        let mut v = Value::from(json!({"items": ["a"]}));
        v.set_at(&path(&["items", "1"]), Value::from("b")).unwrap();
        v.set_at(&path(&["items", "0"]), Value::from("z")).unwrap();
        assert_eq!(v.to_json(), json!({"items": ["z", "b"]}));
        assert!(v.set_at(&path(&["items", "5"]), Value::Null).is_err());
        assert!(v.set_at(&path(&["items", "x"]), Value::Null).is_err());
        assert_eq!(v.at(&path(&["items", "1"])), Some(&Value::from("b")));
    }

    #[test]
    fn writing_through_a_scalar_is_an_error() {
        let mut v = Value::from(json!({"n": 1}));
        let err = v.set_at(&path(&["n", "x"]), Value::Null).unwrap_err();
        assert_eq!(err.found, "number");
        assert!(err.to_string().contains("/n/x"));
    }

    #[test]
    fn paths_overlap_by_prefix() {
        let a = Path::new(["a"]);
        assert!(a.overlaps(&Path::new(["a", "b"])));
        assert!(Path::new(["a", "b"]).overlaps(&a));
        assert!(Path::root().overlaps(&a));
        assert!(!a.overlaps(&Path::new(["b"])));
    }

    #[test]
    fn the_inline_comparison_agrees_with_equality() {
        let values: Vec<Value> = [
            json!(null),
            json!(true),
            json!(false),
            json!(1),
            json!(1.0),
            json!(-1),
            json!("1"),
            json!([1]),
            json!({"n": 1}),
            json!({"n": 1.0}),
        ]
        .into_iter()
        .map(Value::from)
        .collect();
        for a in &values {
            for b in &values {
                assert_eq!(a.same_as(b), a == b, "{} and {}", a.to_json(), b.to_json());
            }
        }
        assert!(!Value::from(json!(1)).same_as(&Value::from(json!(1.0))), "as JSON numbers, 1 and 1.0 differ");
    }
}

#[cfg(test)]
mod deserialize_tests {
    use std::collections::BTreeMap;

    use serde::de::DeserializeOwned;
    use serde::Deserialize;
    use serde_json::json;

    use super::Value;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        name: String,
        #[serde(default)]
        done: bool,
        tags: Option<Vec<String>>,
        size: Size,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Size {
        Small,
        Big { by: u64 },
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Wrapped(i64);

    /// Reads `json` both ways: straight from the value, and through serde_json.
    fn both<T: DeserializeOwned + PartialEq + std::fmt::Debug>(json: serde_json::Value) -> Result<T, String> {
        let value = Value::from(json.clone());
        let direct = T::deserialize(&value).map_err(|e| e.to_string());
        let through_json = serde_json::from_value::<T>(json).map_err(|e| e.to_string());
        assert_eq!(direct.is_ok(), through_json.is_ok(), "{direct:?} vs {through_json:?}");
        if let (Ok(a), Ok(b)) = (&direct, &through_json) {
            assert_eq!(a, b);
        }
        direct
    }

    #[test]
    fn reading_a_type_from_a_value_agrees_with_serde_json() {
        let item = json!({"name": "milk", "tags": ["a", "b"], "size": {"big": {"by": 3}}});
        assert_eq!(both::<Item>(item).unwrap().size, Size::Big { by: 3 });
        assert_eq!(both::<Item>(json!({"name": "x", "tags": null, "size": "small"})).unwrap().tags, None);
        assert_eq!(both::<Wrapped>(json!(-4)).unwrap(), Wrapped(-4));
        assert_eq!(both::<u64>(json!(u64::MAX)).unwrap(), u64::MAX);
        assert_eq!(both::<f64>(json!(1.5)).unwrap(), 1.5);
        assert_eq!(both::<(i64, String)>(json!([1, "a"])).unwrap(), (1, "a".to_string()));
        assert_eq!(both::<BTreeMap<String, Vec<i64>>>(json!({"a": [1], "b": []})).unwrap().len(), 2);
        assert_eq!(both::<std::sync::Arc<[i64]>>(json!([1, 2, 3])).unwrap().len(), 3);
        assert_eq!(both::<serde_json::Value>(item_with_everything()).unwrap(), item_with_everything());
        both::<()>(json!(null)).unwrap();
    }

    fn item_with_everything() -> serde_json::Value {
        json!({"n": null, "b": true, "i": -1, "f": 0.25, "s": "é", "a": [[], {}], "o": {"k": [1, {"x": "y"}]}})
    }

    #[test]
    fn wrong_shapes_fail_as_with_serde_json() {
        let unknown = both::<Item>(json!({"name": "x", "size": "small", "extra": 1})).unwrap_err();
        assert!(unknown.contains("unknown field `extra`"), "{unknown}");
        let missing = both::<Item>(json!({"size": "small"})).unwrap_err();
        assert!(missing.contains("missing field `name`"), "{missing}");
        let kind = both::<i64>(json!("seven")).unwrap_err();
        assert!(kind.contains("invalid type: string \"seven\", expected i64"), "{kind}");
        both::<(i64, i64)>(json!([1, 2, 3])).unwrap_err();
        both::<u8>(json!(300)).unwrap_err();
        both::<Size>(json!("medium")).unwrap_err();
    }
}
