//! `trellis mcp serve` asking a host nobody here wrote (rmcp's client) to approve a call,
//! the ways revision 2026-07-28 allows: to a host that takes tasks, a call that needs
//! approval answers at once with a task waiting for the host's person; the task outlives a
//! restart of the server, because it is kept in the space; approving it (`tasks/update`)
//! runs the call, declining it leaves the note. A host that takes no tasks is asked in the
//! call's answer (`input_required`), and its client sends the call again with the answer.

use std::path::Path;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams, Implementation,
    TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use crate::common;
use crate::mcp::HttpServer;

type Host = RunningService<RoleClient, ClientConfig>;

/// A host that takes tasks, connected to `url`.
async fn host(url: &str) -> Host {
    let capabilities = ClientCapabilities::builder().enable_tasks().build();
    let info = ClientConfig::new(capabilities, Implementation::new("tasks-host", "1"));
    // rmcp's reqwest has no crypto of its own (plain http here, but it is built with TLS).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = StreamableHttpClientTransport::from_uri(url.to_string());
    info.serve(transport).await.expect("the host connects")
}

/// Asks `Notes_delete {id}`; the task it answers with.
async fn delete(host: &Host, id: u64) -> String {
    let arguments = json!({ "id": id }).as_object().cloned().unwrap_or_default();
    let request = CallToolRequestParams::new("Notes_delete").with_arguments(arguments);
    match host.call_tool_once(request).await.expect("the call is answered") {
        CallToolResponse::Task(created) => {
            assert_eq!(created.task.status, TaskStatus::InputRequired, "{created:?}");
            created.task.task_id
        }
        other => panic!("a call that needs approval answers with a task, not {other:?}"),
    }
}

/// The task's state, polled until it is no longer working (ten seconds at most).
async fn settled(host: &Host, id: &str) -> TaskPayload {
    for _ in 0..100 {
        let got = host.get_task(GetTaskParams::new(id)).await.expect("tasks/get answers");
        if got.task.payload != TaskPayload::Working {
            return got.task.payload;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} still works after ten seconds");
}

fn answer(approve: bool) -> rmcp::model::InputResponses {
    let action =
        if approve { json!({"action": "accept", "content": {"approval": true}}) } else { json!({"action": "decline"}) };
    rmcp::model::InputResponses::from_iter([("approval".to_string(), action)])
}

fn titles(space: &Path) -> Vec<String> {
    let notes = common::json_of(space, &["charm", "get", "Notes"])["notes"].clone();
    notes.as_array().into_iter().flatten().filter_map(|n| n["title"].as_str().map(str::to_string)).collect()
}

#[test]
fn a_call_that_needs_approval_is_a_task_that_outlives_a_restart_and_runs_once_approved() {
    let s = common::space();
    for title in ["milk", "eggs"] {
        common::ok(&s.path, &["charm", "send", "Notes", "add", &json!({ "title": title }).to_string()]);
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = HttpServer::start_with(&s.path, &[]);
    let (approve, decline) = runtime.block_on(async {
        let host = host(&server.url).await;
        let (first, second) = (delete(&host, 1).await, delete(&host, 2).await);
        let TaskPayload::InputRequired { input_requests } = settled(&host, &first).await else { panic!("waits") };
        let asked = serde_json::to_value(&input_requests["approval"]).unwrap();
        let message = asked["params"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.starts_with("Approve Notes.delete {\"id\":1}? "), "{asked}");
        let _ = host.cancel().await;
        (first, second)
    });
    assert_eq!(titles(&s.path), ["milk", "eggs"], "nothing ran while the tasks wait");

    // The server stops and starts again: the tasks wait on, kept in the space.
    drop(server);
    let server = HttpServer::start_with(&s.path, &[]);
    runtime.block_on(async {
        let host = host(&server.url).await;
        assert!(matches!(settled(&host, &approve).await, TaskPayload::InputRequired { .. }));
        host.update_task(UpdateTaskParams::new(approve.clone(), answer(true))).await.expect("approved");
        let TaskPayload::Completed { result } = settled(&host, &approve).await else { panic!("completed") };
        assert_ne!(result.get("isError"), Some(&json!(true)), "{result:?}");
        host.update_task(UpdateTaskParams::new(decline.clone(), answer(false))).await.expect("declined");
        let TaskPayload::Completed { result } = settled(&host, &decline).await else { panic!("completed") };
        assert_eq!(result.get("isError"), Some(&json!(true)), "{result:?}");
        // A task answered already cannot be answered again.
        let again = host.update_task(UpdateTaskParams::new(approve.clone(), answer(true))).await;
        assert!(again.is_err(), "{again:?}");
        let _ = host.cancel().await;
    });
    drop(server);
    assert_eq!(titles(&s.path), ["eggs"], "the approved delete ran once; the declined one did not");
}

/// A host's person who answers every approval the same way, and notes what was asked.
#[derive(Clone)]
struct Person {
    approves: bool,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(rmcp::model::ElicitationCapability::new().with_form(Default::default()));
        ClientConfig::new(capabilities, Implementation::new("rounds-host", "1"))
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let asked = serde_json::to_value(&request).unwrap_or_default();
        self.asked.lock().unwrap().push(asked["message"].as_str().unwrap_or_default().to_string());
        Ok(match self.approves {
            true => rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({"approval": true})),
            false => rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Decline),
        })
    }
}

/// `Notes_delete {"id": 1}` from a host whose person `approves` (or not), over `url`: the
/// call's result, and what the person was asked.
fn delete_first(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    approves: bool,
) -> (rmcp::model::CallToolResult, Vec<String>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let person = Person { approves, asked: Default::default() };
    let asked = person.asked.clone();
    let result = runtime.block_on(async move {
        // The latest revision first (`server/discover`), as hosts of 2026-07-28 on start.
        let latest = rmcp::service::ClientLifecycleMode::Auto {
            preferred_versions: vec![rmcp::model::ProtocolVersion::LATEST],
            legacy_version: None,
        };
        let transport = StreamableHttpClientTransport::from_uri(url.to_string());
        let host =
            rmcp::service::ClientServiceExt::serve_with_lifecycle(person, transport, latest).await.expect("connects");
        assert_eq!(host.peer_info().map(|i| i.protocol_version.to_string()), Some("2026-07-28".into()));
        let arguments = json!({"id": 1}).as_object().cloned().unwrap_or_default();
        // rmcp's client answers the `input_required` round and sends the call again.
        let result = host.call_tool(CallToolRequestParams::new("Notes_delete").with_arguments(arguments)).await;
        let _ = host.cancel().await;
        result.expect("answered")
    });
    let asked = asked.lock().unwrap().clone();
    (result, asked)
}

#[test]
fn a_host_of_the_latest_revision_is_asked_to_approve_in_the_calls_answer() {
    let s = common::space();
    for title in ["milk", "eggs"] {
        common::ok(&s.path, &["charm", "send", "Notes", "add", &json!({ "title": title }).to_string()]);
    }
    let server = HttpServer::start_with(&s.path, &[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (declined, asked) = delete_first(&runtime, &server.url, false);
    assert_eq!(declined.is_error, Some(true), "{declined:?}");
    assert!(asked.len() == 1 && asked[0].starts_with("Approve Notes.delete {\"id\":1}? "), "{asked:?}");
    assert_eq!(titles(&s.path), ["milk", "eggs"], "declined: nothing ran");
    let (approved, asked) = delete_first(&runtime, &server.url, true);
    assert_ne!(approved.is_error, Some(true), "{approved:?}");
    assert_eq!(asked.len(), 1, "asked once more: {asked:?}");
    assert_eq!(titles(&s.path), ["eggs"]);
}
