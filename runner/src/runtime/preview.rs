//! What a handler would change, before anyone lets it: [`Runtime::preview`] runs it in a
//! transaction that is rolled back and lists each path it would write, before and after;
//! [`Runtime::send_as_previewed`] runs it for real and commits only if it changes exactly
//! that. A person approving a model's call approves the change they were shown, never a
//! different one made on a state that moved meanwhile.

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

/// What sending an event does besides running its handler.
#[derive(Debug, Clone, Default)]
pub(super) enum Mode {
    /// Commit it.
    #[default]
    Commit,
    /// List what it changes and roll it back.
    Preview,
    /// Commit it only if it changes exactly this.
    Expect(Vec<Changed>),
}

impl Runtime {
    /// What the handler of `stream` would change with `event`: it runs as a send would,
    /// in a transaction that is then rolled back. The answer's [`Sent::previewed`] lists
    /// each path it writes, with its value before and after.
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
    /// assert_eq!((preview.previewed[0].before.clone(), preview.previewed[0].after.clone()), (0.into(), 2.into()));
    /// assert_eq!(rt.read(&rt.charms().result(&id).child("count")).unwrap().to_json(), 0, "rolled back");
    /// rt.send_as_previewed(&add, serde_json::json!(2), None, preview.previewed).await.unwrap();
    /// assert_eq!(rt.read(&rt.charms().result(&id).child("count")).unwrap().to_json(), 2);
    /// # });
    /// ```
    pub async fn preview(&self, stream: &Link, event: serde_json::Value) -> Result<Sent> {
        self.send_with(stream, event, None, Mode::Preview).await
    }

    /// [`Runtime::send`] (with `receipt`, [`Runtime::send_once`]) that commits only if the
    /// handler changes exactly `expected`, what [`Runtime::preview`] showed; otherwise
    /// nothing is written and the error, [`Error::Moved`], carries what it would change now.
    pub async fn send_as_previewed(
        &self,
        stream: &Link,
        event: serde_json::Value,
        receipt: Option<&Link>,
        expected: Vec<Changed>,
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

    /// What a handler's finished transaction does under `mode`: `None` to commit it, else
    /// the answer of a preview (the transaction dropped unwritten).
    pub(super) fn previewed(&self, tx: &Tx<'_>, mode: &Mode, stream: &Link) -> Result<Option<Vec<Changed>>> {
        match mode {
            Mode::Commit => Ok(None),
            Mode::Preview => self.changed_by(tx).map(Some),
            Mode::Expect(expected) => {
                let now = self.changed_by(tx)?;
                match now == *expected {
                    true => Ok(None),
                    false => Err(Error::Moved { stream: stream.clone(), now }),
                }
            }
        }
    }
}
