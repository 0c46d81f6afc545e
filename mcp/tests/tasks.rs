//! `TrellisMcp` answering a host that takes tasks: a call that runs past `TASK_AFTER`
//! answers with a task that goes on working, whose result the host reads with
//! `tasks/get`; a host that does not take tasks waits for the result as before. The host
//! is rmcp's client, over an in-process pipe; the charm's handler sleeps.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams, Implementation,
    TaskPayload, TaskStatus,
};
use rmcp::ServiceExt;
use trellis_mcp::TrellisMcp;
use trellis_runner::prelude::*;

/// A space with one charm, `Slow`, whose `work` takes 1.5 s and counts its runs; its id.
fn space() -> (Runtime, String) {
    let rt = Runtime::in_memory();
    rt.register_pattern(Pattern::new("slow", |b, _: serde_json::Value| {
        b.name("Slow")?;
        let runs = b.state("runs", 0i64)?;
        b.handler("work", move |tx, _: serde_json::Value| {
            std::thread::sleep(Duration::from_millis(1500));
            let n = runs.get(tx)?;
            runs.set(tx, n + 1)
        })?;
        Ok(())
    }));
    let id = rt.charms().create("slow", serde_json::Value::Null).expect("the charm is made");
    (rt, id.to_string())
}

/// A host connected to a server of `rt` over a pipe; `tasks`: whether it takes tasks.
async fn host(rt: &Runtime, tasks: bool) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig> {
    let (client, server) = tokio::io::duplex(1 << 16);
    let serving = TrellisMcp::new(rt.clone());
    tokio::spawn(async move {
        if let Ok(running) = serving.serve(server).await {
            let _ = running.waiting().await;
        }
    });
    let capabilities =
        if tasks { ClientCapabilities::builder().enable_tasks().build() } else { ClientCapabilities::default() };
    let config = ClientConfig::new(capabilities, Implementation::new("host", "1"));
    config.serve(client).await.expect("the host connects")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_past_the_threshold_goes_on_as_a_task_for_a_host_that_takes_them() {
    let (rt, slow) = space();
    let tasks = host(&rt, true).await;
    let request = CallToolRequestParams::new("Slow_work");
    let id = match tasks.call_tool_once(request.clone()).await.expect("answered") {
        CallToolResponse::Task(created) => {
            assert_eq!(created.task.status, TaskStatus::Working, "{created:?}");
            created.task.task_id
        }
        other => panic!("a call past the threshold is a task: {other:?}"),
    };
    let mut result = None;
    for _ in 0..50 {
        let got = tasks.get_task(GetTaskParams::new(id.clone())).await.expect("tasks/get answers");
        if let TaskPayload::Completed { result: done } = got.task.payload {
            result = Some(done);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let result = result.expect("the task completes");
    assert_ne!(result.get("isError"), Some(&serde_json::json!(true)), "{result:?}");
    assert_eq!(rt.charms().get(&slow).expect("the charm")["runs"], 1);

    // A host that does not take tasks gets the result itself, however long it takes.
    let plain = host(&rt, false).await;
    match plain.call_tool_once(request).await.expect("answered") {
        CallToolResponse::Complete(result) => assert_ne!(result.is_error, Some(true), "{result:?}"),
        other => panic!("without tasks, the result: {other:?}"),
    }
    assert_eq!(rt.charms().get(&slow).expect("the charm")["runs"], 2);
}
