//! The lock-delay property of the `delay` phase (see `options_check.rs`, whose module doc states
//! it): a pure function over what the waiters and the witness recorded, tested with broken
//! histories in `options_check_tests.rs`.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::options_check::{attempts, real, seq, Gone, OptHistory, Rates};

/// What the lock-delay check found.
#[derive(Debug, Default)]
pub struct DelayFigures {
    pub violations: Vec<String>,
    /// Entries checked behind an unclean end, and the least margin past the bound (ms).
    pub behind_unclean: usize,
    pub least_margin_ms: Option<i64>,
    /// Handoffs checked behind a clean release, and the longest of them (ms).
    pub behind_clean: usize,
    pub longest_clean_ms: u64,
    pub unclean: usize,
    pub clean: usize,
    /// Unclean verdicts heard across a gap in the witness's own connection: not judged.
    pub unjudged: usize,
}

/// An entry behind a node that went uncleanly.
struct Behind {
    entered: Duration,
    /// The delay, as long as the waiter's clock makes it.
    delay: Duration,
    worker: String,
    /// The node it entered with.
    node: String,
    /// The witness's last sighting of the node ahead.
    seen: Duration,
}

/// The witness's last listing (its send time) that shows `node`.
fn last_seen(listings: &[(Duration, Vec<String>)], node: &str) -> Option<Duration> {
    listings.iter().filter(|(_, c)| c.iter().any(|n| n == node)).map(|(t, _)| *t).max()
}

/// The spans the witness's own session was not connected (from a state other than `Connected`
/// or `Reconnected` to the next one that is; open at the end: to the end of time). A data
/// watch is set again on reconnection, and a node deleted meanwhile is reported deleted
/// (`NodeDeleted`) whether or not its delete came with a data change in one transaction: the
/// marker of a clean release is not seen. So a verdict `Unclean` heard across such a span says
/// nothing. (The soak of 2026-11-25: a holder released cleanly while the ensemble elected a
/// leader; the waiter, back first, saw the marker and entered at once; the witness, back after
/// the delete, heard a deletion.)
pub fn witness_gaps(conns: &[(String, Duration)]) -> Vec<(Duration, Duration)> {
    let mut gaps = Vec::new();
    let mut from = None;
    for (state, at) in conns {
        let up = matches!(state.split('-').next(), Some("Connected" | "Reconnected"));
        match (up, from) {
            (true, Some(f)) => {
                gaps.push((f, *at));
                from = None;
            }
            (false, None) => from = Some(*at),
            _ => {}
        }
    }
    gaps.extend(from.map(|f| (f, Duration::MAX)));
    gaps
}

/// The lock delay `d` (see the module doc), as long as the waiter's clock makes it (`rates`).
/// `faults`: spans that excuse a slow handoff after a clean release.
pub fn lock_delay(
    h: &OptHistory,
    d: Duration,
    faults: &[(Duration, Duration)],
    rates: &Rates,
) -> DelayFigures {
    let mut f = DelayFigures {
        unclean: h.gone.values().filter(|g| g.0 == Gone::Unclean).count(),
        clean: h.gone.values().filter(|g| g.0 == Gone::Clean).count(),
        ..DelayFigures::default()
    };
    let conn_changed = |w: &str, pid: u32, from: Duration, to: Duration| {
        h.conns.iter().any(|(cw, cp, _, at)| cw == w && *cp == pid && *at >= from && *at <= to)
    };
    // Unclean verdicts heard across a gap in the witness's connection: the node may have gone
    // while it was away (after its last sighting, before the verdict), cleanly or not.
    let gaps = witness_gaps(&h.witness_conns);
    let blind: HashSet<&str> = h
        .gone
        .iter()
        .filter(|(node, (gone, heard))| {
            *gone == Gone::Unclean
                && last_seen(&h.listings, node)
                    .is_some_and(|seen| gaps.iter().any(|(a, b)| *a <= *heard && *b >= seen))
        })
        .map(|(node, _)| node.as_str())
        .collect();
    f.unjudged = blind.len();
    let mut behind: BTreeMap<&str, Vec<Behind>> = BTreeMap::new();
    for ((w, pid, _), evs) in attempts(&h.qevs) {
        let Some(acq) = evs.iter().find(|e| e.kind == "acquired") else { continue };
        let (Some(mine), entered) = (seq(&acq.node), acq.at) else { continue };
        let d = real(d, pid, rates);
        // The last time it queued with the node it entered with: its listing came before.
        let Some(queued) = evs.iter().rev().find(|e| e.kind == "queued" && e.node == acq.node) else {
            continue;
        };
        for (node, (gone, heard)) in &h.gone {
            let Some(seen) = last_seen(&h.listings, node) else { continue };
            if seq(node).is_none_or(|s| s >= mine) || seen < queued.at || blind.contains(node.as_str()) {
                continue; // not ahead of ours, possibly gone before our listing, or not judged
            }
            match gone {
                Gone::Unclean => {
                    behind.entry(node.as_str()).or_default().push(Behind {
                        entered,
                        delay: d,
                        worker: w.clone(),
                        node: acq.node.clone(),
                        seen,
                    });
                }
                Gone::Clean => {
                    // Only the node it watched last admits it.
                    let Some(watch) =
                        evs.iter().rev().find(|e| matches!(e.kind.as_str(), "queued" | "moved"))
                    else {
                        continue;
                    };
                    if watch.watching != *node || seen < watch.at || conn_changed(&w, pid, watch.at, entered)
                    {
                        continue;
                    }
                    f.behind_clean += 1;
                    let waited = entered.saturating_sub(*heard.min(&entered));
                    f.longest_clean_ms = f.longest_clean_ms.max(waited.as_millis() as u64);
                    if let Some(delay) = evs.iter().find(|e| e.kind == "delay" && e.node == *node) {
                        f.violations.push(format!(
                            "{w} was held back {} ms by {node}, released cleanly while it watched it \
                             connected",
                            delay.num
                        ));
                    } else if entered > *heard + d
                        && !faults.iter().any(|(a, b)| *a <= entered && *b >= watch.at)
                    {
                        f.violations.push(format!(
                            "{w} entered {} ms after {node}'s clean release (heard at {:.3} s), no fault \
                             between: held back past the delay",
                            waited.as_millis(),
                            heard.as_secs_f64()
                        ));
                    }
                }
            }
        }
    }
    // A mutex admits one entry at a time: the first behind an unclean end waited the delay on
    // its own clock, and every later one came in after it. So each entry is bound by the
    // shortest delay (in real time) of the entries behind that end up to it: a waiter whose
    // clock ran fast shortened the wait for everyone behind it too (the documented clock
    // assumption), which is not a later waiter's skipping the delay.
    for (node, mut entries) in behind {
        entries.sort_by_key(|e| e.entered);
        let mut shortest = Duration::MAX;
        for Behind { entered, delay, worker: w, node: mine, seen } in entries {
            shortest = shortest.min(delay);
            f.behind_unclean += 1;
            let margin = entered.as_millis() as i64 - (seen + shortest).as_millis() as i64;
            f.least_margin_ms = Some(f.least_margin_ms.map_or(margin, |m| m.min(margin)));
            if entered < seen + shortest {
                f.violations.push(format!(
                    "{w} entered at {:.3} s with {mine}, {} ms after {node} (ahead of it) was last seen at \
                     {:.3} s and then vanished uncleanly: less than the lock delay",
                    entered.as_secs_f64(),
                    (entered.saturating_sub(seen)).as_millis(),
                    seen.as_secs_f64()
                ));
            }
        }
    }
    f
}
