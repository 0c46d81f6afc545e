//! Asking the host's person to approve a call (MCP elicitation). A handler that needs
//! approval cannot run for an MCP host that cannot ask anyone; a host that supports form
//! elicitation is asked instead ("Approve Notes.delete {"id":1}? Deleting a note cannot be
//! undone"), and the call runs only on an explicit accept that says yes: by a request of
//! the server's own ([`approve`]), or, from revision 2026-07-28 on (which forbids those),
//! as the call's input request ([`approval`], answered in the call sent again, or in a
//! task's `tasks/update`). A host without elicitation gets the refusal it got before.

use std::time::Duration;

use rmcp::model::{ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest, InputRequests, InputResponses};
use rmcp::schemars::{self, JsonSchema};
use rmcp::service::{ElicitationError, Peer};
use rmcp::ErrorData;
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

/// The key of the approval among a call's input requests.
const APPROVAL: &str = "approval";

/// The approval `question` as an input request of a task or of a multi-round-trip call:
/// a form of one checkbox.
pub(super) fn approval(question: &str) -> Result<InputRequests, ErrorData> {
    let schema = ElicitationSchema::builder()
        .required_bool(APPROVAL)
        .build()
        .map_err(|e| ErrorData::internal_error(format!("the approval's form: {e}"), None))?;
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question.to_string(),
        requested_schema: schema,
    };
    let request = InputRequest::Elicitation(ElicitRequest::new(params));
    Ok(InputRequests::from_iter([(APPROVAL.to_string(), request)]))
}

/// Whether `responses` approve the call: an accepted form that says yes.
pub(super) fn approved(responses: &InputResponses) -> Result<bool, ErrorData> {
    let answer = responses.get(APPROVAL).ok_or_else(|| {
        ErrorData::invalid_params(format!("the task waits for the input `{APPROVAL}`; send it"), None)
    })?;
    Ok(answer["action"] == "accept" && answer["content"][APPROVAL] == true)
}
