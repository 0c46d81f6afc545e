//! The flags both HTTP servers (`trellis serve`, `trellis mcp serve --http`) take for
//! their connections' deadlines and cap (see `trellis_http::Limits`).

use std::time::Duration;

/// Deadlines and a cap for each HTTP connection.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Seconds a client may take to send a request's headers, or stay silent on an open
    /// connection between requests, before it is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = trellis_http::HEADER_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout: u64,
    /// Seconds a request's body may take to arrive in full; past it the request is
    /// answered 408 and the connection closed.
    #[arg(long, value_name = "SECONDS", default_value_t = trellis_http::BODY_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_timeout: u64,
    /// Seconds the server waits for a client that reads none of what it writes (an answer,
    /// or events) before it closes the connection.
    #[arg(long, value_name = "SECONDS", default_value_t = trellis_http::WRITE_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub write_timeout: u64,
    /// Connections one client address may hold at once (every client on this machine
    /// shares the loopback address); the next is answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = trellis_http::PER_ADDRESS as u64,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub connections_per_address: u64,
}

impl ConnectionArgs {
    /// The limits the flags say.
    pub fn limits(&self) -> trellis_http::Limits {
        trellis_http::Limits {
            header_timeout: Duration::from_secs(self.header_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            write_timeout: Duration::from_secs(self.write_timeout),
            // At most 100,000 (the parser's range): it fits.
            per_address: usize::try_from(self.connections_per_address).unwrap_or(usize::MAX),
        }
    }
}
