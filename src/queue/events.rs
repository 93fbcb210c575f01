//! [`QueueEvent`]: what an acquire reports while it waits, and [`Progress`], what a wait keeps
//! for them and for the lock delay.
//!
//! The events go to a callback the caller lends the acquire (`FnMut(&QueueEvent)`), called
//! inline, in order, from the acquire's own future: no task, no channel, no buffering, and no
//! event lost or reordered. A caller who wants a stream builds one from it (an unbounded
//! `mpsc` sender in the callback). Without a callback, an acquire sends no request and does no
//! work for events.

use std::time::{Duration, Instant};

/// What an acquire reports while it waits (`Lock::acquire_with_events`), in this order:
/// `Queued` (only if it has to wait), any number of `MovedUp`, then `Acquired` or `GaveUp`;
/// `Requeued` (followed by `Queued` again) when our session expired while we waited, and
/// `LockDelay` just before `Acquired` when the lock delay applies. A multi-lock reports each
/// member's in turn.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueEvent {
    /// Our node is in the queue, and others are ahead of it.
    #[non_exhaustive]
    Queued {
        /// Our node's name under the lock path.
        node: String,
        /// How many nodes were ahead of ours at that listing.
        ahead: usize,
        /// The node ahead whose deletion we wait for (the first one, when the rule waits for
        /// any of several: a semaphore's leases).
        watching: String,
        /// The participant id of the node at the head of the queue (the holder, or the first
        /// of the holders), read when the event is reported; `None` if it left meanwhile.
        holder: Option<String>,
    },
    /// A listing after a wake-up found fewer nodes ahead of ours. Only the node we watch wakes
    /// us (no herd), so departures further ahead are reported when that node goes.
    #[non_exhaustive]
    MovedUp {
        /// How many nodes are ahead of ours now.
        ahead: usize,
        /// As in [`QueueEvent::Queued`].
        watching: String,
        /// As in [`QueueEvent::Queued`].
        holder: Option<String>,
    },
    /// Our session expired while we waited (our node went with it): the acquire queues again,
    /// at the back, on the session's new generation.
    #[non_exhaustive]
    Requeued {
        /// The session generation we queue again on.
        generation: u64,
    },
    /// A node ahead of ours vanished without a clean release (its session expired, say) and
    /// the lock delay is on ([`crate::LockOptions::lock_delay`]): the acquire waits `wait`
    /// more before it returns, holding our place at the head.
    #[non_exhaustive]
    LockDelay {
        /// How long the acquire waits from now.
        wait: Duration,
        /// The node whose vanishing started the delay.
        vanished: String,
    },
    /// The lock is ours.
    #[non_exhaustive]
    Acquired {
        /// Our node's name.
        node: String,
        /// The hold's fencing token ([`crate::LockGuard::fencing_token`]).
        fencing_token: u64,
    },
    /// The acquire ended without the lock.
    #[non_exhaustive]
    GaveUp {
        /// Why.
        reason: GiveUpReason,
    },
}

/// Why an acquire ended without the lock ([`QueueEvent::GaveUp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUpReason {
    /// A try found the lock taken (the event APIs do not try: reserved).
    Busy,
    /// The timeout passed.
    TimedOut,
    /// The acquire returned an error (it carries the details).
    Failed,
    /// The acquire's future was dropped before it ended (reported from its drop, unless the
    /// thread is panicking).
    Cancelled,
}

/// What stands for a duration too long to add to an instant.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A caller's event callback.
pub(crate) type Sink<'a> = &'a mut (dyn FnMut(&QueueEvent) + Send);

/// What one acquire keeps across its waits: who hears its events, how many were ahead at the
/// last report, and until when the lock delay holds it back.
pub(crate) struct Progress<'a> {
    sink: Option<Sink<'a>>,
    /// Nodes ahead at the last wait; `None` before the first one of this attempt.
    ahead: Option<usize>,
    /// The lock delay: no entry before this instant, because of the node named.
    delay: Option<(Instant, String)>,
    /// How long the lock delay held the acquire back, in all.
    delayed: Duration,
    ended: bool,
}

impl<'a> Progress<'a> {
    /// An acquire that reports to `sink`, if any.
    pub fn new(sink: Option<Sink<'a>>) -> Progress<'a> {
        Progress { sink, ahead: None, delay: None, delayed: Duration::ZERO, ended: false }
    }

    /// Whether anyone hears the events (only then is work done to build them).
    pub fn listening(&self) -> bool {
        self.sink.is_some()
    }

    /// Reports `event`.
    pub fn emit(&mut self, event: QueueEvent) {
        if let Some(sink) = self.sink.as_mut() {
            sink(&event);
        }
    }

    /// Reports the end of the acquire, once; a dropped acquire reports `Cancelled`.
    pub fn end(&mut self, event: QueueEvent) {
        if !self.ended {
            self.ended = true;
            self.emit(event);
        }
    }

    /// A new attempt (after an expiry): the next wait reports `Queued` again.
    pub fn requeued(&mut self, generation: u64) {
        self.ahead = None;
        self.emit(QueueEvent::Requeued { generation });
    }

    /// Whether a wait with `ahead` nodes in front is news, and which: `Some(true)` for the
    /// first of an attempt (`Queued`), `Some(false)` for fewer ahead than last reported
    /// (`MovedUp`), `None` for no news (noted at once). News is noted once reported
    /// ([`Progress::reported`]).
    pub fn news(&mut self, ahead: usize) -> Option<bool> {
        let news = match self.ahead {
            None => Some(true),
            Some(last) if ahead < last => Some(false),
            Some(_) => None,
        };
        if news.is_none() {
            self.ahead = Some(ahead);
        }
        news
    }

    /// A wait with `ahead` nodes in front was reported.
    pub fn reported(&mut self, ahead: usize) {
        self.ahead = Some(ahead);
    }

    /// A node ahead of ours vanished without a clean release: with a lock delay `delay`, no
    /// entry before `delay` from now.
    pub fn vanished_unclean(&mut self, delay: Duration, node: &str) {
        // A delay past the end of time is as long as a century.
        let until = Instant::now().checked_add(delay).unwrap_or_else(|| Instant::now() + FOREVER);
        if self.delay.as_ref().is_none_or(|(at, _)| until > *at) {
            self.delay = Some((until, node.to_string()));
        }
    }

    /// The lock delay holds the acquire back `wait` more.
    pub fn delayed(&mut self, wait: Duration) {
        self.delayed += wait;
    }

    /// How long the lock delay held the acquire back, in all (for the metrics).
    pub fn total_delay(&self) -> Duration {
        self.delayed
    }

    /// Until when the lock delay holds the acquire back, and why; `None` once that is past.
    pub fn delay(&self) -> Option<(Instant, &str)> {
        self.delay.as_ref().filter(|(at, _)| *at > Instant::now()).map(|(at, node)| (*at, node.as_str()))
    }
}

impl Drop for Progress<'_> {
    fn drop(&mut self) {
        // Not while unwinding (the callback itself may have panicked): a second panic would
        // abort the process.
        if !std::thread::panicking() {
            self.end(QueueEvent::GaveUp { reason: GiveUpReason::Cancelled });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn news_is_the_first_wait_and_every_move_up() {
        let mut progress = Progress::new(None);
        assert_eq!(progress.news(3), Some(true));
        // Not reported (the node ahead was gone before we watched it): still the first.
        assert_eq!(progress.news(3), Some(true));
        progress.reported(3);
        assert_eq!(progress.news(3), None);
        assert_eq!(progress.news(1), Some(false));
        progress.reported(1);
        // Further back (a rule that lets later nodes pass ahead): not news, but remembered.
        assert_eq!(progress.news(2), None);
        assert_eq!(progress.news(1), Some(false));
        progress.requeued(2);
        assert_eq!(progress.news(5), Some(true));
    }

    #[test]
    fn events_reach_the_sink_in_order_and_a_drop_reports_cancelled() {
        let mut seen = Vec::new();
        {
            let mut sink = |e: &QueueEvent| seen.push(e.clone());
            let mut progress = Progress::new(Some(&mut sink));
            progress.requeued(7);
        }
        assert_eq!(
            seen,
            vec![
                QueueEvent::Requeued { generation: 7 },
                QueueEvent::GaveUp { reason: GiveUpReason::Cancelled }
            ]
        );
    }

    #[test]
    fn the_longest_delay_wins() {
        let mut progress = Progress::new(None);
        assert!(progress.delay().is_none());
        progress.vanished_unclean(Duration::from_secs(60), "a");
        progress.vanished_unclean(Duration::from_secs(1), "b");
        assert_eq!(progress.delay().map(|(_, n)| n), Some("a"));
    }
}
