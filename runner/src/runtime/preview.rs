//! What a handler would change, before anyone lets it: [`Runtime::preview`] runs it in a
//! transaction that is rolled back and lists each path it would write, before and after,
//! and a fingerprint of each location it read; [`Runtime::send_as_previewed`] runs it for
//! real and commits only if nothing it read then has moved and it changes exactly that. A
//! person approving a model's call approves the change they were shown, never a different
//! one made on a state that moved meanwhile.

use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use super::Runtime;
use crate::error::{Error, Result};
use crate::link::Link;
use crate::read::Read;
use crate::runtime::Sent;
use crate::tx::Tx;

/// One path a handler writes: its value before and after (JSON; `null` where there is
/// none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Changed {
    /// The document.
    pub doc: String,
    /// The path inside it.
    pub path: Vec<String>,
    /// The committed value.
    pub before: serde_json::Value,
    /// The value the handler writes.
    pub after: serde_json::Value,
}

/// A location a preview read, and a fingerprint of its value then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReadAt {
    /// The document.
    pub doc: String,
    /// The path inside it.
    pub path: Vec<String>,
    /// A hash of its value as JSON text (the same on every machine).
    pub hash: u64,
}

/// What a preview found: what the handler would change, and what it read to decide.
#[derive(Debug, Clone, PartialEq, Default, Serialize, schemars::JsonSchema)]
pub struct Previewed {
    /// Each path it would write.
    pub changes: Vec<Changed>,
    /// Each location it read.
    pub read: Vec<ReadAt>,
}

impl<'de> Deserialize<'de> for Previewed {
    /// Also a list of changes alone, as a waiting call stored it before reads were kept.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Stored {
            Full {
                changes: Vec<Changed>,
                #[serde(default)]
                read: Vec<ReadAt>,
            },
            Changes(Vec<Changed>),
        }
        Ok(match Stored::deserialize(deserializer)? {
            Stored::Full { changes, read } => Previewed { changes, read },
            Stored::Changes(changes) => Previewed { changes, read: Vec::new() },
        })
    }
}

/// A fingerprint of `value` that does not change between processes or machines.
fn fingerprint(value: &serde_json::Value) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

/// What sending an event does besides running its handler.
#[derive(Debug, Clone, Default)]
pub(super) enum Mode {
    /// Commit it.
    #[default]
    Commit,
    /// List what it changes and roll it back.
    Preview,
    /// Commit it only if what it read then holds the same and it changes exactly this.
    Expect(Previewed),
}

impl Runtime {
    /// What the handler of `stream` would change with `event`: it runs as a send would,
    /// in a transaction that is then rolled back. The answer's [`Sent::previewed`] lists
    /// each path it writes, with its value before and after, and what it read.
    ///
    /// ```
    /// use trellis_runner::{Pattern, Read, Runtime};
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
    /// let preview = rt.preview(&add, serde_json::json!(2)).await.unwrap();
    /// let change = &preview.previewed.changes[0];
    /// assert_eq!((change.before.clone(), change.after.clone()), (0.into(), 2.into()));
    /// assert_eq!(rt.read(&rt.charms().result(&id).child("count")).unwrap().to_json(), 0, "rolled back");
    /// rt.send_as_previewed(&add, serde_json::json!(2), None, preview.previewed).await.unwrap();
    /// assert_eq!(rt.read(&rt.charms().result(&id).child("count")).unwrap().to_json(), 2);
    /// # });
    /// ```
    pub async fn preview(&self, stream: &Link, event: serde_json::Value) -> Result<Sent> {
        self.send_with(stream, event, None, Mode::Preview).await
    }

    /// [`Runtime::send`] (with `receipt`, [`Runtime::send_once`]) that commits only if
    /// nothing the preview read has moved and the handler changes exactly what
    /// [`Runtime::preview`] showed (`expected`); otherwise nothing is written and the
    /// error, [`Error::Moved`], carries a fresh preview.
    pub async fn send_as_previewed(
        &self,
        stream: &Link,
        event: serde_json::Value,
        receipt: Option<&Link>,
        expected: Previewed,
    ) -> Result<Sent> {
        self.send_with(stream, event, receipt.cloned(), Mode::Expect(expected)).await
    }

    /// Each path `tx` wrote, its committed value beside the transaction's.
    pub(super) fn changed_by(&self, tx: &Tx<'_>) -> Result<Vec<Changed>> {
        let mut written = Vec::new();
        tx.written(|_, doc, paths| written.extend(paths.map(|path| Link::new(doc.clone(), path.clone()))));
        written
            .into_iter()
            .map(|link| {
                Ok(Changed {
                    before: self.read(&link)?.to_json(),
                    after: tx.read(&link)?.to_json(),
                    doc: link.doc.to_string(),
                    path: link.path.segments().iter().map(|s| s.to_string()).collect(),
                })
            })
            .collect()
    }

    /// Each location `tx` read, with a fingerprint of its committed value.
    fn read_by(&self, tx: &Tx<'_>) -> Result<Vec<ReadAt>> {
        let mut read = Vec::new();
        for link in tx.reads() {
            let at = ReadAt {
                hash: fingerprint(&self.read(&link)?.to_json()),
                doc: link.doc.to_string(),
                path: link.path.segments().iter().map(|s| s.to_string()).collect(),
            };
            if !read.contains(&at) {
                read.push(at);
            }
        }
        Ok(read)
    }

    /// Whether each location a preview read holds what it held then.
    fn unmoved(&self, read: &[ReadAt]) -> Result<bool> {
        for at in read {
            let link = Link::new(at.doc.as_str(), crate::value::Path::new(at.path.iter().map(String::as_str)));
            if fingerprint(&self.read(&link)?.to_json()) != at.hash {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// What a handler's finished transaction does under `mode`: `None` to commit it, else
    /// the answer of a preview (the transaction dropped unwritten).
    pub(super) fn previewed(&self, tx: &Tx<'_>, mode: &Mode, stream: &Link) -> Result<Option<Previewed>> {
        let now = || Ok::<_, Error>(Previewed { changes: self.changed_by(tx)?, read: self.read_by(tx)? });
        match mode {
            Mode::Commit => Ok(None),
            Mode::Preview => now().map(Some),
            Mode::Expect(expected) => {
                if self.unmoved(&expected.read)? && self.changed_by(tx)? == expected.changes {
                    return Ok(None);
                }
                Err(Error::Moved { stream: stream.clone(), now: now()? })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::executor::block_on;
    use serde_json::json;

    use crate::error::Error;
    use crate::pattern::Pattern;
    use crate::read::Read;
    use crate::runtime::Runtime;

    /// `bump` sets `count` to 1 once it has read `armed`, whatever `armed` holds.
    fn bumper() -> (Runtime, crate::link::Link) {
        let rt = Runtime::in_memory();
        rt.register_pattern(Pattern::new("bumper", |b, _: serde_json::Value| {
            let armed = b.state("armed", false)?;
            let count = b.state("count", 0i64)?;
            b.handler("bump", move |tx, _: serde_json::Value| {
                armed.get(tx)?;
                count.set(tx, 1)
            })?;
            b.handler("arm", move |tx, on: bool| armed.set(tx, on))?;
            Ok(())
        }));
        let id = rt.charms().create("bumper", json!({})).expect("a charm");
        let result = rt.charms().result(&id);
        (rt, result)
    }

    #[test]
    fn an_approval_is_refused_when_something_the_preview_read_moved_though_the_change_is_the_same() {
        let (rt, charm) = bumper();
        let preview = block_on(rt.preview(&charm.child("bump"), json!({}))).expect("previewed").previewed;
        assert!(preview.read.iter().any(|r| r.path == ["armed"]), "{:?}", preview.read);
        block_on(rt.send(&charm.child("arm"), json!(true))).expect("armed");
        let moved = block_on(rt.send_as_previewed(&charm.child("bump"), json!({}), None, preview));
        let Err(Error::Moved { now, .. }) = moved else { panic!("not refused: {moved:?}") };
        assert_eq!(rt.read(&charm.child("count")).expect("count").to_json(), 0, "nothing was written");
        block_on(rt.send_as_previewed(&charm.child("bump"), json!({}), None, now)).expect("the fresh preview holds");
        assert_eq!(rt.read(&charm.child("count")).expect("count").to_json(), 1);
    }

    #[test]
    fn a_preview_stored_before_reads_were_kept_still_reads() {
        let stored = json!([{"doc": "d", "path": ["count"], "before": 0, "after": 1}]);
        let previewed: super::Previewed = serde_json::from_value(stored).expect("a list of changes");
        assert_eq!((previewed.changes.len(), previewed.read.len()), (1, 0));
    }
}
