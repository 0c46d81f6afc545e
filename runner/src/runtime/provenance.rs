//! Who wrote what. A handler sent through a runtime [acting as](Runtime::acting_as) a
//! [`Writer`] records, in the transaction of its own writes, the writer of each path it
//! wrote: the document `provenance/DOC` keeps, per path of `DOC`, the last writer and
//! when. Writes made without a writer (a computation's, a pattern building) record
//! nothing, so a path shows the last writer that said who it was.
//!
//! A writer with a journal also keeps each path's value before and after in it (see
//! `undo.rs`), so that everything it wrote can be undone together.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::Runtime;
use crate::error::Result;
use crate::link::{DocId, Link};
use crate::read::Read;
use crate::tx::Tx;
use crate::value::{Path, Value};

/// Where the writers of document `DOC` are kept: `provenance/DOC`.
pub const PROVENANCE_PREFIX: &str = "provenance/";

/// How many paths of one document keep their writer; the oldest are forgotten first.
pub const MAX_WRITTEN_PATHS: usize = 256;

/// Who makes a change: a person's command, the web page, a model's tool call, an undo.
///
/// ```
/// use trellis_runner::Writer;
///
/// let writer = Writer::new("command", "charm send").with("user", "ana");
/// assert_eq!(writer.details["user"], "ana");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Writer {
    /// What kind of writer: `command`, `web`, `mcp`, `model`, `undo`, or one of your own.
    pub kind: String,
    /// Who, in a few words a person reads: `charm send`, `the web page`.
    pub name: String,
    /// What else identifies it (a model's call: `conversation`, `request`, `call`, `model`).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub details: serde_json::Map<String, serde_json::Value>,
    /// The document that journals its writes so they can be undone together
    /// ([`Runtime::undo`]); `None` keeps no journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<String>,
}

impl Writer {
    /// A writer of `kind`, shown as `name`.
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Writer { kind: kind.into(), name: name.into(), details: serde_json::Map::new(), journal: None }
    }

    /// With one more detail.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// Journaling its writes in the document `journal`.
    pub fn journaled(mut self, journal: impl Into<String>) -> Self {
        self.journal = Some(journal.into());
        self
    }
}

/// The last writer of one path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Written {
    /// The path inside the document.
    pub path: Vec<String>,
    /// Who wrote it.
    pub by: Writer,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

impl Written {
    /// Whether this write covers `path` or lies inside it.
    pub fn overlaps(&self, path: &[String]) -> bool {
        overlap(&self.path, path)
    }
}

/// Whether one path covers the other.
pub(super) fn overlap(a: &[String], b: &[String]) -> bool {
    a.iter().zip(b).all(|(x, y)| x == y)
}

/// The writers kept for one document, oldest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Kept {
    written: Vec<Written>,
}

impl Kept {
    /// `by` wrote `path`: what was kept of `path` and below is replaced.
    fn wrote(&mut self, path: Vec<String>, by: &Writer, at_ms: u64) {
        self.written.retain(|w| !(w.path.len() >= path.len() && w.path.starts_with(&path)));
        self.written.push(Written { path, by: by.clone(), at_ms });
        let over = self.written.len().saturating_sub(MAX_WRITTEN_PATHS);
        self.written.drain(..over);
    }
}

/// A path as the text segments it is kept as.
pub(super) fn segments(path: &Path) -> Vec<String> {
    path.segments().iter().map(|s| s.to_string()).collect()
}

/// Milliseconds since the Unix epoch (0 on a clock set before it), as the space records
/// when something was written.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// This process, as the space records who runs something (a resumed request, an MCP
/// task): its id and when it first asked, so a later process with the same id is another.
pub fn this_process() -> &'static str {
    static MARK: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MARK.get_or_init(|| {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        format!("{}@{}", std::process::id(), since.as_nanos())
    })
}

fn kept_at(doc: &str) -> Link {
    Link::new(format!("{PROVENANCE_PREFIX}{doc}"), Path::root())
}

fn read_kept(read: &impl Read, doc: &str) -> Result<Kept> {
    // A document that is not a list of writers (written by hand) counts as none kept.
    Ok(read.read(&kept_at(doc))?.read_as().unwrap_or_default())
}

impl Runtime {
    /// This runtime, acting as `writer`: the handlers it sends to record `writer` as the
    /// writer of each path they write ([`Runtime::provenance`]), and journal them if it
    /// keeps a journal. Clones of the handle act as the same writer.
    ///
    /// ```
    /// use trellis_runner::{Pattern, Runtime, Writer};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let rt = Runtime::in_memory();
    /// rt.register_pattern(Pattern::new("counter", |b, _: serde_json::Value| {
    ///     let count = b.state("count", 0i64)?;
    ///     b.handler("add", move |tx, n: i64| count.update(tx, |c| c + n).map(|_| ()))?;
    ///     Ok(())
    /// }));
    /// let id = rt.charms().create("counter", serde_json::json!({})).unwrap();
    /// let add = rt.charms().result(&id).child("add");
    /// rt.acting_as(Writer::new("command", "charm send")).send(&add, serde_json::json!(2)).await.unwrap();
    /// let count = rt.charms().result(&id).child("count");
    /// assert_eq!(rt.last_writer(&count).unwrap().unwrap().by.name, "charm send");
    /// # });
    /// ```
    pub fn acting_as(&self, writer: Writer) -> Runtime {
        Runtime(self.0.clone(), Some(std::sync::Arc::new(writer)))
    }

    /// The writer this handle acts as, if any.
    pub fn writer(&self) -> Option<&Writer> {
        self.1.as_deref()
    }

    /// The last writer of each path of `doc` that one was recorded for, in the order
    /// written (oldest first).
    pub fn provenance(&self, doc: &DocId) -> Result<Vec<Written>> {
        Ok(read_kept(self, doc)?.written)
    }

    /// The newest recorded write that covers `link` or lies inside it.
    pub fn last_writer(&self, link: &Link) -> Result<Option<Written>> {
        let (at, _) = self.0.space.resolve(link)?;
        let path = segments(&at.path);
        // Kept in the order written: the last is the newest, whatever the clocks said.
        Ok(read_kept(self, &at.doc)?.written.into_iter().rfind(|w| w.overlaps(&path)))
    }

    /// Whether a computation writes `link` (or a location overlapping it): a derived
    /// value, whose writer is no one. Only computations of charms running in this process
    /// are known (start the charm first).
    pub fn is_derived(&self, link: &Link) -> bool {
        self.0.space.resolve(link).is_ok_and(|(at, _)| self.0.graph.lock().writes(&at))
    }

    /// Records `writer` for each path `tx` wrote (the provenance documents aside), and
    /// journals them if it keeps a journal. Runs in the handler's transaction, before
    /// anything else is written there.
    pub(super) fn record(&self, tx: &Tx<'_>, writer: &Writer) -> Result<()> {
        let mut written: Vec<(DocId, Vec<Path>)> = Vec::new();
        tx.written(|_, doc, paths| {
            if !doc.starts_with(PROVENANCE_PREFIX) && writer.journal.as_deref() != Some(&**doc) {
                let mut paths: Vec<Path> = paths.cloned().collect();
                paths.dedup();
                written.push((doc.clone(), paths));
            }
        });
        let at_ms = now_ms();
        for (doc, paths) in &written {
            let mut kept = read_kept(tx, doc)?;
            for path in paths {
                kept.wrote(segments(path), writer, at_ms);
            }
            tx.write(&kept_at(doc), Value::from_serialize(&kept).map_err(crate::error::Error::Serialize)?)?;
        }
        match &writer.journal {
            Some(journal) if !written.is_empty() => self.journal_writes(tx, journal, writer, &written),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_what_was_kept_below_it_and_the_oldest_go_first() {
        let (a, b) = (Writer::new("command", "a"), Writer::new("web", "b"));
        let mut kept = Kept::default();
        kept.wrote(vec!["notes".into(), "0".into()], &a, 1);
        kept.wrote(vec!["count".into()], &a, 2);
        kept.wrote(vec!["notes".into()], &b, 3);
        let paths: Vec<_> = kept.written.iter().map(|w| (w.path.join("."), w.by.name.as_str())).collect();
        assert_eq!(paths, [("count".to_string(), "a"), ("notes".to_string(), "b")]);
        for n in 0..MAX_WRITTEN_PATHS {
            kept.wrote(vec![n.to_string()], &a, 4);
        }
        assert_eq!(kept.written.len(), MAX_WRITTEN_PATHS);
        assert!(kept.written.iter().all(|w| w.path != ["count"]), "the oldest were forgotten");
    }

    #[test]
    fn a_write_overlaps_the_paths_it_covers_and_those_inside() {
        let w = Written { path: vec!["notes".into()], by: Writer::new("web", "b"), at_ms: 0 };
        assert!(w.overlaps(&["notes".into(), "0".into()]));
        assert!(w.overlaps(&[]));
        assert!(!w.overlaps(&["count".into()]));
    }
}

#[cfg(test)]
mod hooks {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use crate::pattern::Pattern;
    use crate::{Runtime, Writer};

    #[test]
    fn what_a_commit_sets_off_acts_as_nobody() {
        let rt = Runtime::in_memory();
        let attributed = Arc::new(AtomicBool::new(false));
        let seen = attributed.clone();
        rt.register_pattern(Pattern::new("bell", move |b, _: serde_json::Value| {
            let rung = b.state("rung", 0i64)?;
            let seen = seen.clone();
            b.handler("ring", move |tx, _: serde_json::Value| {
                let seen = seen.clone();
                tx.after_commit(move |rt| seen.store(rt.writer().is_some(), Ordering::SeqCst));
                rung.update(tx, |n| n + 1).map(|_| ())
            })?;
            Ok(())
        }));
        let id = rt.charms().create("bell", serde_json::json!({})).expect("a charm");
        let ring = rt.charms().result(&id).child("ring");
        let model = rt.acting_as(Writer::new("model", "a turn").journaled("j"));
        futures::executor::block_on(model.send(&ring, serde_json::json!({}))).expect("rang");
        assert!(!attributed.load(Ordering::SeqCst), "a hook got the sender's writer");
        let rung = rt.charms().result(&id).child("rung");
        assert_eq!(rt.last_writer(&rung).expect("read").map(|w| w.by.kind), Some("model".into()));
    }
}
