//! What the plugins' errors ask the user to do, in words a front end recognises to point
//! at its own command (the `trellis` command adds `` `trellis plugin list` `` after
//! [`LIST_PLUGINS`]). A library error describes the action; only a command knows the name
//! it is run by.

/// Make a signing key pair.
pub const GENERATE_KEYS: &str = "generate a key pair";
/// See which plugins are installed.
pub const LIST_PLUGINS: &str = "list the plugins";
/// Take an installed plugin away.
pub const REMOVE_PLUGIN: &str = "remove the installed one";
/// Install a bundle that has no signature, on purpose.
pub const INSTALL_UNSIGNED: &str = "install its bundle yourself, allowing it unsigned";
