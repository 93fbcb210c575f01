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
//! | `zk_recipes_acquires_total` | counter | recipe, role, outcome = `acquired` / `busy` / `timeout` / `cancelled` / `error` |
//! | `zk_recipes_acquire_wait_seconds` | histogram | recipe, role |
//! | `zk_recipes_hold_seconds` | histogram | recipe, role |
//! | `zk_recipes_holds_lost_total` | counter | recipe, role, cause = `session_expired` / `node_deleted` |
//! | `zk_recipes_queue_length_at_join` | histogram | recipe, role |
//! | `zk_recipes_session_transitions_total` | counter | state |
//! | `zk_recipes_session_connected` | gauge (0/1) | |
//! | `zk_recipes_session_generation` | gauge | |

use std::sync::Arc;
use std::time::Duration;

use crate::session::ConnectionState;

/// The labels of one recipe handle.
#[derive(Clone, Debug)]
pub(crate) struct Labels {
    pub recipe: &'static str,
    pub role: Arc<str>,
}

impl Labels {
    pub fn new(recipe: &'static str, role: Option<&Arc<str>>) -> Labels {
        Labels { recipe, role: role.cloned().unwrap_or_else(|| Arc::from("default")) }
    }

    fn pairs(&self) -> [(&'static str, String); 2] {
        [("recipe", self.recipe.to_string()), ("role", self.role.to_string())]
    }

    /// An acquire ended: `outcome` is `acquired`, `busy`, `timeout`, `cancelled` or `error`.
    pub fn acquire_ended(&self, outcome: &'static str, waited: Duration) {
        let [recipe, role] = self.pairs();
        metrics::counter!(
            "zk_recipes_acquires_total",
            &[recipe.clone(), role.clone(), ("outcome", outcome.to_string())]
        )
        .increment(1);
        if outcome == "acquired" {
            metrics::histogram!("zk_recipes_acquire_wait_seconds", &[recipe, role])
                .record(waited.as_secs_f64());
        }
    }

    pub fn queue_length(&self, length: usize) {
        metrics::histogram!("zk_recipes_queue_length_at_join", &self.pairs()).record(length as f64);
    }

    pub fn held(&self, held: Duration) {
        metrics::histogram!("zk_recipes_hold_seconds", &self.pairs()).record(held.as_secs_f64());
    }

    pub fn lost(&self, cause: &'static str) {
        let [recipe, role] = self.pairs();
        metrics::counter!("zk_recipes_holds_lost_total", &[recipe, role, ("cause", cause.to_string())])
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
