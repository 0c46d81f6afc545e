//! A source's tool asking the person something mid-call (MCP's elicitation): a form to
//! fill in, or a URL to visit.
//!
//! Whoever runs a call of a source's tool (a dialog) can stand for the person while it
//! runs: [`with_person`] makes a [`Person`] reachable from the call's future, and a
//! source that is asked something from outside during the call (an MCP server's
//! `elicitation/create`) finds it with [`person`] and awaits its [`Reply`]. A dialog's
//! person records the question as a pending interaction (`trellis pending`,
//! `trellis resolve`, the page) and waits for its answer.
//!
//! The time a call waits for the person does not count toward the call's timeout
//! ([`within`]): the person may take longer than a tool may. A long call may also tell the
//! person how it goes ([`Person::progress`]).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use futures::future::BoxFuture;
//! use serde_json::json;
//! use trellis_builtins::sources::elicit::{self, Person, Question, Reply};
//!
//! /// A person who always gives the same name.
//! struct Alice;
//!
//! impl Person for Alice {
//!     fn ask(&self, _question: Question) -> BoxFuture<'static, Reply> {
//!         Box::pin(async { Reply::Accept(json!({"name": "Alice"})) })
//!     }
//!     fn waited(&self) -> Duration { Duration::ZERO }
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let call = async {
//!     let person = elicit::person().expect("the caller stands for a person");
//!     person.ask(Question::form("Your name?", json!({"type": "object"}))).await
//! };
//! let reply = elicit::with_person(Arc::new(Alice), call).await;
//! assert_eq!(reply, Reply::Accept(json!({"name": "Alice"})));
//! assert!(elicit::person().is_none(), "outside the call, nobody is asked");
//! # });
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

/// What a tool asks the person.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Why it asks, in the tool's words.
    pub message: String,
    /// What it wants.
    pub wants: Wants,
}

/// What a question wants from the person.
#[derive(Debug, Clone, PartialEq)]
pub enum Wants {
    /// The fields of a form: an object of the JSON schema (flat, primitive fields).
    Form {
        /// The form's schema.
        schema: Value,
    },
    /// A visit to a URL (to sign in somewhere, say); the tool learns the outcome there.
    Url {
        /// Where to go.
        url: String,
    },
}

impl Question {
    /// A form to fill in.
    pub fn form(message: impl Into<String>, schema: Value) -> Question {
        Question { message: message.into(), wants: Wants::Form { schema } }
    }

    /// A URL to visit.
    pub fn url(message: impl Into<String>, url: impl Into<String>) -> Question {
        Question { message: message.into(), wants: Wants::Url { url: url.into() } }
    }
}

/// The person's reply: MCP's three actions.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Answered: the form's fields (`null` for a URL visited).
    Accept(Value),
    /// Said no, explicitly; the tool goes on without.
    Decline,
    /// Dismissed the question (or nobody answered in time, or the reply was cancelled).
    Cancel,
}

/// Someone who can answer a tool's question while its call runs.
pub trait Person: Send + Sync {
    /// Asks `question`; the reply once there is one.
    fn ask(&self, question: Question) -> BoxFuture<'static, Reply>;

    /// How long the call has waited for replies so far, a wait going on included.
    fn waited(&self) -> Duration;

    /// Tells how the call goes (a long task's stage), for front ends to show while it runs.
    fn progress(&self, _message: &str) {}
}

tokio::task_local! {
    static PERSON: Arc<dyn Person>;
}

/// Runs `call` with `person` reachable from it through [`person`].
pub async fn with_person<F: Future>(person: Arc<dyn Person>, call: F) -> F::Output {
    PERSON.scope(person, call).await
}

/// The person the running call may ask, if its caller stands for one.
pub fn person() -> Option<Arc<dyn Person>> {
    PERSON.try_with(Arc::clone).ok()
}

/// Runs `call` for at most `timeout`, not counting the time it waits for the person of
/// [`with_person`] (if any); `None` when the time ran out.
pub async fn within<F: Future>(timeout: Duration, call: F) -> Option<F::Output> {
    let person = person();
    let waited = || person.as_ref().map_or(Duration::ZERO, |p| p.waited());
    // What the person waited before this call is not this call's.
    let (start, before) = (tokio::time::Instant::now(), waited());
    let mut call = std::pin::pin!(call);
    loop {
        let now_waited = waited();
        let deadline = start + timeout + now_waited.saturating_sub(before);
        tokio::select! {
            output = &mut call => return Some(output),
            () = tokio::time::sleep_until(deadline) => {
                // A wait for the person that began meanwhile moves the deadline on.
                if waited() == now_waited {
                    return None;
                }
            }
        }
    }
}

/// The options a form field (or, for a field of several, each of its items) is picked
/// from: its `enum`, or the `const` of each of its `oneOf` or `anyOf`.
pub fn field_options(field: &Value) -> Vec<String> {
    let field = if field["type"] == "array" { &field["items"] } else { field };
    let shown = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    if let Some(listed) = field["enum"].as_array() {
        return listed.iter().map(shown).collect();
    }
    let alternatives = field["oneOf"].as_array().or(field["anyOf"].as_array());
    alternatives.map(|all| all.iter().filter_map(|a| a.get("const")).map(shown).collect()).unwrap_or_default()
}

/// What a person typed for the form field `name` (of schema `field`), as the field's
/// value: a whole number, a number, yes or no, one of its options, several of them
/// comma-separated (a field of several), or the text; what is wrong with it, in words.
/// The whole answer is checked against the form's schema after.
pub fn field_value(name: &str, field: &Value, typed: &str) -> Result<Value, String> {
    let typed = typed.trim();
    let options = field_options(field);
    let offered = |picked: &str| options.is_empty() || options.iter().any(|o| o == picked);
    match field["type"].as_str().unwrap_or("string") {
        "integer" => typed.parse::<i64>().map(Value::from).map_err(|_| format!("{name} takes a whole number")),
        "number" => typed
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("{name} takes a number")),
        "boolean" => match typed.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(Value::Bool(true)),
            "n" | "no" | "false" => Ok(Value::Bool(false)),
            _ => Err(format!("{name} takes yes or no")),
        },
        "array" => {
            let picked: Vec<&str> = typed.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
            match picked.iter().all(|p| offered(p)) {
                true => Ok(Value::from(picked)),
                false => Err(format!("{name} takes some of, comma-separated: {}", options.join(", "))),
            }
        }
        _ if !offered(typed) => Err(format!("{name} is one of: {}", options.join(", "))),
        _ => Ok(Value::String(typed.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A person who takes `takes` to answer, and counts it as waited.
    struct Slow {
        takes: Duration,
        waited: Arc<Mutex<Duration>>,
    }

    impl Person for Slow {
        fn ask(&self, _question: Question) -> BoxFuture<'static, Reply> {
            let (takes, waited) = (self.takes, self.waited.clone());
            Box::pin(async move {
                let start = tokio::time::Instant::now();
                // Counted as it goes, as a dialog's person counts a wait going on.
                while start.elapsed() < takes {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    *waited.lock().unwrap_or_else(|e| e.into_inner()) = start.elapsed();
                }
                Reply::Decline
            })
        }

        fn waited(&self) -> Duration {
            *self.waited.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    #[tokio::test]
    async fn the_time_a_call_waits_for_the_person_is_not_its_own() {
        let slow = Arc::new(Slow { takes: Duration::from_millis(400), waited: Arc::default() });
        // A call that asks (400 ms of the person's) and then works 20 ms, within 100 ms of its own.
        let call = async {
            let asked = person().expect("a person").ask(Question::url("Sign in", "https://example.test")).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            asked
        };
        let done = with_person(slow.clone(), within(Duration::from_millis(100), call)).await;
        assert_eq!(done, Some(Reply::Decline));
        // Its own work past the timeout still ends it.
        let long = tokio::time::sleep(Duration::from_millis(400));
        assert_eq!(with_person(slow, within(Duration::from_millis(100), long)).await, None);
    }
}
