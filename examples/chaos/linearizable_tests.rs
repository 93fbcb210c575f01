//! The independent checker's own tests: broken histories it must catch, correct ones it must
//! pass, and the comparison with `checker.rs` catching a disagreement.

use super::*;
use crate::checker::{self, Hold, Kind, Pause};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[allow(clippy::too_many_arguments)]
fn op(w: &str, v: &str, kind: LsKind, token: u64, invoke: u64, ret: u64, outcome: Outcome) -> LsOp {
    LsOp {
        worker: w.into(),
        pid: u32::from(w.as_bytes()[0]),
        variant: v.into(),
        kind,
        token,
        elem: 0,
        invoke: ms(invoke),
        ret: Some(ms(ret)),
        outcome,
    }
}

use LsKind::{Acquire, Register, Release, Write};
use Outcome::{Ok as Yes, Refused, Unknown};

/// A fenced PostgreSQL set: a holds token 5, b takes over with 7; `late` is a's write after
/// b registered.
fn pg(late: Outcome) -> Vec<LsOp> {
    vec![
        op("a", "pg-fenced", Register, 5, 0, 2, Yes),
        op("a", "pg-fenced", Write, 5, 10, 12, Yes),
        op("b", "pg-fenced", Register, 7, 20, 22, Yes),
        op("b", "pg-fenced", Write, 7, 30, 32, Yes),
        op("a", "pg-fenced", Write, 5, 40, 42, late),
    ]
}

#[test]
fn a_fenced_register_that_accepted_a_lower_token_is_caught() {
    let good = check_fences(&pg(Refused), &["pg-fenced"]);
    assert!(good.flagged.is_empty(), "{good:?}");
    assert_eq!(good.windows, 5, "every operation alone: five quiescent windows");
    let bad = check_fences(&pg(Yes), &["pg-fenced"]);
    assert_eq!(bad.flagged.len(), 1, "{bad:?}");
    assert_eq!((bad.flagged[0].from, bad.flagged[0].to), (ms(40), ms(42)));
    // A refusal with no higher token registered is as wrong.
    let mut refused_alone = pg(Refused);
    refused_alone[1].outcome = Refused;
    assert_eq!(check_fences(&refused_alone, &["pg-fenced"]).flagged.len(), 1);
    // A write with a higher token raises the fence (as the patterns do): the lower one after
    // it is refused, and accepting it is caught.
    let raised = |late| {
        vec![
            op("a", "pg-fenced", Register, 5, 0, 2, Yes),
            op("b", "pg-fenced", Write, 9, 10, 12, Yes),
            op("a", "pg-fenced", Write, 5, 20, 22, late),
        ]
    };
    assert!(check_fences(&raised(Refused), &["pg-fenced"]).flagged.is_empty());
    assert_eq!(check_fences(&raised(Yes), &["pg-fenced"]).flagged.len(), 1);
    // A write concurrent with the newer register may go before it.
    let mut racing = pg(Yes);
    racing[4].invoke = ms(19);
    racing[4].ret = Some(ms(21));
    assert!(check_fences(&racing, &["pg-fenced"]).flagged.is_empty());
}

#[test]
fn an_unknown_register_may_or_may_not_have_raised_the_fence() {
    // b's register of 7 failed with an unknown outcome: a's later write with 5 may be refused
    // (it took effect) or accepted (it did not).
    for late in [Refused, Yes] {
        let mut ops = pg(late);
        ops[2].outcome = Unknown;
        ops.remove(3);
        assert!(check_fences(&ops, &["pg-fenced"]).flagged.is_empty(), "{late:?}");
    }
}

#[test]
fn zookeeper_fences_by_acquisition_and_refuses_a_gone_node_at_any_token() {
    let zk = |late| {
        vec![
            op("a", "zk-fenced", Acquire, 5, 0, 2, Yes),
            op("a", "zk-fenced", Write, 5, 10, 12, Yes),
            // a paused: its node expired, b acquired.
            op("b", "zk-fenced", Acquire, 7, 5, 30, Yes),
            op("a", "zk-fenced", Write, 5, 40, 42, late),
        ]
    };
    assert!(check_fences(&zk(Refused), &["zk-fenced"]).flagged.is_empty());
    assert_eq!(check_fences(&zk(Yes), &["zk-fenced"]).flagged.len(), 1);
    // Refused with no newer holder (an expiry alone): allowed.
    let alone =
        [op("a", "zk-fenced", Acquire, 5, 0, 2, Yes), op("a", "zk-fenced", Write, 5, 10, 12, Refused)];
    assert!(check_fences(&alone, &["zk-fenced"]).flagged.is_empty());
}

/// Holds of a lock in the lockset history: a 0-100, b 120-300, c 350-3410 (paused 400-3400 past
/// its deadline 2400), d 2600-2700; and the same holds as `checker.rs` sees them.
fn lock_holds() -> (Vec<LsOp>, Vec<Hold>, Vec<Pause>) {
    let v = "pg-unfenced";
    let spans = [("a", 0, 100, 2000), ("b", 120, 300, 2100), ("c", 350, 3410, 2400), ("d", 2600, 2700, 4600)];
    let mut ops = Vec::new();
    let mut holds = Vec::new();
    for (w, start, end, deadline) in spans {
        ops.push(op(w, v, Acquire, start, start.saturating_sub(5), start, Yes));
        ops.push(op(w, v, Release, start, end, end + 2, Yes));
        holds.push(Hold {
            worker: w.into(),
            pid: u32::from(w.as_bytes()[0]),
            resource: format!("/chaos/lockset/{v}"),
            kind: Kind::Exclusive,
            token: start,
            start: ms(start),
            end: ms(end),
            deadline: ms(deadline),
            cause: "done".into(),
        });
    }
    (ops, holds, vec![Pause { pid: u32::from(b'c'), from: ms(400), to: ms(3400) }])
}

fn ours(holds: &[Hold], pauses: &[Pause]) -> Vec<(String, Duration)> {
    checker::overlaps(holds, &|_| None, pauses)
        .iter()
        .map(|o| (o.resource.trim_start_matches("/chaos/lockset/").to_string(), o.at))
        .collect()
}

#[test]
fn a_mutex_overlap_is_flagged_and_both_checkers_agree() {
    let (ops, holds, pauses) = lock_holds();
    let v = check_mutexes(&ops, &["pg-unfenced"]);
    // Each acquire and release alone, but d's hold (from "held": c believes it holds).
    assert_eq!(v.windows, 7, "{v:?}");
    assert_eq!(v.flagged.len(), 1, "{v:?}");
    assert_eq!((v.flagged[0].from, v.flagged[0].to), (ms(2595), ms(2702)));
    let found = ours(&holds, &pauses);
    assert_eq!(found.len(), 1);
    let agreement = compare(&v, &found);
    assert!(agreement.disagreements.is_empty(), "{agreement:?}");
    assert_eq!(agreement.both, 1);
    // Without the overlap (c stops before d begins), nothing is flagged.
    let (mut ops, mut holds, _) = lock_holds();
    ops[5].invoke = ms(2500);
    ops[5].ret = Some(ms(2502));
    holds[2].end = ms(2500);
    let v = check_mutexes(&ops, &["pg-unfenced"]);
    assert!(v.flagged.is_empty(), "{v:?}");
    assert!(ours(&holds, &pauses).is_empty());
}

#[test]
fn a_disagreement_between_the_checkers_is_caught() {
    let (ops, holds, pauses) = lock_holds();
    let v = check_mutexes(&ops, &["pg-unfenced"]);
    // Our checker missing the overlap the search flags.
    let missed = compare(&v, &[]);
    assert_eq!(missed.disagreements.len(), 1, "{missed:?}");
    assert!(missed.disagreements[0].contains("not linearizable"), "{missed:?}");
    // Our checker seeing an overlap in a window the search finds linearizable (b's acquire).
    let mut extra = ours(&holds, &pauses);
    extra.push(("pg-unfenced".into(), ms(118)));
    let a = compare(&v, &extra);
    assert_eq!(a.disagreements.len(), 1, "{a:?}");
    assert!(a.disagreements[0].contains("linearizable, but"), "{a:?}");
    // An overlap at a moment no window covers.
    assert_eq!(compare(&v, &[("pg-unfenced".into(), ms(5000))]).disagreements.len(), 2);
}

#[test]
fn a_window_too_big_for_one_search_is_split_and_still_flagged() {
    // p and q (both paused) believe they hold from 0 and 100 to 10 s, while r's 150 holds come
    // and go: never at most one believer, so one window of 304 operations, split for the
    // search at its quiescent points (p's acquire and release are windows of their own).
    let v = "redis-unfenced";
    let mut ops = vec![
        op("p", v, Acquire, 1, 0, 1, Yes),
        op("p", v, Release, 1, 10_000, 10_001, Yes),
        op("q", v, Acquire, 2, 50, 100, Yes),
        op("q", v, Release, 2, 9_990, 9_991, Yes),
    ];
    for i in 0..150 {
        let t = 200 + i * 50;
        ops.push(op("r", v, Acquire, 3 + i, t, t + 1, Yes));
        ops.push(op("r", v, Release, 3 + i, t + 20, t + 21, Yes));
    }
    let verdicts = check_mutexes(&ops, &[v]);
    assert_eq!((verdicts.windows, verdicts.split), (3, 1), "{verdicts:?}");
    assert!(verdicts.searched > 1 && verdicts.largest <= MAX_SEARCH, "{verdicts:?}");
    assert_eq!(verdicts.flagged.len(), 1);
    // r alone: 300 windows (each acquire and release alone), none flagged.
    let verdicts = check_mutexes(&ops[4..], &[v]);
    assert_eq!((verdicts.windows, verdicts.flagged.len()), (300, 0));
}

#[test]
fn a_long_contended_window_is_searched_whole() {
    // q and r hand the lock to each other 150 times, the next always waiting: no quiescent
    // point until the last release: one window of 599 operations; linearizable, and with one
    // overlap not.
    let v = "zk-unfenced";
    let mut ops = Vec::new();
    for i in 0..300u64 {
        let (w, t) = (if i % 2 == 0 { "q" } else { "r" }, i * 20);
        ops.push(op(w, v, Acquire, i, t.saturating_sub(25), t, Yes));
        ops.push(op(w, v, Release, i, t + 10, t + 12, Yes));
    }
    let verdicts = check_mutexes(&ops, &[v]);
    assert_eq!((verdicts.windows, verdicts.flagged.len(), verdicts.largest), (2, 0, 599), "{verdicts:?}");
    // r's 101st acquire returning at 2005 ms, before q's release at 2010 ms.
    ops[202].invoke = ms(1_995);
    ops[202].ret = Some(ms(2_005));
    assert_eq!(check_mutexes(&ops, &[v]).flagged.len(), 1);
}
