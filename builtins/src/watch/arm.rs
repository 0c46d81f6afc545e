//! Arming the watches in this process: a computation per watch, writing what its
//! condition gives (a derived cell in [`STATE_DOC`]), and an observer of that cell that
//! records a turn to true (`store::found`) and tells the conversation, if it runs here.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use trellis_runner::scheduler::ComputationId;
use trellis_runner::{DocId, Link, Observation, Path, Runtime, Value};

use super::condition::Condition;
use super::store::{self, State, Watch};
use super::WATCHES_DOC;

/// What a conversation running here does when one of its watches fires.
type Listener = Arc<dyn Fn(&Runtime) + Send + Sync>;

/// This process's watches and listeners.
#[derive(Default)]
struct Armed {
    watches: Mutex<HashMap<String, (ComputationId, Observation)>>,
    /// By the conversation's dialog.
    listeners: Mutex<HashMap<Link, Listener>>,
}

/// Arms every watch of the space in this process, and records what each finds now (a
/// watch whose condition turned true while no process evaluated it fires now). Call it
/// once the space is open and its patterns registered.
pub fn arm(rt: &Runtime) {
    // Watches end with their conversation.
    let charms = rt.charms();
    if let Err(error) = store::remove_where(rt, |w| charms.record(&w.conversation_doc).is_none()) {
        tracing::warn!(%error, "could not remove the watches of conversations that are gone");
    }
    let all = store::watches(rt);
    for watch in &all {
        arm_one(rt, watch);
    }
    rt.settle();
    for watch in &all {
        check(rt, &watch.id);
    }
}

/// Calls `listener` whenever a watch of the conversation of `dialog` fires in this
/// process, until [`off`]. A conversation registers while it runs here.
pub fn on_fired(rt: &Runtime, dialog: Link, listener: impl Fn(&Runtime) + Send + Sync + 'static) {
    rt.extension::<Armed>().listeners.lock().insert(dialog, Arc::new(listener));
}

/// Stops telling the conversation of `dialog`.
pub fn off(rt: &Runtime, dialog: &Link) {
    rt.extension::<Armed>().listeners.lock().remove(dialog);
}

/// Arms one watch, unless it is armed here already; its computation first runs at the
/// next settle.
pub(super) fn arm_one(rt: &Runtime, watch: &Watch) {
    let armed = rt.extension::<Armed>();
    let mut watches = armed.watches.lock();
    if watches.contains_key(&watch.id) {
        return;
    }
    // Checked when it was made: one that fails now was written by hand.
    let Ok(condition) = Condition::parse(&watch.condition) else { return };
    let charm = rt.charms().result(&DocId::from(watch.charm.as_str()));
    let run: trellis_runner::scheduler::ComputeFn = Arc::new(move |tx| {
        let state = match condition.holds(&store::fields(tx, &charm)) {
            Ok((holds, values)) => State { holds, values, error: None },
            Err(e) => State { holds: false, values: Default::default(), error: Some(e.to_string()) },
        };
        Ok(Value::from_serialize(&state)?)
    });
    let output = store::state_of(&watch.id);
    let computation = rt.add_computation(&format!("watch {}", watch.id), output.clone(), None, run);
    let id = watch.id.clone();
    let observation = rt.observe(&output, move |rt| {
        soon(rt, id.clone());
        true
    });
    watches.insert(watch.id.clone(), (computation, observation));
}

/// Disarms watch `id` in this process.
pub(super) fn disarm(rt: &Runtime, id: &str) {
    let armed = rt.extension::<Armed>().watches.lock().remove(id);
    if let Some((computation, _observation)) = armed {
        rt.remove_computation(computation);
    }
}

/// [`check`]s watch `id` off the committing thread (an observer runs inside a commit):
/// on a blocking task the runtime waits for when a Tokio runtime runs, else on a thread.
fn soon(rt: &Runtime, id: String) {
    let rt = rt.clone();
    match tokio::runtime::Handle::try_current() {
        Ok(_) => {
            let doc = DocId::from(WATCHES_DOC);
            rt.clone().spawn_tracked(doc, async move {
                if let Err(e) = tokio::task::spawn_blocking(move || check(&rt, &id)).await {
                    tracing::warn!(error = %e, "a watch's check stopped");
                }
            });
        }
        Err(_) => {
            std::thread::spawn(move || check(&rt, &id));
        }
    }
}

/// Records what watch `id` finds now, and tells its conversation if it fired and runs here.
fn check(rt: &Runtime, id: &str) {
    match store::found(rt, id) {
        Ok(Some(fired)) => {
            let dialog = Link::new(
                fired.conversation_doc.as_str(),
                Path::new(fired.conversation_path.iter().map(String::as_str)),
            );
            let listener = rt.extension::<Armed>().listeners.lock().get(&dialog).cloned();
            if let Some(listener) = listener {
                listener(rt);
            }
        }
        Ok(None) => {}
        Err(error) => tracing::warn!(watch = id, %error, "could not record what a watch found"),
    }
}
