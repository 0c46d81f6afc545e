//! `chatbot`: a conversation with a language model that can act on @-mentioned charms.
//!
//! The chatbot keeps the conversation (`messages`) and the user's **attachments**: each
//! @-mentioned charm is attached once and stays until detached. Its `tools` are derived:
//! the static tools from the argument merged with one `{charm}` entry per attachment,
//! so mentioning a charm offers every handler of it to the model, and detaching it takes
//! them away.
//!
//! Each attached charm also gets one **read tool**, `Charm.read`, taking an optional
//! `path` into its data. One tool per charm rather than one per field keeps the tool list
//! short (models choose worse among many tools), reaches nested data (`items/0/title`),
//! and its description lists the top-level fields so the model knows what to ask for. Entries of attachments are keyed by
//! charm id, so two charms with the same name never overwrite each other; the tool
//! catalog gives their tools distinct wire names.
//!
//! The client (a terminal with plugins installed, a page) may add **client tools**
//! ([`SetClientTools`]): definitions only, offered to the model beside the others; a call
//! to one waits for the client to execute it and resolve it with the output.
//!
//! Outputs: `messages`, `attachments`, `client_tools`, `tools`, `model`, `tool_choice`,
//! `result_schema`, the dialog's public outputs ([`DialogOutput::PUBLIC`]:
//! `flattened_tools`, `pending`, `error`, `partial`, `result`, and the streams
//! `add_message`, `cancel_generation`), and the streams `attach`, `detach`, `clear`,
//! `set_model`, `set_tool_choice`, `set_client_tools`, `set_result_schema`.

mod handle;
mod mention;

pub use handle::{Chatbot, ChatbotError, ChatbotField, ChatbotStream};
pub use mention::{mentions, UnknownMention};

use serde_json::json;
use trellis_builtins::catalog::{CLIENT_ENTRY, TOOL_ENTRY};
use trellis_builtins::dialog::{DialogInputs, DialogOutput, Interaction, LLM_DIALOG};
use trellis_builtins::message::Message;
use trellis_runner::prelude::*;

/// The chatbot's argument.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ChatbotArgs {
    /// The system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// The model: `offline` (default), `scripted:PATH`, `openai:MODEL`, `anthropic:MODEL`, `ollama:MODEL`.
    #[serde(default)]
    pub model: Option<String>,
    /// Static tools: a map of `{handler}`, `{pattern}` or `{charm}` entries.
    #[serde(default)]
    pub tools: serde_json::Map<String, serde_json::Value>,
}

/// A charm the user mentioned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Attachment {
    /// The name it was mentioned by.
    pub name: String,
    /// The charm's result.
    #[schemars(with = "serde_json::Value")]
    pub charm: Cell<serde_json::Value>,
}

/// Attach a charm: its handlers become tools until it is detached.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Attach {
    /// The name the user mentioned it by.
    pub name: String,
    /// A link to the charm's result.
    #[schemars(with = "serde_json::Value")]
    pub charm: Cell<serde_json::Value>,
}

/// Detach a charm by the name it was attached by.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Detach {
    /// The name it was attached by.
    pub name: String,
}

/// Forget the conversation and the attachments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct Clear {}

/// Change the model.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetModel {
    /// The model string, e.g. `offline` or `openai:gpt-4o-mini`.
    pub model: String,
}

/// Set the client tools: tools the client executes itself (a terminal's plugins). The
/// server only offers them; a call to one waits for the client's output.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct SetClientTools {
    /// Tool name → `{"description", "parameters"}` (a JSON Schema of an object); replaces
    /// the previous set. A name the chatbot's own tools use is left to them.
    #[serde(default)]
    pub tools: serde_json::Map<String, serde_json::Value>,
}

/// Choose whether the model may, must or must not call tools.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetToolChoice {
    /// `auto` (the model decides), `none`, `required` (it must call one), or one tool's
    /// display name (`Counter.increment`). Holds for the first answer to each message.
    pub tool_choice: String,
}

/// Ask each reply to end with one value of a JSON Schema, or no longer.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct SetResultSchema {
    /// The schema (`null`: replies end as they will).
    #[serde(default)]
    pub schema: Option<serde_json::Value>,
}

/// The tool through which the model asks the user (a question, a confirmation, a choice).
pub use trellis_builtins::tool::HUMAN_INPUT_TOOL;

/// The default system prompt.
pub const SYSTEM: &str = "You are a helpful assistant. The user can mention charms with @Name; \
their handlers are your tools. Use them to act, then say briefly what you did.";

/// The chatbot pattern: [`wire`] with the default system prompt, named "Chat".
pub fn chatbot() -> Pattern {
    Pattern::new("chatbot", |b, args: ChatbotArgs| {
        b.name("Chat")?;
        wire(b, args)
    })
    .description("A chat with a language model that can use the handlers of @-mentioned charms")
}

/// Wires a chatbot into the charm being built: the conversation, the attachments, the
/// dialog at `dialog`, and every stream of the chatbot contract ([`Chatbot`]). A custom
/// chatbot pattern is its own name, system prompt and static tools around this call:
///
/// ```
/// use trellis_patterns::chatbot::{wire, ChatbotArgs};
/// use trellis_runner::prelude::*;
///
/// let terse = Pattern::new("terse", |b, _: serde_json::Value| {
///     b.name("Terse")?;
///     wire(b, ChatbotArgs { system: Some("Answer in five words or fewer.".into()), ..ChatbotArgs::default() })
/// });
/// # let _ = terse;
/// ```
pub fn wire(b: &mut Builder<'_>, args: ChatbotArgs) -> trellis_runner::Result<()> {
    let messages = b.state::<Vec<Message>>(ChatbotField::Messages.key(), Vec::new())?;
    let attachments = b.state::<Vec<Attachment>>(ChatbotField::Attachments.key(), Vec::new())?;
    let model = b.state(ChatbotField::Model.key(), args.model.unwrap_or_else(|| "offline".into()))?;
    let system = b.state("system", args.system.unwrap_or_else(|| SYSTEM.into()))?;
    let tool_choice = b.state(ChatbotField::ToolChoice.key(), "auto".to_string())?;
    let client_tools = b.state("client_tools", serde_json::Map::<String, serde_json::Value>::new())?;
    let result_schema = b.state(ChatbotField::ResultSchema.key(), serde_json::Value::Null)?;
    let mut static_tools = args.tools;
    // The model may always ask the user (`request_human_input`); the dialog waits for the
    // answer. A pattern that does not want it passes `"request_human_input": null`.
    static_tools.entry(HUMAN_INPUT_TOOL).or_insert(json!({ TOOL_ENTRY: HUMAN_INPUT_TOOL }));
    static_tools.retain(|_, entry| !entry.is_null());
    let tools = b.derive("tools", move |tx| {
        let mut tools = static_tools.clone();
        for attachment in attachments.get(tx)? {
            // No entry description: each tool then describes itself from its
            // handler's event schema, which says far more than the charm's name.
            let key = format!("@{}", attachment.charm.link().doc);
            tools.insert(key, json!({"charm": attachment.charm, "read": true}));
        }
        for (name, definition) in client_tools.get(tx)? {
            tools.entry(name).or_insert_with(|| json!({ CLIENT_ENTRY: definition }));
        }
        Ok(tools)
    })?;
    let inputs =
        DialogInputs::new().messages(messages).model(model).system(system).tools(tools).tool_choice(tool_choice);
    let inputs = inputs.result_schema(result_schema);
    let dialog = b.builtin(ChatbotField::Dialog.key(), LLM_DIALOG, inputs.to_json())?;
    for output in DialogOutput::PUBLIC {
        b.alias(output.key(), &dialog.child(output.key()))?;
    }

    b.handler(ChatbotStream::Attach.key(), move |tx, e: Attach| {
        let mut all = attachments.get(tx)?;
        if !all.iter().any(|a| a.charm == e.charm) {
            all.push(Attachment { name: e.name, charm: e.charm });
            attachments.set(tx, all)?;
        }
        Ok(())
    })?;
    b.handler(ChatbotStream::Detach.key(), move |tx, e: Detach| {
        let mut all = attachments.get(tx)?;
        let before = all.len();
        all.retain(|a| a.name != e.name);
        if all.len() == before {
            return Err(format!("`{}` is not attachments", e.name).into());
        }
        attachments.set(tx, all)
    })?;
    let pending: Cell<bool> = Cell::from_link(dialog.child(DialogOutput::Pending.key()));
    let waiting: Cell<Vec<Interaction>> = Cell::from_link(dialog.child(DialogOutput::Interactions.key()));
    b.handler(ChatbotStream::Clear.key(), move |tx, _: Clear| {
        if pending.get(tx)? {
            return Err("a reply is still being generated: cancel it first".into());
        }
        // A call waiting for an answer belongs to the conversation being cleared.
        if waiting.get(tx)?.iter().any(Interaction::blocks) {
            return Err("a tool call is waiting for your answer: resolve it, or cancel it first".into());
        }
        messages.set(tx, Vec::new())?;
        attachments.set(tx, Vec::new())
    })?;
    b.handler(ChatbotStream::SetModel.key(), move |tx, e: SetModel| model.set(tx, e.model))?;
    b.handler(ChatbotStream::SetToolChoice.key(), move |tx, e: SetToolChoice| tool_choice.set(tx, e.tool_choice))?;
    b.handler(ChatbotStream::SetClientTools.key(), move |tx, e: SetClientTools| client_tools.set(tx, e.tools))?;
    b.handler(ChatbotStream::SetResultSchema.key(), move |tx, e: SetResultSchema| {
        if let Some(schema) = &e.schema {
            trellis_builtins::structured::ResultFormat::new(schema.clone())?;
        }
        result_schema.set(tx, e.schema.unwrap_or_default())
    })?;
    Ok(())
}
