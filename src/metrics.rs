//! Metrics through the `metrics` facade: nothing is recorded until the application installs a
//! recorder (e.g. `metrics-exporter-prometheus`).
//!
//! Labels are the recipe (`mutex`, `read-lock`, `write-lock`, `semaphore`, `semaphore-mutex`,
//! `leader-latch`, `leader-selector`) and the role the application gave the path
//! (`LockOptions::metrics_role`, default `default`), never the path itself: paths are unbounded
//! (one lock per order id), labels must not be.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `zk_recipes_acquires_total` | counter | recipe, role, outcome (below) |
//! | `zk_recipes_acquire_wait_seconds` | histogram | recipe, role |
//! | `zk_recipes_hold_seconds` | histogram | recipe, role |
//! | `zk_recipes_holds_lost_total` | counter | recipe, role, cause (below) |
//! | `zk_recipes_holds_near_limit_total` | counter | recipe, role (a hold passed 4/5 of its `max_hold`) |
//! | `zk_recipes_queue_length_at_join` | histogram | recipe, role |
//! | `zk_recipes_session_transitions_total` | counter | state |
//! | `zk_recipes_session_connected` | gauge (0/1) | |
//! | `zk_recipes_session_generation` | gauge | |
//!
//! An acquire's `outcome` is `acquired`, `busy`, `timeout`, `cancelled` or `error`; a lost
//! hold's `cause` is `session_expired`, `node_deleted`, `session_closed` or `max_hold`.

use std::sync::Arc;
use std::time::Duration;

use metrics::Label;

use crate::status::ConnectionState;

/// The labels of one recipe handle: its recipe and role, made into the metric's labels when one
/// is recorded (one small vector then, whether or not a recorder is installed). Kept as the two
/// names, not as labels built ahead: a handle keeps them for as long as it lives, and a process
/// may keep thousands of handles queued (memory per queued waiter, `tests/memory.rs`).
#[derive(Clone, Debug)]
pub(crate) struct Labels {
    recipe: &'static str,
    /// The role the application gave the path; `None`: `default`.
    role: Option<Arc<str>>,
}

impl Labels {
    pub fn new(recipe: &'static str, role: Option<&Arc<str>>) -> Labels {
        Labels { recipe, role: role.cloned() }
    }

    /// The base labels (`recipe` and `role`), then `extra` when given.
    fn with(&self, extra: Option<Label>) -> Vec<Label> {
        let role = match &self.role {
            Some(role) => Label::new("role", role.clone()),
            None => Label::from_static_parts("role", "default"),
        };
        let mut labels = Vec::with_capacity(3);
        labels.push(Label::from_static_parts("recipe", self.recipe));
        labels.push(role);
        labels.extend(extra);
        labels
    }

    /// An acquire ended: `outcome` is `acquired`, `busy`, `timeout`, `cancelled` or `error`.
    pub fn acquire_ended(&self, outcome: &'static str, waited: Duration) {
        metrics::counter!(
            "zk_recipes_acquires_total",
            self.with(Some(Label::from_static_parts("outcome", outcome)))
        )
        .increment(1);
        if outcome == "acquired" {
            metrics::histogram!("zk_recipes_acquire_wait_seconds", self.with(None))
                .record(waited.as_secs_f64());
        }
    }

    pub fn queue_length(&self, length: usize) {
        metrics::histogram!("zk_recipes_queue_length_at_join", self.with(None)).record(length as f64);
    }

    pub fn held(&self, held: Duration) {
        metrics::histogram!("zk_recipes_hold_seconds", self.with(None)).record(held.as_secs_f64());
    }

    /// A revocation request reached a revocable hold (`requested`), or a hold that heard one
    /// was released before it was lost (`honoured`).
    pub fn revocation(&self, event: &'static str) {
        metrics::counter!(
            "zk_recipes_revocations_total",
            self.with(Some(Label::from_static_parts("event", event)))
        )
        .increment(1);
    }

    /// An acquire waited out the lock delay (`LockOptions::lock_delay`) for `waited`.
    pub fn lock_delay(&self, waited: Duration) {
        metrics::histogram!("zk_recipes_lock_delay_seconds", self.with(None)).record(waited.as_secs_f64());
    }

    /// A hold passed four fifths of its maximum hold (`LockOptions::max_hold`) unreleased.
    pub fn near_limit(&self) {
        metrics::counter!("zk_recipes_holds_near_limit_total", self.with(None)).increment(1);
    }

    pub fn lost(&self, cause: &'static str) {
        metrics::counter!(
            "zk_recipes_holds_lost_total",
            self.with(Some(Label::from_static_parts("cause", cause)))
        )
        .increment(1);
    }
}

/// A session state change.
pub(crate) fn session(state: ConnectionState, generation: u64) {
    let name = match state {
        ConnectionState::Connected => "connected",
        ConnectionState::Suspended => "suspended",
        ConnectionState::Reconnected => "reconnected",
        ConnectionState::Lost => "lost",
        ConnectionState::Closed => "closed",
    };
    metrics::counter!("zk_recipes_session_transitions_total", "state" => name).increment(1);
    metrics::gauge!("zk_recipes_session_connected").set(if state.is_connected() { 1.0 } else { 0.0 });
    metrics::gauge!("zk_recipes_session_generation").set(generation as f64);
}
