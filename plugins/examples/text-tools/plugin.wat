;; text-tools: an installable Trellis plugin in WebAssembly text.
;;
;; The ABI (see trellis_plugins::sandbox): export `memory`, `alloc(len) -> ptr`, and per
;; tool a function `(args_ptr, args_len) -> i64` that returns `(result_ptr << 32) |
;; result_len`, arguments and result being UTF-8 JSON. Every call runs in a fresh
;; instance, so this bump allocator never frees.
;;
;; Assemble it with `wat2wasm plugin.wat -o plugin.wasm` (wabt), or with the `wat` crate
;; as the tests do.
(module
  ;; Needs the `clock` permission (the manifest asks for it; the user grants it).
  (import "trellis" "now_ms" (func $now_ms (result i64)))

  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))

  (data (i32.const 16) "{\"words\":")                           ;; 9 bytes
  (data (i32.const 32) "{\"unix_ms\":")                         ;; 11 bytes
  (data (i32.const 48) "\"text\"")                              ;; 6 bytes
  (data (i32.const 64) "{\"error\":\"expected a \\\"text\\\" string\"}") ;; 38 bytes

  ;; Reserves `len` bytes, growing the memory when needed (within the sandbox's cap).
  (func $alloc (export "alloc") (param $len i32) (result i32)
    (local $at i32) (local $end i32)
    (local.set $at (global.get $heap))
    (local.set $end (i32.add (local.get $at) (local.get $len)))
    (block $enough
      (loop $grow
        (br_if $enough (i32.le_u (local.get $end) (i32.shl (memory.size) (i32.const 16))))
        (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then (unreachable)))
        (br $grow)))
    (global.set $heap (local.get $end))
    (local.get $at))

  ;; Packs a result's place for the host.
  (func $result (param $ptr i32) (param $len i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32)) (i64.extend_i32_u (local.get $len))))

  ;; Writes `n` in decimal at `out`; returns the end.
  (func $write_u64 (param $n i64) (param $out i32) (result i32)
    (local $len i32) (local $m i64) (local $end i32)
    (local.set $m (local.get $n))
    (local.set $len (i32.const 1))
    (block $counted
      (loop $count
        (br_if $counted (i64.lt_u (local.get $m) (i64.const 10)))
        (local.set $m (i64.div_u (local.get $m) (i64.const 10)))
        (local.set $len (i32.add (local.get $len) (i32.const 1)))
        (br $count)))
    (local.set $end (i32.add (local.get $out) (local.get $len)))
    (local.set $m (local.get $n))
    (loop $digit
      (local.set $len (i32.sub (local.get $len) (i32.const 1)))
      (i32.store8 (i32.add (local.get $out) (local.get $len))
        (i32.add (i32.const 48) (i32.wrap_i64 (i64.rem_u (local.get $m) (i64.const 10)))))
      (local.set $m (i64.div_u (local.get $m) (i64.const 10)))
      (br_if $digit (i32.gt_u (local.get $len) (i32.const 0))))
    (local.get $end))

  ;; `{"<prefix>N}` in fresh memory, packed.
  (func $number_object (param $prefix i32) (param $prefix_len i32) (param $n i64) (result i64)
    (local $out i32) (local $end i32)
    (local.set $out (call $alloc (i32.const 48)))
    (memory.copy (local.get $out) (local.get $prefix) (local.get $prefix_len))
    (local.set $end (call $write_u64 (local.get $n) (i32.add (local.get $out) (local.get $prefix_len))))
    (i32.store8 (local.get $end) (i32.const 125)) ;; }
    (call $result (local.get $out) (i32.sub (i32.add (local.get $end) (i32.const 1)) (local.get $out))))

  (func $is_space (param $c i32) (result i32)
    (i32.or (i32.or (i32.eq (local.get $c) (i32.const 32)) (i32.eq (local.get $c) (i32.const 9)))
            (i32.or (i32.eq (local.get $c) (i32.const 10)) (i32.eq (local.get $c) (i32.const 13)))))

  ;; Skips white space from `at` up to `end`.
  (func $skip_space (param $at i32) (param $end i32) (result i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $at) (local.get $end)))
        (br_if $done (i32.eqz (call $is_space (i32.load8_u (local.get $at)))))
        (local.set $at (i32.add (local.get $at) (i32.const 1)))
        (br $next)))
    (local.get $at))

  ;; Where the string value of the key "text" starts (after its quote), or -1. A quote
  ;; inside a JSON string is escaped, so `"text"` only matches a token.
  (func $find_text (param $at i32) (param $end i32) (result i32)
    (local $i i32) (local $p i32)
    (block $none
      (loop $scan
        (br_if $none (i32.gt_u (i32.add (local.get $at) (i32.const 6)) (local.get $end)))
        (local.set $i (i32.const 0))
        (block $differs
          (loop $compare
            (br_if $differs (i32.ne (i32.load8_u (i32.add (local.get $at) (local.get $i)))
                                    (i32.load8_u (i32.add (i32.const 48) (local.get $i)))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br_if $compare (i32.lt_u (local.get $i) (i32.const 6))))
          ;; The key matched: a colon and a quote must follow.
          (local.set $p (call $skip_space (i32.add (local.get $at) (i32.const 6)) (local.get $end)))
          (if (i32.and (i32.lt_u (local.get $p) (local.get $end)) (i32.eq (i32.load8_u (local.get $p)) (i32.const 58)))
            (then
              (local.set $p (call $skip_space (i32.add (local.get $p) (i32.const 1)) (local.get $end)))
              (if (i32.and (i32.lt_u (local.get $p) (local.get $end)) (i32.eq (i32.load8_u (local.get $p)) (i32.const 34)))
                (then (return (i32.add (local.get $p) (i32.const 1))))))))
        (local.set $at (i32.add (local.get $at) (i32.const 1)))
        (br $scan)))
    (i32.const -1))

  ;; count_words({"text": "..."}) -> {"words": N}
  (func (export "count_words") (param $ptr i32) (param $len i32) (result i64)
    (local $at i32) (local $end i32) (local $c i32) (local $space i32) (local $in_word i32) (local $words i64)
    (local.set $end (i32.add (local.get $ptr) (local.get $len)))
    (local.set $at (call $find_text (local.get $ptr) (local.get $end)))
    (if (i32.eq (local.get $at) (i32.const -1))
      (then (return (call $result (i32.const 64) (i32.const 38)))))
    (block $closed
      (loop $next
        (br_if $closed (i32.ge_u (local.get $at) (local.get $end)))
        (local.set $c (i32.load8_u (local.get $at)))
        (br_if $closed (i32.eq (local.get $c) (i32.const 34)))
        (local.set $space (call $is_space (local.get $c)))
        ;; An escape: \n, \t and \r are white space; anything else is a character.
        (if (i32.eq (local.get $c) (i32.const 92))
          (then
            (local.set $at (i32.add (local.get $at) (i32.const 1)))
            (local.set $c (i32.load8_u (local.get $at)))
            (local.set $space (i32.or (i32.or (i32.eq (local.get $c) (i32.const 110)) (i32.eq (local.get $c) (i32.const 116)))
                                      (i32.eq (local.get $c) (i32.const 114))))))
        (if (local.get $space)
          (then (local.set $in_word (i32.const 0)))
          (else
            (if (i32.eqz (local.get $in_word))
              (then (local.set $words (i64.add (local.get $words) (i64.const 1)))))
            (local.set $in_word (i32.const 1))))
        (local.set $at (i32.add (local.get $at) (i32.const 1)))
        (br $next)))
    (call $number_object (i32.const 16) (i32.const 9) (local.get $words)))

  ;; now({}) -> {"unix_ms": N}
  (func (export "now") (param $ptr i32) (param $len i32) (result i64)
    (call $number_object (i32.const 32) (i32.const 11) (call $now_ms))))
