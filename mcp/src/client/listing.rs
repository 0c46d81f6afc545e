//! Listing a server's tools: page by page, as [`SourceTool`]s, within bounds. A listing
//! stops at a cursor it saw before and at [`MAX_TOOLS`], and keeps tools only up to
//! [`MAX_TOOLS_BYTES`] (names, descriptions and schemas bounded too), noting what it left
//! out.

use std::collections::HashSet;

use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::Peer;
use rmcp::RoleClient;
use serde_json::Value;
use trellis_builtins::sources::selection::ToolFilter;
use trellis_builtins::sources::SourceTool;

use super::config::ServerSpec;
use super::outcome;

/// The most tools kept from one server.
pub const MAX_TOOLS: usize = 1024;
/// The most bytes of tool definitions (names, descriptions and input schemas) kept from
/// one server: every request carries every tool offered, so a server offering a thousand
/// tools of the largest size would make each request tens of megabytes.
pub const MAX_TOOLS_BYTES: usize = 2 << 20;
/// The most `tools/list` pages read in one listing.
const MAX_PAGES: usize = 64;
/// The longest tool name kept, and the longest description (bytes).
const MAX_NAME: usize = 128;
const MAX_DESCRIPTION: usize = 8 * 1024;
/// The largest input schema a listed tool may have (serialised).
const MAX_SCHEMA_BYTES: usize = 64 << 10;

/// Every tool of the server its spec's `tools` globs keep, page by page: stops at a
/// cursor seen before (a server whose cursor never advances would otherwise be asked
/// forever), at [`MAX_PAGES`] pages and at [`MAX_TOOLS`] tools, and keeps tools only up
/// to [`MAX_TOOLS_BYTES`], saying so in the notes.
pub(super) async fn list_all(
    peer: &Peer<RoleClient>,
    spec: &ServerSpec,
) -> Result<(Vec<SourceTool>, Vec<String>), String> {
    let server = spec.name.as_str();
    let wanted = (!spec.tools.is_empty()).then(|| ToolFilter::Globs(spec.tools.clone()));
    let mut listing = Listing::default();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
        let page = peer.list_tools(Some(params)).await.map_err(|e| format!("tools/list failed: {e}"))?;
        for tool in page.tools {
            match source_tool(tool) {
                Ok((tool, _)) if wanted.as_ref().is_some_and(|w| !w.keeps(&tool)) => {}
                Ok((tool, bytes)) => listing.keep(tool, bytes),
                Err(note) => listing.notes.push(note),
            }
        }
        if listing.tools.len() >= MAX_TOOLS {
            let note = format!("the server offers more than {MAX_TOOLS} tools; only the first {MAX_TOOLS} are used");
            return Ok(listing.ended(note));
        }
        match page.next_cursor {
            None => return Ok(listing.done()),
            Some(next) if !seen.insert(next.clone()) => {
                let note = format!(
                    "the server sent the cursor `{}` again; listing stopped with {} tools",
                    outcome::bounded(next).escape_debug(),
                    listing.tools.len()
                );
                tracing::warn!(server, "{note}");
                return Ok(listing.ended(note));
            }
            Some(next) => cursor = Some(next),
        }
    }
    Ok(listing.ended(format!("the tool list has more than {MAX_PAGES} pages; the rest is left out")))
}

/// The tools kept so far in a listing, with what they weigh, and the notes on those left
/// out.
#[derive(Default)]
struct Listing {
    tools: Vec<SourceTool>,
    notes: Vec<String>,
    /// The bytes of the tools kept.
    bytes: usize,
    /// The tools left out for want of room (see [`MAX_TOOLS_BYTES`]).
    over_budget: usize,
}

impl Listing {
    /// Keeps `tool` (of `bytes`), unless one of its name is kept already, or there are
    /// [`MAX_TOOLS`], or it would take the tools past [`MAX_TOOLS_BYTES`].
    fn keep(&mut self, tool: SourceTool, bytes: usize) {
        if self.tools.iter().any(|t| t.name == tool.name) {
            self.notes.push(format!("the tool `{}` was listed twice; the first is used", tool.name.escape_debug()));
            return;
        }
        // Past the count, the listing ends with a note of its own.
        if self.tools.len() >= MAX_TOOLS {
            return;
        }
        if self.bytes + bytes > MAX_TOOLS_BYTES {
            self.over_budget += 1;
            return;
        }
        self.bytes += bytes;
        self.tools.push(tool);
    }

    /// The tools and notes, once the listing stopped early for the reason `note` gives.
    fn ended(mut self, note: String) -> (Vec<SourceTool>, Vec<String>) {
        self.notes.push(note);
        self.done()
    }

    /// The tools and notes.
    fn done(mut self) -> (Vec<SourceTool>, Vec<String>) {
        if self.over_budget > 0 {
            self.notes.push(format!(
                "the server's tools come to more than {} MiB (names, descriptions and input schemas); {} of them \
                 are left out",
                MAX_TOOLS_BYTES >> 20,
                self.over_budget
            ));
        }
        (self.tools, self.notes)
    }
}

/// A listed tool as a [`SourceTool`], with the bytes of its name, description and input
/// schema; a tool with an unusable name or too large a schema is left out (the note).
fn source_tool(tool: Tool) -> Result<(SourceTool, usize), String> {
    let name = tool.name.to_string();
    if name.is_empty() || name.len() > MAX_NAME || name.contains(char::is_control) {
        return Err(format!(
            "a tool named `{}` was left out: its name is empty, too long or has control characters",
            name.chars().take(MAX_NAME).collect::<String>().escape_debug()
        ));
    }
    let mut description = tool.description.map(|d| d.to_string()).unwrap_or_default();
    if description.len() > MAX_DESCRIPTION {
        let mut end = MAX_DESCRIPTION;
        while !description.is_char_boundary(end) {
            end -= 1;
        }
        description.truncate(end);
    }
    // The spec's defaults: not read-only, and (when not read-only) destructive.
    let hints = tool.annotations.unwrap_or_default();
    let read_only = hints.read_only_hint == Some(true);
    let destructive = !read_only && hints.destructive_hint != Some(false);
    let schema = Value::Object((*tool.input_schema).clone());
    // Every request carries every offered schema: one tool must not weigh like a thousand.
    let size = serde_json::to_vec(&schema).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_SCHEMA_BYTES {
        return Err(format!(
            "the tool `{name}` was left out: its input schema is {size} bytes, more than {MAX_SCHEMA_BYTES}"
        ));
    }
    let bytes = name.len() + description.len() + size;
    let idempotent = hints.idempotent_hint == Some(true);
    let tool = SourceTool::new(name, description, schema).read_only(read_only).destructive(destructive);
    Ok((tool.idempotent(idempotent), bytes))
}
