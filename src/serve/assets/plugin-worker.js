// Runs one call of a plugin's WebAssembly module, in a worker of its own so that the page
// can stop a call that runs too long (it terminates the worker). Its memory is capped (the
// module's maximum is lowered to the plugin's cap before it is compiled). The module gets only the
// `trellis` functions its granted permissions cover (the same as the terminal's sandbox,
// see trellis_plugins::sandbox::host); a module importing anything else is refused.
//
// The ABI: exports `memory`, `alloc(len) -> ptr` and, per tool, `(ptr, len) -> i64`
// returning `(result_ptr << 32) | result_len`; arguments and result are UTF-8 JSON.
//
// Message in: {module: ArrayBuffer, export, granted: ["clock", ...], memoryMib, arguments}.
// Message out: {output: JSON} or {error: "why"}.
"use strict";

// The largest arguments or result passed through the ABI (as in the terminal's sandbox).
const MAX_JSON_BYTES = 1024 * 1024;
// The most bytes one `random` call fills.
const MAX_RANDOM_BYTES = 64 * 1024;

// The host functions each permission allows.
function hostFunctions(granted, memory) {
  const functions = {};
  if (granted.includes("clock")) functions.now_ms = () => BigInt(Date.now());
  if (granted.includes("random")) {
    functions.random = (ptr, len) => {
      if (len < 0 || len > MAX_RANDOM_BYTES) throw new Error(`trellis.random fills at most ${MAX_RANDOM_BYTES} bytes`);
      crypto.getRandomValues(bytesAt(memory(), ptr >>> 0, len));
    };
  }
  // A page has no environment variables: a granted variable is never set here (-1).
  if (granted.some((permission) => permission.startsWith("env:"))) functions.env = () => -1;
  return functions;
}

// WebAssembly pages are 64 KiB.
const PAGE_BYTES = 65536;

function readLeb(bytes, at) {
  let value = 0;
  for (let shift = 0; shift < 35; shift += 7) {
    const byte = bytes[at++];
    if (byte === undefined) throw new Error("the plugin's module is truncated");
    value += (byte & 0x7f) * 2 ** shift;
    if (!(byte & 0x80)) return [value, at];
  }
  throw new Error("the plugin's module has a malformed number");
}

function leb(value) {
  const out = [];
  do {
    const byte = value % 128;
    value = Math.floor(value / 128);
    out.push(value ? byte | 0x80 : byte);
  } while (value);
  return out;
}

// The module with its memory's maximum lowered to the cap, so that growing past it fails
// inside the plugin (as the terminal's sandbox makes it fail), not in the browser.
function capMemory(bytes, memoryMib) {
  const capPages = (memoryMib * 1024 * 1024) / PAGE_BYTES;
  const input = new Uint8Array(bytes);
  const out = [...input.subarray(0, 8)];
  let at = 8;
  while (at < input.length) {
    const id = input[at];
    const [size, start] = readLeb(input, at + 1);
    const end = start + size;
    if (end > input.length) throw new Error("the plugin's module is truncated");
    if (id !== 5) {
      out.push(...input.subarray(at, end));
    } else {
      let [count, p] = readLeb(input, start);
      const section = leb(count);
      for (; count > 0; count--) {
        const flags = input[p];
        if (flags !== 0 && flags !== 1) throw new Error("the plugin's memory must be a plain 32-bit memory");
        let min, max = capPages;
        [min, p] = readLeb(input, p + 1);
        if (flags === 1) [max, p] = readLeb(input, p);
        if (min > capPages) throw new Error(`the plugin's memory starts above its cap of ${memoryMib} MiB`);
        section.push(1, ...leb(min), ...leb(Math.min(max, capPages)));
      }
      if (p !== end) throw new Error("the plugin's memory section is malformed");
      out.push(5, ...leb(section.length), ...section);
    }
    at = end;
  }
  return new Uint8Array(out);
}

// `len` bytes of the module's memory at `ptr`, refused when out of bounds.
function bytesAt(memory, ptr, len) {
  if (ptr + len > memory.buffer.byteLength) throw new Error("the plugin pointed outside its memory");
  return new Uint8Array(memory.buffer, ptr, len);
}

async function call({ module: bytes, export: name, granted, memoryMib, arguments: args }) {
  const module = await WebAssembly.compile(capMemory(bytes, memoryMib));
  let memory = null;
  const trellis = hostFunctions(granted, () => memory);
  for (const wanted of WebAssembly.Module.imports(module)) {
    if (wanted.module !== "trellis" || wanted.kind !== "function" || !Object.hasOwn(trellis, wanted.name)) {
      throw new Error(`the module imports \`${wanted.module}.${wanted.name}\`, which it was not granted: plugins get ` +
        "only the `trellis` functions their permissions allow");
    }
  }
  const { exports } = await WebAssembly.instantiate(module, { trellis });
  memory = exports.memory;
  const run = exports[name];
  if (!(memory instanceof WebAssembly.Memory) || typeof exports.alloc !== "function" || typeof run !== "function") {
    throw new Error(`the plugin's module cannot be used: it must export \`memory\`, \`alloc\` and \`${name}\``);
  }
  const input = new TextEncoder().encode(JSON.stringify(args));
  if (input.length > MAX_JSON_BYTES) throw new Error(`the arguments are larger than ${MAX_JSON_BYTES} bytes`);
  const at = exports.alloc(input.length) >>> 0;
  bytesAt(memory, at, input.length).set(input);
  const packed = BigInt.asUintN(64, BigInt(run(at, input.length)));
  const ptr = Number(packed >> 32n);
  const len = Number(packed & 0xffffffffn);
  if (len > MAX_JSON_BYTES) throw new Error(`the plugin's result is larger than ${MAX_JSON_BYTES} bytes`);
  const text = new TextDecoder("utf-8", { fatal: true }).decode(bytesAt(memory, ptr, len));
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`the plugin's result is not JSON (${error.message})`);
  }
}

self.onmessage = async (event) => {
  try {
    self.postMessage({ output: await call(event.data) });
  } catch (error) {
    // A trap (WebAssembly.RuntimeError) is the plugin's failure, as in the terminal.
    const why = error instanceof WebAssembly.RuntimeError ? `the plugin failed: ${error.message}` : error.message;
    self.postMessage({ error: String(why) });
  }
};
