//! A tool call as a multi-round-trip request (SEP-2322, protocol 2026-07-28 on): a server
//! may answer `tools/call` with `input_required`, the questions it has for the client
//! (elicitation, roots); each is answered ([`elicit`] asks the call's person) and the call
//! sent again with the answers and the server's opaque `requestState`, until it gives its
//! result.
//!
//! At most [`MAX_ROUNDS`] rounds; a round that asks nothing and only carries state waits a
//! little longer each time, so a server that keeps answering so is not called in a loop.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, InputRequest, InputRequiredResult, InputResponses,
};
use rmcp::service::Peer;
use rmcp::RoleClient;

use super::handler::{elicit, People};

/// The most rounds one call may take (rmcp's own default).
const MAX_ROUNDS: usize = rmcp::model::DEFAULT_MRTR_MAX_ROUNDS;
/// The first wait after a round that only carried state; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Calls the tool of `request` on `server`, round after round; the result, or why not.
pub(super) async fn call(
    server: &str,
    peer: &Peer<RoleClient>,
    people: &People,
    mut request: CallToolRequestParams,
) -> Result<CallToolResult, rmcp::ServiceError> {
    let mut pause = FIRST_PAUSE;
    for _ in 0..MAX_ROUNDS {
        let asked = match peer.call_tool_once(request.clone()).await? {
            CallToolResponse::Complete(result) => return Ok(result),
            CallToolResponse::InputRequired(asked) => asked,
            _ => return Err(rmcp::ServiceError::UnexpectedResponse),
        };
        let InputRequiredResult { input_requests, request_state, .. } = asked;
        let questions = input_requests.unwrap_or_default();
        if questions.is_empty() {
            if request_state.is_none() {
                return Err(rmcp::ServiceError::UnexpectedResponse);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        } else {
            pause = FIRST_PAUSE;
        }
        let mut answers = InputResponses::new();
        for (key, question) in questions {
            answers.insert(key, answer(server, people, question).await?);
        }
        request.input_responses = (!answers.is_empty()).then_some(answers);
        request.request_state = request_state;
    }
    Err(rmcp::ServiceError::InputRequiredRoundsExceeded { max_rounds: MAX_ROUNDS })
}

/// The client's answer to one of the server's questions.
async fn answer(
    server: &str,
    people: &People,
    question: InputRequest,
) -> Result<serde_json::Value, rmcp::ServiceError> {
    let answered = match question {
        InputRequest::Elicitation(request) => {
            serde_json::to_value(elicit(server, people, request.params).await.map_err(rmcp::ServiceError::McpError)?)
        }
        // Trellis offers the server no roots (an empty list, in the shape roots have).
        InputRequest::ListRoots(_) => Ok(serde_json::json!({ "roots": [] })),
        _ => {
            return Err(rmcp::ServiceError::McpError(rmcp::model::ErrorData::invalid_request(
                "Trellis does not answer this kind of question (it offers no sampling)",
                None,
            )))
        }
    };
    answered.map_err(|e| rmcp::ServiceError::McpError(rmcp::model::ErrorData::internal_error(e.to_string(), None)))
}
