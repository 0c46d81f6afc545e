//! The watches of a space and the messages they fired, in [`WATCHES_DOC`]: made, removed,
//! listed, and told when a condition turned.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use trellis_runner::{Cell, DocId, Link, Path, Read, Runtime};

use super::condition::{Condition, ConditionError};
use super::{MAX_FIRED, WATCHES_DOC};
use crate::text::truncate;

/// The longest note, in characters.
const MAX_NOTE: usize = 500;

/// How many firings of one watch an hour start a turn: a condition that the turns it
/// starts flip again would otherwise start them without end.
pub const MAX_TOLD_PER_HOUR: usize = 10;

const HOUR_MS: u64 = 3_600_000;

/// One standing watch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Watch {
    /// Its id in the space (`w1`).
    pub id: String,
    /// The conversation's dialog: its document.
    pub conversation_doc: String,
    /// The conversation's dialog: its path in that document.
    pub conversation_path: Vec<String>,
    /// The conversation's charm, by name.
    pub conversation: String,
    /// The charm watched, by id.
    pub charm: String,
    /// Its name when the watch was made.
    pub charm_name: String,
    /// The condition, in CEL over the charm's fields.
    pub condition: String,
    /// What the model wrote to be told.
    pub note: String,
    /// When it was made (milliseconds since the Unix epoch).
    pub created_ms: u64,
    /// Whether the condition held when last evaluated: it fires when this turns true.
    pub holds: bool,
    /// How many times it fired.
    pub fired: u32,
    /// Why the condition could not be evaluated last time, or why its last firing was
    /// not told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When its firings of the last hour were told (at most [`MAX_TOLD_PER_HOUR`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub told_ms: Vec<u64>,
}

impl Watch {
    /// The conversation's dialog.
    pub fn dialog(&self) -> Link {
        Link::new(self.conversation_doc.as_str(), Path::new(self.conversation_path.iter().map(String::as_str)))
    }
}

/// A message a watch fired, waiting for its conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Fired {
    /// The watch.
    pub watch: String,
    /// The conversation's dialog: its document and path.
    pub conversation_doc: String,
    /// The path in that document.
    pub conversation_path: Vec<String>,
    /// What the conversation is told.
    pub text: String,
    /// When it fired.
    pub at_ms: u64,
}

/// A watch to make.
#[derive(Debug, Clone)]
pub struct NewWatch {
    /// The conversation's dialog.
    pub dialog: Link,
    /// The conversation's name.
    pub conversation: String,
    /// The charm to watch.
    pub charm: DocId,
    /// The condition.
    pub condition: String,
    /// The note.
    pub note: String,
    /// How many watches the conversation may keep.
    pub max: usize,
}

/// Why a watch was not made, or not found.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// A bad condition.
    #[error(transparent)]
    Condition(#[from] ConditionError),
    /// The conversation has as many as it may.
    #[error("this conversation has {0} watches already, as many as it may; remove one first")]
    TooMany(usize),
    /// The note is too long.
    #[error("the note is longer than {MAX_NOTE} characters")]
    NoteTooLong,
    /// No watch of that id.
    #[error("no watch {0}; `watch list` shows the watches")]
    Unknown(String),
    /// The space could not be read or written.
    #[error(transparent)]
    Runtime(#[from] trellis_runner::Error),
}

/// The document's value.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Kept {
    #[serde(default)]
    next: u64,
    #[serde(default)]
    watches: Vec<Watch>,
    #[serde(default)]
    fired: Vec<Fired>,
}

fn kept() -> Cell<Kept> {
    Cell::from_link(Link::new(WATCHES_DOC, Path::root()))
}

fn of(watch_dialog: (&str, &[String]), dialog: &Link) -> bool {
    *watch_dialog.0 == *dialog.doc
        && watch_dialog.1.len() == dialog.path.segments().len()
        && watch_dialog.1.iter().zip(dialog.path.segments()).all(|(a, b)| **a == **b)
}

/// Every watch of the space.
pub fn watches(rt: &Runtime) -> Vec<Watch> {
    kept().get(rt).unwrap_or_default().watches
}

/// The messages fired for the conversation of `dialog`, waiting for it.
pub fn waiting(rt: &Runtime, dialog: &Link) -> Vec<Fired> {
    let all = kept().get(rt).unwrap_or_default().fired;
    all.into_iter().filter(|f| of((&f.conversation_doc, &f.conversation_path), dialog)).collect()
}

/// Takes the fired messages of `dialog` out of the waiting ones, all at once: whoever
/// takes them tells the conversation (and [`put_back`]s them if it cannot).
pub fn take_fired(rt: &Runtime, dialog: &Link) -> Result<Vec<Fired>, WatchError> {
    Ok(rt.transact(|tx| {
        let mut all = kept().get(tx).unwrap_or_default();
        let (taken, left) =
            all.fired.into_iter().partition(|f: &Fired| of((&f.conversation_doc, &f.conversation_path), dialog));
        all.fired = left;
        kept().set(tx, all)?;
        Ok(taken)
    })?)
}

/// Puts fired messages that could not be told back among the waiting ones.
pub fn put_back(rt: &Runtime, fired: &[Fired]) -> Result<(), WatchError> {
    rt.transact(|tx| {
        let mut all = kept().get(tx).unwrap_or_default();
        all.fired.splice(0..0, fired.iter().cloned());
        kept().set(tx, all)
    })?;
    Ok(())
}

/// The charm's fields now (its handlers left out).
pub(super) fn fields(rt: &impl Read, charm: &Link) -> serde_json::Map<String, Value> {
    let data = rt.read(charm).map(|v| v.to_json()).unwrap_or_default();
    let fields = data.as_object().cloned().unwrap_or_default();
    fields
        .into_iter()
        .filter(|(key, value)| trellis_runner::link::stream_schema(value).is_none() && !key.starts_with('$'))
        .collect()
}

/// Makes a watch; it holds or not from now on, and fires at its next turn to true.
pub fn add(rt: &Runtime, new: NewWatch) -> Result<Watch, WatchError> {
    if new.note.chars().count() > MAX_NOTE {
        return Err(WatchError::NoteTooLong);
    }
    let condition = Condition::parse(&new.condition)?;
    let charms = rt.charms();
    let charm_name = charms.name(&new.charm);
    let data = fields(rt, &charms.result(&new.charm));
    condition.check_fields(&charm_name, &data)?;
    let (holds, _) = condition.holds(&data)?;
    let made = rt.transact(|tx| {
        let mut all = kept().get(tx).unwrap_or_default();
        if all.watches.iter().filter(|w| of((&w.conversation_doc, &w.conversation_path), &new.dialog)).count()
            >= new.max
        {
            return Ok(None);
        }
        all.next += 1;
        let watch = Watch {
            id: format!("w{}", all.next),
            conversation_doc: new.dialog.doc.to_string(),
            conversation_path: new.dialog.path.segments().iter().map(|s| s.to_string()).collect(),
            conversation: new.conversation.clone(),
            charm: new.charm.to_string(),
            charm_name: charm_name.clone(),
            condition: new.condition.clone(),
            note: new.note.clone(),
            created_ms: trellis_runner::now_ms(),
            holds,
            fired: 0,
            error: None,
            told_ms: Vec::new(),
        };
        all.watches.push(watch.clone());
        kept().set(tx, all)?;
        Ok(Some(watch))
    })?;
    let watch = made.ok_or(WatchError::TooMany(new.max))?;
    super::arm::arm_one(rt, &watch);
    rt.settle();
    Ok(watch)
}

/// Removes watch `id` (and what it fired that still waits).
pub fn remove(rt: &Runtime, id: &str) -> Result<Watch, WatchError> {
    let mut removed = remove_where(rt, |w| w.id == id)?;
    removed.pop().ok_or_else(|| WatchError::Unknown(truncate(id, 40)))
}

/// Removes the watches of the conversation of `dialog`: they end with it.
pub fn remove_all(rt: &Runtime, dialog: &Link) -> Result<Vec<Watch>, WatchError> {
    remove_where(rt, |w| of((&w.conversation_doc, &w.conversation_path), dialog))
}

/// Removes the watches `gone` picks, what they fired that still waits, and their state.
pub(super) fn remove_where(rt: &Runtime, gone: impl Fn(&Watch) -> bool) -> Result<Vec<Watch>, WatchError> {
    let ids: Vec<String> = watches(rt).into_iter().filter(|w| gone(w)).map(|w| w.id).collect();
    for id in &ids {
        super::arm::disarm(rt, id);
    }
    Ok(rt.transact(|tx| {
        let mut all = kept().get(tx).unwrap_or_default();
        let (removed, kept_ones): (Vec<Watch>, Vec<Watch>) = all.watches.into_iter().partition(|w| gone(w));
        all.watches = kept_ones;
        all.fired.retain(|f| !removed.iter().any(|w| w.id == f.watch));
        for watch in &removed {
            tx.write(&state_of(&watch.id), trellis_runner::Value::Null)?;
        }
        kept().set(tx, all)?;
        Ok(removed)
    })?)
}

/// Where watch `id`'s derived cell keeps what its condition gives.
pub(super) fn state_of(id: &str) -> Link {
    Link::new(super::STATE_DOC, Path::new([id]))
}

/// What a watch's condition gives now, as its derived cell keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct State {
    pub holds: bool,
    /// The fields it names, and their values.
    #[serde(default)]
    pub values: BTreeMap<String, Value>,
    #[serde(default)]
    pub error: Option<String>,
}

/// Records what watch `id`'s derived cell holds now: when it turned true, one firing,
/// whose message is returned (and waits in the document until its conversation takes
/// it). Read in the same transaction as the watch, so checks that race apply in order.
pub(super) fn found(rt: &Runtime, id: &str) -> Result<Option<Fired>, WatchError> {
    Ok(rt.transact(|tx| {
        let Ok(state) = Cell::<State>::from_link(state_of(id)).get(tx) else { return Ok(None) };
        let mut all = kept().get(tx).unwrap_or_default();
        let Some(watch) = all.watches.iter_mut().find(|w| w.id == id) else { return Ok(None) };
        let turned = state.holds && !watch.holds;
        let changed = turned || watch.holds != state.holds || watch.error != state.error;
        if !changed {
            return Ok(None);
        }
        watch.holds = state.holds;
        watch.error = state.error.clone();
        let now = trellis_runner::now_ms();
        watch.told_ms.retain(|at| now.saturating_sub(*at) < HOUR_MS);
        if turned && watch.told_ms.len() >= MAX_TOLD_PER_HOUR {
            watch.fired += 1;
            watch.error = Some(format!(
                "fired {MAX_TOLD_PER_HOUR} times within an hour; later firings are not told until an hour has passed"
            ));
        }
        let fired = (turned && watch.told_ms.len() < MAX_TOLD_PER_HOUR).then(|| {
            watch.fired += 1;
            watch.told_ms.push(now);
            Fired {
                watch: watch.id.clone(),
                conversation_doc: watch.conversation_doc.clone(),
                conversation_path: watch.conversation_path.clone(),
                text: told(watch, &state.values),
                at_ms: now,
            }
        });
        if let Some(fired) = &fired {
            all.fired.push(fired.clone());
            let over = all.fired.len().saturating_sub(MAX_FIRED);
            all.fired.drain(..over);
        }
        kept().set(tx, all)?;
        Ok(fired)
    })?)
}

/// `watch w1 on Counter: count > 10 is now true (count is 11). Your note: tell me`.
fn told(watch: &Watch, values: &BTreeMap<String, Value>) -> String {
    let values: Vec<String> =
        values.iter().map(|(field, value)| format!("{field} is {}", truncate(&value.to_string(), 200))).collect();
    format!(
        "watch {} on {}: `{}` is now true ({}). Your note: {}",
        watch.id,
        watch.charm_name,
        watch.condition,
        values.join(", "),
        watch.note
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use trellis_runner::{Pattern, Runtime};

    use super::*;

    fn counter() -> (Runtime, DocId) {
        let rt = Runtime::in_memory();
        rt.register_pattern(Pattern::new("counter", |b, _: serde_json::Value| {
            b.state("count", 0i64)?;
            Ok(())
        }));
        let id = rt.charms().create("counter", json!({})).expect("a charm");
        (rt, id)
    }

    fn new(dialog: &Link, charm: &DocId, condition: &str) -> NewWatch {
        let (conversation, note) = ("Chat".to_string(), String::new());
        NewWatch {
            dialog: dialog.clone(),
            conversation,
            charm: charm.clone(),
            condition: condition.into(),
            note,
            max: 3,
        }
    }

    #[test]
    fn a_conversation_keeps_as_many_watches_as_it_may_and_they_end_with_it() {
        let (rt, charm) = counter();
        let (one, other) = (Link::new("chat-1", Path::new(["dialog"])), Link::new("chat-2", Path::new(["dialog"])));
        for n in 0..3 {
            add(&rt, new(&one, &charm, &format!("count > {n}"))).expect("within the limit");
        }
        let refused = add(&rt, new(&one, &charm, "count > 9")).expect_err("past the limit");
        assert!(refused.to_string().contains("has 3 watches already"), "{refused}");
        add(&rt, new(&other, &charm, "count > 9")).expect("another conversation has its own");
        let ended = remove_all(&rt, &one).expect("removed");
        assert_eq!(ended.len(), 3);
        let left: Vec<String> = watches(&rt).into_iter().map(|w| w.conversation_doc).collect();
        assert_eq!(left, ["chat-2"]);
    }

    #[test]
    fn a_watch_on_a_field_the_charm_lacks_or_with_a_long_note_is_refused() {
        let (rt, charm) = counter();
        let dialog = Link::new("chat-1", Path::root());
        let typo = add(&rt, new(&dialog, &charm, "cont > 1")).expect_err("no such field");
        assert!(typo.to_string().contains("`cont`, which counter does not have; its fields are: count"), "{typo}");
        let mut long = new(&dialog, &charm, "count > 1");
        long.note = "x".repeat(501);
        assert!(matches!(add(&rt, long), Err(WatchError::NoteTooLong)));
    }
}
