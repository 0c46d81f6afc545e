//! Who changed what (`trellis charm get NAME --provenance`) and undoing a turn
//! (`trellis undo`), as the terminal shows them.

use serde_json::Value;
use trellis_builtins::dialog::{RequestId, UndoError, UndoneRequest};
use trellis_runner::Writer;

use super::output::print;
use super::Format;
use crate::session::Session;

/// `trellis charm get NAME --provenance`, from what [`provenance`](crate::session::provenance)
/// reports (here or through the server).
pub fn print_provenance(report: &Value, format: Format) {
    print(format, report, || {
        let (now, name) = (trellis_runner::now_ms(), report["name"].as_str().unwrap_or_default());
        let fields = report["provenance"].as_array().into_iter().flatten();
        fields.map(|f| line(name, f, now)).collect::<Vec<_>>().join("\n")
    });
}

/// `Counter.count: the model (offline) calling Counter.increment in request 1 of Chat, 3 s ago`.
fn line(charm: &str, field: &Value, now: u64) -> String {
    let at = format!("{charm}.{}", field["path"].as_str().unwrap_or_default());
    let by = match (&field["by"], field["derived"].as_bool()) {
        (Value::Null, Some(true)) => "a derived value (a computation writes it)".to_string(),
        (Value::Null, _) => "no writer recorded (set when the charm was made, or by code that names none)".to_string(),
        (by, _) => {
            let ago = now.saturating_sub(field["at_ms"].as_u64().unwrap_or(now)) / 1000;
            format!("{}, {} ago", by["name"].as_str().unwrap_or("?"), seconds(ago))
        }
    };
    format!("{at}: {by}")
}

fn seconds(s: u64) -> String {
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86400),
    }
}

/// `trellis undo [--request ID]`: puts back what the conversation's request changed in
/// the space, and tells the model.
pub fn undo(session: &Session, request: Option<u64>, format: Format) -> anyhow::Result<()> {
    let by = Writer::new("undo", format!("{} undo", crate::program::name()));
    let undone = session.dialog().undo(request.map(RequestId), by).map_err(|e| match e {
        UndoError::Not { request, why } => anyhow::anyhow!(
            "cannot undo request {request}: {why}; name another with --request ID (`{} charm get NAME --provenance` \
             shows which request wrote a value)",
            crate::program::name()
        ),
        other => anyhow::anyhow!("{other}"),
    })?;
    print_undone(&undone, format)
}

/// What `trellis undo` says of a request undone (here or through the server).
pub fn print_undone(undone: &UndoneRequest, format: Format) -> anyhow::Result<()> {
    print(format, &serde_json::to_value(undone)?, || {
        let mut lines = vec![format!("undid request {}: put back", undone.request)];
        lines.extend(undone.changes.lines.iter().map(|l| format!("  {l}")));
        if !undone.not_undone.is_empty() {
            lines.push(format!("not undone, as it happened outside the space: {}", undone.not_undone.join("; ")));
        }
        lines.push("the model is told in the conversation".into());
        lines.join("\n")
    });
    Ok(())
}
