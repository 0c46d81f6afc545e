//! `trellis token`: the space's API tokens, made, listed and revoked from the command line.

use trellis_runner::Runtime;

use super::output::print;
use super::Format;
use crate::terminal::safe_line;
use crate::tokens::{self, NewToken, TokenError, TokenInfo};

/// `trellis token ...`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Make a bearer token for the API; it is shown once.
    New {
        /// What it is for (shown by `token list`).
        #[arg(long, default_value = "api")]
        name: String,
    },
    /// List the tokens: id, name, when made (never the tokens themselves).
    List,
    /// Revoke a token by its id.
    Revoke {
        /// The id `token list` shows.
        id: String,
    },
}

/// Runs a `trellis token` command on the space.
pub fn run(rt: &Runtime, command: TokenCommand, format: Format) -> anyhow::Result<()> {
    let shown = |e: TokenError| anyhow::anyhow!("{}", safe_line(&e.to_string()));
    match command {
        TokenCommand::New { name } => print_new(&tokens::make(rt, &name).map_err(shown)?, format),
        TokenCommand::List => {
            print_list(&tokens::list(rt).into_iter().map(TokenInfo::from).collect::<Vec<_>>(), format)
        }
        TokenCommand::Revoke { id } => print_revoked(&tokens::revoke(rt, &id).map_err(shown)?.into(), format),
    }
    Ok(())
}

/// Prints a token just made (`token new`).
pub fn print_new(new: &NewToken, format: Format) {
    let json = serde_json::to_value(new).unwrap_or_default();
    print(format, &json, || {
        format!(
            "{}\n(token {} named {}: send it as `Authorization: Bearer TOKEN`; it is not shown again)",
            new.token,
            new.id,
            safe_line(&new.name)
        )
    });
}

/// Prints the tokens (`token list`).
pub fn print_list(all: &[TokenInfo], format: Format) {
    let json = serde_json::to_value(all).unwrap_or_default();
    print(format, &json, || {
        if all.is_empty() {
            return format!("no tokens; `{} token new` makes one", crate::program::name());
        }
        let row = |t: &TokenInfo| format!("{}  {}", t.id, safe_line(&t.name));
        all.iter().map(row).collect::<Vec<_>>().join("\n")
    });
}

/// Prints a revoked token (`token revoke`).
pub fn print_revoked(info: &TokenInfo, format: Format) {
    print(format, &serde_json::json!({"id": info.id, "revoked": true}), || {
        format!("revoked token {} ({})", info.id, safe_line(&info.name))
    });
}
