//! The writers' connections: a few, shared by every space a node holds in one database.
//!
//! A connection per space would take a node holding 64 spaces past PostgreSQL's default
//! `max_connections` (100) on its own. A space's writer takes a connection for one group
//! and gives it back, so [`MAX_WRITERS`] connections serve any number of spaces; groups
//! of different spaces then commit side by side, at most that many at once. Each
//! connection keeps the writer's prepared statements (`S`), made once when it connects.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use postgres::Client;
use trellis_runner::storage::StorageError;

use crate::connect::Connector;

/// The most writer connections one node keeps to one database.
pub const MAX_WRITERS: usize = 8;

/// A connection and its prepared statements.
pub(crate) struct Conn<S: Send> {
    pub(crate) client: Client,
    pub(crate) statements: S,
}

/// How a new connection's statements are prepared (errors said through the connector).
pub(crate) type Prepare<S> = fn(&mut Client, &Connector) -> Result<S, StorageError>;

/// The pool: idle connections, and how many exist.
pub(crate) struct Pool<S: Send> {
    connector: Connector,
    prepare: Prepare<S>,
    state: Mutex<State<S>>,
    freed: Condvar,
}

struct State<S: Send> {
    idle: Vec<Conn<S>>,
    /// Connections in existence, idle or taken (or being made).
    open: usize,
}

impl<S: Send> Pool<S> {
    pub(crate) fn new(connector: Connector, prepare: Prepare<S>) -> Pool<S> {
        Pool { connector, prepare, state: Mutex::new(State { idle: Vec::new(), open: 0 }), freed: Condvar::new() }
    }

    /// Runs `work` on a connection: an idle one, a new one while fewer than
    /// [`MAX_WRITERS`] exist, or else the first one given back. The connection goes back
    /// to the pool afterwards, unless it broke.
    pub(crate) fn with<T>(
        &self,
        work: impl FnOnce(&mut Conn<S>) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let mut conn = self.take()?;
        let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&mut conn))) {
            Ok(result) => result,
            // The connection's state is unknown: it is closed, and its place given back.
            Err(panic) => {
                drop(conn);
                self.forget();
                std::panic::resume_unwind(panic);
            }
        };
        if conn.client.is_closed() {
            self.forget();
        } else {
            self.lock().idle.push(conn);
            self.freed.notify_one();
        }
        result
    }

    fn take(&self) -> Result<Conn<S>, StorageError> {
        let mut state = self.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(conn);
            }
            if state.open < MAX_WRITERS {
                state.open += 1;
                drop(state);
                return self.connect().inspect_err(|_| self.forget());
            }
            state = self.freed.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn connect(&self) -> Result<Conn<S>, StorageError> {
        let mut client = self.connector.connect()?;
        let statements = (self.prepare)(&mut client, &self.connector)?;
        Ok(Conn { client, statements })
    }

    fn lock(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One connection fewer: it broke, or was never made.
    fn forget(&self) {
        self.lock().open -= 1;
        self.freed.notify_one();
    }
}

impl<S: Send> Drop for Pool<S> {
    fn drop(&mut self) {
        let idle = std::mem::take(&mut self.lock().idle);
        // Closing a connection runs the client's own runtime, which may not run inside
        // another: the last storage may be dropped on a Tokio worker.
        std::thread::scope(|scope| {
            scope.spawn(move || drop(idle));
        });
    }
}
