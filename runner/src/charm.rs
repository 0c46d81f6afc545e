//! Charms: running (or stored, restartable) instances of patterns.
//!
//! A charm's result lives in the document whose id is the charm id. Its record (pattern
//! id, argument, name given by the user) lives in the `charms` document, so after a
//! restart every charm can be rebuilt from its pattern: the first event to one of its
//! streams starts it again.

use dashmap::DashSet;
use serde::{Deserialize, Serialize};

use crate::builder::{StartTask, Wiring, NAME};
use crate::error::{Error, Result};
use crate::link::{DocId, Link};
use crate::read::Read;
use crate::runtime::Runtime;
use crate::value::{Path, Value};

/// The document that holds every charm's record.
pub const CHARMS_DOC: &str = "charms";

pub use crate::limits::MAX_NAME_CHARS;

/// Checks a charm name and returns it without surrounding white space: it must not be
/// empty, must have at most [`MAX_NAME_CHARS`] characters and no control characters
/// (which could rewrite a terminal that shows the name).
pub fn check_name(name: &str) -> Result<&str> {
    let trimmed = name.trim();
    let reason = if trimmed.is_empty() {
        "it is empty"
    } else if trimmed.chars().count() > MAX_NAME_CHARS {
        "it is too long"
    } else if trimmed.chars().any(char::is_control) {
        "it contains control characters"
    } else {
        return Ok(trimmed);
    };
    // Debug-quoting escapes control characters; a long name is cut for the message.
    let head: String = name.chars().take(40).collect();
    let more = if name.chars().nth(40).is_some() { "…" } else { "" };
    Err(Error::BadName { shown: format!("{head:?}{more}"), reason })
}

/// Which charms are running in this process.
#[derive(Default)]
pub(crate) struct CharmState {
    running: DashSet<DocId>,
    /// Held while a charm is being built and activated (reentrant: building one charm may
    /// start another).
    starting: parking_lot::ReentrantMutex<()>,
    /// What to run when a running charm stops.
    stops: dashmap::DashMap<DocId, parking_lot::Mutex<Vec<StartTask>>>,
}

/// What is stored about a charm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CharmRecord {
    /// The pattern it instantiates.
    pub pattern: String,
    /// The argument it was created with.
    pub argument: serde_json::Value,
    /// A name the user gave it, overriding the pattern's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A charm to create with [`Charms::create_all`].
#[derive(Debug, Clone)]
pub struct NewCharm<'a> {
    /// The pattern it instantiates.
    pub pattern: &'a str,
    /// The argument it is created with.
    pub argument: serde_json::Value,
    /// A name that overrides the pattern's.
    pub name: Option<&'a str>,
}

/// A charm as listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CharmInfo {
    /// The charm id.
    pub id: String,
    /// Its display name (`$NAME`), or the pattern id if it has none.
    pub name: String,
    /// Its pattern.
    pub pattern: String,
    /// Whether it runs in this process.
    pub running: bool,
}

/// The charm manager of a runtime: see [`Runtime::charms`].
#[derive(Clone, Copy)]
pub struct Charms<'a> {
    pub(crate) rt: &'a Runtime,
}

impl Charms<'_> {
    fn record_link(id: &str) -> Link {
        Link::new(CHARMS_DOC, Path::new([id]))
    }

    /// The stored record of a charm.
    pub fn record(&self, id: &str) -> Option<CharmRecord> {
        let value = self.rt.read_raw(&DocId::from(CHARMS_DOC), &Path::new([id]));
        serde_json::from_value(value.to_json()).ok()
    }

    /// Creates a charm of `pattern` with `argument`, starts it, and returns its id.
    pub fn create(&self, pattern: &str, argument: serde_json::Value) -> Result<DocId> {
        self.create_named(pattern, argument, None)
    }

    /// Like [`Charms::create`], with a display name that overrides the pattern's.
    pub fn create_named(&self, pattern: &str, argument: serde_json::Value, name: Option<&str>) -> Result<DocId> {
        let mut ids = self.create_all(&[NewCharm { pattern, argument, name }])?;
        ids.pop().ok_or_else(|| Error::UnknownPattern(pattern.to_string()))
    }

    /// Creates several charms in one transaction and starts them: a reader sees all of
    /// them or none, and a process killed meanwhile leaves none behind. Returns their ids,
    /// in order.
    pub fn create_all(&self, charms: &[NewCharm<'_>]) -> Result<Vec<DocId>> {
        let mut checked = Vec::with_capacity(charms.len());
        for new in charms {
            crate::depth::check_depth_of(&new.argument, format_args!("the argument for pattern `{}`", new.pattern))?;
            let name = new.name.map(check_name).transpose()?;
            let found = self.rt.patterns().get(new.pattern).ok_or_else(|| Error::UnknownPattern(new.pattern.into()))?;
            let id = self.rt.space().new_doc_id("charm");
            let record =
                CharmRecord { pattern: new.pattern.into(), argument: new.argument.clone(), name: name.map(Into::into) };
            let value = Value::from_serialize(&record).map_err(Error::Serialize)?;
            checked.push((found, id, record, value));
        }
        // Held until the charms are active, so an early event waits instead of starting
        // one a second time.
        let _starting = self.rt.0.charms.starting.lock();
        // A pattern that rejects its argument leaves no record behind, nor any other charm.
        let wirings = self.rt.transact_owned(|mut tx| {
            let mut wirings = Vec::with_capacity(checked.len());
            for (pattern, id, record, value) in &checked {
                let wiring;
                (tx, wiring) = self.rt.build_in(tx, pattern, id, &record.argument, record.name.as_deref())?;
                tx.write(&Self::record_link(id), value.clone())?;
                wirings.push(wiring);
            }
            Ok((tx, wirings))
        })?;
        let ids: Vec<DocId> = checked.into_iter().map(|(_, id, _, _)| id).collect();
        for (id, wiring) in ids.iter().zip(wirings) {
            self.activate(id, wiring);
        }
        Ok(ids)
    }

    fn activate(&self, id: &DocId, wiring: Wiring) {
        for (stream, handler) in wiring.handlers {
            self.rt.set_handler(stream, handler);
        }
        for (name, output, run) in wiring.computations {
            self.rt.add_computation(&name, output, Some(id.clone()), run);
        }
        self.rt.0.charms.running.insert(id.clone());
        self.rt.0.charms.stops.insert(id.clone(), parking_lot::Mutex::new(wiring.stops));
        self.rt.settle();
        for task in wiring.tasks {
            task(self.rt);
        }
    }

    /// Starts a stored charm that is not running (after a restart or a stop).
    pub fn start(&self, id: &str) -> Result<()> {
        let id = DocId::from(id);
        // Of two concurrent starts, the second waits here and then finds it running.
        let _starting = self.rt.0.charms.starting.lock();
        if self.rt.0.charms.running.contains(&id) {
            return Ok(());
        }
        let record = self.record(&id).ok_or_else(|| Error::UnknownCharm(id.to_string()))?;
        let pattern =
            self.rt.patterns().get(&record.pattern).ok_or_else(|| Error::UnknownPattern(record.pattern.clone()))?;
        let wiring = self.rt.build_charm(&pattern, &id, record.argument, record.name.as_deref())?;
        self.activate(&id, wiring);
        Ok(())
    }

    /// Stops a charm: its handlers and computations are removed; its data stays, and the
    /// next event to one of its streams starts it again.
    pub fn stop(&self, id: &str) -> Result<()> {
        let id = DocId::from(id);
        if self.record(&id).is_none() {
            return Err(Error::UnknownCharm(id.to_string()));
        }
        self.rt.remove_handlers_of(&id);
        for c in self.rt.computations_of(&id) {
            self.rt.remove_computation(c);
        }
        self.rt.0.charms.running.remove(&id);
        for stop in self.rt.0.charms.stops.remove(&id).map(|(_, stops)| stops.into_inner()).unwrap_or_default() {
            stop(self.rt);
        }
        Ok(())
    }

    /// Removes a charm: stops it and deletes its record, so it is no longer listed,
    /// found or started. (Its result document stays in the space, unreferenced.)
    pub fn remove(&self, id: &str) -> Result<()> {
        self.stop(id)?;
        self.rt.transact(|tx| tx.write(&Self::record_link(id), Value::Null))
    }

    /// Whether the charm runs in this process.
    pub fn is_running(&self, id: &str) -> bool {
        self.rt.0.charms.running.contains(id)
    }

    /// Gives a charm a new display name.
    pub fn rename(&self, id: &str, name: &str) -> Result<()> {
        let name = check_name(name)?;
        let mut record = self.record(id).ok_or_else(|| Error::UnknownCharm(id.to_string()))?;
        record.name = Some(name.to_string());
        let value = Value::from_serialize(&record).map_err(Error::Serialize)?;
        let name_at = self.result(&DocId::from(id)).child(NAME);
        self.rt.transact(|tx| {
            tx.write(&Self::record_link(id), value.clone())?;
            tx.write(&name_at, Value::from(name))
        })
    }

    /// Every stored charm, sorted by name then id.
    pub fn list(&self) -> Vec<CharmInfo> {
        let all = self.rt.read_raw(&DocId::from(CHARMS_DOC), &Path::root());
        let Some(map) = all.as_object() else { return Vec::new() };
        let mut list: Vec<CharmInfo> = map
            .iter()
            .filter_map(|(id, v)| {
                let record: CharmRecord = serde_json::from_value(v.to_json()).ok()?;
                Some(CharmInfo {
                    id: id.to_string(),
                    name: self.name(id),
                    pattern: record.pattern,
                    running: self.is_running(id),
                })
            })
            .collect();
        list.sort_by(|a, b| (&a.name, &a.id).cmp(&(&b.name, &b.id)));
        list
    }

    /// The charm's display name.
    pub fn name(&self, id: &str) -> String {
        match self.rt.read_raw(&DocId::from(id), &Path::new([NAME])) {
            Value::String(s) => s.to_string(),
            _ => self.record(id).map(|r| r.pattern).unwrap_or_else(|| id.to_string()),
        }
    }

    /// Finds a charm by id, or by display name when exactly one charm has it.
    pub fn find(&self, id_or_name: &str) -> Result<DocId> {
        if self.record(id_or_name).is_some() {
            return Ok(DocId::from(id_or_name));
        }
        let matches: Vec<CharmInfo> = self.list().into_iter().filter(|c| c.name == id_or_name).collect();
        match matches.as_slice() {
            [one] => Ok(DocId::from(one.id.as_str())),
            [] => Err(Error::UnknownCharm(id_or_name.to_string())),
            many => Err(Error::AmbiguousCharm {
                name: id_or_name.to_string(),
                ids: many.iter().map(|c| c.id.clone()).collect(),
            }),
        }
    }

    /// A link to the root of the charm's result.
    pub fn result(&self, id: &DocId) -> Link {
        Link::new(id.clone(), Path::root())
    }

    /// The charm's current result as plain JSON (links resolved, streams as markers).
    pub fn get(&self, id: &str) -> Result<serde_json::Value> {
        if self.record(id).is_none() {
            return Err(Error::UnknownCharm(id.to_string()));
        }
        Ok(self.rt.read_deep(&self.result(&DocId::from(id)))?.to_json())
    }
}

#[cfg(test)]
mod tests {
    use super::NewCharm;
    use crate::prelude::*;

    fn counter(fails_when_negative: bool) -> Pattern {
        Pattern::new(if fails_when_negative { "picky" } else { "counter" }, move |b, start: i64| {
            if fails_when_negative && start < 0 {
                return Err("the start must not be negative".into());
            }
            let count = b.state("count", start)?;
            b.lift("label", count, |n: i64| format!("Count: {n}"))?;
            Ok(())
        })
    }

    #[test]
    fn charms_created_together_commit_as_one_or_not_at_all() {
        let rt = Runtime::in_memory();
        rt.register_pattern(counter(false));
        rt.register_pattern(counter(true));
        let new = |pattern, start: i64| NewCharm { pattern, argument: serde_json::json!(start), name: None };

        let refused = rt.charms().create_all(&[new("counter", 1), new("picky", -1)]);
        assert!(refused.is_err(), "the second pattern refuses its argument");
        assert!(rt.charms().list().is_empty(), "so the first is not created either");

        let changes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let heard = changes.clone();
        let _records = rt.observe(&Link::new(super::CHARMS_DOC, Path::root()), move |_| {
            heard.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            true
        });
        let ids = rt.charms().create_all(&[new("counter", 1), new("picky", 2), new("counter", 3)]).expect("created");
        assert_eq!(changes.load(std::sync::atomic::Ordering::SeqCst), 1, "their records (and cells) in one commit");
        let labels: Vec<_> = ids.iter().map(|id| rt.charms().get(id).expect("charm")["label"].clone()).collect();
        assert_eq!(labels, ["Count: 1", "Count: 2", "Count: 3"]);
    }
}
