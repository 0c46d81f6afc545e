//! The user's directories, as the XDG base directory specification names them: where
//! Trellis keeps the default space and looks for the user's own files (the MCP servers
//! file, the plugin trust file). An unset or empty variable falls back to `$HOME`.

use std::path::PathBuf;

/// `$XDG_CONFIG_HOME/trellis`, else `~/.config/trellis`; `None` when neither is set.
pub fn config_dir() -> Option<PathBuf> {
    base("XDG_CONFIG_HOME", ".config")
}

/// `$XDG_DATA_HOME/trellis`, else `~/.local/share/trellis`; `None` when neither is set.
pub fn data_dir() -> Option<PathBuf> {
    base("XDG_DATA_HOME", ".local/share")
}

fn base(variable: &str, under_home: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(variable).filter(|dir| !dir.is_empty()).map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").filter(|home| !home.is_empty()).map(|home| PathBuf::from(home).join(under_home))
    })?;
    Some(dir.join("trellis"))
}
