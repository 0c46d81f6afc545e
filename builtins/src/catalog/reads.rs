//! What a catalog build reads from the runtime, recorded so that a later build can tell
//! whether anything it depends on changed.
//!
//! A build reads the runtime only through a [`Reader`], which keeps each question and its
//! answer. A catalog is a function of those answers (and of the `tools` map), so asking
//! the same questions again and getting the same answers ([`Reads::still_hold`]) means a
//! fresh build would give the same catalog. The answers are projections of what a build
//! uses: a charm's result is seen as its field names and stream markers, never its data
//! values, so a counter going up does not invalidate the catalog.

use std::sync::{Arc, LazyLock};

use serde_json::Value;
use trellis_runner::charm::CHARMS_DOC;
use trellis_runner::link::{is_stream, APPROVAL_KEY, PERSON_ONLY_KEY, RESULT_KEY, STREAM_KEY};
use trellis_runner::{DocId, Link, Path, Pattern, Read, Runtime, Value as Stored};

/// What a stream marker says.
#[derive(Default)]
pub(super) struct Marker<'a> {
    /// The event schema (`None` when null).
    pub(super) schema: Option<&'a Stored>,
    /// The schema of what the handler returns (`None`: it returns nothing).
    pub(super) result: Option<&'a Stored>,
    /// Why a person must approve each event sent on a model's behalf (as
    /// [`stream_approval`](trellis_runner::link::stream_approval)).
    pub(super) approval: Option<&'a str>,
    /// The fields of the event only a person may set (see `Builder::person_only`).
    pub(super) person_only: Vec<String>,
}

/// What a value is to a catalog: data, or a stream with its marker.
#[derive(Clone, PartialEq)]
pub(super) enum Kind {
    /// Not a stream.
    Data,
    /// A stream marker: while it is the same value, so is everything about the stream.
    /// Only the marker is kept, and its schema is looked up when a tool is made of it: a
    /// build sees every field of every charm, and a smaller `Kind` is less to copy.
    Stream(Stored),
}

impl Kind {
    /// What `value` is.
    pub(super) fn of(value: &Stored) -> Kind {
        if is_stream(value) {
            Kind::Stream(value.clone())
        } else {
            Kind::Data
        }
    }

    /// What a stream's marker says, from one look inside.
    pub(super) fn stream(&self) -> Marker<'_> {
        let Kind::Stream(marker) = self else { return Marker::default() };
        let Some(inner) = marker.as_object().and_then(|m| m.get(STREAM_KEY)).and_then(Stored::as_object) else {
            return Marker::default();
        };
        let given = |key: &str| inner.get(key).filter(|s| !matches!(s, Stored::Null));
        Marker {
            schema: given("schema"),
            result: given(RESULT_KEY),
            approval: inner.get(APPROVAL_KEY).and_then(Stored::as_str),
            person_only: match inner.get(PERSON_ONLY_KEY) {
                Some(fields @ Stored::Array(_)) => match fields.to_json() {
                    serde_json::Value::Array(fields) => {
                        fields.iter().filter_map(|f| f.as_str().map(str::to_owned)).collect()
                    }
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            },
        }
    }

    /// Whether `value` is still of this kind, cheaply: a marker that is the very same
    /// value needs no look inside.
    fn still(&self, value: &Stored) -> bool {
        match (self, value) {
            (Kind::Stream(Stored::Object(was)), Stored::Object(now)) if was.ptr_eq(now) => true,
            (Kind::Data, value) if value.as_object().is_none() => true,
            _ => Kind::of(value) == *self,
        }
    }
}

/// Whether `result` still has these fields (see [`Shape`]), without building its shape.
fn fields_hold(result: &Stored, fields: &[Field]) -> bool {
    let Some(map) = result.as_object() else { return false };
    let mut now = map.iter().filter(|(key, _)| !key.starts_with('$'));
    fields.iter().all(|(key, kind)| now.next().is_some_and(|(k, value)| k == key && kind.still(value)))
        && now.next().is_none()
}

/// A top-level field of a charm's result, and what it is.
pub(super) type Field = (Arc<str>, Kind);

/// A charm's result as a build sees it: its fields without `$` keys, in key order, or
/// the kind of value found where a result object was expected.
#[derive(Clone, PartialEq)]
pub(super) enum Shape {
    /// The result object's fields.
    Fields(Vec<Field>),
    /// Not an object: what was found.
    NotAnObject(&'static str),
}

/// One question a build asked the runtime.
#[derive(Clone, PartialEq)]
enum Question {
    /// Follow links to a value.
    Resolve(Link),
    /// Follow links to a charm's result and see its [`Shape`].
    Shape(Link),
    /// Whether a charm record exists.
    IsCharm(DocId),
    /// A charm's display name.
    CharmName(DocId),
    /// The charm a `charm` entry names by id or display name.
    FindCharm(String),
    /// The schema of a registered handler (`None` when nothing is registered).
    Handler(Link),
    /// A registered pattern.
    Pattern(String),
}

/// The answer to a [`Question`]; runtime errors are kept as their messages.
#[derive(Clone)]
enum Answer {
    Resolved(Result<(Link, Stored), String>),
    Shape(Result<(Link, Shape), String>),
    Flag(bool),
    Text(String),
    Found(Result<DocId, String>),
    Handler(Option<Option<Value>>),
    Pattern(Option<Arc<Pattern>>),
}

impl PartialEq for Answer {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Answer::Resolved(a), Answer::Resolved(b)) => a == b,
            (Answer::Shape(a), Answer::Shape(b)) => a == b,
            (Answer::Flag(a), Answer::Flag(b)) => a == b,
            (Answer::Text(a), Answer::Text(b)) => a == b,
            (Answer::Found(a), Answer::Found(b)) => a == b,
            (Answer::Handler(a), Answer::Handler(b)) => a == b,
            // A pattern registered again is a new pattern, even with the same id.
            (Answer::Pattern(a), Answer::Pattern(b)) => match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (a, b) => a.is_none() && b.is_none(),
            },
            _ => false,
        }
    }
}

impl Question {
    fn ask(&self, rt: &Runtime) -> Answer {
        match self {
            Question::Resolve(link) => Answer::Resolved(resolve(rt, link)),
            Question::Shape(link) => Answer::Shape(shape(rt, link)),
            Question::IsCharm(id) => Answer::Flag(is_charm(rt, id)),
            Question::CharmName(id) => Answer::Text(rt.charms().name(id)),
            Question::FindCharm(id) => Answer::Found(find_charm(rt, id)),
            Question::Handler(stream) => Answer::Handler(handler_schema(rt, stream)),
            Question::Pattern(id) => Answer::Pattern(rt.patterns().get(id)),
        }
    }
}

fn resolve(rt: &Runtime, link: &Link) -> Result<(Link, Stored), String> {
    rt.resolve(link).map_err(|e| e.to_string())
}

fn shape(rt: &Runtime, link: &Link) -> Result<(Link, Shape), String> {
    rt.resolve(link).map(|(root, result)| (root, shape_of(&result))).map_err(|e| e.to_string())
}

fn find_charm(rt: &Runtime, id_or_name: &str) -> Result<DocId, String> {
    rt.charms().find(id_or_name).map_err(|e| e.to_string())
}

fn handler_schema(rt: &Runtime, stream: &Link) -> Option<Option<Value>> {
    rt.handler(stream).map(|h| h.schema)
}

/// Whether `id` has a charm record. The record itself (with the charm's argument) is not
/// decoded: a build asks this for every charm, and only whether it is one matters.
fn is_charm(rt: &Runtime, id: &DocId) -> bool {
    // The id is looked up in the records without building a path or a document id per
    // question: a build asks this once per charm, a reuse check again every round.
    static CHARMS: LazyLock<DocId> = LazyLock::new(|| DocId::from(CHARMS_DOC));
    let records = rt.read_raw(&CHARMS, &Path::root());
    let record = records.as_object().and_then(|all| all.get(id.as_ref())).and_then(Stored::as_object);
    record.and_then(|r| r.get("pattern")).is_some_and(|p| p.as_str().is_some())
}

fn shape_of(result: &Stored) -> Shape {
    match result.as_object() {
        Some(fields) => {
            let mut shape = Vec::with_capacity(fields.len());
            shape.extend(
                fields
                    .iter()
                    .filter(|(key, _)| !key.starts_with('$'))
                    .map(|(key, value)| (key.clone(), Kind::of(value))),
            );
            Shape::Fields(shape)
        }
        None => Shape::NotAnObject(result.kind()),
    }
}

impl Question {
    /// Whether asking again gives `answer`. A charm's fields are checked in place: this
    /// runs every round, and most of its work is there.
    fn holds(&self, rt: &Runtime, answer: &Answer) -> bool {
        match (self, answer) {
            (Question::Shape(link), Answer::Shape(Ok((root, Shape::Fields(fields))))) => {
                rt.resolve(link).is_ok_and(|(at, result)| at == *root && fields_hold(&result, fields))
            }
            _ => self.ask(rt) == *answer,
        }
    }
}

/// The questions a build asked and their answers.
#[derive(Default)]
pub(super) struct Reads(Vec<(Question, Answer)>);

impl Reads {
    /// Whether asking every question again gives the same answers.
    pub(super) fn still_hold(&self, rt: &Runtime) -> bool {
        self.0.iter().all(|(question, answer)| question.holds(rt, answer))
    }
}

/// Reads the runtime for a build, recording what it read (when asked to).
pub(super) struct Reader<'a> {
    rt: &'a Runtime,
    reads: Option<Reads>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(rt: &'a Runtime, record: bool) -> Self {
        Reader { rt, reads: record.then(Reads::default) }
    }

    /// What was read (nothing, when not recording).
    pub(super) fn into_reads(self) -> Reads {
        self.reads.unwrap_or_default()
    }

    /// Keeps a question and its answer; returns the answer.
    fn note<T>(&mut self, question: Question, found: T, answer: impl FnOnce(T) -> Answer) -> T
    where
        T: Clone,
    {
        if let Some(reads) = &mut self.reads {
            reads.0.push((question, answer(found.clone())));
        }
        found
    }

    /// Follows links to a value: where it ended and what is there.
    pub(super) fn resolve(&mut self, link: &Link) -> Result<(Link, Stored), String> {
        self.note(Question::Resolve(link.clone()), resolve(self.rt, link), Answer::Resolved)
    }

    /// Follows links to a charm's result and sees its [`Shape`].
    pub(super) fn shape(&mut self, link: &Link) -> Result<(Link, Shape), String> {
        self.note(Question::Shape(link.clone()), shape(self.rt, link), Answer::Shape)
    }

    /// The value at `link` (links followed).
    pub(super) fn read(&mut self, link: &Link) -> Result<Stored, String> {
        self.resolve(link).map(|(_, value)| value)
    }

    /// Whether `id` is a charm.
    pub(super) fn is_charm(&mut self, id: &DocId) -> bool {
        self.note(Question::IsCharm(id.clone()), is_charm(self.rt, id), Answer::Flag)
    }

    /// A charm's display name (its NAME, else its pattern, else its id).
    pub(super) fn charm_name(&mut self, id: &DocId) -> String {
        self.note(Question::CharmName(id.clone()), self.rt.charms().name(id), Answer::Text)
    }

    /// The charm with this id, or else this display name (when only one charm has it).
    pub(super) fn find_charm(&mut self, id_or_name: &str) -> Result<DocId, String> {
        self.note(Question::FindCharm(id_or_name.to_string()), find_charm(self.rt, id_or_name), Answer::Found)
    }

    /// The event schema of the handler registered at `stream`: `None` when there is no
    /// handler, `Some(None)` when it declares no schema.
    pub(super) fn handler(&mut self, stream: &Link) -> Option<Option<Value>> {
        self.note(Question::Handler(stream.clone()), handler_schema(self.rt, stream), Answer::Handler)
    }

    /// The pattern registered as `id`.
    pub(super) fn pattern(&mut self, id: &str) -> Option<Arc<Pattern>> {
        self.note(Question::Pattern(id.to_string()), self.rt.patterns().get(id), Answer::Pattern)
    }
}
