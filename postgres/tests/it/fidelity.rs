//! Documents come back byte for byte as written: JSON is kept as text (key order, big
//! numbers, escapes `jsonb` would refuse or rewrite), and ids sort and select by prefix as
//! SQLite's do, `%` and `_` included.

use std::time::Duration;

use serde_json::json;
use trellis_postgres::{Holder, OpenOptions};
use trellis_runner::storage::conformance::doc;
use trellis_runner::storage::{parse_document, Storage, StoredDoc};

use crate::server::server;

#[test]
fn values_and_ids_come_back_as_written() {
    let server = server!();
    let url = server.new_space("fidelity");
    let storage = OpenOptions::new().lease(Duration::from_secs(30)).open(&url, Holder::new("a")).expect("open");
    let text = r#"{"z":1,"a":[12345678901234567890,1.50,-0.0],"nul":"a\u0000b","é":"ü"}"#;
    let value = parse_document("text", text).expect("parses");
    let ids = ["p%", "p_x", "pa", "p\u{e9}", "q"];
    let mut writes: Vec<StoredDoc> = ids.iter().map(|id| doc(id, 1, json!(id))).collect();
    writes.push(StoredDoc { id: "text".into(), version: 7, value: value.clone() });
    storage.submit(writes).wait().expect("durable");

    let back = storage.load_doc("text").expect("load").expect("there");
    assert_eq!((back.version, back.value.to_json().to_string()), (7, value.to_json().to_string()));
    assert_eq!(storage.doc_ids("p").expect("ids"), ["p%", "p_x", "pa", "p\u{e9}"], "byte order, prefix not a pattern");
    assert_eq!(storage.doc_ids("p%").expect("ids"), ["p%"]);
    assert_eq!(storage.doc_ids("p_").expect("ids"), ["p_x"]);
}
