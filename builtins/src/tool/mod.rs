//! Defining tools in Rust: one builder, two authorities, a registry the dialog refers to.
//!
//! Every tool has an **authority**: who produces the result the model reads.
//!
//! - **Server** authority: the server phase runs in the runtime and its output is the
//!   result. `.server(f).build()` is server-only; `.server(f).client(g)` also hands the
//!   client a display effect (`g` runs in the client with `f`'s output; what it returns is
//!   informational); `.handoff(before, client, after)` runs `before`, keeps its state on
//!   the server, lets the client act on what `before` handed it, and `after` makes the
//!   result from the state and the client's output.
//! - **Client** authority: the client (the terminal, a web page, an SDK) acts first and a
//!   server phase always follows to validate what it sent: `.client(g).server(f)`, or
//!   `.client(g).build()` with the default pass-through server phase. The client's output
//!   is checked against its schema before the server phase sees it.
//!
//! **Where phases run.** A first server phase (`.server(f)`, a handoff's `before`) runs on
//! a blocking thread within the dialog's per-tool timeout. A call that needs the client
//! becomes a pending interaction of the dialog (kind `client_execution`, or a question,
//! confirmation or choice when the tool [`presents`](ToolBuilder::presents) itself so); the
//! client resolves it with its output, and the last server phase (`.server(f)` after a
//! client, a handoff's `after`, or the pass-through) runs in the dialog's `resolve`
//! handler: it validates and shapes, quickly, and cannot send events itself. Client
//! phases run where the client is: [`DefinedTool::run_client`] with a [`ClientContext`]
//! (the terminal's prompt in `trellis chat`).
//!
//! Parameters and client outputs are Rust types with serde and schemars: the advertised
//! schema is derived (optional fields and defaults kept) and prepared like a handler's
//! event schema. [`Approval`] says when a person must approve a call first.
//!
//! Invalid combinations do not compile. A client-authority tool has no handoff:
//!
//! ```compile_fail,E0599
//! use trellis_builtins::tool::{Client, ToolBuilder};
//! # #[derive(serde::Deserialize, schemars::JsonSchema)] struct P {}
//! # #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)] struct O {}
//! let tool = ToolBuilder::<P>::new("t", "a tool")
//!     .authority(Client)
//!     .handoff(|_: P| Ok(((), ())), |_: (), _: &mut dyn trellis_builtins::tool::ClientContext| Ok(O {}), |_: P, _: (), o: O| Ok(o))
//!     .build();
//! ```
//!
//! A tool needs a phase before it can be built:
//!
//! ```compile_fail,E0599
//! use trellis_builtins::tool::{Server, ToolBuilder};
//! # #[derive(serde::Deserialize, schemars::JsonSchema)] struct P {}
//! let tool = ToolBuilder::<P>::new("t", "a tool").authority(Server).build();
//! ```
//!
//! A client-authority tool starts with its client phase (the server phase validates what
//! the client sent, so it comes after):
//!
//! ```compile_fail,E0599
//! use trellis_builtins::tool::{Client, ToolBuilder};
//! # #[derive(serde::Deserialize, schemars::JsonSchema)] struct P {}
//! let tool = ToolBuilder::<P>::new("t", "a tool").authority(Client).server(|_: P| Ok(1)).build();
//! ```
//!
//! and every tool gets an authority before a phase:
//!
//! ```compile_fail,E0599
//! use trellis_builtins::tool::ToolBuilder;
//! # #[derive(serde::Deserialize, schemars::JsonSchema)] struct P {}
//! let tool = ToolBuilder::<P>::new("t", "a tool").server(|_: P| Ok(1)).build();
//! ```
//!
//! A built tool is registered by name in a [`ToolRegistry`] that the `llm_dialog` builtin
//! holds (`LlmDialog::with_tools`); a dialog's `tools` map offers it with an entry
//! `{"tool": "name"}`. Closures cannot live in cells, so the cells hold the name.
//!
//! ```
//! use trellis_builtins::tool::{Server, ToolBuilder, ToolRegistry};
//!
//! /// Two numbers to add.
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Sum { a: i64, b: i64 }
//!
//! let registry = ToolRegistry::standard();
//! registry.register(ToolBuilder::<Sum>::new("add", "Adds two numbers").authority(Server).server(|s: Sum| Ok(s.a + s.b)).build())?;
//! assert!(registry.get("add").is_some());
//! # Ok::<(), trellis_builtins::tool::RegistryError>(())
//! ```

mod approval;
mod builder;
mod client;
mod error;
mod human_input;
pub mod limits;
pub mod person_only;
mod registry;

use crate::validation::{violations, LazyValidator};
use std::sync::Arc;

use serde_json::Value;

pub use approval::Approval;
pub use builder::{
    Client, ClientPhase, ClientThenServer, Handoff, HandoffBuilder, HandoffPhases, NoAuthority, NoPhase, Server,
    ServerPhase, ServerWithEffect, ToolBuilder, Wire,
};
pub use client::{ClientContext, ClientError};
pub use error::ToolError;
pub use human_input::{human_input, AnswerKind, HumanInput, HUMAN_INPUT_TOOL};
pub use registry::{RegistryError, ToolRegistry};

pub use crate::ask::Ask;
use crate::schema::InputShape;

/// Who produces a tool's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authority {
    /// The server phase's output is the result.
    Server,
    /// The client acts first; a server phase validates its output into the result.
    Client,
}

/// How the first phase of a call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    /// The call has its result; `effect` is what the client gets to display, if anything.
    Done {
        /// The result the model reads.
        output: Value,
        /// The input of the client's display effect (server authority with a client phase).
        effect: Option<Value>,
    },
    /// The call waits for the client.
    Client {
        /// Server-side state the last phase needs; never shown to front ends.
        state: Value,
        /// What the client phase gets.
        input: Value,
        /// What the interaction presents.
        ask: Ask,
    },
}

type StartFn = dyn Fn(Value) -> Result<Start, ToolError> + Send + Sync;
type FinishFn = dyn Fn(Value, Value, Value) -> Result<Value, ToolError> + Send + Sync;
type ClientFn = dyn Fn(Value, &mut dyn ClientContext) -> Result<Value, ToolError> + Send + Sync;
type ApprovalFn = dyn Fn(&Value) -> Option<String> + Send + Sync;

/// A built tool (see the module docs), type-erased: arguments and outputs are JSON here,
/// decoded into the builder's types inside.
pub struct DefinedTool {
    name: String,
    description: String,
    authority: Authority,
    input_schema: Arc<Value>,
    shape: InputShape,
    client_output_schema: Option<Arc<Value>>,
    /// `client_output_schema` compiled, on the first output checked.
    client_output_validator: LazyValidator,
    approval: Arc<ApprovalFn>,
    approval_marker: Option<String>,
    approval_reason: Option<String>,
    start: Box<StartFn>,
    finish: Option<Box<FinishFn>>,
    client: Option<Box<ClientFn>>,
}

impl std::fmt::Debug for DefinedTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefinedTool").field("name", &self.name).field("authority", &self.authority).finish()
    }
}

impl DefinedTool {
    /// The name it is registered under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it does, for the model.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Who produces its result.
    pub fn authority(&self) -> Authority {
        self.authority
    }

    /// The prepared input schema (an object schema).
    pub fn input_schema(&self) -> &Arc<Value> {
        &self.input_schema
    }

    /// How the arguments relate to the parameters (see [`InputShape`]).
    pub fn shape(&self) -> InputShape {
        self.shape
    }

    /// The schema of what the client sends back, for tools a client executes.
    pub fn client_output_schema(&self) -> Option<&Arc<Value>> {
        self.client_output_schema.as_ref()
    }

    /// Why a person must approve a call with these (valid) arguments, if they must.
    pub fn approval_for(&self, arguments: &Value) -> Option<String> {
        (self.approval)(arguments)
    }

    /// The policy as data, when it can be written down: `Some(reason)` when every call
    /// needs approval (what a stream marker carries).
    pub fn approval_marker(&self) -> Option<&str> {
        self.approval_marker.as_deref()
    }

    /// Why some calls may wait for approval (any policy but [`Approval::Never`]).
    pub fn approval_reason(&self) -> Option<&str> {
        self.approval_reason.as_deref()
    }

    /// Whether the client has a phase to run (a client-authority tool, a handoff, or a
    /// server tool with a display effect).
    pub fn has_client_phase(&self) -> bool {
        self.client.is_some()
    }

    /// Runs the first server phase (the only one for server-only tools) with checked
    /// arguments. Synchronous: the catalog runs it on a blocking thread with a timeout.
    pub fn start(&self, arguments: Value) -> Result<Start, ToolError> {
        (self.start)(self.shape.event_from_arguments(arguments))
    }

    /// Runs the last server phase: the client's `output` (checked against its schema
    /// first), the call's `arguments`, and the `state` the first phase kept.
    pub fn finish(&self, arguments: Value, state: Value, output: Value) -> Result<Value, ToolError> {
        let Some(finish) = &self.finish else {
            return Err(format!("`{}` does not wait for the client, so it takes no client output", self.name).into());
        };
        if let Some(schema) = &self.client_output_schema {
            let invalid =
                |why: &str| ToolError::new(format!("the client's output for `{}` is not valid: {why}", self.name));
            let validator = self.client_output_validator.get(schema).map_err(invalid)?;
            if let Some(why) = violations(validator, &output) {
                return Err(invalid(&why));
            }
        }
        finish(self.shape.event_from_arguments(arguments), state, output)
    }

    /// Runs the client phase, where the client is (the terminal): `input` is what the
    /// interaction carries (the arguments, what a handoff handed over, or the display
    /// effect's input). Returns the client's output.
    pub fn run_client(&self, input: Value, context: &mut dyn ClientContext) -> Result<Value, ToolError> {
        match &self.client {
            Some(client) => client(input, context),
            None => Err(format!("`{}` has no client phase", self.name).into()),
        }
    }
}

/// Tools are the same tool only if they are the same registration.
impl PartialEq for DefinedTool {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

/// Shared handle to a defined tool.
pub type ToolRef = Arc<DefinedTool>;
