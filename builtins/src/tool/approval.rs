//! [`Approval`]: when a person must approve a call before it runs.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::schema::InputShape;

/// When a call of a tool waits for a person's approval. The dialog enforces it on the
/// server: the call does not run until a person approved exactly that call.
pub enum Approval<P> {
    /// Calls run at once.
    Never,
    /// Every call waits; the reason is shown to the person (and carried as data, as a
    /// stream's approval marker is).
    Always(String),
    /// A call waits when `when` holds for its arguments; `reason` is shown.
    When {
        /// Shown to the person.
        reason: String,
        /// Whether these arguments need approval.
        when: Arc<dyn Fn(&P) -> bool + Send + Sync>,
    },
}

impl<P> Approval<P> {
    /// Every call waits for approval, for `reason`.
    pub fn always(reason: impl Into<String>) -> Self {
        Approval::Always(reason.into())
    }

    /// A call waits for approval, for `reason`, when `when` holds for its arguments.
    pub fn when(reason: impl Into<String>, when: impl Fn(&P) -> bool + Send + Sync + 'static) -> Self {
        Approval::When { reason: reason.into(), when: Arc::new(when) }
    }

    /// The policy as data when it is "always" (what a stream marker carries).
    pub(super) fn marker(&self) -> Option<&str> {
        match self {
            Approval::Always(reason) => Some(reason),
            _ => None,
        }
    }

    /// Why some calls may need approval, for any policy but "never".
    pub(super) fn reason(&self) -> Option<&str> {
        match self {
            Approval::Never => None,
            Approval::Always(reason) | Approval::When { reason, .. } => Some(reason),
        }
    }
}

impl<P: DeserializeOwned + 'static> Approval<P> {
    /// The policy over JSON arguments. Arguments that do not decode need approval: a
    /// predicate that cannot be asked never lets a call through.
    pub(super) fn erase(self, shape: InputShape) -> Arc<super::ApprovalFn> {
        match self {
            Approval::Never => Arc::new(|_: &Value| None),
            Approval::Always(reason) => Arc::new(move |_: &Value| Some(reason.clone())),
            Approval::When { reason, when } => Arc::new(move |arguments: &Value| {
                let event = shape.event_from_arguments(arguments.clone());
                match serde_json::from_value::<P>(event) {
                    Ok(params) if !when(&params) => None,
                    _ => Some(reason.clone()),
                }
            }),
        }
    }
}
