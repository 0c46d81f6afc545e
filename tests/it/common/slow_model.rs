//! A slow model for tests that cancel a reply (the chat's Ctrl-C, the page's Stop).

use super::provider::{Provider, Reply};

/// The base URL of a local OpenAI-compatible server whose replies stream a word every
/// 100 ms for a long time, so that there is a generation to cancel.
pub fn server() -> String {
    Provider::start(vec![Reply::Slow]).url
}
