//! `shopping`: things to buy, checked off once bought.

use trellis::prelude::*;

/// One thing to buy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Item {
    /// What to buy.
    pub name: String,
    /// Whether it is bought.
    #[serde(default)]
    pub checked: bool,
}

/// Add something to the shopping list.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Add {
    /// What to buy, e.g. "milk".
    pub item: String,
}

/// Remove something from the shopping list.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Remove {
    /// The item's name, as on the list.
    pub item: String,
}

/// Check something off the shopping list: it is bought.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Check {
    /// The item's name, as on the list.
    pub item: String,
}

/// The position of `name` on the list (case-insensitive), or an error the model can act on.
fn position(items: &[Item], name: &str) -> Result<usize, BoxError> {
    let found = items.iter().position(|i| i.name.eq_ignore_ascii_case(name.trim()));
    found.ok_or_else(|| {
        let names: Vec<&str> = items.iter().map(|i| i.name.as_str()).collect();
        format!("`{name}` is not on the list; it has: {}", names.join(", ")).into()
    })
}

/// The shopping list: state `items`, derived `left` (how many are not bought yet),
/// handlers `add`, `remove`, `check`.
pub fn shopping() -> Pattern {
    Pattern::new("shopping", |b, _: serde_json::Value| {
        b.name("Shopping")?;
        let items = b.state::<Vec<Item>>("items", Vec::new())?;
        b.lift("left", items, |items: Vec<Item>| items.iter().filter(|i| !i.checked).count())?;
        b.handler("add", move |tx, e: Add| {
            let name = e.item.trim().to_string();
            if name.is_empty() {
                return Err("say what to add".into());
            }
            items.push(tx, Item { name, checked: false })
        })?;
        b.handler("remove", move |tx, e: Remove| {
            let mut all = items.get(tx)?;
            all.remove(position(&all, &e.item)?);
            items.set(tx, all)
        })?;
        b.handler("check", move |tx, e: Check| {
            let mut all = items.get(tx)?;
            let at = position(&all, &e.item)?;
            all[at].checked = true;
            items.set(tx, all)
        })?;
        Ok(())
    })
    .description("A shopping list: add, remove and check off items")
}
