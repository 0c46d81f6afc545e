//! Tool sets and tool selection: combining sources under prefixes and filters, and
//! choosing which of many tools a request offers.
//!
//! A dialog's catalog combines its `tools` entries (static handler tools, charms,
//! patterns) with every attached [`ToolSource`] (plugins, MCP servers). [`ToolSet`] is a
//! source made of other sources, each with its own prefix and [`ToolFilter`] (names, a
//! glob, a predicate), so `github.get_issue` and `search.web` can be offered as
//! `work.gh_get_issue` and `work.web` beside each other, and the rest left out.
//!
//! With hundreds of tools, offering all of them costs tokens and confuses models. A
//! [`ToolSelector`] picks the tools of one request; [`KeywordSelector`] (shipped) scores
//! each tool's names and description against the recent conversation and keeps the best,
//! up to a cap, always keeping tools the conversation already called. Install one on a
//! runtime with [`sources::select_with`](super::select_with); without one, every
//! tool is offered.
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use trellis_builtins::sources::selection::{KeywordSelector, ToolSelector};
//! use trellis_builtins::message::Message;
//! use trellis_builtins::model::ToolSpec;
//!
//! let spec = |name: &str, description: &str| ToolSpec {
//!     name: name.replace('.', "_"),
//!     display_name: name.into(),
//!     description: description.into(),
//!     input_schema: Arc::new(json!({"type": "object"})),
//! };
//! let tools = [spec("time.now", "The current time in a zone."), spec("notes.add", "Add a note.")];
//! let chosen = KeywordSelector::new(1).select(&tools, &[Message::user("add a note for me")]);
//! assert_eq!(chosen, [1]);
//! ```

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{CallFuture, SourceTool, ToolSource};
use crate::message::{Message, Part, Role, ToolOutput};
use crate::model::ToolSpec;
use crate::naming::FastMap;

/// Chooses the tools one request offers.
pub trait ToolSelector: Send + Sync + 'static {
    /// The indices (into `tools`, ascending) of the tools to offer, given the conversation
    /// so far (oldest first).
    fn select(&self, tools: &[ToolSpec], conversation: &[Message]) -> Vec<usize>;
}

/// Which tools of a source a [`ToolSet`] keeps.
#[derive(Clone)]
pub enum ToolFilter {
    /// These names only.
    Names(HashSet<String>),
    /// Names matching any of these globs (`*` any run of characters, `?` one character).
    Globs(Vec<String>),
    /// Tools the function accepts.
    Predicate(Arc<dyn Fn(&SourceTool) -> bool + Send + Sync>),
}

impl ToolFilter {
    /// A filter keeping the tools named in `names`.
    pub fn names<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        ToolFilter::Names(names.into_iter().map(Into::into).collect())
    }

    /// Whether `tool` passes.
    pub fn keeps(&self, tool: &SourceTool) -> bool {
        match self {
            ToolFilter::Names(names) => names.contains(&tool.name),
            ToolFilter::Globs(globs) => globs.iter().any(|glob| glob_matches(glob.as_bytes(), tool.name.as_bytes())),
            ToolFilter::Predicate(keep) => keep(tool),
        }
    }
}

/// Glob matching without backtracking blow-up: `*` remembers one restart point.
fn glob_matches(glob: &[u8], name: &[u8]) -> bool {
    let (mut g, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match glob.get(g) {
            Some(b'*') => {
                star = Some((g, n));
                g += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                g += 1;
                n += 1;
            }
            _ => match star {
                Some((sg, sn)) => {
                    g = sg + 1;
                    n = sn + 1;
                    star = Some((sg, sn + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == b'*')
}

/// One source of a [`ToolSet`], with its prefix and filter.
struct Member {
    source: Arc<dyn ToolSource>,
    prefix: String,
    filter: Option<ToolFilter>,
}

/// A [`ToolSource`] combining sources, each under a prefix (`gh_get_issue`) and filter.
/// Trusted only when every part is.
pub struct ToolSet {
    name: String,
    parts: Vec<Member>,
}

impl ToolSet {
    /// An empty set named `name` (its tools are displayed `name.prefix_tool`).
    pub fn new(name: impl Into<String>) -> Self {
        ToolSet { name: name.into(), parts: Vec::new() }
    }

    /// Adds `source`'s tools, named `prefix_tool` (just `tool` for an empty prefix), keeping
    /// those `filter` accepts (all without one).
    pub fn with(mut self, source: Arc<dyn ToolSource>, prefix: &str, filter: Option<ToolFilter>) -> Self {
        self.parts.push(Member { source, prefix: prefix.to_string(), filter });
        self
    }

    fn named(prefix: &str, tool: &str) -> String {
        if prefix.is_empty() {
            tool.to_string()
        } else {
            format!("{prefix}_{tool}")
        }
    }
}

impl ToolSource for ToolSet {
    fn name(&self) -> &str {
        &self.name
    }

    fn tools(&self) -> Arc<[SourceTool]> {
        let mut tools = Vec::new();
        for part in &self.parts {
            let kept = part.source.tools();
            for tool in kept.iter().filter(|t| part.filter.as_ref().is_none_or(|f| f.keeps(t))) {
                let mut tool = tool.clone();
                tool.name = Self::named(&part.prefix, &tool.name);
                tools.push(tool);
            }
        }
        tools.into()
    }

    fn version(&self) -> u64 {
        // Any part's change changes the sum (versions only grow).
        self.parts.iter().fold(0u64, |sum, part| sum.wrapping_add(part.source.version()))
    }

    fn trusted(&self) -> bool {
        self.parts.iter().all(|part| part.source.trusted())
    }

    fn call(&self, tool: &str, arguments: Value, timeout: Duration) -> CallFuture {
        for part in &self.parts {
            let inner = if part.prefix.is_empty() {
                Some(tool)
            } else {
                tool.strip_prefix(part.prefix.as_str()).and_then(|rest| rest.strip_prefix('_'))
            };
            let Some(inner) = inner else { continue };
            let offered = part.source.tools();
            if offered.iter().any(|t| t.name == inner && part.filter.as_ref().is_none_or(|f| f.keeps(t))) {
                return part.source.call(inner, arguments, timeout);
            }
        }
        let message = format!("`{}.{tool}` is not a tool of this set", self.name);
        Box::pin(async move { ToolOutput::ErrorText(message) })
    }
}

/// Scores tools against the recent conversation by shared words (a tool's display name counts
/// three times its description; rare words more than common ones) and offers the best,
/// at most `cap`, in catalog order. Tools the conversation already called are always
/// offered (within the cap), so a tool loop never loses the tool it is using.
#[derive(Debug, Clone)]
pub struct KeywordSelector {
    cap: usize,
}

/// How much of the conversation (the latest text, in bytes) the selector reads.
const RECENT_BYTES: usize = 4096;
/// Words too common to say anything about a tool.
const STOP_WORDS: &[&str] = &[
    "the", "and", "for", "with", "what", "this", "that", "from", "into", "please", "can", "you", "your", "are", "was",
    "how", "get", "set", "all", "any", "its", "have", "has", "will", "would", "could", "should", "about", "me", "my",
];

impl KeywordSelector {
    /// A selector offering at most `cap` tools (at least one).
    pub fn new(cap: usize) -> Self {
        KeywordSelector { cap: cap.max(1) }
    }
}

impl ToolSelector for KeywordSelector {
    fn select(&self, tools: &[ToolSpec], conversation: &[Message]) -> Vec<usize> {
        if tools.len() <= self.cap {
            return (0..tools.len()).collect();
        }
        let (query, called) = recent(conversation);
        // Which query words each tool has, in its names and in its description (bit i is
        // query word i), found in one pass over each text without allocating per word.
        let mut buffer = String::new();
        let mut mask = |text: &str| {
            let mut bits = 0u64;
            each_word(text, &mut buffer, |word| {
                if let Some(&i) = query.get(word) {
                    bits |= 1 << i;
                }
            });
            bits
        };
        let masks: Vec<(u64, u64)> = tools.iter().map(|t| (mask(&t.display_name), mask(&t.description))).collect();
        // Rare words weigh more: ln(1 + N / (1 + tools having the word)).
        let weights: Vec<f64> = (0..query.len())
            .map(|i| {
                let having = masks.iter().filter(|(n, d)| (n | d) & (1 << i) != 0).count();
                (1.0 + tools.len() as f64 / (1.0 + having as f64)).ln()
            })
            .collect();
        let score = |bits: u64| -> f64 {
            weights.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, w)| w).sum()
        };
        let mut scored: Vec<(f64, usize)> = masks
            .iter()
            .enumerate()
            .map(|(index, &(names, description))| {
                let pinned = called.contains(tools[index].name.as_str());
                (if pinned { f64::INFINITY } else { 3.0 * score(names) + score(description) }, index)
            })
            .collect();
        // Best first; equal scores keep catalog order.
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut chosen: Vec<usize> = scored.into_iter().take(self.cap).map(|(_, index)| index).collect();
        chosen.sort_unstable();
        chosen
    }
}

/// The most distinct words of the conversation the selector weighs (one bit each).
const MAX_QUERY_WORDS: usize = 64;

/// The distinct words of the latest text of the conversation (up to [`RECENT_BYTES`] and
/// [`MAX_QUERY_WORDS`], newest first), each with its index, and the wire names of the
/// tools it called.
fn recent(conversation: &[Message]) -> (FastMap<String, usize>, HashSet<&str>) {
    let mut budget = RECENT_BYTES;
    let mut query = FastMap::default();
    let mut called = HashSet::new();
    let mut buffer = String::new();
    for message in conversation.iter().rev() {
        for part in &message.content {
            match part {
                Part::Text { text } if budget > 0 && message.role != Role::Tool => {
                    let mut end = text.len().min(budget);
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    budget -= end;
                    each_word(&text[..end], &mut buffer, |word| {
                        let next = query.len();
                        if next < MAX_QUERY_WORDS && !query.contains_key(word) {
                            query.insert(word.to_string(), next);
                        }
                    });
                }
                Part::ToolCall { name, .. } => {
                    called.insert(name.as_str());
                }
                _ => {}
            }
        }
    }
    (query, called)
}

/// Calls `found` with each lower-case word of `text` (split at anything but letters and
/// digits, and between a lower-case letter and an upper-case one), leaving out stop words
/// and one- or two-letter words, a plural `s` taken off. `buffer` is reused.
fn each_word(text: &str, buffer: &mut String, mut found: impl FnMut(&str)) {
    let mut emit = |buffer: &mut String| {
        let word = match buffer.strip_suffix('s') {
            Some(stem) if stem.len() > 3 && !stem.ends_with('s') => stem,
            _ => buffer.as_str(),
        };
        if word.len() > 2 && !STOP_WORDS.contains(&word) {
            found(word);
        }
        buffer.clear();
    };
    buffer.clear();
    let mut previous_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() || (c.is_uppercase() && previous_lower) {
            emit(buffer);
        }
        previous_lower = c.is_lowercase();
        if c.is_alphanumeric() {
            buffer.extend(c.to_lowercase());
        }
    }
    emit(buffer);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(display: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: display.replace(['.', '-'], "_"),
            display_name: display.into(),
            description: description.into(),
            input_schema: Arc::new(json!({"type": "object"})),
        }
    }

    fn many() -> Vec<ToolSpec> {
        let mut tools: Vec<ToolSpec> =
            (0..200).map(|i| spec(&format!("filler.tool{i}"), "Does something unrelated with widgets.")).collect();
        tools.push(spec("time.get_current_time", "Get the current time in a timezone."));
        tools.push(spec("github.createIssue", "Open an issue in a repository."));
        tools
    }

    #[test]
    fn the_tools_the_conversation_speaks_of_are_offered_within_the_cap() {
        let tools = many();
        let selector = KeywordSelector::new(5);
        let chosen = selector.select(&tools, &[Message::user("What time is it in Tokyo?")]);
        assert_eq!(chosen.len(), 5);
        assert!(chosen.contains(&200), "{chosen:?}");
        let chosen = selector.select(&tools, &[Message::user("please open issues about the crash")]);
        assert!(chosen.contains(&201), "camelCase names and plurals match: {chosen:?}");
    }

    #[test]
    fn a_tool_already_called_stays_offered() {
        let tools = many();
        let call = Part::ToolCall { id: "1".into(), name: "filler_tool7".into(), input: json!({}) };
        let conversation =
            [Message::user("time?"), Message { role: Role::Assistant, content: vec![call], usage: None }];
        let chosen = KeywordSelector::new(2).select(&tools, &conversation);
        assert!(chosen.contains(&7) && chosen.contains(&200), "{chosen:?}");
    }

    #[test]
    fn few_tools_are_all_offered() {
        let tools = [spec("a.b", "x"), spec("c.d", "y")];
        assert_eq!(KeywordSelector::new(2).select(&tools, &[]), [0, 1]);
    }

    #[test]
    fn globs_match_without_blowing_up() {
        assert!(glob_matches(b"get_*", b"get_current_time"));
        assert!(glob_matches(b"*time*", b"get_current_time"));
        assert!(glob_matches(b"g?t_*_time", b"get_current_time"));
        assert!(!glob_matches(b"set_*", b"get_current_time"));
        let long = "a".repeat(5000);
        assert!(!glob_matches("*a*a*a*a*a*a*a*b".as_bytes(), long.as_bytes()));
    }

    struct Fixed(&'static str, Vec<SourceTool>, bool);

    impl ToolSource for Fixed {
        fn name(&self) -> &str {
            self.0
        }
        fn tools(&self) -> Arc<[SourceTool]> {
            self.1.clone().into()
        }
        fn version(&self) -> u64 {
            0
        }
        fn trusted(&self) -> bool {
            self.2
        }
        fn call(&self, tool: &str, _arguments: Value, _timeout: Duration) -> CallFuture {
            let answer = format!("{} ran {tool}", self.0);
            Box::pin(async move { ToolOutput::Text(answer) })
        }
    }

    #[tokio::test]
    async fn a_tool_set_prefixes_filters_and_routes_calls() {
        let tool = |name: &str| SourceTool::new(name, "", json!({"type": "object"})).read_only(true);
        let github = Arc::new(Fixed("github", vec![tool("get_issue"), tool("delete_repo")], true));
        let search = Arc::new(Fixed("search", vec![tool("web"), tool("images")], false));
        let set = ToolSet::new("work").with(github, "gh", Some(ToolFilter::Globs(vec!["get_*".into()]))).with(
            search,
            "",
            Some(ToolFilter::names(["web"])),
        );
        let names: Vec<String> = set.tools().iter().map(|t| t.name.clone()).collect();
        assert_eq!(names, ["gh_get_issue", "web"]);
        assert!(!set.trusted(), "one part is not trusted");
        let ran = set.call("gh_get_issue", json!({}), Duration::from_secs(1)).await;
        assert_eq!(ran, ToolOutput::Text("github ran get_issue".into()));
        let filtered = set.call("gh_delete_repo", json!({}), Duration::from_secs(1)).await;
        assert!(matches!(filtered, ToolOutput::ErrorText(_)), "a filtered-out tool cannot be called");
        let predicate = ToolFilter::Predicate(Arc::new(|t: &SourceTool| t.read_only));
        assert!(predicate.keeps(&tool("x")));
    }
}
