//! [`DialogSettings`]: the limits of the tool loop, chosen per builtin
//! (`LlmDialog::with_settings`) and the same for every dialog it runs. Apart from the
//! builtin so that the fields and their defaults read as one list.

use std::time::Duration;

use crate::files::FileLimits;

/// Limits of the tool loop.
#[derive(Debug, Clone, Copy)]
pub struct DialogSettings {
    /// Rounds of tool calls before the dialog stops with a message (default 10).
    pub max_rounds: u32,
    /// How long one tool call may take (default 30 s); also the last server phase of a
    /// call that waited for the client, which runs when the client's output arrives.
    pub tool_timeout: Duration,
    /// The longest reply text kept from one answer, in bytes (default 1 MiB). A longer
    /// answer is stopped there: its text so far is kept and the dialog reports an error.
    pub max_reply_bytes: usize,
    /// How long a call waits for a person or the client before it gets a "no answer in
    /// time" result the model reads (default: it waits until answered or cancelled). It
    /// counts from when the call was asked, across a restart too (the timer is armed
    /// again when the dialog's charm starts).
    pub wait_timeout: Option<Duration>,
    /// How large the files of a message may be (5 MiB each, 20 MiB together by default).
    pub files: FileLimits,
    /// How many calls of one round to tools outside the space (MCP servers' tools) run at
    /// once (default 4); a charm's handlers always run one after another.
    pub parallel_calls: usize,
    /// Whether a dialog that starts with a request its process stopped in goes on with it
    /// (default true; see the `recover` module). A process that only looks at a space
    /// leaves such a request as it is, for one that runs conversations.
    pub resume: bool,
    /// How many watches one conversation may keep (default
    /// [`MAX_WATCHES`](crate::watch::MAX_WATCHES), 20).
    pub max_watches: usize,
}

impl Default for DialogSettings {
    fn default() -> Self {
        DialogSettings {
            max_rounds: 10,
            tool_timeout: Duration::from_secs(30),
            max_reply_bytes: 1 << 20,
            wait_timeout: None,
            files: FileLimits::default(),
            parallel_calls: 4,
            resume: true,
            max_watches: crate::watch::MAX_WATCHES,
        }
    }
}
