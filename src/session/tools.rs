//! The tools some charms offer a model, flattened as `trellis tools --json` prints them
//! and the server answers them.

use serde_json::json;
use trellis_builtins::catalog::Catalog;
use trellis_runner::Runtime;

/// The tools the charms named (ids or names) offer a model, flattened as `tools --json`
/// prints them and the server answers them.
pub fn flattened(rt: &Runtime, charms: &[String]) -> trellis_runner::Result<serde_json::Value> {
    let mut entries = serde_json::Map::new();
    for name in charms {
        let id = rt.charms().find(name)?;
        entries.insert(id.to_string(), json!({"charm": rt.charms().result(&id).to_json()}));
    }
    Ok(Catalog::build(rt, &serde_json::Value::Object(entries)).flattened())
}
