//! The safe window's side of the connection state: a session counts as
//! [`ConnectionState::Suspended`] while its connection is down **or** while its safe window has
//! passed without a fresh answer from the server, whatever the client's own state says.
//!
//! Why: a process paused (SIGSTOP, a long GC-like stall, a VM freeze) past its session timeout
//! wakes with its client still "connected" and its holds still `Held` as far as any event has
//! said; meanwhile the server may have expired the session and given the lock to another. The
//! only thing that is right at once after such a pause is the clock: `last contact + timeout`
//! has passed. So:
//! * readers of a hold's status (`Hold::status`, `lost`, `ensure_safe`) call
//!   [`Shared::check_window`] first, which publishes `Suspended` at once if the window lapsed;
//! * the session's task (`supervisor.rs`) sleeps until the window's end and does the same when
//!   it runs, and publishes `Reconnected` only once an answer has opened the window again.
//!
//! One flag (`Reports::suspended`) says whether `Suspended` is the last published state of the
//! current generation; it is read and changed under its lock, together with the publication,
//! so the connection's drop and the window's lapse publish `Suspended` once, and `Reconnected`
//! follows only a published `Suspended`.

use std::time::Instant;

use super::shared::Shared;
use crate::status::ConnectionState;
use crate::util::lock;

impl Shared {
    /// Whether the safe window of `generation` has passed at `now` (or `generation` is not the
    /// current session, or has had no answer yet).
    pub(crate) fn window_lapsed(&self, generation: u64, now: Instant) -> bool {
        self.safe_until(generation).is_none_or(|until| until <= now)
    }

    /// Whether `Suspended` is the last published state of the current generation.
    pub(super) fn is_suspended(&self) -> bool {
        *lock(&self.reports.suspended)
    }

    /// Publishes `Suspended` for `generation`, unless it is already suspended or is not the
    /// current session (an expired generation is reported `Lost`, never `Suspended` after it).
    pub(super) fn suspend(&self, generation: u64) {
        let mut suspended = lock(&self.reports.suspended);
        if *suspended || !self.is_current(generation) {
            return;
        }
        *suspended = true;
        self.publish(ConnectionState::Suspended, generation);
    }

    /// Publishes `Reconnected` for `generation` if it was suspended, is still the current
    /// session, and its safe window is open again. Returns whether the session is (now) not
    /// suspended.
    pub(super) fn resume(&self, generation: u64) -> bool {
        let mut suspended = lock(&self.reports.suspended);
        if !*suspended {
            return true;
        }
        // A window nobody asks for (`demand.rs`) is not waited for: nothing holds. One that is
        // asked for is (the session beats, and its proofs open it).
        let watched = self.contact.demand.is_warm() || self.window_asked(Instant::now()).is_some();
        if !self.is_current(generation) || (watched && self.window_lapsed(generation, Instant::now())) {
            return false;
        }
        *suspended = false;
        self.publish(ConnectionState::Reconnected, generation);
        true
    }

    /// A new generation starts (or the session ends): it is not suspended. Called with the
    /// publication of `Lost`, `Connected` or `Closed`, under the same lock.
    pub(super) fn publish_unsuspended(&self, state: ConnectionState, generation: u64) {
        let mut suspended = lock(&self.reports.suspended);
        *suspended = false;
        self.publish(state, generation);
    }

    /// Publishes `Suspended` at once if the safe window of `generation` has passed: what every
    /// read of a hold's status does first, so that a status read right after a pause is never
    /// `Held` past the window, before the session's task has run.
    ///
    /// Only a warm window is watched (`demand.rs`): one that passed while nobody asked for it,
    /// or while it was warming again, suspends nobody (no hold was handed out on it).
    pub(crate) fn check_window(&self, generation: u64) {
        if !self.contact.demand.is_warm() {
            return;
        }
        let lapsed = self.safe_until(generation).is_some_and(|until| until <= Instant::now());
        if lapsed && !self.is_suspended() {
            tracing::warn!(
                connect = %self.connect,
                generation,
                "the safe window passed without an answer from the server (a pause of this \
                 process, or a server that stopped answering): suspended until one comes"
            );
            self.suspend(generation);
        }
    }

    /// Marks the window warm when it is asked for and proven at least half a timeout ahead
    /// (`demand.rs`): from then on, proofs keep coming before it passes unless something is
    /// wrong, and a lapse is a suspension.
    pub(super) fn warm_if_ahead(&self, generation: u64) {
        let ahead = Instant::now() + self.session_timeout() / 2;
        if self.safe_until(generation).is_some_and(|until| until >= ahead) {
            self.contact.demand.set_warm(true);
        }
    }

    /// Waits, before an acquire hands out its hold, until the window of `generation` is warm
    /// (`demand.rs`) or the session is no longer `generation`; at most until `deadline`, or one
    /// session timeout (a connection down meanwhile: the hold is then handed out as it is, and
    /// told `Suspended`). The acquire asks for the window meanwhile, so the session is beating.
    /// A suspended session whose window is still warm (a waiter that beat while it waited)
    /// does not wait. Cancel-safe: it only observes.
    pub(crate) async fn window_ready(&self, generation: u64, deadline: Option<Instant>) {
        if self.contact.demand.is_warm() {
            return;
        }
        let mut warm = self.contact.demand.warm_changes();
        let mut states = self.reports.status.subscribe();
        let bound = Instant::now() + self.session_timeout();
        let bound = deadline.map_or(bound, |d| d.min(bound));
        loop {
            if *warm.borrow_and_update() || !self.is_current(generation) {
                return;
            }
            tokio::select! {
                _ = warm.changed() => {}
                changed = states.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep_until(bound.into()) => {
                    tracing::debug!(
                        generation,
                        "the safe window is not proven yet: the hold is handed out as it is"
                    );
                    return;
                }
            }
        }
    }

    /// Whether `generation` is the current session's (and the session is not closed).
    fn is_current(&self, generation: u64) -> bool {
        !self.is_closed() && lock(&self.current).as_ref().is_some_and(|c| c.generation == generation)
    }
}
