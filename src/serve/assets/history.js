// What the chat page shows of the state's history: who wrote each field of an attached
// charm last (under its value in the panel), the tool results whose values changed since
// the call (marked "changed since"), the Undo turn button, and the conversation's watches. Loaded before app.js, whose
// `el`, `$`, `api`, `reporting`, `notice`, `chat` and `charmData` it uses once the page
// runs. Values and writers' names are data: they reach the page as text only.
"use strict";

const writers = new Map(); // charm id -> its provenance report
const fetchingWriters = new Map(); // charm id -> whether another fetch should follow

// Fetches who wrote charm `id`'s fields, after each change of it (one fetch at a time).
function loadWriters(id) {
  if (fetchingWriters.has(id)) {
    fetchingWriters.set(id, true);
    return;
  }
  fetchingWriters.set(id, false);
  api("GET", `/api/charms/${encodeURIComponent(id)}/provenance`)
    .then((report) => { writers.set(id, report); if (chat) renderPanel(); })
    .catch(() => {})
    .finally(() => {
      const again = fetchingWriters.get(id);
      fetchingWriters.delete(id);
      if (again) loadWriters(id);
    });
}

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return s < 86400 ? `${Math.floor(s / 3600)} h ago` : `${Math.floor(s / 86400)} d ago`;
}

// The line under field `field` of charm `id`: its last writer, or that it is derived.
function writerLine(id, field) {
  const report = writers.get(id);
  if (!report) return null;
  const entries = report.provenance.filter((entry) => entry.field === field);
  const said = entries.map((entry) => {
    const where = entry.path === field ? "" : `${entry.path}: `;
    if (entry.by) return `${where}by ${entry.by.name}, ${ago(entry.at_ms)}`;
    return entry.derived ? "derived" : "";
  }).filter(Boolean);
  return said.length ? el("dd", { class: "writer", "data-writer": field }, said.join("; ")) : null;
}

const isHandler = (value) => value && typeof value === "object" && "$stream" in value;

// For a tool result of a call on an attached charm: what of the values it showed is
// different now (`count is now 7`), or nothing.
function changedSince(callName, output) {
  const shown = output.type === "json" && output.value && output.value.result;
  const charmName = displayName(callName).split(".")[0];
  const attached = chat.attachments.find((a) => a.name === charmName);
  const now = attached && attached.id && charmData.get(attached.id);
  if (!shown || typeof shown !== "object" || !now || !now.data) return [];
  return Object.entries(shown)
    .filter(([field, value]) => !field.startsWith("$") && !isHandler(value) && field in now.data)
    .filter(([field, value]) => JSON.stringify(value) !== JSON.stringify(now.data[field]))
    .map(([field]) => `${field} is now ${JSON.stringify(now.data[field])}`);
}

// The mark of a stale tool result, or nothing.
function staleMark(callName, output) {
  const changes = changedSince(callName, output);
  if (!changes.length) return null;
  return el("span", { class: "stale", title: "the values this result showed have changed since" },
    ` changed since: ${changes.join(", ")}`);
}

// Puts back what the last request's tool calls changed; says what it did, or why not.
async function undoTurn() {
  try {
    const undone = await api("POST", "/api/chat/undo", {});
    const lines = undone.changes.lines.join("; ");
    const outside = undone.not_undone.length ? ` Not undone (outside the space): ${undone.not_undone.join("; ")}.` : "";
    notice(`Undid request ${undone.request}: ${lines}.${outside}`);
  } catch (error) {
    notice(error.message);
  }
}

// --- watches ----------------------------------------------------------------------

let watchList = [];
let fetchingWatches = null; // null, or whether another fetch should follow

// Fetches the watches, after each change of the conversation or a charm.
function loadWatches() {
  if (fetchingWatches !== null) {
    fetchingWatches = true;
    return;
  }
  fetchingWatches = false;
  api("GET", "/api/watches")
    .then((all) => { watchList = all; renderWatches(); })
    .catch(() => {})
    .finally(() => {
      const again = fetchingWatches;
      fetchingWatches = null;
      if (again) loadWatches();
    });
}

// This conversation's watches: condition, note, whether it holds, how often it fired.
function renderWatches() {
  const mine = watchList.filter((w) => !chat || w.conversation_doc === chat.charm);
  $("#panel .empty-watches").hidden = mine.length > 0;
  $("#watch-list").replaceChildren(...mine.map((w) => {
    const state = `${w.holds ? "holds now" : "does not hold now"}, fired ${w.fired} time${w.fired === 1 ? "" : "s"}`;
    const remove = () => reporting(api("DELETE", `/api/watches/${encodeURIComponent(w.id)}`).then(loadWatches));
    return el("li", { class: "watch", "data-watch": w.id },
      el("code", {}, `${w.charm_name}: ${w.condition}`),
      el("span", { class: "watch-state" }, ` ${state}`),
      w.note ? el("div", { class: "watch-note" }, `note: ${w.note}`) : "",
      w.error ? el("div", { class: "problem" }, w.error) : "",
      el("button", { type: "button", "aria-label": `remove watch ${w.id}`, onclick: remove }, "Remove"));
  }));
}
