//! Connections to the server, and what its errors mean for the user.
//!
//! Every connection gets a connect timeout and a statement timeout unless the URL set its
//! own, so an unreachable or stuck server fails a call instead of hanging the node: a
//! writer blocked forever would hold every later commit, a reader every first read of a
//! document. Errors name what to fix (start the server, create the database, check the
//! password), because the driver's own words ("db error", "error connecting to server")
//! do not say.

use std::time::Duration;

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use trellis_runner::storage::StorageError;

use crate::SpaceUrl;

/// How long a connection attempt may take when the URL does not say (`connect_timeout`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long unacknowledged data may stay on a connection before it is given up, when the
/// URL does not say (`tcp_user_timeout`): a server that vanished from the network.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens connections to one space's database, each set up the same way.
#[derive(Clone)]
pub(crate) struct Connector {
    config: postgres::Config,
    /// The URL as shown to the user (no password).
    target: String,
    statement_timeout: Duration,
}

impl Connector {
    pub(crate) fn new(url: &SpaceUrl, connect_timeout: Duration, statement_timeout: Duration) -> Connector {
        let mut config = url.config().clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(connect_timeout);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            // Names Trellis's connections in `pg_stat_activity`.
            config.application_name("trellis");
        }
        Connector { config, target: url.to_string(), statement_timeout }
    }

    /// The same connections, for errors about the database rather than one space.
    pub(crate) fn for_database(&self, url: &SpaceUrl) -> Connector {
        Connector { target: url.database_shown().to_owned(), ..self.clone() }
    }

    /// The URL as shown to the user.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }

    /// A new connection, with the statement timeout set.
    pub(crate) fn connect(&self) -> Result<Client, StorageError> {
        self.connect_with_timeout(self.statement_timeout)
    }

    /// A new connection whose statements give up after `timeout` (the lease's renewal must
    /// not wait longer than a renewal period).
    pub(crate) fn connect_with_timeout(&self, timeout: Duration) -> Result<Client, StorageError> {
        let mut client = self.config.connect(NoTls).map_err(|error| self.error("connect", &error))?;
        self.limit(&mut client, timeout)?;
        Ok(client)
    }

    /// Makes the connection's statements give up after `timeout`.
    pub(crate) fn limit(&self, client: &mut Client, timeout: Duration) -> Result<(), StorageError> {
        let millis = timeout.as_millis().max(1);
        client
            .batch_execute(&format!("SET statement_timeout = {millis}"))
            .map_err(|error| self.error("set the statement timeout", &error))
    }

    /// `error`, met while trying to `action`, as a storage error saying what to do.
    pub(crate) fn error(&self, action: &str, error: &postgres::Error) -> StorageError {
        let (what, hint) = explain(error);
        let message = match action {
            "connect" => format!("could not connect to {}: {what}", servers(&self.config)),
            _ => format!("could not {action}: {what}"),
        };
        StorageError::Database { target: self.target.clone(), message, hint }
    }

    /// A storage error that did not come from the driver.
    pub(crate) fn fault(&self, message: String, hint: &'static str) -> StorageError {
        StorageError::Database { target: self.target.clone(), message, hint }
    }
}

/// What went wrong, in the server's or the operating system's words, and what to do.
fn explain(error: &postgres::Error) -> (String, &'static str) {
    if let Some(db) = error.as_db_error() {
        let mut what = db.message().to_owned();
        if let Some(detail) = db.detail() {
            what = format!("{what} ({detail})");
        }
        return (what, db_hint(db.code()));
    }
    if let Some(io) = io_cause(error) {
        use std::io::ErrorKind;
        let hint = match io.kind() {
            ErrorKind::ConnectionRefused | ErrorKind::NotFound => {
                "is PostgreSQL running there? Start it, or fix the host and port in the URL"
            }
            ErrorKind::TimedOut => {
                "the server did not answer in time; check the host and port in the URL and that the network reaches it"
            }
            ErrorKind::PermissionDenied => "this user may not open the server's socket; check the socket directory",
            _ => "check that the server is running and reachable",
        };
        return (io.to_string(), hint);
    }
    let what = match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    };
    let hint = if what.contains("password missing") {
        "the server asks for a password: give it in the URL (postgres://USER:PASSWORD@HOST/DATABASE)"
    } else if what.contains("host and hostaddr are missing") {
        "give the server's host in the URL (postgres://USER@HOST/DATABASE, or ?host=/socket/directory)"
    } else if error.is_closed() {
        "the connection to the server was lost; check that the server is running"
    } else if what.contains("TLS") {
        "this build connects without TLS; use sslmode=disable or sslmode=prefer in the URL"
    } else {
        ""
    };
    (what, hint)
}

/// What to do about an error the server reported, where its code says.
fn db_hint(code: &SqlState) -> &'static str {
    match code {
        c if *c == SqlState::INVALID_CATALOG_NAME => {
            "create the database (`createdb NAME` as a PostgreSQL superuser), or name an existing one in the URL"
        }
        c if *c == SqlState::INVALID_PASSWORD || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            "the server refused the login: check the user and password in the URL"
        }
        c if *c == SqlState::INSUFFICIENT_PRIVILEGE => {
            "grant this user the right to create and write tables in the database, or have an administrator create Trellis's tables (trellis_*) and grant it SELECT, INSERT and UPDATE on them"
        }
        c if *c == SqlState::QUERY_CANCELED => {
            "the server did not finish within the statement timeout; check its load and what holds locks on the trellis_ tables"
        }
        c if *c == SqlState::TOO_MANY_CONNECTIONS => "the server has no free connection; raise max_connections or close other clients",
        c if *c == SqlState::CANNOT_CONNECT_NOW || *c == SqlState::ADMIN_SHUTDOWN => {
            "the server is starting or shutting down; try again shortly"
        }
        c if *c == SqlState::READ_ONLY_SQL_TRANSACTION => {
            "the server is a read-only standby; give the URL of the primary"
        }
        c if *c == SqlState::DISK_FULL => "the server's disk is full; free space there",
        _ => "",
    }
}

/// The operating-system error under a driver error, if that is what it was.
fn io_cause(error: &postgres::Error) -> Option<&std::io::Error> {
    let mut cause = std::error::Error::source(error);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cause = current.source();
    }
    None
}

/// The servers a config connects to, as `host:port` (or the socket directory), for a
/// message saying which one could not be reached.
fn servers(config: &postgres::Config) -> String {
    use postgres::config::Host;
    let ports = config.get_ports();
    let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(name) => format!("{name}:{}", port(i)),
            #[cfg(unix)]
            Host::Unix(dir) => format!("the socket in {} (port {})", dir.display(), port(i)),
        })
        .collect();
    if hosts.is_empty() {
        "the server".to_owned()
    } else {
        hosts.join(", ")
    }
}

/// Whether the database `url` names answers: a connection and one statement, on a thread
/// of its own (the caller may be a Tokio worker), within the connect and statement
/// timeouts. For a server's readiness probe.
pub fn ping(url: &SpaceUrl) -> Result<(), StorageError> {
    with_client(url, |client, connector| {
        client.simple_query("SELECT 1").map(drop).map_err(|error| connector.error("run a statement", &error))
    })
}

/// Whether the space `url` names holds any document (without taking its lease): a
/// server of many spaces opens only those, so a request naming any other cannot make one.
pub fn space_exists(url: &SpaceUrl) -> Result<bool, StorageError> {
    with_client(url, |client, connector| {
        let failed = |error: postgres::Error| connector.error("look the space up", &error);
        // The tables may not exist yet (a new database), and then no space does.
        let tables = client.query_one("SELECT to_regclass('trellis_documents') IS NOT NULL", &[]).map_err(failed)?;
        if !tables.try_get::<_, bool>(0).map_err(failed)? {
            return Ok(false);
        }
        let query = "SELECT EXISTS (SELECT 1 FROM trellis_documents WHERE space = $1)";
        client.query_one(query, &[&url.space()]).and_then(|row| row.try_get(0)).map_err(failed)
    })
}

/// The secret the `trellis serve` nodes of `url`'s database share, made by the first to
/// ask: a node proves with it that a request it forwards comes from a node, not a client.
pub fn cluster_secret(url: &SpaceUrl) -> Result<String, StorageError> {
    with_client(url, |client, connector| {
        let failed = |error: postgres::Error| connector.error("read the nodes' shared secret", &error);
        let made = "CREATE TABLE IF NOT EXISTS trellis_cluster (
                        only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                        secret text NOT NULL
                    );
                    INSERT INTO trellis_cluster (secret)
                        VALUES (md5(gen_random_uuid()::text) || md5(gen_random_uuid()::text))
                        ON CONFLICT DO NOTHING";
        // Two nodes starting at once: the advisory lock keeps their CREATEs apart.
        let mut tx = client.transaction().map_err(failed)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CLUSTER_LOCK]).map_err(failed)?;
        tx.batch_execute(made).map_err(failed)?;
        let secret = tx.query_one("SELECT secret FROM trellis_cluster", &[]).and_then(|row| row.try_get(0));
        let secret = secret.map_err(failed)?;
        tx.commit().map_err(failed)?;
        Ok(secret)
    })
}

/// The advisory lock taken while the nodes' secret is made (any fixed number).
const CLUSTER_LOCK: i64 = 0x0074_7265_6c6c_6973 + 1;

/// `work` with a new connection to `url`'s database, on a thread of its own (the caller
/// may be a Tokio worker), within the connect timeout for its statements too.
fn with_client<T: Send>(
    url: &SpaceUrl,
    work: impl FnOnce(&mut Client, &Connector) -> Result<T, StorageError> + Send,
) -> Result<T, StorageError> {
    let connector = Connector::new(url, CONNECT_TIMEOUT, CONNECT_TIMEOUT);
    let done = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut client = connector.connect()?;
                work(&mut client, &connector)
            })
            .join()
    });
    done.unwrap_or_else(|_| Err(StorageError::WriterGone))
}
