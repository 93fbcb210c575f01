//! The checks of the option phases (`delay`, `maxhold`, `revoke`, `observer`: see
//! `workers_options.rs`): pure functions over what the workers and the witness recorded, so that
//! their tests (`options_check_tests.rs`) can feed them broken histories.
//!
//! - **queue events** stay in order per acquire attempt: `Queued` first (if it waits), `MovedUp`
//!   with fewer nodes ahead each time, `Requeued` starting over, `LockDelay` only right before
//!   the end, exactly one `Acquired` or `GaveUp`, last;
//! - **lock delay**: a waiter that saw a node ahead of it vanish without a clean release enters
//!   no sooner than [`DELAY`] after the node's last sighting; and is not held back after a clean
//!   release (no `LockDelay` naming it, and in by [`DELAY`] after it when no fault intervened).
//!   An unclean verdict the witness reached across a gap in its own connection is not judged:
//!   ZooKeeper reports a node deleted while the witness was away as deleted, even when a marked
//!   release (a data change first, in the same transaction) took it (see [`witness_gaps`]);
//! - **max hold**: a limited hold ends (its holder stops) by [`LIMIT`] + [`LIMIT_SLACK`];
//! - **revocation**: every holder asked is told, unless its hold ended first;
//! - **observer**: tokens never go back, and each observer shows the leader of a term that has
//!   run [`CONVERGE`] past the last fault.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::checker::{Hold, Pause, WAKE_GRACE};
use crate::delay_check::lock_delay;
use crate::faults::FaultRec;
use crate::report::PhaseReport;
use crate::resource::Epoch;
use crate::SESSION;

/// The `delay` phase's lock delay.
pub const DELAY: Duration = Duration::from_secs(1);
/// The hold limit of the limited holds (`delay` and `maxhold` phases).
pub const LIMIT: Duration = Duration::from_millis(500);
/// How far past its limit a hold may go on: the limit is a timer on the holder's own runtime;
/// past it come only the status change, the worker's wake-up and its abort at the resource.
/// A quarter of the session timeout, generous on a loaded 2-core machine.
pub const LIMIT_SLACK: Duration = Duration::from_millis(SESSION.as_millis() as u64 / 4);
/// A holder asked to release hears it within this (one watch event), unless its hold ends.
pub const TOLD_WITHIN: Duration = SESSION;
/// Observers show the real leader this long after the last fault (or the term's start).
pub const CONVERGE: Duration = SESSION;

/// One queue event an acquire reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QEv {
    pub worker: String,
    pub pid: u32,
    /// The worker's acquire call (one per process).
    pub attempt: u64,
    /// `queued`, `moved`, `requeued`, `delay`, `acquired`, `gaveup`.
    pub kind: String,
    /// Nodes ahead (`queued`, `moved`), the wait in ms (`delay`), the token (`acquired`).
    pub num: u64,
    /// Our node (`queued`, `acquired`), the vanished node (`delay`); else `-`.
    pub node: String,
    /// The node watched (`queued`, `moved`); else `-`.
    pub watching: String,
    pub at: Duration,
}

/// How the witness saw a node go: with a data change first (a marked, clean release), or
/// deleted outright (an expiry, a hold limit, an unmarked delete).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    Clean,
    Unclean,
}

/// What the option phases recorded.
#[derive(Default, Debug)]
pub struct OptHistory {
    pub qevs: Vec<QEv>,
    /// Session state changes: worker, pid, state, when.
    pub conns: Vec<(String, u32, String, Duration)>,
    /// The witness's listings of the lock path: when sent, the children.
    pub listings: Vec<(Duration, Vec<String>)>,
    /// The witness's verdict on each node it watched go, and when it heard.
    pub gone: HashMap<String, (Gone, Duration)>,
    /// The witness's own session states (`Connected-1`, `Suspended-1`, ...), and when.
    pub witness_conns: Vec<(String, Duration)>,
    /// Limited holds: worker, resource, token, limit.
    pub limited: Vec<(String, String, u64, Duration)>,
    /// Revocation requests that reached a node: asker, resource, token, sent, answered.
    pub asks: Vec<(String, String, u64, Duration, Duration)>,
    /// Holders told of a request: worker, resource, token, when.
    pub told: Vec<(String, String, u64, Duration)>,
    /// Observer reports: worker, pid, token (`None`: nobody leads), when.
    pub obs: Vec<(String, u32, Option<u64>, Duration)>,
}

impl OptHistory {
    /// Whether nothing was recorded (not an option phase).
    pub fn is_empty(&self) -> bool {
        self.qevs.is_empty() && self.conns.is_empty() && self.limited.is_empty() && self.obs.is_empty()
    }

    /// Handles one worker line of the option phases; `None` if it is not one.
    pub fn handle(&mut self, parts: &[&str], epoch: Epoch) -> Option<&'static str> {
        let num = |s: &str| s.parse::<u64>().unwrap_or(0);
        let at = |s: &str| epoch.at(num(s));
        match parts {
            ["QEV", w, pid, attempt, kind, n, node, watching, t] => self.qevs.push(QEv {
                worker: w.to_string(),
                pid: num(pid) as u32,
                attempt: num(attempt),
                kind: kind.to_string(),
                num: num(n),
                node: node.to_string(),
                watching: watching.to_string(),
                at: at(t),
            }),
            ["CONN", w, pid, state, t] => {
                self.conns.push((w.to_string(), num(pid) as u32, state.to_string(), at(t)))
            }
            ["LIM", w, res, token, ms] => self.limited.push((
                w.to_string(),
                res.to_string(),
                num(token),
                Duration::from_millis(num(ms)),
            )),
            ["ASKED", w, _pid, res, token, sent, answered] => {
                self.asks.push((w.to_string(), res.to_string(), num(token), at(sent), at(answered)))
            }
            ["TOLD", w, _pid, res, token, t] => {
                self.told.push((w.to_string(), res.to_string(), num(token), at(t)))
            }
            ["OBS", w, pid, token, t] => {
                self.obs.push((w.to_string(), num(pid) as u32, Some(num(token)).filter(|t| *t > 0), at(t)))
            }
            _ => return None,
        }
        Some("OK")
    }
}

/// A node's sequence number (its trailing digits).
pub fn seq(node: &str) -> Option<u64> {
    let digits = node.len() - node.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    node[node.len() - digits..].parse().ok()
}

/// The events of each acquire attempt, in order: (worker, pid, attempt) → events.
pub(crate) fn attempts(qevs: &[QEv]) -> BTreeMap<(String, u32, u64), Vec<&QEv>> {
    let mut by: BTreeMap<(String, u32, u64), Vec<&QEv>> = BTreeMap::new();
    for e in qevs {
        by.entry((e.worker.clone(), e.pid, e.attempt)).or_default().push(e);
    }
    by
}

/// Queue events in order per attempt (see the module doc). An attempt without an end is
/// allowed only for a killed process (`killed` pids). Returns the violations and how many
/// attempts were checked.
pub fn queue_events(qevs: &[QEv], killed: &[u32], delay: Option<Duration>) -> (Vec<String>, usize) {
    let mut out = Vec::new();
    let by = attempts(qevs);
    for ((w, pid, a), evs) in &by {
        let mut bad = |why: String| out.push(format!("queue events of {w} (pid {pid}) attempt {a}: {why}"));
        let mut ahead: Option<u64> = None;
        let mut last_at = Duration::ZERO;
        for (i, e) in evs.iter().enumerate() {
            let next = evs.get(i + 1).map(|n| n.kind.as_str());
            if e.at < last_at {
                bad(format!("{} at {:.3} s before the event ahead of it", e.kind, e.at.as_secs_f64()));
            }
            last_at = e.at;
            match e.kind.as_str() {
                "queued" => {
                    if ahead.is_some() {
                        bad("Queued twice without a Requeued between".into());
                    }
                    ahead = Some(e.num);
                }
                "moved" => match ahead {
                    None => bad("MovedUp before Queued".into()),
                    Some(before) if e.num >= before => bad(format!(
                        "MovedUp to {} ahead after {before} ahead: the position went back up",
                        e.num
                    )),
                    Some(_) => ahead = Some(e.num),
                },
                "requeued" => ahead = None,
                "delay" => {
                    if !matches!(next, Some("acquired" | "gaveup" | "requeued")) {
                        bad(format!("LockDelay followed by {}", next.unwrap_or("nothing")));
                    }
                    if delay.is_some_and(|d| Duration::from_millis(e.num) > d) {
                        bad(format!("LockDelay of {} ms, longer than the delay", e.num));
                    }
                }
                "acquired" | "gaveup" => {
                    if next.is_some() {
                        bad(format!("{} after the acquire ended ({})", next.unwrap_or(""), e.kind));
                    }
                }
                other => bad(format!("unknown event {other}")),
            }
        }
        let ended = evs.last().is_some_and(|e| matches!(e.kind.as_str(), "acquired" | "gaveup"));
        if !ended && !killed.contains(pid) {
            bad("no Acquired or GaveUp".into());
        }
    }
    (out, by.len())
}

/// The rate of a worker process's clock (libfaketime's, `clock_map.rs`), 1 if not faked.
pub type Rates = HashMap<u32, f64>;

/// `d` on the clock of process `pid`, as long as it takes in real time (`rates`).
pub fn real(d: Duration, pid: u32, rates: &Rates) -> Duration {
    d.div_f64(rates.get(&pid).copied().filter(|r| *r > 0.0).unwrap_or(1.0))
}

/// Limited holds (`limited`) that went on past their limit (as long as the holder's clock makes
/// it: `rates`) by more than [`LIMIT_SLACK`]: the violations, the holds checked and the largest
/// overshoot past the limit (ms, negative: ended before it). A hold whose process was paused
/// across its limit must have stopped within [`WAKE_GRACE`] of waking.
pub fn max_hold(
    holds: &[Hold],
    limited: &[(String, String, u64, Duration)],
    pauses: &[Pause],
    rates: &Rates,
) -> (Vec<String>, usize, i64) {
    let (mut out, mut checked, mut most) = (Vec::new(), 0, i64::MIN);
    for (w, res, token, limit) in limited {
        let Some(h) = holds.iter().find(|h| h.worker == *w && h.resource == *res && h.token == *token) else {
            continue;
        };
        if h.cause == "killed" {
            continue; // its process was killed: the session's expiry ends it
        }
        checked += 1;
        let due = h.start + real(*limit, h.pid, rates);
        most = most.max(h.end.as_millis() as i64 - due.as_millis() as i64);
        if h.end <= due + LIMIT_SLACK {
            continue;
        }
        let paused = pauses.iter().any(|p| {
            p.pid == h.pid && p.from <= due + LIMIT_SLACK && p.to >= h.start && h.end <= p.to + WAKE_GRACE
        });
        if !paused {
            out.push(format!(
                "{w} held {res} token {token} from {:.3} s to {:.3} s ({}): {} ms past its limit of {} ms",
                h.start.as_secs_f64(),
                h.end.as_secs_f64(),
                h.cause,
                (h.end - due).as_millis(),
                limit.as_millis()
            ));
        }
    }
    (out, checked, most)
}

/// Every holder asked (a request that reached its node) is told, unless its hold ended first:
/// by a loss, the phase's end, or within [`TOLD_WITHIN`] of the request, or its process was
/// paused between the request and the hold's end (past its session timeout: the hold ended at
/// the server, and the paused holder hears of the loss first when it wakes). Returns the
/// violations, the requests matched to a hold, and the longest time to be told (ms).
pub fn revocation(
    holds: &[Hold],
    asks: &[(String, String, u64, Duration, Duration)],
    told: &[(String, String, u64, Duration)],
    pauses: &[Pause],
) -> (Vec<String>, usize, u64) {
    let (mut out, mut matched, mut slowest) = (Vec::new(), 0, 0u64);
    for (asker, res, token, sent, answered) in asks {
        let Some(h) = holds.iter().find(|h| h.resource == *res && h.token == *token) else { continue };
        matched += 1;
        if let Some((_, _, _, at)) = told.iter().find(|(_, r, t, _)| r == res && t == token) {
            slowest = slowest.max(at.saturating_sub(*sent).as_millis() as u64);
            continue;
        }
        let ended_by_itself = matches!(h.cause.as_str(), "done" | "unreported");
        let paused = pauses.iter().any(|p| p.pid == h.pid && p.to >= *sent && p.from <= h.end);
        if ended_by_itself && !paused && h.end > *answered + TOLD_WITHIN {
            out.push(format!(
                "{} held {res} token {token} to {:.3} s ({}), never told of {asker}'s request answered at \
                 {:.3} s",
                h.worker,
                h.end.as_secs_f64(),
                h.cause,
                answered.as_secs_f64()
            ));
        }
    }
    (out, matched, slowest)
}

/// What the observer check found.
#[derive(Debug, Default)]
pub struct ObsFigures {
    pub violations: Vec<String>,
    pub reports: usize,
    /// Convergence points checked, and the longest an observer took to show the leader there.
    pub checked: usize,
    pub slowest_ms: u64,
}

/// Each observer's reports (worker, pid) in order: the token shown (`None`: nobody), when.
type ObserverReports<'a> = BTreeMap<(&'a str, u32), Vec<(Option<u64>, Duration)>>;

/// Observers (see the module doc). `terms`: the leaders' holds; `faults`: the phase's fault
/// spans; `down`: spans (pid, from, to) when a process was paused or dead.
pub fn observer(
    obs: &[(String, u32, Option<u64>, Duration)],
    terms: &[Hold],
    faults: &[(Duration, Duration)],
    down: &[(u32, Duration, Duration)],
) -> ObsFigures {
    let mut f = ObsFigures { reports: obs.len(), ..ObsFigures::default() };
    let mut by: ObserverReports = BTreeMap::new();
    for (w, pid, token, at) in obs {
        by.entry((w.as_str(), *pid)).or_default().push((*token, *at));
    }
    // A worker's observer in a process replaced by a new one (killed, respawned) is gone from
    // the new one's first report on.
    let mut down = down.to_vec();
    for ((w, pid), seq) in &by {
        let first = seq[0].1;
        let next = by
            .iter()
            .filter(|((w2, p2), s)| w2 == w && p2 != pid && s[0].1 > first)
            .map(|(_, s)| s[0].1)
            .min();
        if let Some(next) = next {
            down.push((*pid, next, Duration::MAX));
        }
    }
    for ((w, pid), seq) in &by {
        let mut newest = 0;
        for (token, at) in seq {
            if let Some(t) = *token {
                if t < newest {
                    f.violations.push(format!(
                        "observer of {w} (pid {pid}) reported token {t} at {:.3} s after it had reported \
                         {newest}: a term that ended before its read",
                        at.as_secs_f64()
                    ));
                }
                newest = newest.max(t);
            }
        }
    }
    // The moment c when each clean term must be shown: CONVERGE after its start or after the
    // end of the last fault begun by then, whichever is later; checked if the term is still on.
    for t in terms.iter().filter(|t| matches!(t.cause.as_str(), "done" | "stop")) {
        let mut c = t.start + CONVERGE;
        while let Some(end) =
            faults.iter().filter(|(a, b)| *a <= c && *b + CONVERGE > c).map(|(_, b)| *b).max()
        {
            c = end + CONVERGE;
        }
        if c >= t.end {
            continue;
        }
        for ((w, pid), seq) in &by {
            let first = seq.first().map_or(Duration::MAX, |(_, at)| *at);
            let dead = down.iter().any(|(p, a, b)| p == pid && *a <= c && b.saturating_add(CONVERGE) > c);
            if first > c.saturating_sub(CONVERGE) || dead {
                continue; // this observer's process was not up (long enough) at c
            }
            f.checked += 1;
            let shown = seq.iter().rev().find(|(_, at)| *at <= c).and_then(|(tok, _)| *tok);
            if shown != Some(t.token) {
                f.violations.push(format!(
                    "observer of {w} (pid {pid}) showed {} at {:.3} s, while {} had led since {:.3} s (token \
                     {}) and the last fault was over {} ms before",
                    shown.map_or("nobody".into(), |s| format!("token {s}")),
                    c.as_secs_f64(),
                    t.worker,
                    t.start.as_secs_f64(),
                    t.token,
                    CONVERGE.as_millis()
                ));
                continue;
            }
            // Since when it showed this leader (without a change up to c).
            let since = seq
                .iter()
                .rev()
                .skip_while(|(_, at)| *at > c)
                .take_while(|(tok, _)| *tok == Some(t.token))
                .last()
                .map_or(c, |(_, at)| *at);
            f.slowest_ms = f.slowest_ms.max(since.saturating_sub(t.start).as_millis() as u64);
        }
    }
    f
}

/// Runs the checks of the option phase `mode` on its report's history, adding their lines and
/// violations. Nothing for the other phases.
pub fn attach(
    r: &mut PhaseReport,
    mode: &str,
    pauses: &[Pause],
    kills: &[(u32, Duration)],
    faults: &[&FaultRec],
) {
    if !crate::workers_options::MODES.contains(&mode) {
        return;
    }
    let h = &r.history;
    let o = &h.opts;
    let spans: Vec<(Duration, Duration)> = faults.iter().map(|f| (f.start, f.end)).collect();
    let killed: Vec<u32> = kills.iter().map(|k| k.0).collect();
    let rates = h.clocks.rates();
    let mut lines = Vec::new();
    let mut violations = Vec::new();
    if !o.qevs.is_empty() {
        let delay = (mode == "delay").then_some(DELAY);
        let (v, n) = queue_events(&o.qevs, &killed, delay);
        lines.push(format!(
            "  queue events: {} events in {n} acquire attempts, in order and positions never back up: {} out \
             of order",
            o.qevs.len(),
            v.len()
        ));
        violations.extend(v);
    }
    if mode == "delay" {
        let f = lock_delay(o, DELAY, &spans, &rates);
        lines.push(format!(
            "  lock delay {} ms: the witness saw {} nodes go uncleanly ({} of them heard across a gap in its \
             own connection: not judged), {} cleanly; {} entries behind an unclean end, each at least the \
             delay (the shortest, in real time, of those in behind that end so far) after its last sighting \
             (least margin {} ms); {} handoffs after a clean release (longest {} ms, never held back); {} \
             violations",
            DELAY.as_millis(),
            f.unclean,
            f.unjudged,
            f.clean,
            f.behind_unclean,
            f.least_margin_ms.map_or("-".into(), |m| m.to_string()),
            f.behind_clean,
            f.longest_clean_ms,
            f.violations.len()
        ));
        violations.extend(f.violations);
    }
    if !o.limited.is_empty() {
        let (v, n, most) = max_hold(&h.holds, &o.limited, pauses, &rates);
        lines.push(format!(
            "  max hold {} ms: {n} limited holds, the longest ended {most} ms past its limit (bound {} ms); \
             {} violations",
            LIMIT.as_millis(),
            LIMIT_SLACK.as_millis(),
            v.len()
        ));
        violations.extend(v);
    }
    if mode == "revoke" {
        let (v, n, slowest) = revocation(&h.holds, &o.asks, &o.told, pauses);
        lines.push(format!(
            "  revocation: {} requests reached a node, {n} of them a reported hold; {} holders told (slowest \
             {slowest} ms after the request); {} asked and never told",
            o.asks.len(),
            o.told.len(),
            v.len()
        ));
        violations.extend(v);
    }
    if mode == "observer" {
        let mut down: Vec<(u32, Duration, Duration)> = pauses.iter().map(|p| (p.pid, p.from, p.to)).collect();
        down.extend(kills.iter().map(|(pid, at)| (*pid, *at, Duration::MAX)));
        // A term led from a process whose clock runs at another rate is no convergence point:
        // its session may end at the server while its leader's clock says it still leads (the
        // clock assumption, docs/safety.md).
        let terms: Vec<Hold> =
            h.holds.iter().filter(|t| rates.get(&t.pid).is_none_or(|r| *r == 1.0)).cloned().collect();
        let f = observer(&o.obs, &terms, &spans, &down);
        lines.push(format!(
            "  observers: {} reports; never back to an older term; {} convergence points ({} ms after the \
             last fault or the term's start), slowest to show its leader {} ms; {} violations",
            f.reports,
            f.checked,
            CONVERGE.as_millis(),
            f.slowest_ms,
            f.violations.len()
        ));
        violations.extend(f.violations);
    }
    for v in violations.iter().take(10) {
        lines.push(format!("    VIOLATION {v}"));
    }
    r.violations += violations.len();
    // After the phase's own lines, before the faults and gaps.
    let at = r.lines.iter().position(|l| l.starts_with("  faults:")).unwrap_or(r.lines.len());
    r.lines.splice(at..at, lines);
}

#[cfg(test)]
#[path = "options_check_tests.rs"]
mod tests;
