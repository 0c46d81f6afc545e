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
//! Outputs: `messages`, `attachments`, `tools`, `flattened_tools`, `pending`, `error`,
//! `partial`, and the streams `add_message`, `cancel_generation`, `attach`, `detach`,
//! `clear`.

use serde_json::json;
use trellis_builtins::dialog::LLM_DIALOG;
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

/// The default system prompt.
pub const SYSTEM: &str = "You are a helpful assistant. The user can mention charms with @Name; \
their handlers are your tools. Use them to act, then say briefly what you did.";

/// The chatbot pattern.
pub fn chatbot() -> Pattern {
    Pattern::new("chatbot", |b, args: ChatbotArgs| {
        b.name("Chat")?;
        let messages = b.state::<Vec<Message>>("messages", Vec::new())?;
        let attachments = b.state::<Vec<Attachment>>("attachments", Vec::new())?;
        let model = b.state("model", args.model.unwrap_or_else(|| "offline".into()))?;
        let system = b.state("system", args.system.unwrap_or_else(|| SYSTEM.into()))?;
        let static_tools = args.tools;
        let attached = attachments.clone();
        let tools = b.derive("tools", move |tx| {
            let mut tools = static_tools.clone();
            for attachment in attached.get(tx)? {
                // No entry description: each tool then describes itself from its
                // handler's event schema, which says far more than the charm's name.
                let key = format!("@{}", attachment.charm.link().doc);
                tools.insert(key, json!({"charm": attachment.charm, "read": true}));
            }
            Ok(tools)
        });
        let dialog = b.builtin(
            "dialog",
            LLM_DIALOG,
            json!({"messages": messages, "model": model, "system": system, "tools": tools}),
        )?;
        for output in ["add_message", "cancel_generation", "pending", "error", "partial", "flattened_tools"] {
            b.alias(output, &dialog.child(output))?;
        }

        let list = attachments.clone();
        b.handler("attach", move |tx, e: Attach| {
            let mut all = list.get(tx)?;
            if !all.iter().any(|a| a.charm == e.charm) {
                all.push(Attachment { name: e.name, charm: e.charm });
                list.set(tx, all)?;
            }
            Ok(())
        });
        let list = attachments.clone();
        b.handler("detach", move |tx, e: Detach| {
            let mut all = list.get(tx)?;
            let before = all.len();
            all.retain(|a| a.name != e.name);
            if all.len() == before {
                return Err(format!("`{}` is not attached", e.name).into());
            }
            Ok(list.set(tx, all)?)
        });
        let pending: Cell<bool> = Cell::from_link(dialog.child("pending"));
        b.handler("clear", move |tx, _: Clear| {
            if pending.get(tx)? {
                return Err("a reply is still being generated: cancel it first".into());
            }
            messages.set(tx, Vec::new())?;
            Ok(attachments.set(tx, Vec::new())?)
        });
        b.handler("set_model", move |tx, e: SetModel| Ok(model.set(tx, e.model)?));
        Ok(())
    })
    .description("A chat with a language model that can use the handlers of @-mentioned charms")
}
