//! How the nodes of a database, and the commands run on its spaces, prove themselves to
//! one another: headers carrying the secret they all read from the database
//! (`trellis_postgres::cluster_secret`). Whoever can read that secret can open any space
//! of the database, so it may act in any space; a client cannot pass for either.

/// The header a forwarded request carries: who forwarded it (a node's address, or
/// [`A_COMMAND`]).
pub const FORWARDED: &str = "x-trellis-forwarded-by";

/// The header that proves a forwarded request comes from a node or a command: the secret.
pub const NODE: &str = "x-trellis-node";

/// The header of a `trellis` command run on a space a node holds (with the secret): it
/// acts with the rights the space's own hand-off token gives on one machine.
pub const COMMAND: &str = "x-trellis-command";

/// What a command puts in [`FORWARDED`].
pub const A_COMMAND: &str = "a trellis command";

/// How long reaching another node may take (not its answer: an event stream is long).
const CONNECT: std::time::Duration = std::time::Duration::from_secs(3);

/// The HTTP client for requests between nodes, and from a command to a node: no proxy of
/// the environment sees their secret or tokens, and a redirect goes back to whoever asked
/// as it is (the sign-in's 303 sets its cookie).
pub fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).connect_timeout(CONNECT).build()
}
