//! A task's edit (`kanban edit`): which fields change, and the `edited` event's payload, written once for every
//! store.

use serde_json::{Map, Value as Json, json};

/// The fields `kanban edit` may change; `None` leaves a field as it is. For `assignee`, an empty string clears it.
#[derive(Clone, Debug, Default)]
pub struct TaskEdit {
    pub title: Option<String>,
    pub body: Option<String>,
    pub command: Option<String>,
    pub priority: Option<i64>,
    pub assignee: Option<String>,
    pub max_runtime_seconds: Option<i64>,
}

/// The fields `kanban edit` may change, as stored: title, body, command, priority, assignee, max runtime.
pub type EditableFields = (String, Option<String>, Option<String>, i64, Option<String>, Option<i64>);

impl TaskEdit {
    /// The fields after this edit of `before` (blank text clears a field), and the `edited` event's payload: each
    /// changed field as from/to (empty when nothing changes). Every store applies edits through this one rule.
    pub fn apply_to(&self, before: &EditableFields) -> (EditableFields, Map<String, Json>) {
        let text = |s: &Option<String>| s.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
        let after = (
            self.title.clone().unwrap_or_else(|| before.0.clone()),
            if self.body.is_some() { text(&self.body) } else { before.1.clone() },
            if self.command.is_some() { text(&self.command) } else { before.2.clone() },
            self.priority.unwrap_or(before.3),
            if self.assignee.is_some() { text(&self.assignee) } else { before.4.clone() },
            self.max_runtime_seconds.or(before.5),
        );
        let mut changes = Map::new();
        let mut note = |name: &str, from: Json, to: Json| {
            if from != to {
                changes.insert(name.to_owned(), json!({"from": from, "to": to}));
            }
        };
        note("title", json!(before.0), json!(after.0));
        note("body", json!(before.1), json!(after.1));
        note("command", json!(before.2), json!(after.2));
        note("priority", json!(before.3), json!(after.3));
        note("assignee", json!(before.4), json!(after.4));
        note("max_runtime_seconds", json!(before.5), json!(after.5));
        (after, changes)
    }
}
