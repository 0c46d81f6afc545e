//! The space a command works on: where it is, opening it (a fresh one seeded), and, for a
//! command that only reads, a snapshot of it when it cannot be opened for writing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use trellis_runner::storage::{SqliteSnapshot, SqliteStorage, Storage, StorageError};
use trellis_runner::Runtime;

use super::{charm::CharmCommand, mcp::McpCommand, plugin::PluginCommand, App, Command};
use crate::terminal;

impl App {
    /// Opens (creating if needed) the space and registers the patterns; a fresh space (no
    /// document at all) gets its seed so there is something to talk to.
    ///
    /// A space file that was there but comes back without any document (truncated, or
    /// replaced by an empty file) is also fresh to the runtime; saying so keeps a lost
    /// space from passing silently for a new one.
    ///
    /// `resume`: whether its conversations go on with a request a stopped process left
    /// (see [`Command::runs_conversations`]); `claim`: how this process holds a space kept
    /// in a database.
    pub(super) fn open_space(&self, place: &Place, resume: bool, claim: &Claim) -> anyhow::Result<Runtime> {
        let existing = match place {
            Place::File(path) => std::fs::metadata(path).ok().filter(std::fs::Metadata::is_file).map(|m| m.len()),
            Place::Postgres(_) => None,
        };
        let storage = match place {
            Place::File(path) => {
                place.open_storage(claim).with_context(|| format!("cannot open the space at {}", path.display()))?
            }
            // The database's error names the space (without its password).
            Place::Postgres(_) => place.open_storage(claim)?,
        };
        let rt = Runtime::with_storage(storage)?;
        self.register(&rt, resume);
        let shown = || place.to_string();
        // Fresh: no document at all. A space whose charms were all removed, or whose list
        // of charms was lost, is not seeded over.
        let fresh = rt.space().doc_ids("").is_empty();
        if let (Some(bytes), true) = (existing, fresh) {
            eprintln!(
                "warning: the space {} existed but held no data ({bytes} bytes); starting a new space with the \
                 reference charms (if you expected your charms there, restore that file from a backup)",
                shown()
            );
        }
        if !fresh && rt.charms().list().is_empty() {
            let orphans = rt.space().doc_ids("charm-").len();
            if orphans > 0 {
                eprintln!(
                    "warning: the space {} holds {orphans} charm document(s) but no list of its charms: it may be \
                     damaged; restore it from a backup",
                    shown()
                );
            }
        }
        if fresh {
            if self.reference_charms {
                trellis_patterns::seed(&rt).context("cannot seed the fresh space with the reference charms")?;
            }
            for seed in &self.seeds {
                seed(&rt).context("cannot seed the fresh space")?;
            }
        }
        // Whatever this command changes, the watches on it find out here.
        trellis_builtins::watch::arm(&rt);
        Ok(rt)
    }

    /// The space as it was last saved, read without its lock and never written (see
    /// [`Runtime::open_snapshot`]), for a command that only reads; says so on standard
    /// error, with `why` the space could not be opened.
    pub(super) fn open_snapshot(&self, path: &Path, why: &str) -> anyhow::Result<Runtime> {
        let snapshot = SqliteSnapshot::open(path)
            .with_context(|| format!("cannot read the space at {} ({why})", path.display()))?;
        let rt = self.open_to_read(Box::new(snapshot))?;
        eprintln!(
            "note: the space {} {why}: showing it as it was last saved (this command saves nothing)",
            terminal::safe_line(&path.display().to_string())
        );
        Ok(rt)
    }

    /// A runtime on `storage` with the patterns registered, for reading what it holds: it
    /// goes on with no conversation a stopped process left, and seeds nothing.
    pub(super) fn open_to_read(&self, storage: Box<dyn Storage>) -> anyhow::Result<Runtime> {
        let rt = Runtime::with_storage(storage)?;
        self.register(&rt, false);
        Ok(rt)
    }

    /// Registers the reference patterns, the dialog builtin and the app's own.
    fn register(&self, rt: &Runtime, resume: bool) {
        use trellis_builtins::dialog::{DialogSettings, LlmDialog};
        trellis_patterns::register_all(rt);
        let settings = DialogSettings { resume, ..DialogSettings::default() };
        rt.register_builtin(Arc::new(LlmDialog::new().with_settings(settings).with_tools(self.tools.clone())));
        for builtin in &self.builtins {
            rt.register_builtin(Arc::clone(builtin));
        }
        for pattern in &self.patterns {
            rt.register_pattern(pattern.clone());
        }
    }
}

impl Command {
    /// Whether the command runs the space's conversations, so that one a stopped process
    /// left in the middle of a request goes on: `chat`, `resolve` and `serve`. Any other
    /// leaves it for them (`pending` lists it).
    pub(super) fn runs_conversations(&self) -> bool {
        matches!(self, Command::Chat { .. } | Command::Resolve { .. } | Command::Serve(_))
    }

    /// Whether the command only shows what the space holds, so that a snapshot of it
    /// serves as well (what it computes to show a charm need not be saved).
    pub(super) fn only_reads(&self) -> bool {
        matches!(
            self,
            Command::Patterns
                | Command::Charm(CharmCommand::List | CharmCommand::Get { .. })
                | Command::Tools { .. }
                | Command::Pending { .. }
                | Command::Mcp(McpCommand::List { .. })
                | Command::Plugin(PluginCommand::List)
        )
    }
}

/// Whether opening the space failed because another process holds it.
pub(super) fn in_use(error: &anyhow::Error) -> bool {
    storage_error(error).is_some_and(|e| matches!(e, StorageError::InUse { .. }))
}

/// Where the node holding the space takes requests, when opening it failed for that.
pub(super) fn holder_addr(error: &anyhow::Error) -> Option<String> {
    match storage_error(error)? {
        StorageError::Owned { addr, .. } => addr.clone(),
        _ => None,
    }
}

/// Whether opening the space failed because this user may not write its file (or the
/// lock file beside it).
pub(super) fn unwritable(error: &anyhow::Error) -> bool {
    storage_error(error).is_some_and(StorageError::is_unwritable)
}

/// `error` (the space cannot be opened for writing), saying which commands read it anyway.
pub(super) fn readers_still_can(error: &anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "{}; commands that only read it (`charm list`, `charm get`, `tools`, `pending`) still can",
        super::explain(error)
    )
}

fn storage_error(error: &anyhow::Error) -> Option<&StorageError> {
    error.chain().find_map(|cause| cause.downcast_ref::<StorageError>())
}

/// Where a space lives: a SQLite file, or a space in a PostgreSQL database
/// (`postgres://USER@HOST/DB?space=NAME`).
#[derive(Debug, Clone)]
pub enum Place {
    /// The space's SQLite file.
    File(PathBuf),
    /// A space in PostgreSQL, several `trellis serve` nodes may share.
    Postgres(Box<trellis_postgres::SpaceUrl>),
}

impl Place {
    /// `--space`'s value: a PostgreSQL URL, or the path of a file (any other URL is
    /// refused: taken for a path, it would make folders named after its scheme).
    pub fn parse(given: PathBuf) -> anyhow::Result<Place> {
        if let Some(text) = given.to_str().filter(|text| trellis_postgres::SpaceUrl::is_postgres(text)) {
            return Ok(Place::Postgres(Box::new(trellis_postgres::SpaceUrl::parse(text)?)));
        }
        check_not_url(&given)?;
        Ok(Place::File(given))
    }

    /// The space's storage, opened for writing: the file's lock, or the database's lease
    /// for this node, held as `claim` says.
    pub fn open_storage(&self, claim: &Claim) -> Result<Box<dyn Storage>, StorageError> {
        Ok(match self {
            Place::File(path) => Box::new(SqliteStorage::open(path)?),
            Place::Postgres(url) => {
                let holder = holder(claim.addr.clone());
                match &claim.database {
                    Some(database) => Box::new(database.open(url.space(), holder)?),
                    None => Box::new(claim.options().open(url, holder)?),
                }
            }
        })
    }
}

/// How this process holds a space kept in a database: where it takes requests for it (a
/// server's address, for other nodes to forward to) and how long its lease runs unrenewed.
#[derive(Debug, Clone, Default)]
pub struct Claim {
    /// `http://HOST:PORT`, when this process takes requests.
    pub addr: Option<String>,
    /// The lease's length [default: `trellis_postgres::DEFAULT_LEASE`].
    pub lease: Option<std::time::Duration>,
    /// The connections this process keeps to the space's database, when it holds many of
    /// its spaces (a server of a database), made with their own lease (`lease` is then not
    /// read); else the space gets connections of its own.
    pub database: Option<trellis_postgres::Database>,
}

impl Claim {
    /// How a space in a database is opened under this claim.
    pub fn options(&self) -> trellis_postgres::OpenOptions {
        let options = trellis_postgres::OpenOptions::new();
        match self.lease {
            Some(lease) => options.lease(lease),
            None => options,
        }
    }
}

impl std::fmt::Display for Place {
    /// The path, or the URL without its password; escaped for a terminal.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Place::File(path) => path.display().to_string(),
            Place::Postgres(url) => url.to_string(),
        };
        f.write_str(&terminal::safe_line(&text))
    }
}

/// This process as the holder of a space's lease: the machine and the process, and where
/// it takes requests for the space (a server's address).
pub(super) fn holder(addr: Option<String>) -> trellis_postgres::Holder {
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "localhost".into());
    let holder = trellis_postgres::Holder::new(format!("{host}:{}", std::process::id()));
    match addr {
        Some(addr) => holder.at(addr),
        None => holder,
    }
}

/// Refuses a space given as a URL (`postgres://...`, `file://...`): taken for a relative
/// path, it would make a folder tree named after the scheme in the current directory.
pub(super) fn check_not_url(path: &Path) -> anyhow::Result<()> {
    let text = path.to_string_lossy();
    let scheme = text.split_once("://").map(|(scheme, _)| scheme).filter(|scheme| {
        scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    });
    match scheme {
        Some(scheme) => anyhow::bail!(
            "--space {} is a URL ({scheme}://), and Trellis keeps a space in a file or in PostgreSQL: give the \
             path of a file (it is created if missing) or postgres://USER@HOST/DB?space=NAME",
            terminal::safe_line(&text)
        ),
        None => Ok(()),
    }
}

/// The default space: `space.sqlite` in the user's data directory.
pub(super) fn default_space() -> anyhow::Result<PathBuf> {
    let data = trellis_runner::dirs::data_dir()
        .context("cannot find a data directory (neither XDG_DATA_HOME nor HOME is set); pass --space PATH")?;
    Ok(data.join("space.sqlite"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn a_space_named_by_a_url_is_refused_and_a_path_is_not() {
        for url in ["postgres://localhost/trellis", "file:///tmp/s.db", "sqlite+x://a"] {
            let error = super::check_not_url(Path::new(url)).expect_err(url).to_string();
            assert!(error.contains("is a URL") && error.contains("give the path"), "{error}");
            assert!(!error.contains("  "), "one sentence, not a gap where a line was joined: {error}");
        }
        for path in ["s.db", "/tmp/a://b/s.db", "./postgres:/x", "dir/s.db"] {
            assert!(super::check_not_url(Path::new(path)).is_ok(), "{path}");
        }
    }
}
