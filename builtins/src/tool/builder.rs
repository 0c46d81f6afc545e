//! [`ToolBuilder`]: the typestate builder, the only way to define a tool in Rust.
//!
//! The builder's type records the authority and the phases given so far; only the
//! methods that make sense in that state exist, so an invalid tool does not compile.

use std::marker::PhantomData;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::{Approval, Ask, Authority, ClientContext, DefinedTool, Start, ToolError};
use crate::ask::InteractionKind;
use crate::schema::{prepare_input_schema, InputShape};

/// Server authority: the server phase's output is the model's result.
#[derive(Debug, Clone, Copy)]
pub struct Server;

/// Client authority: the client acts first and a server phase validates its output.
#[derive(Debug, Clone, Copy)]
pub struct Client;

/// What a handoff's first phase returns: `state` stays on the server (never shown to
/// front ends) for the last phase; `client` is what the client phase gets.
#[derive(Debug, Clone)]
pub struct Handoff<S, D> {
    /// Kept on the server until the last phase.
    pub state: S,
    /// Handed to the client.
    pub client: D,
}

/// The state of a builder with no authority yet.
#[derive(Debug)]
pub struct NoAuthority;
/// The state of a builder with no phase yet.
#[derive(Debug)]
pub struct NoPhase;
/// A server phase only.
pub struct ServerPhase<F, O>(F, PhantomData<fn() -> O>);
/// A server phase, then a display effect in the client.
pub struct ServerWithEffect<F, O, G>(F, G, PhantomData<fn() -> O>);
/// A client phase, waiting for its server phase (or the default pass-through).
pub struct ClientPhase<G, CO>(G, PhantomData<fn() -> CO>);
/// A client phase, then a server phase.
pub struct ClientThenServer<G, CO, F, O>(G, F, PhantomData<fn() -> (CO, O)>);
/// Before, client, after.
pub struct HandoffPhases<B, S, D, C, CO, A, O>(B, C, A, PhantomData<HandoffTypes<S, D, CO, O>>);

/// The types a handoff's phases pass along: state, client input, client output, result.
type HandoffTypes<S, D, CO, O> = fn() -> (S, D, CO, O);

/// A server-authority builder with a handoff.
pub type HandoffBuilder<P, B, S, D, C, CO, A, O> = ToolBuilder<P, Server, HandoffPhases<B, S, D, C, CO, A, O>>;

/// Defines a tool with parameters `P` (see the [module docs](super)).
///
/// ```
/// use trellis_builtins::tool::{Approval, Client, ClientContext, ToolBuilder};
///
/// /// What to confirm.
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Action { action: String }
///
/// /// What the person said.
/// #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// struct Confirmed { confirmed: bool }
///
/// let tool = ToolBuilder::<Action>::new("confirm_action", "Ask the user to confirm an action")
///     .authority(Client)
///     .client(|a: Action, person: &mut dyn ClientContext| Ok(Confirmed { confirmed: person.confirm(&a.action)? }))
///     .server(|a: Action, c: Confirmed| Ok(if c.confirmed { format!("{} done", a.action) } else { "cancelled".into() }))
///     .approval(Approval::Never)
///     .build();
/// assert_eq!(tool.name(), "confirm_action");
/// ```
pub struct ToolBuilder<P, A = NoAuthority, S = NoPhase> {
    name: String,
    description: String,
    approval: Approval<P>,
    presents: Option<Arc<PresentFn>>,
    phases: S,
    authority: PhantomData<fn() -> A>,
}

type PresentFn = dyn Fn(&Value) -> Option<Ask> + Send + Sync;

impl<P: DeserializeOwned + JsonSchema + 'static> ToolBuilder<P> {
    /// A tool named `name` (as the model and the `tools` map know it) doing `description`.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        ToolBuilder {
            name: name.into(),
            description: description.into(),
            approval: Approval::Never,
            presents: None,
            phases: NoPhase,
            authority: PhantomData,
        }
    }

    /// Who produces the result: [`Server`] or [`Client`].
    pub fn authority<A>(self, _authority: A) -> ToolBuilder<P, A, NoPhase> {
        self.with(NoPhase)
    }
}

impl<P, A, S> ToolBuilder<P, A, S> {
    /// When a person must approve a call before it runs (default [`Approval::Never`]).
    pub fn approval(mut self, policy: Approval<P>) -> Self {
        self.approval = policy;
        self
    }

    fn with<A2, S2>(self, phases: S2) -> ToolBuilder<P, A2, S2> {
        ToolBuilder {
            name: self.name,
            description: self.description,
            approval: self.approval,
            presents: self.presents,
            phases,
            authority: PhantomData,
        }
    }
}

impl<P> ToolBuilder<P, Server, NoPhase> {
    /// The server phase: its output is the model's result.
    pub fn server<F, O>(self, f: F) -> ToolBuilder<P, Server, ServerPhase<F, O>>
    where
        F: Fn(P) -> Result<O, ToolError>,
    {
        self.with(ServerPhase(f, PhantomData))
    }

    /// Three phases: `before` on the server, whose `state` stays there and whose `client`
    /// part the client phase gets; then `after` makes the result from the state and the
    /// client's output.
    pub fn handoff<B, S, D, C, CO, A, O>(
        self,
        before: B,
        client: C,
        after: A,
    ) -> HandoffBuilder<P, B, S, D, C, CO, A, O>
    where
        B: Fn(P) -> Result<Handoff<S, D>, ToolError>,
        C: Fn(D, &mut dyn ClientContext) -> Result<CO, ToolError>,
        A: Fn(P, S, CO) -> Result<O, ToolError>,
    {
        self.with(HandoffPhases(before, client, after, PhantomData))
    }
}

impl<P, F, O> ToolBuilder<P, Server, ServerPhase<F, O>> {
    /// A display effect: `g` runs in the client with the server's output; what it returns
    /// is informational (the model's result is the server's output).
    pub fn client<G, E>(self, g: G) -> ToolBuilder<P, Server, ServerWithEffect<F, O, G>>
    where
        G: Fn(O, &mut dyn ClientContext) -> Result<E, ToolError>,
    {
        let ServerPhase(f, _) = self.phases;
        let (name, description, approval, presents) = (self.name, self.description, self.approval, self.presents);
        ToolBuilder {
            name,
            description,
            approval,
            presents,
            phases: ServerWithEffect(f, g, PhantomData),
            authority: PhantomData,
        }
    }
}

impl<P: DeserializeOwned + 'static, S> ToolBuilder<P, Client, S> {
    /// How front ends that do not run this tool's client phase (the command line, a web
    /// page) present a call to a person: a question, a confirmation or a choice, whose
    /// answer is the client's output. Without it a call is a client execution, described
    /// by the tool's description.
    pub fn presents(mut self, f: impl Fn(&P) -> Ask + Send + Sync + 'static) -> Self {
        self.presents = Some(Arc::new(move |args: &Value| decode::<P>(args.clone()).ok().map(|p| f(&p))));
        self
    }
}

impl<P> ToolBuilder<P, Client, NoPhase> {
    /// The client phase: what the client (or the person at it) produces, of type `CO`.
    pub fn client<G, CO>(self, g: G) -> ToolBuilder<P, Client, ClientPhase<G, CO>>
    where
        G: Fn(P, &mut dyn ClientContext) -> Result<CO, ToolError>,
    {
        self.with(ClientPhase(g, PhantomData))
    }
}

impl<P, G, CO> ToolBuilder<P, Client, ClientPhase<G, CO>> {
    /// The server phase that validates the client's output and makes the result.
    pub fn server<F, O>(self, f: F) -> ToolBuilder<P, Client, ClientThenServer<G, CO, F, O>>
    where
        F: Fn(P, CO) -> Result<O, ToolError>,
    {
        let ClientPhase(g, _) = self.phases;
        let (name, description, approval, presents) = (self.name, self.description, self.approval, self.presents);
        ToolBuilder {
            name,
            description,
            approval,
            presents,
            phases: ClientThenServer(g, f, PhantomData),
            authority: PhantomData,
        }
    }
}

/// What a typed value crossing between server and client phases must be: JSON both ways.
pub trait Wire: Serialize + DeserializeOwned + 'static {}
impl<T: Serialize + DeserializeOwned + 'static> Wire for T {}

impl<P, F, O> ToolBuilder<P, Server, ServerPhase<F, O>>
where
    P: DeserializeOwned + JsonSchema + 'static,
    F: Fn(P) -> Result<O, ToolError> + Send + Sync + 'static,
    O: Serialize + 'static,
{
    /// A server-only tool.
    pub fn build(self) -> DefinedTool {
        let ServerPhase(f, _) = self.phases;
        let start = move |args: Value| Ok(Start::Done { output: to_json(f(decode(args)?)?)?, effect: None });
        parts(self.name, self.description, self.approval, Authority::Server, Box::new(start), None, None, None)
    }
}

impl<P, F, O, G, E> ToolBuilder<P, Server, ServerWithEffect<F, O, G>>
where
    P: DeserializeOwned + JsonSchema + 'static,
    F: Fn(P) -> Result<O, ToolError> + Send + Sync + 'static,
    O: Wire,
    G: Fn(O, &mut dyn ClientContext) -> Result<E, ToolError> + Send + Sync + 'static,
    E: Serialize + 'static,
{
    /// A server tool with a display effect in the client.
    pub fn build(self) -> DefinedTool {
        let ServerWithEffect(f, g, _) = self.phases;
        let start = move |args: Value| {
            let output = to_json(f(decode(args)?)?)?;
            Ok(Start::Done { effect: Some(output.clone()), output })
        };
        let client = move |input: Value, cx: &mut dyn ClientContext| to_json(g(decode(input)?, cx)?);
        let (name, description, approval) = (self.name, self.description, self.approval);
        parts(name, description, approval, Authority::Server, Box::new(start), None, Some(Box::new(client)), None)
    }
}

impl<P, B, S, D, C, CO, A, O> HandoffBuilder<P, B, S, D, C, CO, A, O>
where
    P: DeserializeOwned + JsonSchema + 'static,
    B: Fn(P) -> Result<Handoff<S, D>, ToolError> + Send + Sync + 'static,
    S: Wire,
    D: Wire,
    C: Fn(D, &mut dyn ClientContext) -> Result<CO, ToolError> + Send + Sync + 'static,
    CO: Wire + JsonSchema,
    A: Fn(P, S, CO) -> Result<O, ToolError> + Send + Sync + 'static,
    O: Serialize + 'static,
{
    /// A server tool that hands off to the client between two server phases.
    pub fn build(self) -> DefinedTool {
        let HandoffPhases(before, client, after, _) = self.phases;
        let description = self.description.clone();
        let start = move |args: Value| {
            let Handoff { state, client } = before(decode(args)?)?;
            Ok(Start::Client { state: to_json(state)?, input: to_json(client)?, ask: client_execution(&description) })
        };
        let finish =
            move |args: Value, state: Value, out: Value| to_json(after(decode(args)?, decode(state)?, decode(out)?)?);
        let phases = ClientPhases { start: Box::new(start), finish: Box::new(finish), client: typed_client(client) };
        with_client_phase::<P, CO>(self.name, self.description, self.approval, Authority::Server, phases)
    }
}

impl<P, G, CO> ToolBuilder<P, Client, ClientPhase<G, CO>>
where
    P: DeserializeOwned + JsonSchema + 'static,
    G: Fn(P, &mut dyn ClientContext) -> Result<CO, ToolError> + Send + Sync + 'static,
    CO: Wire + JsonSchema,
{
    /// A client-authority tool with the default pass-through server phase: the client's
    /// output, once it matches its schema, is the result.
    pub fn build(self) -> DefinedTool {
        let ClientPhase(g, _) = self.phases;
        let passthrough = |_: P, out: CO| Ok(out);
        let (name, description, approval, presents) = (self.name, self.description, self.approval, self.presents);
        ToolBuilder {
            name,
            description,
            approval,
            presents,
            phases: ClientThenServer(g, passthrough, PhantomData),
            authority: PhantomData::<fn() -> Client>,
        }
        .build()
    }
}

impl<P, G, CO, F, O> ToolBuilder<P, Client, ClientThenServer<G, CO, F, O>>
where
    P: DeserializeOwned + JsonSchema + 'static,
    G: Fn(P, &mut dyn ClientContext) -> Result<CO, ToolError> + Send + Sync + 'static,
    CO: Wire + JsonSchema,
    F: Fn(P, CO) -> Result<O, ToolError> + Send + Sync + 'static,
    O: Serialize + 'static,
{
    /// A client-authority tool.
    pub fn build(self) -> DefinedTool {
        let ClientThenServer(g, f, _) = self.phases;
        let description = self.description.clone();
        let presents = self.presents;
        let start = move |args: Value| {
            let ask =
                presents.as_ref().and_then(|present| present(&args)).unwrap_or_else(|| client_execution(&description));
            Ok(Start::Client { state: Value::Null, input: args, ask })
        };
        let finish = move |args: Value, _state: Value, out: Value| to_json(f(decode(args)?, decode(out)?)?);
        let phases = ClientPhases { start: Box::new(start), finish: Box::new(finish), client: typed_client(g) };
        with_client_phase::<P, CO>(self.name, self.description, self.approval, Authority::Client, phases)
    }
}

/// What asks the client to run a tool's client phase: the tool's description.
fn client_execution(description: &str) -> Ask {
    Ask { kind: InteractionKind::ClientExecution, prompt: description.to_string(), options: Vec::new() }
}

/// The phases of a tool whose call waits for the client.
struct ClientPhases {
    start: Box<super::StartFn>,
    finish: Box<super::FinishFn>,
    client: Box<super::ClientFn>,
}

/// A client phase `g` over typed input and output, as the JSON in and out the tool runs.
fn typed_client<I: DeserializeOwned + 'static, CO: Serialize + 'static>(
    g: impl Fn(I, &mut dyn ClientContext) -> Result<CO, ToolError> + Send + Sync + 'static,
) -> Box<super::ClientFn> {
    Box::new(move |input: Value, cx: &mut dyn ClientContext| to_json(g(decode(input)?, cx)?))
}

/// A tool with a client phase whose output (`CO`) is checked against its schema.
fn with_client_phase<P: JsonSchema + DeserializeOwned + 'static, CO: JsonSchema>(
    name: String,
    description: String,
    approval: Approval<P>,
    authority: Authority,
    phases: ClientPhases,
) -> DefinedTool {
    let ClientPhases { start, finish, client } = phases;
    parts(name, description, approval, authority, start, Some(finish), Some(client), Some(output_schema::<CO>()))
}

#[allow(clippy::too_many_arguments)] // one private assembly point for the five build()s
fn parts<P: JsonSchema + DeserializeOwned + 'static>(
    name: String,
    description: String,
    approval: Approval<P>,
    authority: Authority,
    start: Box<super::StartFn>,
    finish: Option<Box<super::FinishFn>>,
    client: Option<Box<super::ClientFn>>,
    client_output_schema: Option<Arc<Value>>,
) -> DefinedTool {
    let (input_schema, shape) = prepared::<P>();
    DefinedTool {
        name,
        description,
        authority,
        input_schema: Arc::new(input_schema),
        shape,
        client_output_schema,
        client_output_validator: Default::default(),
        approval_marker: approval.marker().map(str::to_string),
        approval_reason: approval.reason().map(str::to_string),
        approval: approval.erase(shape),
        start,
        finish,
        client,
    }
}

/// `T`'s schema, prepared as tool schemas are (references inlined, runtime markers gone).
fn prepared<T: JsonSchema>() -> (Value, InputShape) {
    let raw = schemars::schema_for!(T).to_value();
    match prepare_input_schema(&raw) {
        Ok(prepared) => (prepared.schema, prepared.shape),
        // A derived schema is small and acyclic after cutting recursion; should a type
        // still defeat preparation, accept any object rather than refuse every call.
        Err(error) => {
            tracing::warn!(%error, "a tool's schema could not be prepared; it accepts any object");
            (serde_json::json!({"type": "object"}), InputShape::Object)
        }
    }
}

/// The schema a client's output of type `T` must match, prepared as one property of an
/// object (so any schema, `true` or a string included, stays exactly what it says).
fn output_schema<T: JsonSchema>() -> Arc<Value> {
    let mut raw = schemars::schema_for!(T).to_value();
    let defs = raw.as_object_mut().and_then(|map| map.remove("$defs"));
    let mut wrapper = serde_json::json!({ "type": "object", "properties": { "output": raw } });
    if let (Some(defs), Value::Object(map)) = (defs, &mut wrapper) {
        map.insert("$defs".into(), defs);
    }
    let prepared = prepare_input_schema(&wrapper).map(|p| p.schema.pointer("/properties/output").cloned());
    Arc::new(prepared.ok().flatten().unwrap_or_else(|| serde_json::json!({})))
}

/// Decodes a JSON value into a phase's input type; the error is for the model.
pub(super) fn decode<T: DeserializeOwned>(value: Value) -> Result<T, ToolError> {
    serde_json::from_value(value).map_err(|e| ToolError::new(format!("the value does not fit: {e}")))
}

fn to_json<T: Serialize>(value: T) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(|e| ToolError::new(format!("the output cannot be written as JSON: {e}")))
}
