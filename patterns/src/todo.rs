//! `todo`: a list of tasks you can add, complete, rename and remove.

use trellis_runner::prelude::*;

/// One task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Task {
    /// What to do.
    pub title: String,
    /// Whether it is done.
    #[serde(default)]
    pub done: bool,
}

/// The todo list's argument.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct TodoArgs {
    /// The list's title (default "Todo").
    #[serde(default)]
    pub title: Option<String>,
}

/// Add a task to the end of the list. Returns the task, with its index.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Add {
    /// What to do.
    pub title: String,
}

/// A task just added, and where it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Added {
    /// The task's position, starting at 0 (what `complete`, `rename` and `remove` take).
    pub index: usize,
    /// What to do.
    pub title: String,
    /// Whether it is done (a new task is not).
    pub done: bool,
}

/// Mark the task at `index` (0-based) as done.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Complete {
    /// The task's position, starting at 0.
    pub index: usize,
}

/// Remove the task at `index` (0-based).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Remove {
    /// The task's position, starting at 0.
    pub index: usize,
}

/// Give the task at `index` (0-based) a new title.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Rename {
    /// The task's position, starting at 0.
    pub index: usize,
    /// The new title.
    pub title: String,
}

fn task_at(items: &Cell<Vec<Task>>, tx: &Tx, index: usize) -> Result<Cell<Task>, BoxError> {
    let len = items.get(tx)?.len();
    if index >= len {
        return Err(format!("there is no task {index}; the list has {len} (indexes start at 0)").into());
    }
    Ok(items.item(index))
}

/// The todo pattern: state `items`, derived `remaining`, handlers `add` (returns the
/// task with its index), `complete`, `remove`, `rename`.
pub fn todo() -> Pattern {
    Pattern::new("todo", |b, args: TodoArgs| {
        b.name(args.title.unwrap_or_else(|| "Todo".into()))?;
        let items = b.state::<Vec<Task>>("items", Vec::new())?;
        b.lift("remaining", items, |items: Vec<Task>| items.iter().filter(|t| !t.done).count())?;
        b.handler("add", move |tx, e: Add| -> Result<Added> {
            let index = items.get(tx)?.len();
            items.push(tx, Task { title: e.title.clone(), done: false })?;
            Ok(Added { index, title: e.title, done: false })
        })?;
        b.handler("complete", move |tx, e: Complete| task_at(&items, tx, e.index)?.key::<bool>("done").set(tx, true))?;
        b.handler("rename", move |tx, e: Rename| {
            task_at(&items, tx, e.index)?.key::<String>("title").set(tx, e.title)
        })?;
        b.handler("remove", move |tx, e: Remove| {
            task_at(&items, tx, e.index)?;
            items.update(tx, |mut all| {
                all.remove(e.index);
                all
            })
        })?;
        Ok(())
    })
    .description("A todo list: add, complete, rename and remove tasks")
}
