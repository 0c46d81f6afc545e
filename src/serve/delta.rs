//! What an event stream sent, kept as digests, and what changed since: a chat stream sends
//! the whole conversation once, when it opens, then only what changed (the new or changed
//! messages, the other fields that changed, the streamed reply's new text). So each event
//! is as large as its change, and a stream holds a few bytes per message, not a copy of
//! the conversation.

use std::hash::{DefaultHasher, Hasher};

use serde::Serialize;

use super::api::Partial;
use super::routes::chat::{ChatChange, ChatState};

/// A digest of `value`'s JSON: equal JSON, equal digest (and different JSON a different
/// one but for a chance of one in 2^64, which would cost one stale field on a page).
pub fn digest(value: &impl Serialize) -> u64 {
    let mut hasher = DefaultHasher::new();
    // Serialized into the hasher: no buffer per value.
    let _ = serde_json::to_writer(HashWriter(&mut hasher), value);
    hasher.finish()
}

struct HashWriter<'h>(&'h mut DefaultHasher);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a chat stream sent of the conversation.
pub struct SentChat {
    messages: Vec<u64>,
    /// The model, whether a reply is pending, the error, the notice, the queued messages
    /// and the calls' progress, together.
    head: u64,
    interactions: u64,
    attachments: u64,
    tools: u64,
    allowed: u64,
    compaction: u64,
    result: u64,
}

impl SentChat {
    /// What sending the whole of `state` sent.
    pub fn new(state: &ChatState) -> Self {
        SentChat {
            messages: state.messages.iter().map(digest).collect(),
            head: digest(&(&state.model, state.pending, &state.error, &state.notice, &state.queued, &state.progress)),
            interactions: digest(&state.interactions),
            attachments: digest(&state.attachments),
            tools: digest(&state.tools),
            allowed: digest(&state.allowed),
            compaction: digest(&state.compaction),
            result: digest(&state.result),
        }
    }

    /// The change from what was sent to `now` (`None` when nothing changed), from then on
    /// counted as sent.
    pub fn change(&mut self, now: ChatState) -> Option<ChatChange> {
        let sent = SentChat::new(&now);
        // The first message that differs: those before it are as sent.
        let from = self.messages.iter().zip(&sent.messages).take_while(|(a, b)| a == b).count();
        let changed = |before: u64, after: u64| before != after;
        if from == sent.messages.len()
            && from == self.messages.len()
            && !changed(self.head, sent.head)
            && !changed(self.interactions, sent.interactions)
            && !changed(self.attachments, sent.attachments)
            && !changed(self.tools, sent.tools)
            && !changed(self.allowed, sent.allowed)
            && !changed(self.compaction, sent.compaction)
            && !changed(self.result, sent.result)
        {
            return None;
        }
        let change = ChatChange {
            from,
            messages: now.messages.into_iter().skip(from).collect(),
            model: now.model,
            pending: now.pending,
            error: now.error,
            notice: now.notice,
            queued: now.queued,
            progress: now.progress,
            interactions: changed(self.interactions, sent.interactions).then_some(now.interactions),
            attachments: changed(self.attachments, sent.attachments).then_some(now.attachments),
            tools: changed(self.tools, sent.tools).then_some(now.tools),
            allowed: changed(self.allowed, sent.allowed).then_some(now.allowed),
            compaction: changed(self.compaction, sent.compaction).then_some(now.compaction),
            result: changed(self.result, sent.result).then_some(now.result),
        };
        *self = sent;
        Some(change)
    }
}

/// What a stream sent of a text that mostly grows (the streamed reply).
#[derive(Default)]
pub struct SentText {
    sent: Option<(usize, u64)>,
}

impl SentText {
    /// The `partial` event from what was sent to `now`: the new text when `now` goes on
    /// from what was sent, all of it otherwise; `None` when nothing changed.
    pub fn change(&mut self, now: &str) -> Option<Partial> {
        let whole = (now.len(), digest(&now));
        if self.sent == Some(whole) {
            return None;
        }
        let goes_on = self.sent.and_then(|(len, sent)| {
            let before = now.get(..len)?;
            (digest(&before) == sent).then(|| now[len..].to_string())
        });
        self.sent = Some(whole);
        Some(match goes_on {
            Some(text) => Partial { text, append: true },
            None => Partial { text: now.to_string(), append: false },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::routes::chat::{Compacted, FileSizes};
    use trellis_builtins::message::Message;

    fn state(messages: &[&str], pending: bool) -> ChatState {
        ChatState {
            charm: "c".into(),
            model: "offline".into(),
            pending,
            error: None,
            messages: messages.iter().map(|m| Message::user(*m)).collect(),
            interactions: Vec::new(),
            attachments: Vec::new(),
            tools: Vec::new(),
            compaction: None,
            result: None,
            notice: None,
            queued: Vec::new(),
            progress: Vec::new(),
            allowed: Vec::new(),
            file_limits: FileSizes { per_file: 1, per_message: 2 },
        }
    }

    #[test]
    fn a_change_carries_only_the_new_or_changed_messages_and_fields() {
        let mut sent = SentChat::new(&state(&["a", "b"], false));
        assert!(sent.change(state(&["a", "b"], false)).is_none(), "nothing changed");
        let change = sent.change(state(&["a", "b", "c"], true)).expect("a change");
        assert_eq!((change.from, change.messages.len(), change.pending), (2, 1, true));
        assert!(change.tools.is_none() && change.attachments.is_none() && change.interactions.is_none());
        assert!(change.compaction.is_none() && change.result.is_none() && change.allowed.is_none());
        let mut allowing = state(&["a", "b", "c"], true);
        allowing.allowed = vec!["Notes.delete".into()];
        let allowed = sent.change(allowing).expect("a change");
        assert_eq!((allowed.allowed, allowed.messages.len()), (Some(vec!["Notes.delete".to_string()]), 0));
        let mut compacted = state(&["a", "b", "c"], false);
        compacted.compaction = Some(Compacted { upto: 2, summary: "a and b".into() });
        let change = sent.change(compacted).expect("a change");
        assert_eq!(change.compaction, Some(Some(Compacted { upto: 2, summary: "a and b".into() })));
        let cleared = sent.change(state(&["a", "b", "c"], false)).expect("a change");
        assert_eq!(cleared.compaction, Some(None), "sent as null: none now");
        let rewritten = sent.change(state(&["a", "x"], true)).expect("a change");
        assert_eq!((rewritten.from, rewritten.messages.len()), (1, 1), "from the first that differs");
        let shorter = sent.change(state(&[], true)).expect("a change");
        assert_eq!((shorter.from, shorter.messages.len()), (0, 0), "cleared");
    }

    #[test]
    fn streamed_text_is_sent_as_what_follows_or_whole_when_it_starts_over() {
        let mut sent = SentText::default();
        let first = sent.change("Hel").expect("a change");
        assert_eq!((first.text.as_str(), first.append), ("Hel", false));
        assert!(sent.change("Hel").is_none());
        let more = sent.change("Hello ☃").expect("a change");
        assert_eq!((more.text.as_str(), more.append), ("lo ☃", true));
        let over = sent.change("Bye").expect("a change");
        assert_eq!((over.text.as_str(), over.append), ("Bye", false));
    }
}
