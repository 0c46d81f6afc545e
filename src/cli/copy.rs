//! `trellis space copy FROM TO`: a space's documents, all of them (charms, conversations,
//! plugins, tokens), from one storage to another, SQLite or PostgreSQL either way.
//!
//! The copy works below the runtime, document by document at the versions they have, so
//! nothing runs and nothing is recomputed on the way: what arrives is what was saved. Both
//! spaces are opened for writing (the file's lock, the database's lease), so neither
//! changes while the copy runs. The target must hold no document: a copy never merges
//! into a space. Once everything is durable, every document is read back from the target
//! and compared with the source's; the command fails on the first difference.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use trellis_runner::storage::{Durable, Storage, StoredDoc};

use super::space::{Claim, Place};
use super::Format;

/// Documents submitted to the target in one transaction.
const BATCH: usize = 500;

/// How often a long copy says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// What a copy did.
#[derive(Debug, serde::Serialize)]
struct Copied {
    from: String,
    to: String,
    documents: usize,
    /// The JSON text copied, in bytes.
    bytes: usize,
    /// Whether every document read back from the target equals the source's (always true
    /// when the command succeeds).
    checked: bool,
}

impl super::SpaceCommand {
    /// Runs a `trellis space` command.
    pub(super) fn run(self, format: Format) -> anyhow::Result<()> {
        match self {
            super::SpaceCommand::Copy { from, to } => run(&Place::parse(from)?, &Place::parse(to)?, format),
        }
    }
}

/// `trellis space copy FROM TO`.
fn run(from: &Place, to: &Place, format: Format) -> anyhow::Result<()> {
    if from.to_string() == to.to_string() {
        anyhow::bail!("{from} is both FROM and TO: name two spaces");
    }
    if let Place::File(path) = from {
        if !path.is_file() {
            anyhow::bail!("{from} is not a space file: nothing to copy (check the path)");
        }
    }
    let source =
        from.open_storage(&Claim::default()).with_context(|| format!("cannot open the space to copy, {from}"))?;
    let target =
        to.open_storage(&Claim::default()).with_context(|| format!("cannot open the space to copy into, {to}"))?;
    let ids = source.doc_ids("").with_context(|| format!("cannot list the documents of {from}"))?;
    if ids.is_empty() {
        anyhow::bail!("{from} holds no document: nothing to copy (is that the space you meant?)");
    }
    let already = target.doc_ids("").with_context(|| format!("cannot list the documents of {to}"))?.len();
    if already > 0 {
        anyhow::bail!(
            "{to} already holds {already} document(s), and a copy never merges into a space; \
             copy into a new space (another file, or another ?space=NAME), or remove that one first"
        );
    }
    let mut progress = Progress::new(ids.len());
    let mut bytes = 0;
    let mut tickets: Vec<Durable> = Vec::new();
    for chunk in ids.chunks(BATCH) {
        let mut batch = Vec::with_capacity(chunk.len());
        for id in chunk {
            // Listed a moment ago under the lock: a document gone now is storage failing.
            let doc =
                source.load_doc(id)?.with_context(|| format!("document {id} was listed in {from} but is gone"))?;
            bytes += doc.value.to_json().to_string().len();
            batch.push(doc);
        }
        tickets.push(target.submit(batch));
        progress.advance(chunk.len(), "copied");
    }
    for ticket in tickets {
        ticket.wait().with_context(|| format!("the copy into {to} was not saved"))?;
    }
    progress.restart();
    for id in &ids {
        check_same(source.as_ref(), target.as_ref(), id).with_context(|| format!("the copy in {to} differs"))?;
        progress.advance(1, "checked");
    }
    progress.done();
    let copied = Copied { from: from.to_string(), to: to.to_string(), documents: ids.len(), bytes, checked: true };
    super::output::print(format, &serde_json::to_value(&copied)?, || {
        format!("copied {} document(s) ({} bytes of JSON) from {from} to {to}; read back, the same", ids.len(), bytes)
    });
    Ok(())
}

/// Whether document `id` reads the same (version and value) from both.
fn check_same(source: &dyn Storage, target: &dyn Storage, id: &str) -> anyhow::Result<()> {
    let theirs: Option<StoredDoc> = source.load_doc(id)?;
    let ours = target.load_doc(id)?;
    match (theirs, ours) {
        (Some(a), Some(b)) if a == b => Ok(()),
        (Some(a), Some(b)) => {
            anyhow::bail!(
                "document {id} is at version {} there and {} here, or its value differs",
                a.version,
                b.version
            )
        }
        (_, None) => anyhow::bail!("document {id} is missing"),
        (None, Some(_)) => anyhow::bail!("document {id} vanished from the source during the copy"),
    }
}

/// Says on standard error how far a long copy got, at most once a second.
struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    said: Option<Instant>,
}

impl Progress {
    fn new(total: usize) -> Self {
        Progress { total, done: 0, started: Instant::now(), said: None }
    }

    fn advance(&mut self, by: usize, what: &str) {
        self.done += by;
        let due = self.said.map_or(self.started.elapsed() >= PROGRESS_EVERY, |at| at.elapsed() >= PROGRESS_EVERY);
        if due {
            eprintln!("{what} {} of {} document(s)", self.done, self.total);
            self.said = Some(Instant::now());
        }
    }

    fn restart(&mut self) {
        self.done = 0;
    }

    fn done(&self) {
        if self.said.is_some() {
            eprintln!("done in {:.1} s", self.started.elapsed().as_secs_f64());
        }
    }
}
