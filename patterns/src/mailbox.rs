//! `mailbox`: mail the charm sends, kept in `sent`. Who a mail goes to is the person's to
//! set (`Builder::person_only`): a model may write the mail, but an address it was told
//! to use (by a web page it read, say) reaches no one unless the person gives it.
//!
//! Nothing leaves the machine: "sending" keeps the mail in the charm, which is what an
//! outbox a person later reviews, or a test, needs.

use trellis_runner::prelude::*;

/// The most mails `sent` keeps; older ones are dropped.
pub const KEPT: usize = 100;

/// The longest address, subject or body accepted, in characters.
pub const MAX_TEXT: usize = 10_000;

/// Send a mail. `to` is set by the user: a model's value is only a suggestion to them.
/// Returns the mail as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Mail {
    /// Who it goes to (an e-mail address).
    pub to: String,
    /// Its subject line.
    pub subject: String,
    /// What it says.
    pub body: String,
}

/// The mailbox pattern: state `sent`; handler `send`, whose `to` only a person sets.
pub fn mailbox() -> Pattern {
    Pattern::new("mailbox", |b, _: serde_json::Value| {
        b.name("Mailbox")?;
        let sent = b.state::<Vec<Mail>>("sent", Vec::new())?;
        b.handler("send", move |tx, mail: Mail| -> Result<Mail> {
            for (what, text) in [("to", &mail.to), ("subject", &mail.subject), ("body", &mail.body)] {
                if text.chars().count() > MAX_TEXT {
                    return Err(format!("`{what}` is longer than {MAX_TEXT} characters").into());
                }
            }
            if !mail.to.contains('@') {
                return Err(format!("`to` must be an e-mail address, got {:?}", mail.to).into());
            }
            sent.update(tx, |mut all| {
                all.push(mail.clone());
                let excess = all.len().saturating_sub(KEPT);
                all.drain(..excess);
                all
            })?;
            Ok(mail)
        })?;
        b.person_only("send", &["to"])
    })
    .description("Mailbox: send mail (kept in `sent`); who it goes to is always the user's to set")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_person_sends_and_the_stream_says_who_sets_to() {
        let rt = Runtime::in_memory();
        rt.register_pattern(mailbox());
        let id = rt.charms().create("mailbox", json!({})).expect("a mailbox");
        let result = rt.charms().result(&id);
        let marker = rt.transact(|tx| tx.read(&result.child("send"))).expect("the stream").to_json();
        assert_eq!(marker["$stream"]["person_only"], json!(["to"]), "{marker}");
        let mail = json!({"to": "me@example.com", "subject": "hi", "body": "hello"});
        futures::executor::block_on(rt.send(&result.child("send"), mail.clone())).expect("a person's send");
        assert_eq!(rt.charms().get(&id).expect("its data")["sent"], json!([mail]));
        let bad =
            futures::executor::block_on(rt.send(&result.child("send"), json!({"to": "x", "subject": "", "body": ""})));
        assert!(bad.is_err_and(|e| e.to_string().contains("e-mail address")));
    }
}
