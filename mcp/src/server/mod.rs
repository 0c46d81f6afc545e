//! Trellis as an MCP server: [`TrellisMcp`] (the handler) and its transports ([`serve_stdio`], [`serve_http`]).

mod bearer;
mod budget;
mod elicit;
mod serve;
mod sessions;
mod stdio;
mod subscriptions;
mod tasks;
mod unfit;
mod watch;

pub use bearer::{TokenCheck, METADATA_PATH};
pub use serve::{http_service, serve_http, serve_stdio, HttpOptions, ServeError};
pub use sessions::{IdleSessions, SESSION_IDLE};
pub use subscriptions::{MAX_SUBSCRIPTIONS, SESSION_SHARE};
pub use tasks::{MAX_TASKS, TASKS_DOC, TASK_AFTER};

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock, CustomRequest,
    CustomResult, GetTaskParams, GetTaskResult, Implementation, InputRequiredResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter, Tool,
    ToolAnnotations, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};
use trellis_builtins::catalog::{Catalog, CatalogCache, ToolTarget};
use trellis_builtins::dialog::is_conversation;
use trellis_builtins::message::{Part, ToolOutput};
use trellis_runner::{Runtime, Writer};

/// How long what is set aside for a `subscriptions/listen` stream when its filter is
/// accepted (its part of the budget, its receivers) waits for the stream to start. The
/// stream starts right after its acknowledgement is sent, but a client that cancels at
/// once can end the request in between (seen over Streamable HTTP); what it was promised
/// is let go once this has passed.
const STREAM_START: Duration = Duration::from_secs(2);

/// How long one tool call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The MCP server of one space, as one client's session sees it.
#[derive(Clone)]
pub struct TrellisMcp {
    rt: Runtime,
    /// The last catalog, rebuilt only when what it was built from changed.
    tools: Arc<CatalogCache>,
    /// What the server's clients watch, one observer per thing (see [`watch`]).
    watches: watch::Watches,
    /// The subscriptions that may be open at once ([`MAX_SUBSCRIPTIONS`]).
    budget: Arc<budget::Budget>,
    /// This session's `resources/subscribe` subscriptions and list changes (the
    /// revisions before 2026-07-28), stopped when the session ends.
    legacy: Arc<subscriptions::Legacy>,
    /// How much of the budget this client may hold: all of it when it is alone (stdio),
    /// [`SESSION_SHARE`] when it shares it ([`TrellisMcp::for_client`]).
    share: usize,
}

impl TrellisMcp {
    /// The server of the space `rt` runs.
    pub fn new(rt: Runtime) -> Self {
        // The tasks a stopped server was running cannot finish.
        tasks::recover(&rt);
        TrellisMcp {
            rt,
            tools: Arc::default(),
            watches: watch::Watches::default(),
            budget: budget::Budget::new(MAX_SUBSCRIPTIONS),
            legacy: Arc::default(),
            share: MAX_SUBSCRIPTIONS,
        }
    }

    /// The server for another client of the same space: the same catalog, watches and
    /// subscription budget, its own session, and its own [`SESSION_SHARE`] of the budget.
    pub fn for_client(&self) -> Self {
        TrellisMcp { legacy: Arc::default(), share: SESSION_SHARE, ..self.clone() }
    }

    /// The charm a resource URI names, if it names one.
    fn charm_of(&self, uri: &str) -> Option<String> {
        let id = uri.strip_prefix(CHARM_URI)?;
        self.rt.charms().record(id).map(|_| id.to_string())
    }

    /// The tools: the handlers of every charm that is not a conversation of its own (a
    /// chatbot's streams are for people, not for another assistant). Reused from the last
    /// call while the charms' tools did not change, as a dialog reuses its catalog.
    pub fn catalog(&self) -> Arc<Catalog> {
        let mut entries = Map::new();
        for charm in self.rt.charms().list() {
            let result = self.rt.charms().result(&charm.id.as_str().into());
            if is_conversation(&self.rt, &result) {
                continue;
            }
            entries.insert(charm.id.clone(), json!({ "charm": result.to_json() }));
        }
        self.tools.get(&self.rt, &Value::Object(entries))
    }
}

impl ServerHandler for TrellisMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tasks()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("trellis", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Each tool is a handler of a live charm in the user's Trellis space (`Charm.handler`); \
                 calling it changes the charm and returns what the handler answered, what changed, and the charm's data.",
        )
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(unfit::refusal(&request))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .catalog()
            .tools()
            .iter()
            .map(|tool| {
                let schema = match &*tool.input_schema {
                    Value::Object(map) => map.clone(),
                    _ => Map::new(),
                };
                let mut listed = Tool::new(tool.wire.clone(), tool.description.clone(), schema);
                if let Some(Value::Object(answer)) = tool.answer_schema() {
                    listed.output_schema = Some(Arc::new(answer));
                }
                listed.title = Some(tool.display.clone());
                listed.annotations = Some(annotations(tool));
                listed
            })
            .chain([create_charm_tool(&self.rt)])
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == CREATE_CHARM {
            return Ok(create_charm(&self.rt, &request.arguments.unwrap_or_default()).into());
        }
        let catalog = self.catalog();
        if catalog.get(&request.name).is_none() {
            let name = trellis_builtins::text::echo(&request.name);
            let message = format!("unknown tool `{name}`; tools/list shows the tools");
            return Err(ErrorData::invalid_params(message, None));
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        // Recorded as the writer of what the call changes (`charm get --provenance`).
        let client = context.client_info().map(|info| trellis_builtins::text::echo(&info.name));
        let client = client.unwrap_or_else(|| "(unnamed)".to_string());
        let rt = self.rt.acting_as(writer(&client));
        // A host that takes tasks gets one for a call that waits or runs long.
        let tasks = context.client_capabilities().is_some_and(|capabilities| capabilities.supports_tasks());
        // A call that needs approval asks the host's person, when the host can ask anyone
        // (never for fields only a person sets: those are refused over MCP).
        let asks = catalog.get(&request.name).and_then(|t| Some((t, t.approval_for(&arguments)?)));
        let run = match asks.filter(|(tool, _)| tool.person_only.is_empty()) {
            Some((tool, reason)) if tasks => {
                let question = elicit::question(&tool.display, &arguments, &reason);
                let (_, created) = tasks::create(&self.rt, (&request.name, &arguments, &client), Some(question))?;
                return Ok(created.into());
            }
            // A host of 2026-07-28 on is asked in the call's answer, and sends it again.
            Some((tool, reason)) if asks_in_rounds(&context) => match &request.input_responses {
                Some(answers) if elicit::approved(answers)? => Some(trellis_builtins::invoke::Approved::by_the_user()),
                Some(_) => {
                    let why = format!("the user did not approve `{}`; nothing was run", tool.display);
                    return Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into());
                }
                None => {
                    let question = elicit::question(&tool.display, &arguments, &reason);
                    let asked = InputRequiredResult::from_input_requests(elicit::approval(&question)?);
                    return Ok(asked.into());
                }
            },
            Some((tool, reason)) => match elicit::approve(&context.peer, &tool.display, &arguments, &reason).await {
                elicit::Asked::Approved => Some(trellis_builtins::invoke::Approved::by_the_user()),
                elicit::Asked::Refused(why) => return Ok(CallToolResult::error(vec![ContentBlock::text(why)]).into()),
                elicit::Asked::Cannot => None,
            },
            None => None,
        };
        // The call goes on in the trace of the host's call (`_meta.traceparent`, SEP-414).
        let span = called(&request.name, &context);
        let call = tracing::Instrument::instrument(
            invoke(catalog, rt, request.name.to_string(), arguments.clone(), run),
            span,
        );
        if !tasks {
            return Ok(call.await.into());
        }
        // Past `TASK_AFTER`, the call goes on as a task the host polls.
        let mut call = tokio::spawn(call);
        match tokio::time::timeout(TASK_AFTER, &mut call).await {
            Ok(joined) => Ok(joined.unwrap_or_else(|_| stopped()).into()),
            Err(_) => {
                let (id, created) = tasks::create(&self.rt, (&request.name, &arguments, &client), None)?;
                let space = self.rt.clone();
                tokio::spawn(async move { tasks::finish(&space, &id, &call.await.unwrap_or_else(|_| stopped())) });
                Ok(created.into())
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        tasks::get(&self.rt, &request.task_id)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let approve = elicit::approved(&request.input_responses)?;
        let stored = tasks::answer(&self.rt, &request.task_id, approve)?;
        if approve {
            let rt = self.rt.acting_as(writer(&stored.client));
            let approval = Some(trellis_builtins::invoke::Approved::by_the_user());
            let call = invoke(self.catalog(), rt, stored.tool, stored.arguments, approval);
            let (space, id) = (self.rt.clone(), request.task_id);
            tokio::spawn(async move { tasks::finish(&space, &id, &call.await) });
        }
        Ok(())
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tasks::cancel(&self.rt, &request.task_id)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Charms coming, going or renamed change the tools and the resources.
        if let Err(error) = self.legacy.lists(self, context.peer) {
            tracing::warn!(%error, "the client will not hear of new charms");
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = self
            .rt
            .charms()
            .list()
            .into_iter()
            .map(|charm| {
                Resource::new(format!("{CHARM_URI}{}", charm.id), charm.name.clone())
                    .with_title(format!("{} ({})", charm.name, charm.pattern))
                    .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let unknown =
            || ErrorData::resource_not_found(format!("no charm at `{}`; resources/list shows them", request.uri), None);
        let id = self.charm_of(&request.uri).ok_or_else(unknown)?;
        let data = self.rt.charms().get(&id).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let text = serde_json::to_string_pretty(&without_streams(data))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let contents = ResourceContents::TextResourceContents {
            uri: request.uri.clone(),
            mime_type: Some("application/json".into()),
            text,
            meta: None,
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(subscriptions::accept(self, requested))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        subscriptions::listen(self, context).await
    }

    #[allow(deprecated)] // the subscription of the revisions today's hosts speak (2025-11-25)
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.legacy.subscribe(self, request.uri, context.peer)
    }

    #[allow(deprecated)] // see `subscribe`
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.legacy.unsubscribe(&request.uri);
        Ok(())
    }
}

/// What a host may assume of `tool`: a handler whose stream needs approval is
/// destructive; reading a charm changes nothing; a handler's change stays in the space
/// (no open world).
fn annotations(tool: &trellis_builtins::catalog::Tool) -> ToolAnnotations {
    let read_only = matches!(tool.target, ToolTarget::Read { .. });
    ToolAnnotations::new().read_only(read_only).destructive(tool.approval.is_some()).open_world(false)
}

/// The tool that creates a charm. Its name has a `-` that no charm tool's wire name can
/// have in that place, so it never clashes with one.
pub const CREATE_CHARM: &str = "create-charm";

/// The [`CREATE_CHARM`] tool, offering the patterns `rt` knows.
fn create_charm_tool(rt: &Runtime) -> Tool {
    let patterns: Vec<String> = rt.patterns().all().iter().map(|p| p.id().to_string()).collect();
    let schema = json!({
        "type": "object",
        "properties": {
            "pattern": { "type": "string", "enum": patterns, "description": "The pattern of the new charm." },
            "name": { "type": "string", "description": "Its name (what `Charm.handler` tools start with)." },
            "argument": { "type": "object", "description": "The pattern's argument, if it takes one." }
        },
        "required": ["pattern"]
    });
    let schema = schema.as_object().cloned().unwrap_or_default();
    let mut tool =
        Tool::new(CREATE_CHARM, "Create a charm of one of the space's patterns; its handlers become tools.", schema);
    tool.title = Some("Create a charm".into());
    tool
}

/// Runs [`CREATE_CHARM`] with the client's `arguments`.
fn create_charm(rt: &Runtime, arguments: &Map<String, Value>) -> CallToolResult {
    let failed = |message: String| CallToolResult::error(vec![ContentBlock::text(message)]);
    let Some(pattern) = arguments.get("pattern").and_then(Value::as_str) else {
        return failed("`pattern` is required: one of the patterns tools/list shows in this tool's schema".into());
    };
    let name = arguments.get("name").and_then(Value::as_str);
    let argument = arguments.get("argument").cloned().unwrap_or(Value::Null);
    let created = rt.charms().create_named(pattern, argument, name).and_then(|id| Ok((rt.charms().get(&id)?, id)));
    match created {
        Ok((data, id)) => CallToolResult::structured(
            json!({ "id": &*id, "uri": format!("{CHARM_URI}{id}"), "data": without_streams(data) }),
        ),
        Err(error) => failed(error.to_string()),
    }
}

/// Where charm resources live: `trellis://charm/ID`.
pub const CHARM_URI: &str = "trellis://charm/";

/// A charm's data without its stream markers (those are the tools).
fn without_streams(mut data: Value) -> Value {
    if let Value::Object(fields) = &mut data {
        fields.retain(|_, value| trellis_runner::link::stream_schema(value).is_none());
    }
    data
}

/// Text and files as MCP content: images and audio with their bytes, other files named.
fn content_blocks(parts: Vec<Part>) -> Vec<ContentBlock> {
    parts
        .into_iter()
        .filter_map(|part| match part {
            Part::Text { text } => Some(ContentBlock::text(text)),
            Part::File(file) => Some(match file.data.clone() {
                Some(data) if file.is_image() => ContentBlock::image(data, file.media_type),
                Some(data) if file.media_type.starts_with("audio/") => ContentBlock::audio(data, file.media_type),
                _ => ContentBlock::text(format!("[{}]", file.describe())),
            }),
            _ => None,
        })
        .collect()
}

/// Whether the host is asked in a call's answer (`input_required`): it speaks 2026-07-28 or
/// later, where the server sends no requests of its own, and takes elicitation forms.
fn asks_in_rounds(context: &RequestContext<RoleServer>) -> bool {
    let latest = context.protocol_version().is_some_and(|version| !version.has_initialize());
    let forms = context
        .client_capabilities()
        .and_then(|capabilities| capabilities.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    latest && forms
}

/// The span of a host's call of `tool`, continuing the trace its `_meta` names.
fn called(tool: &str, context: &RequestContext<RoleServer>) -> tracing::Span {
    let span = tracing::info_span!(
        target: trellis_builtins::traced::TARGET,
        "tools/call",
        otel.name = %format_args!("tools/call {tool}"),
        otel.kind = "server",
        mcp.method.name = "tools/call",
        gen_ai.tool.name = tool,
    );
    let meta = &context.meta;
    trellis_builtins::traced::adopt(&span, &|field| match field {
        "traceparent" => meta.get_traceparent().map(str::to_owned),
        "tracestate" => meta.get_tracestate().map(str::to_owned),
        _ => None,
    });
    span
}

/// The writer of what an MCP client's calls change.
fn writer(client: &str) -> Writer {
    Writer::new("mcp", format!("the MCP client {client}"))
}

/// Runs a call of the tool `name` with `arguments` as `rt`'s writer (approved, when
/// `approval`); its result as the host reads it.
async fn invoke(
    catalog: Arc<Catalog>,
    rt: Runtime,
    name: String,
    arguments: Value,
    approval: Option<trellis_builtins::invoke::Approved>,
) -> CallToolResult {
    let invocation = match approval {
        Some(approval) => catalog.invoke_approved(&rt, &name, arguments, CALL_TIMEOUT, approval).await,
        None => catalog.invoke(&rt, &name, arguments, CALL_TIMEOUT).await,
    };
    match invocation.output {
        ToolOutput::Json(value) => CallToolResult::structured(value),
        ToolOutput::Text(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        ToolOutput::ErrorText(text) => CallToolResult::error(vec![ContentBlock::text(text)]),
        ToolOutput::Content(parts) => CallToolResult::success(content_blocks(parts)),
    }
}

/// The result of a call whose task stopped unexpectedly (it panicked).
fn stopped() -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text("the call stopped unexpectedly; it may have applied")])
}
