//! Limits that several layers check: named once, here at the bottom, so the errors of the
//! storage floor can state them without reaching up into the layers that enforce them.

/// The most characters a charm name may have: names are shown in lists, prompts and
/// tool names.
pub const MAX_NAME_CHARS: usize = 100;

/// The most containers (objects, arrays) a value entering the runtime may nest: an
/// event, a pattern argument, a message or a tool input. `{"a": [1]}` nests 2.
pub const MAX_DEPTH: usize = 64;

/// The most containers a stored document may nest, counting the path a value is written
/// at. Every write is checked against it, and storage loads documents up to it.
pub const MAX_DOC_DEPTH: usize = 512;
