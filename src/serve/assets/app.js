// The Trellis chat page. Everything from charms, models and tools is data: it reaches
// the page only through textContent and attribute values, never as HTML.
"use strict";

const $ = (selector) => document.querySelector(selector);

// Makes an element; children are nodes or strings (strings become text nodes).
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

let chat = null; // the last ChatState
let partial = "";
const charmData = new Map(); // charm id -> CharmData
let candidates = []; // charms a message can mention
const stoppedAt = new Set(); // conversation lengths at which this page stopped a reply
let popup = { open: false, items: [], selected: 0, start: 0 };

function notice(text) {
  const box = $("#notice");
  box.textContent = text || "";
  box.hidden = !text;
}

async function api(method, path, body) {
  const options = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(BASE + path, options);
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const error = new Error(json && json.error ? json.error : `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return json;
}

// Shows a failure, keeping the page usable.
const reporting = (action) => action.catch((error) => notice(error.message));

// --- the conversation -------------------------------------------------------------

// Display names by wire name, kept after a charm is detached so old calls keep theirs.
const displays = new Map();

function displayName(wire) {
  return displays.get(wire) || wire;
}

function resultText(output) {
  if (output.type === "json") {
    const summary = output.value && output.value.summary;
    // A summary leaves out the rest of the result: not that the person edited the call.
    const edited = output.value && output.value.arguments_changed;
    if (typeof summary !== "string") return JSON.stringify(output.value);
    return typeof edited === "string" ? `${summary} (${edited})` : summary;
  }
  return output.type === "error-text" ? `error: ${output.value}` : String(output.value);
}

let summaryOpen = false; // whether the person opened the summary (kept across renders)

// Where the model's view of the conversation was compacted: the turns above are a summary.
function compactionNote(compaction) {
  const toggle = (e) => { summaryOpen = e.target.open; };
  return el("li", { class: "compacted" },
    el("details", summaryOpen ? { open: "", ontoggle: toggle } : { ontoggle: toggle },
      el("summary", {}, "The model reads the turns above as this summary (the conversation keeps them whole)"),
      el("div", { class: "summary" }, compaction.summary)));
}

function renderMessages() {
  const list = $("#messages");
  const items = [];
  const calls = new Map(); // call id -> the tool's wire name
  for (const [index, message] of chat.messages.entries()) {
    const side = message.role === "user" ? "user" : "assistant";
    for (const part of message.content) {
      if (part.type === "text") {
        if (!part.text.trim()) continue;
        items.push(el("li", { class: side }, part.text.trim()));
      } else if (part.type === "file") {
        items.push(el("li", { class: `${side} file` }, filePart(part)));
      } else if (part.type === "tool-call") {
        calls.set(part.id, part.name);
        items.push(el("li", { class: "tool-call", "data-call": part.id },
          `→ ${displayName(part.name)} ${JSON.stringify(part.input)}`));
      } else if (part.type === "tool-result") {
        const failed = part.output.type === "error-text";
        const call = calls.get(part.id);
        const stale = !failed && call ? staleMark(call, part.output) : null;
        items.push(el("li", { class: failed ? "tool-result failed" : "tool-result", "data-call": part.id },
          "← ", ...resultParts(part.output), ...(stale ? [stale] : [])));
      }
    }
    if (stoppedAt.has(index + 1)) items.push(el("li", { class: "stopped" }, "(stopped)"));
    if (chat.compaction && chat.compaction.upto === index + 1) items.push(compactionNote(chat.compaction));
  }
  // How long calls go (an MCP task's stage), while they run.
  for (const step of chat.pending ? chat.progress || [] : []) {
    items.push(el("li", { class: "progress", "data-call": step.call }, `⋯ ${step.tool}: ${step.text}`));
  }
  if (chat.pending && partial) items.push(el("li", { class: "assistant streaming" }, partial));
  // Sent while the reply ran: the reply takes them in at its next step.
  for (const queued of chat.queued || []) {
    const text = queued.content.filter((part) => part.type === "text").map((part) => part.text).join("");
    items.push(el("li", { class: "user queued" }, el("span", { class: "queued-note" }, "waits for the reply: "), text));
  }
  if (chat.result != null && !chat.pending) {
    items.push(el("li", { class: "result" }, el("div", {}, "The reply ended with this value:"),
      el("pre", {}, JSON.stringify(chat.result, null, 2))));
  }
  if (chat.notice) items.push(el("li", { class: "note" }, chat.notice));
  if (chat.error) items.push(el("li", { class: "tool-result failed" }, `the model failed: ${chat.error}`));
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  list.replaceChildren(...items);
  if (atBottom) list.scrollTop = list.scrollHeight;
}

function renderChips() {
  $("#chips").replaceChildren(...chat.attachments.map((a) =>
    el("span", { class: "chip", "data-charm": a.name }, a.name,
      el("button", {
        type: "button", "aria-label": `detach ${a.name}`,
        onclick: () => reporting(api("DELETE", `/api/chat/attachments/${encodeURIComponent(a.name)}`)),
      }, "×"))));
}

function renderTools() {
  const tools = chat.tools;
  $("#tools-chip").textContent = `${tools.length} tool${tools.length === 1 ? "" : "s"}`;
  $("#tools-list").replaceChildren(...tools.map((t) =>
    el("li", { title: t.description }, t.display, el("span", { class: "from" }, `from ${t.from}`))));
}

function formatValue(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 1);
}

function renderPanel() {
  const shown = chat.attachments.filter((a) => a.id && charmData.has(a.id));
  $("#panel .empty").hidden = shown.length > 0;
  $("#charms").replaceChildren(...shown.map((a) => {
    const charm = charmData.get(a.id);
    const fields = Object.entries(charm.data || {}).filter(([key]) => !key.startsWith("$"));
    return el("section", { class: "charm", "data-charm": charm.name },
      el("h3", {}, charm.name),
      el("dl", {}, ...fields.flatMap(([key, value]) => {
        const writer = writerLine(a.id, key);
        return [el("dt", {}, key), el("dd", { "data-field": key }, formatValue(value)), ...(writer ? [writer] : [])];
      })));
  }));
}

// --- plugins: their tools run here, in the browser ---------------------------------

const pluginTools = new Map(); // tool name -> {plugin, tool}
const modules = new Map(); // plugin name -> Promise of its module's bytes
const running = new Map(); // call id -> the run of that call in this page (settled or not)

async function loadPlugins() {
  for (const plugin of await api("GET", "/api/plugins")) {
    for (const tool of plugin.tools) pluginTools.set(tool.name, { plugin, tool });
  }
}

function isPluginCall(interaction) {
  return interaction.kind === "client_execution" && pluginTools.has(interaction.tool);
}

async function moduleOf(plugin) {
  if (!modules.has(plugin.name)) {
    const fetched = fetch(BASE + plugin.module, { credentials: "same-origin" }).then(async (response) => {
      if (!response.ok) throw new Error(`the plugin's module could not be fetched (${response.status})`);
      return response.arrayBuffer();
    });
    modules.set(plugin.name, fetched);
    fetched.catch(() => modules.delete(plugin.name)); // a later call fetches it again
  }
  return modules.get(plugin.name);
}

// Runs one call in a fresh worker: a fresh instance, stopped past the time budget.
function inWorker(plugin, tool, args, bytes) {
  return new Promise((done) => {
    const worker = new Worker("plugin-worker.js");
    const finish = (result) => { clearTimeout(timer); worker.terminate(); done(result); };
    const timer = setTimeout(() => finish({ error: `the plugin ran past its budget of ${plugin.time_budget_ms / 1000} s ` +
      "in the page and was stopped (does it loop forever?)" }), plugin.time_budget_ms);
    worker.onmessage = (event) => finish(event.data);
    worker.onerror = (event) => { event.preventDefault(); finish({ error: `the plugin's worker failed: ${event.message || "it did not start"}` }); };
    worker.postMessage({ module: bytes, export: tool.export, granted: plugin.granted, memoryMib: plugin.memory_mib,
      arguments: args });
  });
}

// Runs a waiting call to a plugin's tool and resolves it with the result; a failure is
// an error result for the model to read, so the conversation goes on.
async function runPluginCall(interaction) {
  const { plugin, tool } = pluginTools.get(interaction.tool);
  let result;
  try {
    result = await inWorker(plugin, tool, interaction.arguments, await moduleOf(plugin));
  } catch (error) {
    result = { error: error.message };
  }
  const output = "output" in result ? result.output : { error: result.error };
  try {
    await api("POST", `/api/interactions/${encodeURIComponent(interaction.call_id)}/resolve`, { output });
  } catch (error) {
    // 409: another tab ran it first and its result counts; nothing is wrong here.
    if (error.status !== 409) notice(error.message);
  }
}

function runPluginCalls() {
  for (const interaction of chat.interactions) {
    if (!isPluginCall(interaction) || running.has(interaction.call_id)) continue;
    running.set(interaction.call_id, runPluginCall(interaction));
  }
}

function render() {
  if (!chat) return;
  runPluginCalls();
  $("#model").textContent = chat.model;
  $("#stop").disabled = !chat.pending;
  renderMessages();
  renderPrompts();
  renderAllowed();
  renderChips();
  renderTools();
  renderPanel();
}

// --- live updates -----------------------------------------------------------------

// The stream sends the whole conversation when it opens (`chat`), then what changed
// (`change`): the messages from `from` on, and the fields that changed.
function changed(change) {
  if (!chat || change.from > chat.messages.length) return false;
  chat.messages.splice(change.from, Infinity, ...change.messages);
  for (const key of ["model", "pending", "error", "notice", "queued", "progress", "interactions", "attachments", "tools",
    "allowed", "compaction", "result"]) {
    if (key in change) chat[key] = change[key];
  }
  return true;
}

function follow() {
  const events = new EventSource(BASE + "/api/chat/events");
  const show = () => {
    for (const tool of chat.tools) displays.set(tool.wire, tool.display);
    render();
  };
  events.addEventListener("chat", (e) => { chat = JSON.parse(e.data); show(); loadWatches(); });
  events.addEventListener("change", (e) => {
    loadWatches();
    if (changed(JSON.parse(e.data))) return show();
    // Out of step (it cannot be, on one stream): start again from the whole state.
    events.close();
    follow();
  });
  events.addEventListener("partial", (e) => {
    const update = JSON.parse(e.data);
    partial = update.append ? partial + update.text : update.text;
    if (chat) renderMessages();
  });
  events.addEventListener("charm", (e) => {
    const charm = JSON.parse(e.data);
    charmData.set(charm.id, charm);
    loadWriters(charm.id);
    loadWatches();
    // The panel, and the tool results whose values this changed.
    if (chat) { renderPanel(); renderMessages(); }
  });
  events.addEventListener("open", () => notice(""));
  events.addEventListener("error", () => {
    // Closed for good (signed out, server gone): say why, from the API's own answer.
    if (events.readyState === EventSource.CLOSED) {
      reporting(api("GET", "/api/chat").then(() => setTimeout(follow, 1000)));
    }
  });
}

// --- the composer and the @-popup -------------------------------------------------

async function loadCandidates() {
  const charms = await api("GET", "/api/charms");
  candidates = charms.filter((c) => !chat || c.id !== chat.charm);
}

// The `@word` being typed just before the caret, if any.
function mentionAtCaret(input) {
  const before = input.value.slice(0, input.selectionStart);
  const match = /(^|[^\p{L}\p{N}_])@([\p{L}\p{N}_ -]*)$/u.exec(before);
  if (!match) return null;
  return { start: before.length - match[2].length - 1, query: match[2] };
}

function renderPopup() {
  const list = $("#mentions");
  list.hidden = !popup.open;
  list.replaceChildren(...popup.items.map((c, i) =>
    el("li", {
      role: "option", id: `mention-${i}`, "data-name": c.name, "aria-selected": String(i === popup.selected),
      onmousedown: (e) => { e.preventDefault(); pick(i); },
    }, c.name, el("span", { class: "pattern" }, c.pattern))));
  $("#input").setAttribute("aria-activedescendant", popup.open ? `mention-${popup.selected}` : "");
}

function updatePopup() {
  const input = $("#input");
  const mention = mentionAtCaret(input);
  const query = mention ? mention.query.toLowerCase() : "";
  const items = mention
    ? candidates
      .filter((c) => c.name.toLowerCase().includes(query))
      .sort((a, b) => Number(!a.name.toLowerCase().startsWith(query)) - Number(!b.name.toLowerCase().startsWith(query)))
    : [];
  popup = { open: items.length > 0, items, selected: 0, start: mention ? mention.start : 0 };
  renderPopup();
}

function pick(index) {
  const charm = popup.items[index];
  if (!charm) return;
  const input = $("#input");
  const caret = input.selectionStart;
  const inserted = `@${charm.name} `;
  input.value = input.value.slice(0, popup.start) + inserted + input.value.slice(caret);
  const at = popup.start + inserted.length;
  input.setSelectionRange(at, at);
  popup = { open: false, items: [], selected: 0, start: 0 };
  renderPopup();
  input.focus();
  reporting(api("POST", "/api/chat/attachments", { charm: charm.id }));
}

function onKey(e) {
  if (popup.open) {
    const n = popup.items.length;
    if (e.key === "ArrowDown") { popup.selected = (popup.selected + 1) % n; renderPopup(); e.preventDefault(); return; }
    if (e.key === "ArrowUp") { popup.selected = (popup.selected + n - 1) % n; renderPopup(); e.preventDefault(); return; }
    if (e.key === "Enter" || e.key === "Tab") { pick(popup.selected); e.preventDefault(); return; }
    if (e.key === "Escape") { popup.open = false; renderPopup(); e.preventDefault(); return; }
  }
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    send();
  }
}

let sending = false; // a message on its way (its files may take a moment to upload)

async function send() {
  const input = $("#input");
  const text = input.value.trim();
  const { files, sent } = takeAttached();
  if ((!text && !files.length) || sending) return;
  sending = true;
  $("#send").disabled = true;
  try {
    await api("POST", "/api/chat/messages", files.length ? { text, files } : { text });
    input.value = "";
    sent();
    notice("");
  } catch (error) {
    notice(error.message);
  } finally {
    sending = false;
    $("#send").disabled = false;
  }
}

function start() {
  const input = $("#input");
  input.addEventListener("input", updatePopup);
  input.addEventListener("keydown", onKey);
  input.addEventListener("focus", () => reporting(loadCandidates()));
  input.addEventListener("blur", () => { popup.open = false; renderPopup(); });
  $("#composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("#stop").addEventListener("click", () => {
    if (chat) stoppedAt.add(chat.messages.length);
    reporting(api("POST", "/api/chat/cancel", {}));
  });
  $("#undo").addEventListener("click", undoTurn);
  $("#tools-chip").addEventListener("click", () => {
    const list = $("#tools-list");
    list.hidden = !list.hidden;
    $("#tools-chip").setAttribute("aria-expanded", String(!list.hidden));
  });
  startFiles();
  reporting(loadCandidates());
  // The plugins first, so a call already waiting is run, not shown as a question.
  reporting(loadPlugins()).finally(follow);
}

start();
