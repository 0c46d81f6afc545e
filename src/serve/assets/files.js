// Files in the chat page: those attached to the next message (chips, refused here past the
// server's limits, which the server checks again), and the file parts of the transcript:
// images shown from the server, other files as links. Loaded first (app.js uses its
// `BASE`); it uses app.js's `el`, `$`, `notice` and `chat` once the page runs. Names and
// types are data: they reach the page as text and attribute values only.
"use strict";

// Where the page's space is served: "" for a server of one space, "/spaces/NAME" for a
// server of many (the page's address without its last segment). Every API path goes below.
const BASE = location.pathname.replace(/\/[^/]*$/, "");

// The images the server shows inline (it sends every other type, SVG too, as a download).
const INLINE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

let attached = []; // the next message's files: {name, media_type, size, data (base64)}
const shownImages = new Map(); // doc -> its <img>, kept across renders so it loads once

// A size as people read it (powers of 1024), as the server writes it.
function sizeText(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

function fileUrl(doc) {
  return `${BASE}/api/chat/files/${encodeURIComponent(doc)}`;
}

// `name (media type, size)`, as the server describes a file.
function describeFile(part) {
  const name = part.name || (part.media_type.startsWith("image/") ? "an image" : "a file");
  return `${name} (${part.media_type}, ${sizeText(part.size)})`;
}

// A file part of the transcript: an image inline, any other file a link to download it.
function filePart(part) {
  const label = describeFile(part);
  if (!part.doc) return el("span", { class: "file-missing" }, `[${label}: not kept]`);
  if (INLINE_TYPES.includes(part.media_type)) {
    if (!shownImages.has(part.doc)) {
      shownImages.set(part.doc, el("img", { src: fileUrl(part.doc), alt: label, title: label, "data-doc": part.doc }));
    }
    return shownImages.get(part.doc);
  }
  return el("a", { href: fileUrl(part.doc), download: part.name || "", "data-doc": part.doc }, label);
}

// What a tool result shows: its text, or its parts (text and files) in order.
function resultParts(output) {
  if (output.type !== "content") return [resultText(output)];
  return output.value.map((part) => {
    if (part.type === "text") return part.text;
    return part.type === "file" ? filePart(part) : JSON.stringify(part);
  });
}

// The media type the server takes: the browser's guess without parameters, else bytes.
function mediaTypeOf(file) {
  const type = (file.type || "").split(";")[0].trim().toLowerCase();
  return type || "application/octet-stream";
}

function readBase64(file) {
  return new Promise((done, fail) => {
    const reader = new FileReader();
    reader.onload = () => {
      const url = String(reader.result);
      done(url.slice(url.indexOf(",") + 1));
    };
    reader.onerror = () => fail(new Error(`${file.name} could not be read: ${reader.error && reader.error.message}`));
    reader.readAsDataURL(file);
  });
}

// Adds `files` to the next message; one past the limits is refused here, saying why.
async function attachFiles(files) {
  const limits = chat && chat.file_limits;
  const refused = [];
  for (const file of files) {
    const total = attached.reduce((sum, f) => sum + f.size, 0) + file.size;
    if (limits && file.size > limits.per_file) {
      refused.push(`${file.name} is ${sizeText(file.size)}, and a file may be at most ${sizeText(limits.per_file)}: ` +
        "send a smaller one");
    } else if (limits && total > limits.per_message) {
      refused.push(`with ${file.name} this message's files would come to ${sizeText(total)}, more than the ` +
        `${sizeText(limits.per_message)} a message may carry: send it with the next message`);
    } else {
      try {
        attached.push({ name: file.name, media_type: mediaTypeOf(file), size: file.size, data: await readBase64(file) });
      } catch (error) {
        refused.push(error.message);
      }
    }
  }
  renderAttached();
  if (refused.length) notice(refused.join("\n"));
}

function renderAttached() {
  $("#files").replaceChildren(...attached.map((file, index) =>
    el("span", { class: "chip", "data-file": file.name }, `${file.name} (${sizeText(file.size)})`,
      el("button", {
        type: "button", "aria-label": `remove ${file.name}`,
        onclick: () => { attached.splice(index, 1); renderAttached(); },
      }, "×"))));
}

// The files for a request (without the page's own fields), and what to call once it was
// accepted: those files leave the chips (any attached meanwhile stay for the next message).
function takeAttached() {
  const taken = attached.slice();
  const files = taken.map(({ name, media_type, data }) => ({ name, media_type, data }));
  const sent = () => {
    attached = attached.filter((file) => !taken.includes(file));
    renderAttached();
  };
  return { files, sent };
}

// The attach button, and files dropped or pasted on the message box.
function startFiles() {
  const picker = $("#file-input");
  $("#attach").addEventListener("click", () => picker.click());
  picker.addEventListener("change", () => {
    attachFiles([...picker.files]);
    picker.value = ""; // the same file may be picked again
  });
  const box = $("#input");
  const carriesFiles = (e) => e.dataTransfer && [...e.dataTransfer.types].includes("Files");
  box.addEventListener("dragover", (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    box.classList.add("dropping");
  });
  box.addEventListener("dragleave", () => box.classList.remove("dropping"));
  box.addEventListener("drop", (e) => {
    box.classList.remove("dropping");
    if (!e.dataTransfer || !e.dataTransfer.files.length) return;
    e.preventDefault();
    attachFiles([...e.dataTransfer.files]);
  });
  box.addEventListener("paste", (e) => {
    if (!e.clipboardData || !e.clipboardData.files.length) return;
    e.preventDefault();
    attachFiles([...e.clipboardData.files]);
  });
}
