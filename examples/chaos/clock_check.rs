//! The clock assumption in the checker's verdict.
//!
//! The safe window (`safe_until`: the last contact with the server plus the session timeout,
//! less the worker's margin) assumes that the client's and the server's clocks run at about
//! the same rate (bounded rate drift). A client whose clock runs slow, or a server whose clock
//! runs fast, breaks that assumption: the server expires the session while the client still
//! believes its window open, and a successor can come in while it still works. Fencing is what
//! stays safe then (0 fenced violations is still required); an overlap of the holds *without*
//! fencing during such a clock fault is attributed to the broken assumption instead of failing
//! the run as unexplained. Nothing else is excused: an overlap outside every clock fault, an
//! overlap where the earlier holder's clock was not the faulted one (or ran fast, which only
//! closes its window early), and a wall-clock step (only monotonic clocks are read) stay
//! violations.

use std::time::Duration;

use crate::checker::{Hold, Overlap};
use crate::clock_map::ClockMap;
use crate::faults::{Fault, FaultRec};
use crate::resource::Epoch;

/// What the report says of an overlap the clock assumption explains.
pub const EXPLAINED: &str = "explained: clock fault (rate drift beyond the bounded-drift assumption)";

/// How long after a fast server is restored its early expiries may still show: a holder's
/// window closes at the latest a session timeout after its last contact.
pub const SERVER_GRACE: Duration = crate::SESSION;

/// A span of a clock fault that breaks the bounded-drift assumption.
#[derive(Clone, Debug, PartialEq)]
pub struct DriftSpan {
    /// The slow-clocked worker process, or `None`: a fast server's (every session's).
    pub pid: Option<u32>,
    pub from: Duration,
    pub to: Duration,
    pub what: String,
}

/// The spans of a phase: each worker process whose clock ran slow (rate below 1), over its
/// samples; each fast-server fault, to a session timeout past its end.
pub fn spans(clocks: &ClockMap, faults: &[&FaultRec]) -> Vec<DriftSpan> {
    let epoch = Epoch(clocks.epoch_ns);
    let workers = clocks.pids.iter().filter(|(_, c)| c.rate < 1.0).map(|(pid, c)| {
        let (from, to) = c.span(epoch);
        DriftSpan { pid: Some(*pid), from, to, what: format!("pid {pid}'s clock at {}", c.label) }
    });
    let servers = faults.iter().filter(|f| f.fault == Fault::ClockFastServer).map(|f| DriftSpan {
        pid: None,
        from: f.start,
        to: f.end + SERVER_GRACE,
        what: format!("a fast server clock ({})", f.detail),
    });
    workers.chain(servers).collect()
}

/// Explains each unexplained overlap that a span covers: the successor came in within the span,
/// and (for a slow worker's span) every earlier holder inside was of that process.
pub fn explain(overlaps: &mut [Overlap], holds: &[Hold], spans: &[DriftSpan]) {
    for o in overlaps.iter_mut().filter(|o| o.explanation.is_none()) {
        let covering = spans.iter().find(|s| {
            s.from <= o.at
                && o.at <= s.to
                && s.pid.is_none_or(|pid| o.earlier.iter().all(|&e| holds[e].pid == pid))
        });
        if let Some(s) = covering {
            o.explanation = Some(format!(
                "{EXPLAINED}: {} over {:.2}-{:.2} s",
                s.what,
                s.from.as_secs_f64(),
                s.to.as_secs_f64()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{overlaps, Kind};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn hold(worker: &str, pid: u32, start: u64, end: u64, deadline: u64) -> Hold {
        Hold {
            worker: worker.into(),
            pid,
            resource: "/r".into(),
            kind: Kind::Exclusive,
            token: start,
            start: ms(start),
            end: ms(end),
            deadline: ms(deadline),
            cause: "safe".into(),
        }
    }

    /// A slow-clocked holder (pid 5) went on to its own deadline (3000 on the true clock)
    /// after the server had expired it; b came in at 2500. Unfenced, that is an overlap.
    fn slow_holder() -> Vec<Hold> {
        vec![hold("a", 5, 1000, 2900, 3000), hold("b", 6, 2500, 2700, 4500)]
    }

    #[test]
    fn an_overlap_during_a_slow_client_clock_is_attributed_to_the_clock() {
        let holds = slow_holder();
        let mut found = overlaps(&holds, &|_| None, &[]);
        assert_eq!(found.len(), 1);
        assert!(found[0].explanation.is_none(), "the pause rule does not excuse it");
        let spans =
            [DriftSpan { pid: Some(5), from: ms(500), to: ms(6000), what: "pid 5's clock at x0.5".into() }];
        explain(&mut found, &holds, &spans);
        let why = found[0].explanation.as_deref().expect("explained");
        assert!(why.starts_with(EXPLAINED), "{why}");
        // A fast server's span explains it whoever held.
        let mut found = overlaps(&holds, &|_| None, &[]);
        explain(
            &mut found,
            &holds,
            &[DriftSpan { pid: None, from: ms(2000), to: ms(2600), what: "server".into() }],
        );
        assert!(found[0].explanation.is_some());
    }

    #[test]
    fn an_unfenced_overlap_outside_every_clock_fault_stays_unexplained() {
        let holds = slow_holder();
        let cases = [
            // The clock fault was over before the successor came in.
            DriftSpan { pid: Some(5), from: ms(0), to: ms(2000), what: "earlier".into() },
            // It began after.
            DriftSpan { pid: None, from: ms(2600), to: ms(9000), what: "later".into() },
            // Another process's clock was the slow one.
            DriftSpan { pid: Some(6), from: ms(0), to: ms(9000), what: "the successor's".into() },
        ];
        for span in cases {
            let mut found = overlaps(&holds, &|_| None, &[]);
            explain(&mut found, &holds, std::slice::from_ref(&span));
            assert!(found[0].explanation.is_none(), "{span:?} must not explain {found:?}");
        }
    }

    #[test]
    fn only_slow_worker_clocks_and_fast_servers_make_spans() {
        let mut clocks = ClockMap::default();
        let s = 1_000_000_000u64;
        for (pid, label, rate) in [(1, "x0.5", 0.5), (2, "x2", 2.0), (3, "step", 1.0)] {
            clocks.sample(pid, label, rate, 10 * s, 10 * s, 0);
            clocks.sample(pid, label, rate, 12 * s, 14 * s, 0);
        }
        let server = FaultRec {
            phase: "mutex".into(),
            fault: Fault::ClockFastServer,
            start: ms(20_000),
            end: ms(26_000),
            detail: "server 2 at x2".into(),
        };
        let other = FaultRec { fault: Fault::SlowPath, ..server.clone() };
        let found = spans(&clocks, &[&server, &other]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].pid, found[0].from, found[0].to), (Some(1), ms(10_000), ms(14_000)));
        assert_eq!((found[1].pid, found[1].from, found[1].to), (None, ms(20_000), ms(26_000) + SERVER_GRACE));
    }
}
