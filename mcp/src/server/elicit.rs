//! Asking the host's person to approve a call (MCP elicitation). A handler that needs
//! approval cannot run for an MCP host that cannot ask anyone; a host that supports form
//! elicitation is asked instead ("Approve Notes.delete {"id":1}? Deleting a note cannot be
//! undone"), and the call runs only on an explicit accept that says yes. A host without it,
//! or a client of a revision that forbids the server's requests, gets the refusal it got
//! before.

use std::time::Duration;

use rmcp::schemars::{self, JsonSchema};
use rmcp::service::{ElicitationError, Peer};
use rmcp::RoleServer;
use serde::Deserialize;

/// How long the person has to answer.
const APPROVAL_WAIT: Duration = Duration::from_secs(300);

/// What the person is asked to fill in.
#[derive(Debug, Deserialize, JsonSchema)]
struct Approval {
    /// Whether the call may run.
    approve: bool,
}

rmcp::elicit_safe!(Approval);

/// How asking went.
pub(super) enum Asked {
    /// The person approved.
    Approved,
    /// The person did not: why, for the call's result.
    Refused(String),
    /// The host cannot be asked.
    Cannot,
}

/// What the person is asked: `Approve Notes.delete {"id":1}? REASON`.
pub(super) fn question(tool: &str, arguments: &serde_json::Value, reason: &str) -> String {
    let shown = trellis_builtins::text::truncate(&arguments.to_string(), 500);
    format!("Approve {tool} {shown}? {reason}")
}

/// Asks the person behind `peer` to approve a call of `tool` with `arguments`, which needs
/// approval for `reason`.
pub(super) async fn approve(peer: &Peer<RoleServer>, tool: &str, arguments: &serde_json::Value, reason: &str) -> Asked {
    let message = question(tool, arguments, reason);
    let nothing = "nothing was run";
    match peer.elicit_with_timeout::<Approval>(message, Some(APPROVAL_WAIT)).await {
        Ok(Some(Approval { approve: true })) => Asked::Approved,
        Ok(_) => Asked::Refused(format!("the user did not approve `{tool}`; {nothing}")),
        Err(ElicitationError::UserDeclined) => Asked::Refused(format!("the user declined `{tool}`; {nothing}")),
        Err(ElicitationError::UserCancelled) => {
            Asked::Refused(format!("the user dismissed the approval of `{tool}`; {nothing}"))
        }
        Err(ElicitationError::CapabilityNotSupported) => Asked::Cannot,
        Err(ElicitationError::Service(error)) if error.to_string().contains("2026-07-28") => Asked::Cannot,
        Err(error) => Asked::Refused(format!("the approval of `{tool}` could not be asked: {error}; {nothing}")),
    }
}
