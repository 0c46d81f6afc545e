// The prompts of the chat page: the calls waiting for a person (approvals, with Always
// allow and edited arguments; questions, confirmations, choices; a tool's form or URL),
// and the tools allowed to run without asking. Loaded before app.js, whose `el`, `$`,
// `api`, `reporting`, `chat` and plugin calls it uses once the page runs. What a tool or
// model says is data: it reaches the page as text and attribute values only.
"use strict";

// Answers a waiting call; a refusal (an edited input that does not fit the tool, a
// call another tab answered) is said in the prompt it came from.
function resolve(call, answer, problem) {
  problem.hidden = true;
  return api("POST", `/api/interactions/${encodeURIComponent(call)}/resolve`, answer).catch((error) => {
    problem.textContent = error.message;
    problem.hidden = false;
  });
}

// The approval's controls: Approve, Always allow, Deny, and the arguments to edit. A call
// with fields only the person sets (`person_only`) is approved only with the arguments
// the person gives: those fields start empty, the model's values are in the question as
// suggestions, and there is no plain Approve or Always allow.
function approvalControls(interaction, answer, deny, reason, problem) {
  const call = interaction.call_id;
  const personOnly = interaction.person_only || [];
  const args = el("textarea", { class: "arguments", rows: "4", spellcheck: "false", "aria-label": `arguments of ${interaction.tool}` });
  const shown = { ...interaction.arguments };
  for (const field of personOnly) shown[field] = "";
  args.value = JSON.stringify(shown, null, 2);
  const runEdited = () => {
    let input;
    try {
      input = JSON.parse(args.value);
    } catch (error) {
      problem.textContent = `The arguments are not JSON (${error.message}): fix them, or approve the model's as they are.`;
      problem.hidden = false;
      return;
    }
    answer({ approve_with: { input } });
  };
  const edit = el("details", { class: "edit" }, el("summary", {}, "Edit arguments"), args,
    el("button", { type: "button", onclick: runEdited }, "Run with these arguments"));
  // What the call would change, value by value: approving commits exactly that.
  const lines = (interaction.preview && interaction.preview.lines) || [];
  const preview = el("ul", { class: "preview", "aria-label": "what it would change" },
    ...lines.map((line) => el("li", {}, line)));
  preview.hidden = lines.length === 0;
  if (personOnly.length) {
    edit.open = true;
    return [el("div", { class: "ask" }, `${interaction.tool}: ${interaction.prompt}`), preview, edit, deny, reason];
  }
  return [
    el("div", { class: "ask" }, `Approve ${interaction.tool} ${JSON.stringify(interaction.arguments)}? ${interaction.prompt}`),
    preview,
    el("button", { type: "button", onclick: () => answer("approve") }, "Approve"),
    el("button", { type: "button", title: `${interaction.tool} runs without asking from now on in this conversation`,
      onclick: () => answer({ approve_with: { always: true } }) }, `Always allow ${interaction.tool}`),
    deny, reason, edit,
  ];
}

// A tool's question mid-call (an MCP server's elicitation): a URL to visit, or a form of
// flat fields, each an input of its type; Decline and Cancel send the tool MCP's own
// answers. The form's fields are checked against the tool's schema by the server.
function elicitationControls(interaction, answer) {
  const refuse = [
    el("button", { type: "button", onclick: () => answer("decline") }, "Decline"),
    el("button", { type: "button", onclick: () => answer("cancel") }, "Cancel"),
  ];
  const url = interaction.input.url;
  if (typeof url === "string") {
    const link = /^https?:\/\//.test(url) ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, url) : el("code", {}, url);
    return [el("div", { class: "ask" }, `${interaction.tool} asks you to visit a URL: ${interaction.prompt}`), link,
      el("button", { type: "button", onclick: () => answer({ answer: "done" }) }, "Done"), ...refuse];
  }
  const schema = interaction.input.schema || {};
  const required = schema.required || [];
  const fields = Object.entries(schema.properties || {}).map(([name, field]) => {
    // Each option's value, and what the person reads (a `oneOf` option's title).
    const options = (field.enum || []).map((o) => [String(o), String(o)]).concat((field.oneOf || field.anyOf || [])
      .filter((o) => o.const !== undefined).map((o) => [String(o.const), String(o.title || o.const)]));
    let input;
    if (field.type === "boolean") input = el("input", { type: "checkbox" });
    else if (options.length && field.type !== "array") {
      input = el("select", {}, el("option", { value: "" }, ""),
        ...options.map(([value, label]) => el("option", { value }, label)));
    } else input = el("input", { type: field.type === "number" || field.type === "integer" ? "number" : "text" });
    input.setAttribute("aria-label", name);
    input.dataset.field = name;
    const about = field.description || field.title || "";
    return { name, field, input, row: el("label", { class: "field" }, `${name}${required.includes(name) ? " *" : ""}`, input, el("small", {}, about)) };
  });
  const send = () => {
    const output = {};
    for (const { name, field, input } of fields) {
      if (field.type === "boolean") output[name] = input.checked;
      else if (input.value === "") continue;
      else if (field.type === "number" || field.type === "integer") output[name] = Number(input.value);
      else if (field.type === "array") output[name] = input.value.split(",").map((v) => v.trim()).filter(Boolean);
      else output[name] = input.value;
    }
    answer({ output });
  };
  return [el("div", { class: "ask" }, `${interaction.tool} asks: ${interaction.prompt}`), ...fields.map((f) => f.row),
    el("button", { type: "button", onclick: send }, "Send"), ...refuse];
}

function prompt(interaction) {
  const call = interaction.call_id;
  if (isPluginCall(interaction)) {
    return el("div", { class: "prompt running", "data-call": call, "data-kind": interaction.kind },
      `running ${interaction.tool} (plugin ${pluginTools.get(interaction.tool).plugin.name}) in this page…`);
  }
  const box = el("div", { class: "prompt", "data-call": call, "data-kind": interaction.kind });
  const problem = el("div", { class: "problem", role: "alert", hidden: "" });
  const answer = (reply) => resolve(call, reply, problem);
  const reason = el("input", { type: "text", placeholder: "why not (optional)", "aria-label": "reason" });
  const deny = el("button", { type: "button", onclick: () => answer({ deny: reason.value || "no reason given" }) }, "Deny");
  switch (interaction.kind) {
    case "approval":
      box.append(...approvalControls(interaction, answer, deny, reason, problem));
      break;
    case "elicitation":
      box.append(...elicitationControls(interaction, answer));
      break;
    case "confirmation":
      box.append(el("div", { class: "ask" }, interaction.prompt),
        el("button", { type: "button", onclick: () => answer({ answer: "yes" }) }, "Yes"),
        el("button", { type: "button", onclick: () => answer({ answer: "no" }) }, "No"));
      break;
    case "choice":
      box.append(el("div", { class: "ask" }, interaction.prompt),
        ...interaction.options.map((option) =>
          el("button", { type: "button", onclick: () => answer({ answer: option }) }, option)));
      break;
    default: {
      const text = el("input", { type: "text", "aria-label": "your answer" });
      const send = () => text.value.trim() && answer({ answer: text.value });
      text.addEventListener("keydown", (e) => { if (e.key === "Enter") send(); });
      box.append(el("div", { class: "ask" }, interaction.prompt), text,
        el("button", { type: "button", onclick: send }, "Answer"));
    }
  }
  box.append(problem);
  return box;
}

// A call's prompt stays the same element while it waits, so what the person typed in it
// (edited arguments, a reason) outlives the changes that render the page again.
const prompts = new Map(); // call id -> its prompt

function renderPrompts() {
  const shown = chat.interactions.map((interaction) => {
    const kept = prompts.get(interaction.call_id);
    // A plugin's call becomes a "running" note once the plugins are known.
    const box = kept && kept.classList.contains("running") === isPluginCall(interaction) ? kept : prompt(interaction);
    prompts.set(interaction.call_id, box);
    return box;
  });
  for (const call of prompts.keys()) {
    if (!chat.interactions.some((interaction) => interaction.call_id === call)) prompts.delete(call);
  }
  $("#prompts").replaceChildren(...shown);
}

// The tools an approval allowed always: each can be made to ask again.
function renderAllowed() {
  const allowed = chat.allowed || [];
  const box = $("#allowed");
  box.hidden = allowed.length === 0;
  box.replaceChildren(el("span", {}, "Run without asking:"), ...allowed.map((tool) =>
    el("span", { class: "chip", "data-tool": tool }, tool,
      el("button", {
        type: "button", title: `${tool} asks for approval again`,
        onclick: () => reporting(api("DELETE", `/api/chat/allowed/${encodeURIComponent(tool)}`)),
      }, "ask again"))));
}
