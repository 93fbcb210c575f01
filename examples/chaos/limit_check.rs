//! The hand-over at a hold limit (`maxhold` phase): the documented overlap, told apart from a
//! real one.
//!
//! At `max_hold` a lock's node is deleted at once and its holder is told (the limit is no
//! fence), and a selector deletes its node once it has aborted its term's task. Either way the
//! next holder may begin while the earlier one's last write is still on its way: the interval
//! view then counts the earlier hold as ending after the next began. That is explained when every
//! earlier holder inside was a limited hold whose limit had passed when the later began, which
//! ended within [`LIMIT_SLACK`] of it, and none of whose writes ended at the resource after the
//! later hold's first write began. A write of the earlier hold that overlaps one of the later
//! stays a violation, as does an overlap before the limit.

use std::time::Duration;

use crate::checker::{Hold, Op, Overlap};
use crate::options_check::{real, Rates, LIMIT_SLACK};

/// What the explanation starts with.
pub const EXPLAINED: &str = "explained: the hand-over at a hold limit";

/// Explains each unexplained overlap that is a hand-over at a hold limit (see the module doc).
/// `limited`: (worker, resource, token, limit) of each limited hold.
pub fn explain(
    overlaps: &mut [Overlap],
    holds: &[Hold],
    ops: &[Op],
    limited: &[(String, String, u64, Duration)],
    rates: &Rates,
) {
    fn of<'a>(ops: &'a [Op], h: &'a Hold) -> impl Iterator<Item = &'a Op> {
        ops.iter().filter(move |op| op.worker == h.worker && op.resource == h.resource && op.token == h.token)
    }
    for o in overlaps.iter_mut().filter(|o| o.explanation.is_none()) {
        let later = &holds[o.later];
        let first_write = of(ops, later).map(|op| op.begin).min();
        let handed: Option<Vec<String>> = o
            .earlier
            .iter()
            .map(|&e| {
                let h = &holds[e];
                let (_, _, _, limit) = limited
                    .iter()
                    .find(|(w, r, t, _)| *w == h.worker && *r == h.resource && *t == h.token)?;
                let due = h.start + real(*limit, h.pid, rates);
                let last_write = of(ops, h).filter_map(|op| op.end).max();
                let apart = match (last_write, first_write) {
                    (Some(last), Some(first)) => last <= first,
                    _ => true,
                };
                (due <= later.start && h.end <= due + LIMIT_SLACK && apart).then(|| {
                    format!(
                        "{}'s hold reached its {} ms limit at {:.3} s, and its last write ended before {}'s \
                         first began",
                        h.worker,
                        limit.as_millis(),
                        due.as_secs_f64(),
                        later.worker
                    )
                })
            })
            .collect();
        if let Some(why) = handed.filter(|w| !w.is_empty()) {
            o.explanation = Some(format!("{EXPLAINED}: {}", why.join("; ")));
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

    fn hold(worker: &str, token: u64, start: u64, end: u64) -> Hold {
        Hold {
            worker: worker.into(),
            pid: 1,
            resource: "/r".into(),
            kind: Kind::Exclusive,
            token,
            start: ms(start),
            end: ms(end),
            deadline: ms(start + 2_000),
            cause: "unreported".into(),
        }
    }

    fn write(worker: &str, token: u64, begin: u64, end: u64) -> Op {
        Op {
            worker: worker.into(),
            pid: 1,
            resource: "/r".into(),
            kind: Kind::Exclusive,
            token,
            begin: ms(begin),
            end: Some(ms(end)),
            begun: true,
            accepted: true,
            refused: false,
        }
    }

    fn checked(holds: &[Hold], ops: &[Op], limited: &[(String, String, u64, Duration)]) -> Vec<Overlap> {
        let mut found = overlaps(holds, &|_| None, &[]);
        explain(&mut found, holds, ops, limited, &Rates::new());
        found
    }

    /// The soak's case: a's term (limit 500 ms from 1,000) was aborted after its last write was
    /// sent; the resource saw that write end at 1,530, after b began at 1,505, and b's first
    /// write begin at 1,531.
    #[test]
    fn a_hand_over_at_the_limit_with_no_writes_overlapping_is_explained() {
        let holds = [hold("a", 1, 1_000, 1_530), hold("b", 2, 1_505, 2_000)];
        let ops = [write("a", 1, 1_480, 1_530), write("b", 2, 1_531, 1_540)];
        let limited = [("a".to_string(), "/r".to_string(), 1, ms(500))];
        let found = checked(&holds, &ops, &limited);
        assert_eq!(found.len(), 1);
        assert!(found[0].explanation.as_deref().is_some_and(|e| e.starts_with(EXPLAINED)), "{found:?}");
    }

    #[test]
    fn overlapping_writes_an_early_successor_or_an_unlimited_hold_stay_violations() {
        let limited = [("a".to_string(), "/r".to_string(), 1, ms(500))];
        // b's first write began while a's last was still open.
        let holds = [hold("a", 1, 1_000, 1_530), hold("b", 2, 1_505, 2_000)];
        let ops = [write("a", 1, 1_480, 1_530), write("b", 2, 1_510, 1_540)];
        assert!(checked(&holds, &ops, &limited)[0].explanation.is_none());
        // b began before a's limit.
        let holds = [hold("a", 1, 1_000, 1_530), hold("b", 2, 1_450, 2_000)];
        let ops = [write("a", 1, 1_400, 1_420), write("b", 2, 1_531, 1_540)];
        assert!(checked(&holds, &ops, &limited)[0].explanation.is_none());
        // a's hold had no limit.
        let holds = [hold("a", 1, 1_000, 1_530), hold("b", 2, 1_505, 2_000)];
        let ops = [write("a", 1, 1_480, 1_530), write("b", 2, 1_531, 1_540)];
        assert!(checked(&holds, &ops, &[])[0].explanation.is_none());
        // a went on past its limit by more than the slack.
        let holds =
            [hold("a", 1, 1_000, 1_500 + LIMIT_SLACK.as_millis() as u64 + 10), hold("b", 2, 1_505, 9_000)];
        let ops = [write("a", 1, 1_480, 1_490), write("b", 2, 8_000, 8_010)];
        assert!(checked(&holds, &ops, &limited)[0].explanation.is_none());
    }
}
