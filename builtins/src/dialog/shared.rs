//! What the dialogs of one `llm_dialog` builtin share: how models are found (one
//! instance per model string), its settings and defined tools, and which request of each
//! dialog runs, so that a cancel can abort it. Every request task holds it; it lives
//! apart from the builtin's `instantiate`, which only hands it on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use trellis_runner::Link;

use super::{interaction, DialogCells, DialogOutput, DialogSettings, Interaction, RequestId, Resolution, Resolve};
use crate::model::{Model, ModelError};
use crate::tool::ToolRegistry;

/// Finds the model for a model string (`offline`, `scripted:PATH`, `openai:M`, ...).
pub type ModelResolver = Arc<dyn Fn(&str) -> Result<Arc<dyn Model>, ModelError> + Send + Sync>;

/// What the dialogs of one builtin share (see the module docs).
pub(crate) struct Shared {
    resolver: ModelResolver,
    models: Mutex<HashMap<String, Arc<dyn Model>>>,
    pub(crate) settings: DialogSettings,
    /// The defined tools `{"tool"}` entries name, and whose last phases `resolve` runs.
    pub(crate) tools: ToolRegistry,
    /// The running request of each dialog (by its location) and its id, to abort on cancel.
    running: Mutex<HashMap<Link, (RequestId, tokio::task::AbortHandle)>>,
    /// The model strings whose provider refused a request for its images or documents:
    /// they are sent placeholders from then on.
    text_only: Mutex<std::collections::HashSet<String>>,
}

impl Shared {
    /// Shared state with nothing running and no model made yet.
    pub(super) fn new(resolver: ModelResolver, settings: DialogSettings, tools: ToolRegistry) -> Shared {
        Shared {
            resolver,
            models: Mutex::new(HashMap::new()),
            settings,
            tools,
            running: Mutex::new(HashMap::new()),
            text_only: Mutex::default(),
        }
    }

    /// Fresh shared state that finds models as this one does, with other settings or tools.
    pub(super) fn rebuilt(&self, settings: DialogSettings, tools: ToolRegistry) -> Shared {
        Shared::new(self.resolver.clone(), settings, tools)
    }

    /// The model for a model string; one instance per string, so a scripted model keeps
    /// its place in the script across requests.
    pub(crate) fn model(&self, spec: &str) -> Result<Arc<dyn Model>, ModelError> {
        let mut models = self.models.lock();
        if let Some(model) = models.get(spec) {
            return Ok(model.clone());
        }
        let model = (self.resolver)(spec)?;
        models.insert(spec.to_string(), model.clone());
        Ok(model)
    }

    /// Whether the model of this string is sent placeholders for images and documents.
    pub(crate) fn is_text_only(&self, spec: &str) -> bool {
        self.text_only.lock().contains(spec)
    }

    /// Sends the model of this string placeholders for images and documents from now on.
    pub(crate) fn make_text_only(&self, spec: &str) {
        self.text_only.lock().insert(spec.to_string());
    }

    /// Records the running request of a dialog.
    pub(crate) fn remember(&self, dialog: Link, id: RequestId, handle: tokio::task::AbortHandle) {
        self.running.lock().insert(dialog, (id, handle));
    }

    /// Forgets request `id` of a dialog, unless a newer one is recorded.
    pub(crate) fn forget(&self, dialog: &Link, id: RequestId) {
        let mut running = self.running.lock();
        if running.get(dialog).is_some_and(|(current, _)| *current == id) {
            running.remove(dialog);
        }
    }

    /// With a wait timeout, answers each of `asked` that still waits when its time (from
    /// when it was asked, so a restart does not give it more) runs out.
    pub(crate) fn time_out_waiting(&self, rt: &trellis_runner::Runtime, cells: &DialogCells, asked: &[Interaction]) {
        let Some(limit) = self.settings.wait_timeout else { return };
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let now = interaction::now_ms();
        for waiting in asked.iter().filter(|i| i.blocks()) {
            let waited = Duration::from_millis(now.saturating_sub(waiting.asked_at));
            let reason = Some(format!("nothing came within {} s", limit.as_secs_f64()));
            let answer =
                Resolve::new(waiting.call_id.clone(), Resolution::TimedOut { reason }).asked_at(waiting.asked_at);
            let (weak, resolve) = (rt.downgrade(), cells.base.child(DialogOutput::Resolve.key()));
            // Not tracked: a dialog waiting for a person is idle, and `settled` must not
            // wait for the timer.
            tokio::spawn(async move {
                tokio::time::sleep(limit.saturating_sub(waited)).await;
                let (Some(rt), Ok(event)) = (weak.upgrade(), serde_json::to_value(&answer)) else { return };
                // Refused when the call was answered meanwhile: nothing to do then.
                if let Err(error) = rt.send(&resolve, event).await {
                    tracing::debug!(call = %answer.call_id, %error, "wait timeout found the call answered");
                }
            });
        }
    }

    /// Aborts whatever request of the dialog runs.
    pub(super) fn abort(&self, dialog: &Link) {
        if let Some((_, handle)) = self.running.lock().remove(dialog) {
            handle.abort();
        }
    }
}
