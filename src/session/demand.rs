//! Who asks for the safe window, so that a session beats only while someone does.
//!
//! A beat is a `sync` the leader answers (`proof.rs`): twenty of them per timeout cost an idle
//! fleet four times the client crate's own pings, for windows nobody reads. So the session's
//! task beats only while the window is **asked for**:
//! * a hold is alive (a [`crate::LockGuard`], a leadership): it is `Held` only inside its window;
//! * an acquire is under way, from its start to its end: it may be admitted at any moment, and
//!   its hold must then have a window;
//! * a caller of the session's own window ([`crate::Session::safe_until`],
//!   [`crate::Session::last_contact`]): for one session timeout after each call; a receiver of
//!   [`crate::Session::contacts`], for as long as it lives;
//! * and for one session timeout after the last of those ended (the linger), so that a session
//!   that takes locks often keeps its window proven between them;
//! * always, when the session was opened with `ConnectOptions::beat_while_idle`.
//!
//! While nobody asks, the session sends nothing but the client crate's pings, and its window is
//! not watched: it may pass without a suspension (nothing holds). When someone asks again, the
//! window is **warming** until a proof puts it at least half a timeout ahead (at once when the
//! last proof is that recent): an acquire waits for it before it hands out its hold
//! (`Shared::window_ready`, even while the connection is down, bounded by the acquire's deadline
//! and a timeout), and a window that passes while warming suspends nobody. Once warm, the window
//! is watched as always (`window.rs`): a lapse is a suspension. A session suspended by its
//! connection is `Reconnected` with its window open again while someone asks for it, at once
//! when nobody does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::util::lock;

/// Who asks for the window of a session (see the module's docs).
pub(super) struct Demand {
    /// Always asked for: `ConnectOptions::beat_while_idle`.
    always: bool,
    /// Holds and acquires alive.
    count: AtomicUsize,
    /// Until when the window is asked for by callers and by the linger.
    until: Mutex<Option<Instant>>,
    /// Wakes the session's task when someone starts asking.
    wake: Notify,
    /// Whether the window is warm: asked for, and proven at least half a timeout ahead since.
    warm: watch::Sender<bool>,
}

impl Demand {
    /// Nobody asks yet; or, `always`, the window is asked for as long as the session lives.
    pub(super) fn new(always: bool) -> Demand {
        Demand {
            always,
            count: AtomicUsize::new(0),
            until: Mutex::new(None),
            wake: Notify::new(),
            warm: watch::channel(false).0,
        }
    }

    /// Someone asks until `until` (a caller of the window, the linger).
    ///
    /// The session's task is woken only when the time asked for before had passed: while it has
    /// not, the task is beating, and it looks again at the latest of its beats' answers or at
    /// that time, whichever comes first, and finds the later one then. A session that takes
    /// locks often so wakes its task for none of them.
    pub(super) fn ask_until(&self, until: Instant) {
        let mut current = lock(&self.until);
        if current.is_none_or(|c| c < until) {
            let asking = current.is_some_and(|c| c > Instant::now());
            *current = Some(until);
            drop(current);
            if !asking {
                self.wake.notify_one();
            }
        }
    }

    /// Whether a time asked for has not passed yet (the session's task is beating).
    fn lingers(&self) -> bool {
        lock(&self.until).is_some_and(|until| until > Instant::now())
    }

    /// Whether anyone asks at `now`, besides `receivers` live receivers of the contacts; and
    /// until when, if only for a while (`None`: until a hold or acquire ends).
    pub(super) fn asked(&self, now: Instant, receivers: bool) -> Option<Option<Instant>> {
        if self.always || self.count.load(Ordering::SeqCst) > 0 || receivers {
            return Some(None);
        }
        lock(&self.until).filter(|until| *until > now).map(Some)
    }

    /// Resolves when someone starts asking (or asks again).
    pub(super) async fn woken(&self) {
        self.wake.notified().await
    }

    pub(super) fn is_warm(&self) -> bool {
        *self.warm.borrow()
    }

    pub(super) fn set_warm(&self, warm: bool) {
        self.warm.send_if_modified(|w| std::mem::replace(w, warm) != warm);
    }

    pub(super) fn warm_changes(&self) -> watch::Receiver<bool> {
        self.warm.subscribe()
    }
}

/// One hold or acquire asking for the window, from its creation to its drop; the linger
/// starts when the last one goes.
pub(crate) struct Asking {
    demand: Weak<Demand>,
    linger: Duration,
}

impl Asking {
    /// Asks `demand` for the window until dropped; then, if it was the last, for `linger` more.
    ///
    /// The session's task is woken only when nobody asked a moment ago: within the linger it is
    /// beating already (see [`Demand::ask_until`]).
    pub(super) fn new(demand: &Arc<Demand>, linger: Duration) -> Asking {
        if demand.count.fetch_add(1, Ordering::SeqCst) == 0 && !demand.lingers() {
            demand.wake.notify_one();
        }
        Asking { demand: Arc::downgrade(demand), linger }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        if let Some(demand) = self.demand.upgrade() {
            if demand.count.fetch_sub(1, Ordering::SeqCst) == 1 {
                demand.ask_until(Instant::now() + self.linger);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the session's task would be woken now (a stored wake-up is taken).
    fn woken(demand: &Demand) -> bool {
        let woken = std::pin::pin!(demand.woken());
        crate::util::poll_now(woken).is_some()
    }

    #[test]
    fn holds_taken_within_the_linger_wake_the_sessions_task_for_none_of_them() {
        let demand = Arc::new(Demand::new(false));
        let linger = Duration::from_secs(600);
        // The first asker wakes the task (it starts beating), and so does the end of the last
        // one (the task learns when the linger ends).
        let first = Asking::new(&demand, linger);
        assert!(woken(&demand));
        drop(first);
        assert!(woken(&demand));
        assert!(demand.asked(Instant::now(), false).is_some());
        // Within the linger the task is beating: cycles of acquire and release, and callers
        // of the window, wake it no more.
        for _ in 0..3 {
            let next = Asking::new(&demand, linger);
            assert!(demand.asked(Instant::now(), false) == Some(None));
            drop(next);
            demand.ask_until(Instant::now() + linger);
        }
        assert!(!woken(&demand));
        assert!(demand.asked(Instant::now(), false).is_some_and(|until| until.is_some()));
    }

    #[test]
    fn an_asker_after_the_linger_wakes_the_sessions_task() {
        let demand = Arc::new(Demand::new(false));
        // No linger: once dropped, nobody asks (the time asked for is the drop's instant).
        drop(Asking::new(&demand, Duration::ZERO));
        assert!(woken(&demand));
        assert!(demand.asked(Instant::now() + Duration::from_millis(1), false).is_none());
        let again = Asking::new(&demand, Duration::ZERO);
        assert!(woken(&demand));
        drop(again);
        assert!(woken(&demand));
        // A caller of the window after the linger passed wakes it too.
        demand.ask_until(Instant::now() + Duration::from_secs(600));
        assert!(woken(&demand));
    }
}
