//! The space's registered patterns, as `trellis patterns --json` prints them and the
//! server answers them.

use trellis_runner::Runtime;

/// A registered pattern as `patterns --json` prints it and the server answers it.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct PatternInfo {
    /// The pattern id (`charm new PATTERN`).
    pub id: String,
    /// What its charms are.
    pub description: String,
    /// The JSON schema of its argument.
    pub argument_schema: serde_json::Value,
}

/// The registered patterns.
pub fn pattern_infos(rt: &Runtime) -> Vec<PatternInfo> {
    let all = rt.patterns().all();
    all.iter()
        .map(|p| PatternInfo {
            id: p.id().to_string(),
            description: p.about().to_string(),
            argument_schema: p.argument_schema().clone(),
        })
        .collect()
}
