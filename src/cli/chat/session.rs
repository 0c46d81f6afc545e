//! The chat session: the space's chatbot charm, @-mentions, and sending turns.
//!
//! One chatbot charm ("Chat") per space holds the conversation, so it continues across
//! runs (`/clear` forgets it). Each message's @-mentions are resolved against the charm
//! names and attached before the message is sent.

use std::time::Duration;

use anyhow::bail;
use serde_json::json;
use trellis_builtins::dialog::DialogHandle;
use trellis_builtins::message::Message;
use trellis_runner::{DocId, Read as _, Runtime};

use crate::cli::terminal::safe_line;

/// The pattern of the chat's own charm (never an @-mention target).
const CHATBOT: &str = "chatbot";

/// The chat session: the chatbot charm and its dialog.
pub struct Session {
    rt: Runtime,
    chat: DocId,
    dialog: DialogHandle,
}

impl Session {
    /// Finds (or creates) the space's chatbot charm and sets its model.
    pub async fn open(rt: &Runtime, model: &str) -> anyhow::Result<Session> {
        // Fail before anything changes: a bad model string or a missing key.
        trellis_builtins::provider::model_from_str(model)?;
        let charms = rt.charms();
        let chat = match charms.list().into_iter().find(|c| c.pattern == CHATBOT) {
            Some(c) => DocId::from(c.id.as_str()),
            None => charms.create(CHATBOT, json!({}))?,
        };
        let session = Session {
            rt: rt.clone(),
            dialog: DialogHandle::new(rt.clone(), charms.result(&chat).child("dialog")),
            chat,
        };
        session.send("set_model", json!({"model": model})).await?;
        Ok(session)
    }

    async fn send(&self, stream: &str, event: serde_json::Value) -> anyhow::Result<()> {
        self.rt.send(&self.rt.charms().result(&self.chat).child(stream), event).await?;
        Ok(())
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The dialog.
    pub fn dialog(&self) -> &DialogHandle {
        &self.dialog
    }

    /// Attaches every charm mentioned in `text`; an unknown mention is an error.
    pub async fn attach_mentions(&self, text: &str) -> anyhow::Result<Vec<String>> {
        let charms = self.rt.charms().list();
        let names: Vec<&str> = charms.iter().filter(|c| c.pattern != CHATBOT).map(|c| c.name.as_str()).collect();
        let mut attached = Vec::new();
        for mention in mentions(text, &names)? {
            for charm in charms.iter().filter(|c| c.name == mention) {
                let link = self.rt.charms().result(&DocId::from(charm.id.as_str()));
                self.send("attach", json!({"name": charm.name, "charm": link.to_json()})).await?;
            }
            attached.push(mention);
        }
        Ok(attached)
    }

    /// Sends one user message (attaching its mentions first) without waiting for the
    /// reply; returns the index of that message in the conversation, from which the
    /// reply's messages follow.
    pub async fn start(&self, text: &str) -> anyhow::Result<usize> {
        self.attach_mentions(text).await?;
        let before = self.dialog.messages().len();
        self.dialog.send(Message::user(text)).await?;
        Ok(before)
    }

    /// Sends one user message (attaching its mentions) and waits up to `timeout` for the
    /// whole reply.
    pub async fn turn(&self, text: &str, timeout: Duration) -> anyhow::Result<Vec<Message>> {
        let before = self.start(text).await?;
        match self.dialog.wait(timeout).await {
            Err(trellis_runner::Error::Timeout(..)) => {
                let mut message = format!(
                    "the model {} did not finish its answer within {} s; try again, allow it longer with \
                     --timeout SECONDS, or choose another model with --model (`offline` needs no network)",
                    self.model(),
                    timeout.as_secs_f64()
                );
                // Stop the request, so the stored conversation is not left waiting on it.
                if let Err(e) = self.dialog.cancel().await {
                    message.push_str(&format!(" (the request could not be stopped: {e})"));
                }
                bail!(message);
            }
            waited => waited?,
        }
        self.check_error()?;
        Ok(self.dialog.messages().split_off(before))
    }

    /// The failure of the last request, as an error.
    pub fn check_error(&self) -> anyhow::Result<()> {
        match self.dialog.error() {
            Some(error) => bail!("the model failed: {error}"),
            None => Ok(()),
        }
    }

    /// The names of the attached charms, in the order they were attached.
    pub fn attachments(&self) -> Vec<String> {
        let at = self.rt.charms().result(&self.chat).child("attachments");
        let list = self.rt.read(&at).map(|v| v.to_json()).unwrap_or_default();
        list.as_array().into_iter().flatten().filter_map(|a| a["name"].as_str().map(str::to_string)).collect()
    }

    /// The model string the chat uses now.
    pub fn model(&self) -> String {
        let at = self.rt.charms().result(&self.chat).child("model");
        let model = self.rt.read(&at).map(|v| v.to_json()).unwrap_or_default();
        model.as_str().unwrap_or("offline").to_string()
    }

    /// Forgets the conversation and the attachments.
    pub async fn clear(&self) -> anyhow::Result<()> {
        self.send("clear", json!({})).await
    }

    /// Switches the model (checked first).
    pub async fn set_model(&self, model: &str) -> anyhow::Result<()> {
        trellis_builtins::provider::model_from_str(model)?;
        self.send("set_model", json!({"model": model})).await
    }

    /// The display name of a tool by its wire name (the wire name when unknown).
    pub fn display_name(&self, wire: &str) -> String {
        let tools = self.dialog.flattened_tools();
        tools
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["wire"] == wire)
            .and_then(|t| t["display"].as_str())
            .unwrap_or(wire)
            .to_string()
    }
}

/// The charm names mentioned with `@` in `text`, longest name first when names share a
/// prefix (`@Todo list` prefers "Todo list" over "Todo").
pub fn mentions(text: &str, names: &[&str]) -> anyhow::Result<Vec<String>> {
    let mut sorted: Vec<&str> = names.to_vec();
    sorted.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut found: Vec<String> = Vec::new();
    for (at, _) in text.match_indices('@') {
        // `me@example.com` is not a mention: a mention starts a word.
        if text[..at].ends_with(|c: char| c.is_alphanumeric()) {
            continue;
        }
        let rest = &text[at + 1..];
        let hit = sorted.iter().find(|name| {
            rest.len() >= name.len()
                && rest.is_char_boundary(name.len())
                && rest[..name.len()].eq_ignore_ascii_case(name)
                && !rest[name.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
        });
        match hit {
            Some(name) => {
                if !found.iter().any(|f| f == name) {
                    found.push(name.to_string());
                }
            }
            None => {
                let word: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-').collect();
                if !word.is_empty() {
                    let names: Vec<_> = names.iter().map(|n| safe_line(n)).collect();
                    bail!("unknown charm @{}; the charms are: {}", safe_line(&word), names.join(", "));
                }
            }
        }
    }
    Ok(found)
}

/// The names of the charms a message can mention: every charm but the chatbot.
pub fn charm_names(rt: &Runtime) -> Vec<String> {
    rt.charms().list().into_iter().filter(|c| c.pattern != CHATBOT).map(|c| c.name).collect()
}

#[cfg(test)]
mod tests {
    use super::mentions;

    #[test]
    fn mentions_match_names_case_insensitively_and_prefer_longer_names() {
        let names = ["Counter", "Todo", "Todo list"];
        assert_eq!(mentions("@counter add 5", &names).unwrap(), ["Counter"]);
        assert_eq!(mentions("put it on @Todo list now", &names).unwrap(), ["Todo list"]);
        assert_eq!(mentions("@Todo and @Counter and @Todo", &names).unwrap(), ["Todo", "Counter"]);
        assert!(mentions("mail me at a@ b", &names).unwrap().is_empty());
        assert!(mentions("write to me@example.com", &names).unwrap().is_empty());
        let err = mentions("@Nope do it", &names).unwrap_err().to_string();
        assert!(err.contains("@Nope") && err.contains("Counter"), "{err}");
        assert!(mentions("@Counters", &names).is_err(), "a longer word is not the name");
    }
}
