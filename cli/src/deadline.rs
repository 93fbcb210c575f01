//! When the command must be dead after a loss: the kill deadline, bounded by the session.
//!
//! The server cannot expire our session before `safe_until` (the send time of our latest
//! request proven to have reached the ZooKeeper leader, plus the negotiated session timeout),
//! so nobody else can hold the lock before then. The command gets SIGTERM as soon as the loss
//! is noticed, and SIGKILL at [`kill_at`]: after `--grace`, but never later than
//! `safe_until − margin`.

use std::time::{Duration, Instant};

/// The smallest margin: covers the timer's wake-up and scheduling delay on a loaded machine,
/// and the time SIGKILL takes to stop every process of the group.
pub const MIN_MARGIN: Duration = Duration::from_millis(200);

/// The default margin for a negotiated session timeout: a tenth of it, and at least
/// [`MIN_MARGIN`].
///
/// The margin absorbs what happens between the deadline and the command being stopped: the
/// timer firing late (scheduling delay on a busy machine, a paused zklock), the kill(2) call,
/// and the kernel delivering SIGKILL to every process of the group (milliseconds, more under
/// memory pressure). 200 ms covers those on a loaded host; a tenth of the timeout scales it
/// for long timeouts, where longer stalls of zklock itself (swap, a stopped VM) become the
/// risk, and clock-rate differences grow with the window.
pub fn default_margin(session_timeout: Duration) -> Duration {
    (session_timeout / 10).max(MIN_MARGIN)
}

/// When to send SIGKILL after a loss noticed at `noticed`: `noticed + grace`, or
/// `safe_until − margin`, whichever comes first; never before `noticed`. `safe_until: None`
/// (nothing known about the session, or the hold certainly lost) means at once.
pub fn kill_at(noticed: Instant, grace: Duration, safe_until: Option<Instant>, margin: Duration) -> Instant {
    let Some(safe_until) = safe_until else { return noticed };
    let by_session = safe_until.checked_sub(margin).unwrap_or(noticed);
    (noticed + grace).min(by_session).max(noticed)
}

/// How much grace a command can get at best after a loss, for the warning at start: the
/// session timeout less the time the client takes to notice a dead connection (about 2/5 of
/// the timeout in `zookeeper-client`), less the staleness of the proven contact (up to 2/5 of
/// the timeout: `Session::last_contact`), less the margin. Zero means a lost command is killed
/// at once.
pub fn best_grace(session_timeout: Duration, margin: Duration) -> Duration {
    let detection = session_timeout * 2 / 5;
    let staleness = session_timeout * 2 / 5;
    session_timeout.saturating_sub(detection).saturating_sub(staleness).saturating_sub(margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn grace_applies_when_the_session_leaves_room() {
        let t = Instant::now();
        assert_eq!(kill_at(t, 2 * S, Some(t + 10 * S), 200 * MS), t + 2 * S);
    }

    #[test]
    fn the_session_caps_the_grace() {
        let t = Instant::now();
        assert_eq!(kill_at(t, 5 * S, Some(t + 3 * S), 200 * MS), t + 3 * S - 200 * MS);
    }

    #[test]
    fn unknown_or_lost_means_now() {
        let t = Instant::now();
        assert_eq!(kill_at(t, 5 * S, None, 200 * MS), t);
    }

    #[test]
    fn a_window_already_spent_means_now() {
        let t = Instant::now() + 10 * S;
        // safe_until already passed, or within the margin.
        assert_eq!(kill_at(t, 5 * S, Some(t - S), 200 * MS), t);
        assert_eq!(kill_at(t, 5 * S, Some(t + 100 * MS), 200 * MS), t);
        assert_eq!(kill_at(t, 5 * S, Some(t + 200 * MS), 200 * MS), t);
    }

    #[test]
    fn zero_grace_is_now() {
        let t = Instant::now();
        assert_eq!(kill_at(t, Duration::ZERO, Some(t + 10 * S), 200 * MS), t);
    }

    #[test]
    fn the_margin_is_a_tenth_and_at_least_200ms() {
        assert_eq!(default_margin(Duration::from_secs(10)), S);
        assert_eq!(default_margin(Duration::from_secs(2)), 200 * MS);
        assert_eq!(default_margin(Duration::from_millis(500)), 200 * MS);
    }

    #[test]
    fn short_sessions_leave_no_grace() {
        assert_eq!(
            best_grace(Duration::from_millis(400), default_margin(Duration::from_millis(400))),
            Duration::ZERO
        );
        assert_eq!(best_grace(Duration::from_secs(10), default_margin(Duration::from_secs(10))), S);
    }
}
