//! The name the program is run by (`App::new`'s, `trellis` for the `trellis` binary), for
//! the messages that name its subcommands, and the commands that go with the actions
//! library errors ask for.
//!
//! The library crates describe what to do ("list the patterns": see
//! `trellis_runner::error::actions`, `trellis_plugins::actions`); only the program knows
//! what it is called, so it adds its command after each ([`with_commands`]).

use std::sync::OnceLock;

use trellis_plugins::actions as plugin;
use trellis_runner::error::actions as runner;

/// Set once, by the `App` that runs; `trellis` until then.
static NAME: OnceLock<String> = OnceLock::new();

/// The name used before an `App` runs (tests of the library's parts).
const DEFAULT: &str = "trellis";

/// Each action a library error may ask for, and the subcommand that does it.
const COMMANDS: &[(&str, &str)] = &[
    (runner::LIST_PATTERNS, "patterns"),
    (runner::LIST_CHARMS, "charm list"),
    (runner::RENAME_CHARMS, "charm rename"),
    (plugin::GENERATE_KEYS, "plugin keygen"),
    (plugin::LIST_PLUGINS, "plugin list"),
    (plugin::REMOVE_PLUGIN, "plugin remove NAME"),
    (plugin::INSTALL_UNSIGNED, "plugin install PATH --allow-unsigned"),
];

/// Names the program `name` for the rest of the process (the first name given stays: one
/// process runs one program).
pub(crate) fn set_name(name: &str) {
    let _ = NAME.set(name.to_string());
}

/// The program's name.
pub(crate) fn name() -> &'static str {
    NAME.get().map_or(DEFAULT, String::as_str)
}

/// `text` with the program's command added after each action it asks for:
/// "list the patterns" becomes "list the patterns (`trellis patterns`)".
pub(crate) fn with_commands(text: &str) -> String {
    let mut out = text.to_string();
    for (action, command) in COMMANDS {
        if let Some(at) = out.find(action) {
            out.insert_str(at + action.len(), &format!(" (`{} {command}`)", name()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_a_library_asks_for_gets_the_command_that_does_it() {
        let error = trellis_runner::Error::UnknownPattern("nope".into()).to_string();
        assert_eq!(
            with_commands(&error),
            "unknown pattern `nope`; list the patterns (`trellis patterns`) to see the registered ones"
        );
        let error = trellis_plugins::store::StoreError::AlreadyInstalled("clock".into()).to_string();
        assert!(
            with_commands(&error).contains("remove the installed one (`trellis plugin remove NAME`) first"),
            "{error}"
        );
        assert_eq!(with_commands("no action here"), "no action here");
    }
}
