//! `notes`: short notes you can add, edit, delete and search.

use trellis_runner::prelude::*;

/// One note. Its `id` is stable and never reused, even after the note is deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Note {
    /// The note's id (1, 2, 3, ...).
    pub id: u64,
    /// A short title.
    pub title: String,
    /// The text of the note.
    #[serde(default)]
    pub body: String,
}

/// The notebook's argument.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct NotesArgs {
    /// The notebook's title (default "Notes").
    #[serde(default)]
    pub title: Option<String>,
}

/// Add a note; it gets a new id, one above the last given. Returns the note, with its id.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Add {
    /// A short title.
    pub title: String,
    /// The text of the note (default empty).
    #[serde(default)]
    pub body: String,
}

/// Change the title and/or the body of the note with this `id`; fields left out stay
/// as they are.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Edit {
    /// The note's id (see `notes`).
    pub id: u64,
    /// The new title, if it changes.
    #[serde(default)]
    pub title: Option<String>,
    /// The new body, if it changes.
    #[serde(default)]
    pub body: Option<String>,
}

/// Delete the note with this `id`. Its id is not given to any later note.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Delete {
    /// The note's id (see `notes`).
    pub id: u64,
}

/// Find the notes whose title or body contains `query` (ignoring case). Returns the
/// matches, which are also kept in `results` (replacing the previous search's).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Search {
    /// The text to look for.
    pub query: String,
}

/// The position of the note with `id`, or an error that lists the ids there are.
fn position(notes: &[Note], id: u64) -> Result<usize, BoxError> {
    if let Some(index) = notes.iter().position(|n| n.id == id) {
        return Ok(index);
    }
    let ids: Vec<String> = notes.iter().map(|n| n.id.to_string()).collect();
    Err(if ids.is_empty() {
        format!("no note with id {id}; there are no notes").into()
    } else {
        format!("no note with id {id}; ids are {}", ids.join(", ")).into()
    })
}

fn matches(note: &Note, query: &str) -> bool {
    note.title.to_lowercase().contains(query) || note.body.to_lowercase().contains(query)
}

/// The notes pattern: state `notes`, `next_id`, `results`; derived `count`; handlers
/// `add` (returns the note), `edit`, `delete`, `search` (returns the matches).
pub fn notes() -> Pattern {
    Pattern::new("notes", |b, args: NotesArgs| {
        b.name(args.title.unwrap_or_else(|| "Notes".into()))?;
        let notes = b.state::<Vec<Note>>("notes", Vec::new())?;
        let next_id = b.state::<u64>("next_id", 1)?;
        let results = b.state::<Vec<Note>>("results", Vec::new())?;
        b.lift("count", notes, |notes: Vec<Note>| notes.len())?;
        b.handler("add", move |tx, e: Add| -> Result<Note> {
            let id = next_id.get(tx)?;
            next_id.set(tx, id + 1)?;
            let note = Note { id, title: e.title, body: e.body };
            notes.push(tx, note.clone())?;
            Ok(note)
        })?;
        b.handler("edit", move |tx, e: Edit| {
            if e.title.is_none() && e.body.is_none() {
                return Err("nothing to change: give a new `title`, `body` or both".into());
            }
            let note = notes.item(position(&notes.get(tx)?, e.id)?);
            if let Some(title) = e.title {
                note.key::<String>("title").set(tx, title)?;
            }
            if let Some(body) = e.body {
                note.key::<String>("body").set(tx, body)?;
            }
            Ok(())
        })?;
        b.handler("delete", move |tx, e: Delete| {
            let mut all = notes.get(tx)?;
            all.remove(position(&all, e.id)?);
            notes.set(tx, all)
        })?;
        b.require_approval("delete", "Deleting a note cannot be undone")?;
        b.handler("search", move |tx, e: Search| -> Result<Vec<Note>> {
            let query = e.query.to_lowercase();
            let found: Vec<Note> = notes.get(tx)?.into_iter().filter(|n| matches(n, &query)).collect();
            results.set(tx, found.clone())?;
            Ok(found)
        })?;
        Ok(())
    })
    .description("Notes with a title and a body: add, edit, delete and search them")
}
