//! `trellis serve`: one space, or with `--database URL` the spaces of a PostgreSQL
//! database, each opened the first time a request names it (`crate::serve::run_many`). Opening one runs this
//! program's own code (its patterns and builtins, its seed for a fresh space), which the
//! server asks for over a channel, so the program itself need not be shared between
//! threads.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;
use trellis_postgres::SpaceUrl;

use super::space::{Claim, Place};
use super::{connections, App};
use crate::serve::Opened;

/// `trellis serve`'s flags.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Where to listen (port 0 picks one). Loopback only, unless --allow-remote.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
    pub addr: std::net::SocketAddr,
    /// Let --addr be an address other machines can reach. Anyone who gets a token
    /// acts on your charms, and plain HTTP shows it to the network on the way.
    #[arg(long)]
    pub allow_remote: bool,
    /// The chatbot pattern whose conversation the chat uses [default: the program's chatbot].
    #[arg(long, value_name = "PATTERN")]
    pub chatbot: Option<String>,
    /// Requests per minute each client address may make.
    #[arg(long, value_name = "N", default_value_t = 600, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_limit: u32,
    #[command(flatten)]
    pub connections: connections::ConnectionArgs,
    /// Let clients choose scripted models (`scripted:PATH`, replayed JSON turns, for
    /// tests) from the files in DIR; without it the server opens no file a client names.
    #[arg(long, value_name = "DIR")]
    pub scripts: Option<PathBuf>,
    /// Serve every space of this PostgreSQL database (postgres://USER@HOST/DB, no
    /// space=) instead of --space: a request names its space, /spaces/NAME/...; a space
    /// another node holds is forwarded there. Run several such servers on one database
    /// and a space survives one of them stopping.
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// For a space in PostgreSQL: how long this node's hold on a space lasts without
    /// renewal (renewed every third of it), so how soon another node takes a space over
    /// when this one dies.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = super::positive_seconds)]
    pub lease: f64,
    /// With --database: the URL the other nodes reach this one at (http://HOST:PORT),
    /// kept with each space it holds so they forward its requests here [default: http://
    /// and --addr]. Needed when --addr is 0.0.0.0 or the nodes see this machine by
    /// another address.
    #[arg(long, value_name = "URL", requires = "database", value_parser = advertised_url)]
    pub advertise: Option<String>,
    /// The MCP servers whose tools the page's chat offers (a server of one space; their
    /// questions mid-call are asked on the page).
    #[command(flatten)]
    pub mcp: super::mcp::McpArgs,
}

/// `--advertise`'s value: an http(s) URL of a host and port, nothing after them.
fn advertised_url(text: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(text).map_err(|error| format!("{error}; give http://HOST:PORT"))?;
    let plain = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    if !plain {
        return Err("give http://HOST:PORT (or https://), with no path, query or credentials".to_owned());
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

impl ServeArgs {
    /// How a server of one space holds it. Its lease names no address: the database's
    /// nodes and commands ask for `/spaces/NAME/...`, which only a server of many spaces
    /// (`--database`) answers, so they are told which process holds the space instead.
    pub fn claim(&self) -> Claim {
        Claim { addr: None, lease: Some(std::time::Duration::from_secs_f64(self.lease)), database: None }
    }
}

/// How many spaces may wait to be opened at once.
const OPENING: usize = 16;

/// How many spaces are opened at once, each on a thread (and a database connection to
/// look it up) of its own.
const OPENERS: usize = 8;

impl App {
    /// Serves every space of the database `--database` names until the process ends.
    pub(super) async fn serve_many(&self, args: ServeArgs) -> anyhow::Result<()> {
        let database = args.database.clone().context("--database names no database")?;
        if !args.mcp.is_empty() {
            anyhow::bail!(
                "--mcp and --mcp-config attach MCP servers to a server of one space; a server of a database's spaces \
                 offers none"
            );
        }
        let database = database.as_str();
        let probe = space_url(database, "readiness")?;
        let lease = args.lease;
        let advertise = args.advertise.clone();
        let options = self.serve_options(args, None);
        let (opener, mut requests) = mpsc::channel::<crate::serve::OpenRequest>(OPENING);
        let ready: Arc<dyn Fn() -> Result<(), String> + Send + Sync> =
            Arc::new(move || trellis_postgres::ping(&probe).map_err(|e| e.to_string()));
        let nodes = space_url(database, "nodes")?;
        let secret = tokio::task::block_in_place(|| trellis_postgres::cluster_secret(&nodes))?;
        // One set of connections for every space this node opens.
        let shared = Claim { lease: Some(Duration::from_secs_f64(lease)), ..Claim::default() };
        let shared = Claim { database: Some(shared.options().database(&nodes)?), ..shared };
        // A task of its own, so that the server goes on while spaces are opened here.
        let mut server =
            tokio::spawn(crate::serve::run_many(options, opener, crate::serve::Node { ready, secret, advertise }));
        let runtime = tokio::runtime::Handle::current();
        let openers = Arc::new(tokio::sync::Semaphore::new(OPENERS));
        // Each space opens on a thread of its own (at most `OPENERS` at once): opening
        // talks to the database (up to a connection's timeout when it does not answer) and
        // may seed the space, and a slow one holds up no other.
        tokio::task::block_in_place(|| {
            std::thread::scope(|opening| loop {
                let next = runtime.block_on(async {
                    let permit = tokio::select! {
                        served = &mut server => return Err(served),
                        permit = Arc::clone(&openers).acquire_owned() => permit.ok(),
                    };
                    tokio::select! {
                        served = &mut server => Err(served),
                        Some(request) = requests.recv() => Ok((request, permit)),
                    }
                });
                let (request, permit) = match next {
                    Ok(next) => next,
                    Err(served) => return served.context("the server stopped unexpectedly")?,
                };
                let claim = Claim { addr: Some(request.addr.clone()), ..shared.clone() };
                let runtime = &runtime;
                let opener = std::thread::Builder::new().name("trellis-open".to_owned());
                let started = opener.spawn_scoped(opening, move || {
                    let _permit = permit;
                    // The space's conversations start their work on the server's runtime.
                    let _entered = runtime.enter();
                    let opened = match request.follow {
                        true => self.open_copy(database, &request.space, &claim),
                        false => self.open_existing(database, &request.space, &claim).map(Opened::Held),
                    };
                    // The request was dropped (its client left): nothing to answer.
                    let _ = request.reply.send(opened);
                });
                // Its asker hears that the space could not be opened; the server goes on.
                if let Err(error) = started {
                    tracing::error!(%error, "could not start a thread to open a space");
                }
            })
        })
    }

    /// Opens the space `space` of `database` for this node, if the database holds it.
    fn open_existing(&self, database: &str, space: &str, claim: &Claim) -> anyhow::Result<trellis_runner::Runtime> {
        let url = space_url(database, space)?;
        if !trellis_postgres::space_exists(&url)? {
            return Err(crate::serve::NoSuchSpace(space.to_owned()).into());
        }
        self.open_space(&Place::Postgres(Box::new(url)), true, claim)
    }

    /// A copy of the space `space` of `database`, which another node holds, to follow:
    /// the feed of its changes is started first, so that none made durable while the
    /// copy reads is missed.
    fn open_copy(&self, database: &str, space: &str, claim: &Claim) -> anyhow::Result<Opened> {
        let url = space_url(database, space)?;
        let feed = trellis_postgres::ChangeFeed::follow(&url, None)?;
        let storage = match &claim.database {
            Some(database) => database.follow(space)?,
            None => claim.options().database(&url)?.follow(space)?,
        };
        Ok(Opened::Copy(self.open_to_read(Box::new(storage))?, Box::new(feed)))
    }

    /// How `trellis serve` runs, from its flags; `space`: the space's file, if it has one.
    pub(super) fn serve_options(&self, args: ServeArgs, space: Option<PathBuf>) -> crate::serve::Options {
        let ServeArgs {
            addr,
            allow_remote,
            chatbot,
            rate_limit,
            connections,
            scripts,
            database: _,
            lease: _,
            advertise: _,
            mcp: _,
        } = args;
        crate::serve::Options {
            addr,
            allow_remote,
            chatbot: chatbot.unwrap_or_else(|| self.chatbot.clone()),
            rate_per_minute: rate_limit,
            limits: connections.limits(),
            space,
            tools: self.tools.clone(),
            scripts,
        }
    }
}

/// The URL of space `space` in `database` (a URL that names no space itself).
fn space_url(database: &str, space: &str) -> anyhow::Result<SpaceUrl> {
    let mut url = reqwest::Url::parse(database)
        .ok()
        .filter(|url| matches!(url.scheme(), "postgres" | "postgresql"))
        .with_context(|| "--database takes a PostgreSQL URL, postgres://USER[:PASSWORD]@HOST[:PORT]/DB".to_owned())?;
    if url.query_pairs().any(|(key, _)| key == "space") {
        anyhow::bail!("--database names a database, not a space: remove its space= (requests name their space)");
    }
    url.query_pairs_mut().append_pair("space", space);
    Ok(SpaceUrl::parse(url.as_str())?)
}
