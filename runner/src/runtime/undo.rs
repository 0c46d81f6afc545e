//! Undoing everything one writer wrote. A [`Writer`] with a journal (a model's request,
//! say) keeps in it, for each path its handlers wrote, the value before its first write
//! and after its last; [`Runtime::undo`] puts every path back in one transaction, unless
//! someone wrote one of them again since, which it lists instead.
//!
//! A path's `after` is refreshed whenever the writer writes it or a path overlapping it,
//! so it is the value the writer left: a path whose value differs now was written by
//! someone else, recorded or not.

use serde::{Deserialize, Serialize};

use super::provenance::{now_ms, overlap, segments, Written};
use super::{Changed, Runtime, Writer};
use crate::error::{Error, Result};
use crate::link::{DocId, Link};
use crate::read::Read;
use crate::tx::Tx;
use crate::value::{Path, Value};

/// How many paths one journal keeps; a writer that writes more cannot be undone.
pub const MAX_JOURNAL_ENTRIES: usize = 256;

/// The most JSON one journal holds; a writer whose values before and after come to more
/// cannot be undone.
pub const MAX_JOURNAL_BYTES: usize = 1 << 20;

/// How many effects outside the space one journal lists.
pub const MAX_JOURNAL_EFFECTS: usize = 64;

/// What one writer wrote, to undo it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Journal {
    /// The writer.
    pub by: Writer,
    /// Each path it wrote, in the order first written.
    #[serde(default)]
    pub entries: Vec<Entry>,
    /// What it did outside the space, which no undo reverts (an MCP call, a plugin's).
    #[serde(default)]
    pub effects: Vec<String>,
    /// It wrote more than [`MAX_JOURNAL_ENTRIES`] paths (or a value too deep to keep).
    #[serde(default)]
    pub overflow: bool,
    /// Who undid it and when, once undone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone: Option<Undoing>,
}

/// One path a journal's writer wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Entry {
    /// The document.
    pub doc: String,
    /// The path inside it.
    pub path: Vec<String>,
    /// Its value before the first write.
    pub before: serde_json::Value,
    /// Whether it had no value before (undoing removes it rather than writing `null`).
    #[serde(default)]
    pub absent: bool,
    /// The value the writer left there.
    pub after: serde_json::Value,
}

/// Who undid a journal, and when (milliseconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Undoing {
    /// Who.
    pub by: Writer,
    /// When.
    pub at_ms: u64,
}

/// What an undo did: each path put back (`before`: what it held, `after`: what it holds
/// again), and the effects outside the space it could not revert.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Undone {
    /// The paths put back.
    pub reverted: Vec<Changed>,
    /// What the writer did outside the space.
    pub effects: Vec<String>,
}

/// A path written again since the journal's writer left it, which refuses an undo.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Later {
    /// The document.
    pub doc: String,
    /// The path inside it.
    pub path: Vec<String>,
    /// What the journal's writer left there.
    pub left: serde_json::Value,
    /// What it holds now.
    pub now: serde_json::Value,
    /// Who wrote it last, when that was recorded.
    pub by: Option<Written>,
}

impl std::fmt::Display for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} is {} (it was left at {})", self.doc, self.path.join("/"), self.now, self.left)?;
        match &self.by {
            Some(written) => write!(f, ", written by {}", written.by.name),
            None => f.write_str(", written by a writer that was not recorded"),
        }
    }
}

fn link_of(doc: &str, path: &[String]) -> Link {
    Link::new(doc, Path::new(path.iter().map(String::as_str)))
}

fn read_journal(read: &impl Read, id: &str) -> Result<Option<Journal>> {
    let value = read.read(&Link::new(id, Path::root()))?;
    if value == Value::Null {
        return Ok(None);
    }
    value.read_as().map(Some).map_err(|e| Error::NotUndoable(format!("the journal {id} is not one: {e}")))
}

fn write_journal(tx: &Tx<'_>, id: &str, journal: &Journal) -> Result<()> {
    tx.write(&Link::new(id, Path::root()), Value::from_serialize(journal).map_err(Error::Serialize)?)
}

impl Runtime {
    /// The journal `id`, if anything was journaled there.
    pub fn journal(&self, id: &str) -> Result<Option<Journal>> {
        read_journal(self, id)
    }

    /// Notes in the journal `id` of `writer` something it did outside the space, which an
    /// undo lists as not undone.
    pub fn journal_effect(&self, id: &str, writer: &Writer, effect: &str) -> Result<()> {
        self.transact(|tx| {
            let mut journal = read_journal(tx, id)?.unwrap_or_else(|| empty(writer));
            if journal.effects.len() < MAX_JOURNAL_EFFECTS {
                journal.effects.push(effect.to_string());
            }
            write_journal(tx, id, &journal)
        })
    }

    /// Journals the paths `written` (by document) in `id`: their value before, unless
    /// journaled already, and the value now of each journaled path they overlap.
    pub(super) fn journal_writes(
        &self,
        tx: &Tx<'_>,
        id: &str,
        writer: &Writer,
        written: &[(DocId, Vec<Path>)],
    ) -> Result<()> {
        // Writes after an undo begin anew: what was undone is not theirs to undo again.
        let mut journal = read_journal(tx, id)?.filter(|j| j.undone.is_none()).unwrap_or_else(|| empty(writer));
        for (doc, paths) in written {
            for path in paths.iter().map(segments) {
                for entry in journal.entries.iter_mut().filter(|e| *e.doc == **doc && overlap(&e.path, &path)) {
                    entry.after = tx.read(&link_of(doc, &entry.path))?.to_json();
                }
                if journal.overflow || journal.entries.iter().any(|e| *e.doc == **doc && e.path == path) {
                    continue;
                }
                let link = link_of(doc, &path);
                let absent = match path.split_last() {
                    Some((last, parent)) => {
                        self.read_raw(doc, &Path::new(parent.iter().map(String::as_str))).child(last).is_none()
                    }
                    None => self.read_raw(doc, &Path::root()) == Value::Null,
                };
                let entry = Entry {
                    doc: doc.to_string(),
                    before: self.read(&link)?.to_json(),
                    absent,
                    after: tx.read(&link)?.to_json(),
                    path,
                };
                let at = Path::new(["entries".to_string(), journal.entries.len().to_string()]);
                let fits = Value::from_serialize(&entry)
                    .is_ok_and(|v| crate::depth::check_write(&v, &at, "a journal entry").is_ok());
                match journal.entries.len() < MAX_JOURNAL_ENTRIES && fits {
                    true => journal.entries.push(entry),
                    // Kept no further: an undo of part of it would leave a state nobody made.
                    false => journal.overflow = true,
                }
            }
        }
        if serde_json::to_vec(&journal).map_or(true, |json| json.len() > MAX_JOURNAL_BYTES) {
            journal.overflow = true;
        }
        if journal.overflow {
            journal.entries.clear();
        }
        write_journal(tx, id, &journal)
    }

    /// Puts back every path the journal `id` lists, in one transaction made as `by`, and
    /// marks the journal undone. Refused ([`Error::UndoRefused`], nothing changed) when
    /// one of them holds another value than the journal's writer left there; refused
    /// ([`Error::NotUndoable`]) when there is no such journal, it was undone already, or it
    /// overflowed.
    ///
    /// ```
    /// use trellis_runner::{Pattern, Read, Runtime, Writer};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let rt = Runtime::in_memory();
    /// rt.register_pattern(Pattern::new("counter", |b, _: serde_json::Value| {
    ///     let count = b.state("count", 0i64)?;
    ///     b.handler("add", move |tx, n: i64| count.update(tx, |c| c + n).map(|_| ()))?;
    ///     Ok(())
    /// }));
    /// let id = rt.charms().create("counter", serde_json::json!({})).unwrap();
    /// let (add, count) = (rt.charms().result(&id).child("add"), rt.charms().result(&id).child("count"));
    /// let model = rt.acting_as(Writer::new("model", "a model's turn").journaled("journal-1"));
    /// model.send(&add, serde_json::json!(2)).await.unwrap();
    /// model.send(&add, serde_json::json!(3)).await.unwrap();
    /// rt.undo("journal-1", Writer::new("undo", "trellis undo")).unwrap();
    /// assert_eq!(rt.read(&count).unwrap().to_json(), 0);
    /// # });
    /// ```
    pub fn undo(&self, id: &str, by: Writer) -> Result<Undone> {
        self.undo_then(id, by, |_, _| Ok(()))
    }

    /// [`Runtime::undo`] that also runs `then` in its transaction, once everything is put
    /// back (to tell whoever should know, in the same commit).
    pub fn undo_then(&self, id: &str, by: Writer, then: impl Fn(&Tx<'_>, &Undone) -> Result<()>) -> Result<Undone> {
        // The charms whose data it puts back run, so that their derived values follow.
        for entry in read_journal(self, id)?.iter().flat_map(|journal| &journal.entries) {
            self.start_charm_for(&link_of(&entry.doc, &[]))?;
        }
        self.transact(|tx| {
            let journal = read_journal(tx, id)?.ok_or_else(|| Error::NotUndoable(format!("nothing was journaled in {id}")))?;
            if let Some(undoing) = &journal.undone {
                return Err(Error::NotUndoable(format!("{} undid it already", undoing.by.name)));
            }
            if journal.overflow {
                return Err(Error::NotUndoable(format!(
                    "it wrote more than {MAX_JOURNAL_ENTRIES} paths (or values too large or too deep to keep), so it was \
                     not journaled"
                )));
            }
            let mut later = Vec::new();
            for entry in &journal.entries {
                let now = tx.read(&link_of(&entry.doc, &entry.path))?.to_json();
                if now != entry.after {
                    let by = self.last_writer(&link_of(&entry.doc, &entry.path))?;
                    let by = by.filter(|w| w.by.journal.as_deref() != Some(id));
                    later.push(Later { doc: entry.doc.clone(), path: entry.path.clone(), left: entry.after.clone(), now, by });
                }
            }
            // An item it added to a list cannot go while items someone else added stay after it.
            for entry in journal.entries.iter().filter(|e| e.absent) {
                if let Some(after) = item_after(tx, entry, &journal.entries)? {
                    let by = self.last_writer(&link_of(&entry.doc, &after))?;
                    let now = tx.read(&link_of(&entry.doc, &after))?.to_json();
                    later.push(Later { doc: entry.doc.clone(), path: after, left: serde_json::Value::Null, now, by });
                }
            }
            if !later.is_empty() {
                return Err(Error::UndoRefused { later });
            }
            for entry in journal.entries.iter().rev() {
                put_back(tx, entry)?;
            }
            let mut reverted = Vec::with_capacity(journal.entries.len());
            for entry in &journal.entries {
                let after = tx.read(&link_of(&entry.doc, &entry.path))?.to_json();
                reverted.push(Changed { doc: entry.doc.clone(), path: entry.path.clone(), before: entry.after.clone(), after });
            }
            self.record(tx, &by)?;
            let mut journal = journal;
            journal.undone = Some(Undoing { by: by.clone(), at_ms: now_ms() });
            write_journal(tx, id, &journal)?;
            let undone = Undone { reverted, effects: journal.effects };
            then(tx, &undone)?;
            Ok(undone)
        })
    }
}

fn empty(writer: &Writer) -> Journal {
    Journal { by: writer.clone(), entries: Vec::new(), effects: Vec::new(), overflow: false, undone: None }
}

/// For an item `entry` added to a list: the path of the first item after it that the
/// list holds now and the journal did not add, if any.
fn item_after(tx: &Tx<'_>, entry: &Entry, entries: &[Entry]) -> Result<Option<Vec<String>>> {
    let Some((last, parent)) = entry.path.split_last() else { return Ok(None) };
    let Ok(at) = last.parse::<usize>() else { return Ok(None) };
    let serde_json::Value::Array(items) = tx.read(&link_of(&entry.doc, parent))?.to_json() else { return Ok(None) };
    let path_of = |i: usize| -> Vec<String> { parent.iter().cloned().chain([i.to_string()]).collect() };
    let ours = |path: &Vec<String>| entries.iter().any(|e| e.absent && e.doc == entry.doc && e.path == *path);
    Ok((at + 1..items.len()).map(path_of).find(|path| !ours(path)))
}

/// Writes back what `entry` held before; a path that held nothing is taken out of its
/// object, or its array cut short there.
fn put_back(tx: &Tx<'_>, entry: &Entry) -> Result<()> {
    let Some((last, parent)) = entry.path.split_last().filter(|_| entry.absent) else {
        return tx.write(&link_of(&entry.doc, &entry.path), Value::from(entry.before.clone()));
    };
    let parent = link_of(&entry.doc, parent);
    let mut value = tx.read(&parent)?.to_json();
    match &mut value {
        serde_json::Value::Object(map) => {
            map.remove(last);
        }
        serde_json::Value::Array(items) => {
            if let Ok(at) = last.parse::<usize>() {
                items.truncate(at);
            }
        }
        _ => return Ok(()),
    }
    tx.write(&parent, Value::from(value))
}

#[cfg(test)]
mod tests {
    use futures::executor::block_on;
    use serde_json::json;

    use super::*;
    use crate::pattern::Pattern;

    /// A notes charm: `add` pushes a note, `set` replaces them all, `title` renames the first.
    fn notes() -> (Runtime, Link) {
        let rt = Runtime::in_memory();
        rt.register_pattern(Pattern::new("notes", |b, _: serde_json::Value| {
            let notes = b.state("notes", Vec::<String>::new())?;
            b.derive("count", move |tx| Ok(notes.get(tx)?.len()))?;
            b.handler("add", move |tx, title: String| {
                let at = notes.get(tx)?.len();
                tx.write(&notes.link().child(at.to_string()), Value::from(json!(title)))
            })?;
            b.handler("set", move |tx, all: Vec<String>| notes.set(tx, all))?;
            b.handler("title", move |tx, title: String| tx.write(&notes.link().child("0"), Value::from(json!(title))))?;
            Ok(())
        }));
        let id = rt.charms().create("notes", json!({})).expect("a charm");
        let result = rt.charms().result(&id);
        (rt, result)
    }

    fn undoer() -> Writer {
        Writer::new("undo", "trellis undo")
    }

    #[test]
    fn an_undo_puts_back_a_turn_of_several_writes_and_takes_out_what_was_added() {
        let (rt, charm) = notes();
        block_on(rt.send(&charm.child("set"), json!(["milk"]))).expect("set");
        let model = rt.acting_as(Writer::new("model", "a turn").journaled("j1"));
        block_on(model.send(&charm.child("add"), json!("eggs"))).expect("add");
        block_on(model.send(&charm.child("title"), json!("oat milk"))).expect("title");
        block_on(model.send(&charm.child("add"), json!("bread"))).expect("add");
        assert_eq!(rt.read(&charm.child("notes")).expect("notes").to_json(), json!(["oat milk", "eggs", "bread"]));
        let undone = rt.undo("j1", undoer()).expect("undone");
        assert_eq!(rt.read(&charm.child("notes")).expect("notes").to_json(), json!(["milk"]));
        assert_eq!(rt.read(&charm.child("count")).expect("count").to_json(), json!(1), "derived values follow");
        assert_eq!(undone.reverted.len(), 3);
        let again = rt.undo("j1", undoer()).expect_err("undone once");
        assert!(again.to_string().contains("trellis undo undid it already"), "{again}");
        let last = rt.last_writer(&charm.child("notes").child("0")).expect("read").expect("recorded");
        assert_eq!(last.by.kind, "undo");
    }

    #[test]
    fn an_undo_is_refused_after_a_later_write_by_someone_else_and_changes_nothing() {
        let (rt, charm) = notes();
        let model = rt.acting_as(Writer::new("model", "a turn").journaled("j1"));
        block_on(model.send(&charm.child("set"), json!(["milk", "eggs"]))).expect("set");
        let person = rt.acting_as(Writer::new("command", "charm send"));
        block_on(person.send(&charm.child("title"), json!("oat milk"))).expect("title");
        let refused = rt.undo("j1", undoer()).expect_err("refused");
        let Error::UndoRefused { later } = &refused else { panic!("{refused}") };
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].by.as_ref().map(|w| w.by.name.as_str()), Some("charm send"));
        assert!(refused.to_string().contains("written by charm send"), "{refused}");
        assert_eq!(rt.read(&charm.child("notes")).expect("notes").to_json(), json!(["oat milk", "eggs"]));
        assert_eq!(rt.journal("j1").expect("read").expect("kept").undone, None);
    }

    #[test]
    fn an_item_added_before_someone_elses_is_not_taken_out_from_under_it() {
        let (rt, charm) = notes();
        let model = rt.acting_as(Writer::new("model", "a turn").journaled("j1"));
        block_on(model.send(&charm.child("add"), json!("milk"))).expect("add");
        let person = rt.acting_as(Writer::new("command", "charm send"));
        block_on(person.send(&charm.child("add"), json!("eggs"))).expect("add");
        let refused = rt.undo("j1", undoer()).expect_err("refused");
        assert!(refused.to_string().contains("/notes/1 is \"eggs\""), "{refused}");
        assert!(refused.to_string().contains("written by charm send"), "{refused}");
        assert_eq!(rt.read(&charm.child("notes")).expect("notes").to_json(), json!(["milk", "eggs"]));
    }

    #[test]
    fn a_write_nobody_recorded_refuses_an_undo_too() {
        let (rt, charm) = notes();
        let model = rt.acting_as(Writer::new("model", "a turn").journaled("j1"));
        block_on(model.send(&charm.child("add"), json!("milk"))).expect("add");
        block_on(rt.send(&charm.child("title"), json!("oat milk"))).expect("unrecorded");
        let refused = rt.undo("j1", undoer()).expect_err("refused");
        assert!(refused.to_string().contains("not recorded"), "{refused}");
    }

    #[test]
    fn a_missing_journal_and_one_that_overflowed_cannot_be_undone() {
        let (rt, charm) = notes();
        assert!(matches!(rt.undo("nothing", undoer()), Err(Error::NotUndoable(_))));
        let model = rt.acting_as(Writer::new("model", "a turn").journaled("j1"));
        for n in 0..=MAX_JOURNAL_ENTRIES {
            block_on(model.send(&charm.child("add"), json!(n.to_string()))).expect("add");
        }
        let journal = rt.journal("j1").expect("read").expect("kept");
        assert!(journal.overflow && journal.entries.is_empty());
        let refused = rt.undo("j1", undoer()).expect_err("overflowed");
        assert!(refused.to_string().contains("more than 256 paths"), "{refused}");
    }

    #[test]
    fn effects_outside_the_space_are_listed_by_the_undo() {
        let (rt, charm) = notes();
        let writer = Writer::new("model", "a turn").journaled("j1");
        block_on(rt.acting_as(writer.clone()).send(&charm.child("add"), json!("milk"))).expect("add");
        rt.journal_effect("j1", &writer, "mcp.fetch (call c2)").expect("noted");
        let undone = rt.undo("j1", undoer()).expect("undone");
        assert_eq!(undone.effects, ["mcp.fetch (call c2)"]);
    }
}
