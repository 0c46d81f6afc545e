//! A small MCP server (rmcp, stdio) for the client's tests: the behaviours third-party
//! servers do not show on demand.
//!
//! Tools: `echo` (read-only), `grow` (adds a tool `extra_N`, then sends
//! `notifications/tools/list_changed`), `crash` (the process exits in the middle of the
//! call), `hang` (never answers). `--page-size N` lists N tools per page; `--stuck-cursor`
//! answers every page with the same next cursor, as a broken server would; `--heavy N`
//! adds N tools `heavy_I` of about 64 KiB each (an 8 KiB description, a 56 KiB input
//! schema), as a server listing a great many large tools would. List changes go
//! only to the client's `subscriptions/listen` subscriptions (revision 2026-07-28), or,
//! with `--plain-notifications`, only as plain notifications. It writes a line to its standard error when it starts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rmcp::model::SubscriptionFilter;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};

#[derive(Clone)]
struct TestServer {
    extra: Arc<AtomicUsize>,
    page_size: usize,
    stuck_cursor: bool,
    plain_notifications: bool,
    heavy: usize,
    /// The open `subscriptions/listen` subscriptions.
    subscriptions: Arc<std::sync::Mutex<Vec<SubscriptionSink>>>,
}

fn tool(name: &str, description: &str, read_only: bool) -> Tool {
    let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
    let schema: Map<String, Value> = schema.as_object().cloned().unwrap_or_default();
    let mut tool = Tool::new(name.to_string(), description.to_string(), schema);
    tool.annotations = Some(ToolAnnotations::new().read_only(read_only));
    tool
}

/// A tool of about 64 KiB: an 8 KiB description and a 56 KiB input schema.
fn heavy_tool(n: usize) -> Tool {
    let property = json!({"type": "string", "description": "x".repeat(56 << 10)});
    let schema = json!({"type": "object", "properties": {"text": property}});
    let schema: Map<String, Value> = schema.as_object().cloned().unwrap_or_default();
    Tool::new(format!("heavy_{n}"), "y".repeat(8 << 10), schema)
}

impl TestServer {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool("echo", "Says the text back.", true),
            tool("grow", "Adds a tool.", false),
            tool("crash", "Exits in the middle of the call.", false),
            tool("hang", "Never answers.", true),
        ];
        tools.extend((0..self.extra.load(Ordering::SeqCst)).map(|n| tool(&format!("extra_{n}"), "Added.", true)));
        tools.extend((0..self.heavy).map(heavy_tool));
        tools
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools();
        let start: usize = request.and_then(|r| r.cursor).and_then(|c| c.parse().ok()).unwrap_or(0);
        let end = (start + self.page_size).min(tools.len());
        let page = tools.get(start..end).map(<[Tool]>::to_vec).unwrap_or_default();
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = match (self.stuck_cursor, end < tools.len()) {
            (true, _) => Some("1".into()),
            (false, true) => Some(end.to_string()),
            (false, false) => None,
        };
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = request.arguments.as_ref().and_then(|a| a.get("text")).and_then(Value::as_str).unwrap_or("");
        match &*request.name {
            "echo" => Ok(CallToolResult::success(vec![ContentBlock::text(format!("echo: {text}"))]).into()),
            "grow" => {
                self.extra.fetch_add(1, Ordering::SeqCst);
                let sinks = self.subscriptions.lock().map(|s| s.clone()).unwrap_or_default();
                let failed = |e: &dyn std::fmt::Display| ErrorData::internal_error(e.to_string(), None);
                if self.plain_notifications {
                    context.peer.notify_tool_list_changed().await.map_err(|e| failed(&e))?;
                } else {
                    for sink in sinks {
                        sink.notify_tool_list_changed().await.map_err(|e| failed(&e))?;
                    }
                }
                Ok(CallToolResult::success(vec![ContentBlock::text("grown")]).into())
            }
            "crash" => std::process::exit(3),
            "hang" => std::future::pending().await,
            other => Err(ErrorData::invalid_params(format!("no tool `{other}`"), None)),
        }
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        if let Ok(mut subscriptions) = self.subscriptions.lock() {
            subscriptions.push(context.sink().clone());
        }
        context.cancelled().await;
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let page_size = match args.iter().position(|a| a == "--page-size") {
        Some(i) => args.get(i + 1).ok_or("--page-size needs a number")?.parse()?,
        None => usize::MAX / 2,
    };
    let heavy = match args.iter().position(|a| a == "--heavy") {
        Some(i) => args.get(i + 1).ok_or("--heavy needs a number")?.parse()?,
        None => 0,
    };
    let server = TestServer {
        extra: Arc::default(),
        page_size,
        stuck_cursor: args.iter().any(|a| a == "--stuck-cursor"),
        plain_notifications: args.iter().any(|a| a == "--plain-notifications"),
        heavy,
        subscriptions: Arc::default(),
    };
    eprintln!("test server ready (page size {page_size})");
    server.serve(rmcp::transport::stdio()).await?.waiting().await?;
    Ok(())
}
