//! The option checks' own tests: each property catches a hand-made history that breaks it, and
//! passes its correct neighbour.

use super::*;
use crate::checker::Kind;
use crate::delay_check::witness_gaps;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn ev(attempt: u64, kind: &str, num: u64, node: &str, watching: &str, at: u64) -> QEv {
    QEv {
        worker: "w".into(),
        pid: 7,
        attempt,
        kind: kind.into(),
        num,
        node: node.into(),
        watching: watching.into(),
        at: ms(at),
    }
}

fn hold(worker: &str, pid: u32, resource: &str, token: u64, start: u64, end: u64, cause: &str) -> Hold {
    Hold {
        worker: worker.into(),
        pid,
        resource: resource.into(),
        kind: Kind::Exclusive,
        token,
        start: ms(start),
        end: ms(end),
        deadline: ms(end),
        cause: cause.into(),
    }
}

/// A waiter queued behind two nodes, moved up, requeued after an expiry, delayed, then in.
fn good_attempt() -> Vec<QEv> {
    vec![
        ev(1, "queued", 2, "n-0000000005", "n-0000000004", 10),
        ev(1, "moved", 1, "-", "n-0000000003", 20),
        ev(1, "requeued", 2, "-", "-", 30),
        ev(1, "queued", 1, "n-0000000009", "n-0000000008", 40),
        ev(1, "delay", 900, "n-0000000008", "-", 50),
        ev(1, "acquired", 99, "n-0000000009", "-", 950),
        ev(2, "gaveup", 0, "-", "-", 960),
    ]
}

#[test]
fn queue_events_in_order_pass_and_every_disorder_is_caught() {
    let good = good_attempt();
    assert_eq!(queue_events(&good, &[], Some(ms(1000))), (vec![], 2));
    // The position goes back up.
    let mut up = good.clone();
    up[1].num = 2;
    assert_eq!(queue_events(&up, &[], None).0.len(), 1, "{:?}", queue_events(&up, &[], None));
    // An event after the end.
    let mut after = good.clone();
    after.push(ev(1, "moved", 0, "-", "-", 990));
    assert!(queue_events(&after, &[], None).0.iter().any(|v| v.contains("after the acquire ended")));
    // The lock delay not right before the end.
    let mut early = good.clone();
    early.swap(3, 4);
    assert!(!queue_events(&early, &[], None).0.is_empty());
    // A delay longer than the option's.
    assert_eq!(queue_events(&good, &[], Some(ms(500))).0.len(), 1);
    // No end, in a process that was not killed; allowed for a killed one.
    let unended = good[..4].to_vec();
    assert_eq!(queue_events(&unended, &[], None).0.len(), 1);
    assert!(queue_events(&unended, &[7], None).0.is_empty());
    // Times going back.
    let mut back = good;
    back[2].at = ms(5);
    assert_eq!(queue_events(&back, &[], None).0.len(), 1);
}

/// The witness saw n-4 (ahead of w's n-5) last at 1000 ms, then gone as `gone`, heard at 1010.
fn delay_history(gone: Gone, entered: u64) -> OptHistory {
    let mut h = OptHistory {
        qevs: vec![
            ev(1, "queued", 1, "n-0000000005", "n-0000000004", 500),
            ev(1, "acquired", 42, "n-0000000005", "-", entered),
        ],
        listings: vec![
            (ms(400), vec!["n-0000000004".into()]),
            (ms(1000), vec!["n-0000000004".into(), "n-0000000005".into()]),
            (ms(1020), vec!["n-0000000005".into()]),
        ],
        ..OptHistory::default()
    };
    h.gone.insert("n-0000000004".into(), (gone, ms(1010)));
    h
}

#[test]
fn entering_within_the_delay_after_an_unclean_end_is_caught() {
    let f = lock_delay(&delay_history(Gone::Unclean, 2050), DELAY, &[], &Rates::new());
    assert!(f.violations.is_empty() && f.behind_unclean == 1, "{f:?}");
    assert_eq!(f.least_margin_ms, Some(50));
    // In 400 ms after the last sighting: the delay was not applied.
    let f = lock_delay(&delay_history(Gone::Unclean, 1400), DELAY, &[], &Rates::new());
    assert_eq!(f.violations.len(), 1, "{f:?}");
    // Not judged when the node may have been gone before the waiter listed: seen last before
    // its Queued.
    let mut h = delay_history(Gone::Unclean, 1400);
    h.listings.retain(|(t, _)| *t < ms(500));
    assert!(lock_delay(&h, DELAY, &[], &Rates::new()).violations.is_empty());
}

/// The witness's own session: connected at 0, away from `from` to `to` (ms).
fn witness_away(from: u64, to: Option<u64>) -> Vec<(String, Duration)> {
    let mut conns = vec![("Connected-1".to_string(), ms(0)), ("Suspended-1".to_string(), ms(from))];
    conns.extend(to.map(|to| ("Reconnected-1".to_string(), ms(to))));
    conns
}

#[test]
fn an_unclean_verdict_heard_across_the_witness_own_reconnection_is_not_judged() {
    // The second soak's case: n-4's holder released it cleanly (marker and delete in one
    // transaction) while the witness's connection was down (an election); the waiter, back
    // first, saw the marker and entered at once, 400 ms after the last sighting. The witness,
    // back after the delete, had its data watch set again on a node that was gone, and heard
    // `NodeDeleted`: its verdict says nothing of how the node went.
    let mut h = delay_history(Gone::Unclean, 1400);
    h.witness_conns = witness_away(1002, Some(1008));
    let f = lock_delay(&h, DELAY, &[], &Rates::new());
    assert!(f.violations.is_empty() && f.unjudged == 1 && f.behind_unclean == 0, "{f:?}");
    // Still away at the end: not judged either.
    h.witness_conns = witness_away(1005, None);
    assert!(lock_delay(&h, DELAY, &[], &Rates::new()).violations.is_empty());
    // Away only before the last sighting (the watch was set again while the node stood), or
    // only after the verdict: the verdict stands, and entering within the delay is caught.
    for (from, to) in [(600, Some(900)), (1011, Some(1300)), (1011, None)] {
        h.witness_conns = witness_away(from, to);
        let f = lock_delay(&h, DELAY, &[], &Rates::new());
        assert!(f.violations.len() == 1 && f.unjudged == 0, "{from}-{to:?}: {f:?}");
    }
    // A node that went cleanly is judged as before across the gap (a marker seen is a marker).
    let mut h = delay_history(Gone::Clean, 2030);
    h.qevs.insert(1, ev(1, "delay", 1000, "n-0000000004", "-", 1020));
    h.witness_conns = witness_away(1002, Some(1008));
    let f = lock_delay(&h, DELAY, &[], &Rates::new());
    assert!(f.violations.len() == 1 && f.unjudged == 0, "{f:?}");
}

#[test]
fn witness_gaps_run_from_a_drop_to_the_next_connection() {
    let conns: Vec<(String, Duration)> = [
        ("Connected-1", 0),
        ("Suspended-1", 10),
        ("Suspended-1", 12),
        ("Reconnected-1", 20),
        ("Lost-1", 30),
        ("Connected-2", 35),
        ("Lagged-0", 40),
    ]
    .into_iter()
    .map(|(s, t)| (s.to_string(), ms(t)))
    .collect();
    assert_eq!(witness_gaps(&conns), vec![(ms(10), ms(20)), (ms(30), ms(35)), (ms(40), Duration::MAX)]);
}

#[test]
fn being_held_back_after_a_clean_release_is_caught() {
    let f = lock_delay(&delay_history(Gone::Clean, 1030), DELAY, &[], &Rates::new());
    assert!(f.violations.is_empty() && f.behind_clean == 1, "{f:?}");
    // A LockDelay naming the cleanly released node, the waiter connected throughout.
    let mut h = delay_history(Gone::Clean, 2030);
    h.qevs.insert(1, ev(1, "delay", 1000, "n-0000000004", "-", 1020));
    assert_eq!(lock_delay(&h, DELAY, &[], &Rates::new()).violations.len(), 1);
    // Excused if its session's state changed meanwhile (it could not watch the release).
    h.conns.push(("w".into(), 7, "Disconnected-1".into(), ms(900)));
    assert!(lock_delay(&h, DELAY, &[], &Rates::new()).violations.is_empty());
    // Entering late without a LockDelay: held back past the delay; excused by a fault.
    let h = delay_history(Gone::Clean, 3000);
    assert_eq!(lock_delay(&h, DELAY, &[], &Rates::new()).violations.len(), 1);
    assert!(lock_delay(&h, DELAY, &[(ms(1500), ms(2500))], &Rates::new()).violations.is_empty());
}

#[test]
fn a_hold_past_its_limit_is_caught() {
    let limited = vec![("a".to_string(), "/m".to_string(), 5, LIMIT)];
    let ok = [hold("a", 1, "/m", 5, 1000, 1000 + 600, "lost")];
    assert_eq!(max_hold(&ok, &limited, &[], &Rates::new()), (vec![], 1, 100));
    // 3 s past the limit, as if the limit never fired (the worker's cap).
    let over = [hold("a", 1, "/m", 5, 1000, 1000 + 3500, "done")];
    assert_eq!(max_hold(&over, &limited, &[], &Rates::new()).0.len(), 1);
    // Unless its process was paused across the limit and it stopped on waking.
    let paused = [Pause { pid: 1, from: ms(1200), to: ms(4200) }];
    assert!(max_hold(&over, &limited, &paused, &Rates::new()).0.is_empty());
}

#[test]
fn a_holder_asked_and_never_told_is_caught() {
    let asks = vec![("asker".to_string(), "/m".to_string(), 5, ms(1000), ms(1010))];
    let holds = [hold("a", 1, "/m", 5, 500, 4500, "done")];
    let (v, matched, _) = revocation(&holds, &asks, &[], &[]);
    assert_eq!((v.len(), matched), (1, 1), "{v:?}");
    let told = vec![("a".to_string(), "/m".to_string(), 5, ms(1030))];
    assert_eq!(revocation(&holds, &asks, &told, &[]), (vec![], 1, 30));
    // A hold that ended first (lost, or done just after the request) needs no telling.
    let lost = [hold("a", 1, "/m", 5, 500, 1200, "lost")];
    assert!(revocation(&lost, &asks, &[], &[]).0.is_empty());
    let done = [hold("a", 1, "/m", 5, 500, 1100, "done")];
    assert!(revocation(&done, &asks, &[], &[]).0.is_empty());
    // Nor does a holder whose process was paused after the request (its session expired; a
    // selector's task is then aborted on waking, its hold unreported).
    let unreported = [hold("a", 1, "/m", 5, 500, 4500, "unreported")];
    assert_eq!(revocation(&unreported, &asks, &[], &[]).0.len(), 1);
    let paused = [Pause { pid: 1, from: ms(1005), to: ms(4490) }];
    assert!(revocation(&unreported, &asks, &[], &paused).0.is_empty());
}

#[test]
fn an_observer_going_back_or_not_converging_is_caught() {
    let terms = [hold("a", 1, "/o", 10, 1000, 6000, "done"), hold("b", 2, "/o", 20, 6100, 9000, "done")];
    let good = vec![
        ("o".to_string(), 3, None, ms(100)),
        ("o".to_string(), 3, Some(10), ms(1010)),
        ("o".to_string(), 3, None, ms(6020)),
        ("o".to_string(), 3, Some(20), ms(6110)),
    ];
    let f = observer(&good, &terms, &[], &[]);
    assert!(f.violations.is_empty() && f.checked == 2, "{f:?}");
    // Back to an older term.
    let mut back = good.clone();
    back.push(("o".to_string(), 3, Some(10), ms(6200)));
    assert!(observer(&back, &terms, &[], &[])
        .violations
        .iter()
        .any(|v| v.contains("after it had reported 20")));
    // Stuck on the old leader past the bound (b's term checked at 8100 ms).
    let stuck = good[..3].to_vec();
    assert_eq!(observer(&stuck, &terms, &[], &[]).violations.len(), 1);
    // A fault until 7000 ms moves b's check to 9000 ms, past its term: not checked.
    let f = observer(&stuck, &terms, &[(ms(6500), ms(7000))], &[]);
    assert!(f.violations.is_empty() && f.checked == 1, "{f:?}");
    // Nor is an observer whose process died.
    let f = observer(&stuck, &terms, &[], &[(3, ms(7000), Duration::MAX)]);
    assert!(f.violations.is_empty(), "{f:?}");
}

#[test]
fn clocks_and_respawns_are_taken_into_account() {
    // A holder whose clock runs at half speed makes a 500 ms limit last 1 s: 1.2 s is in bound,
    // 1.6 s is not.
    let limited = vec![("a".to_string(), "/m".to_string(), 5, LIMIT)];
    let slow: Rates = [(1, 0.5)].into_iter().collect();
    let ok = [hold("a", 1, "/m", 5, 0, 1200, "lost")];
    assert!(max_hold(&ok, &limited, &[], &slow).0.is_empty());
    assert_eq!(max_hold(&ok, &limited, &[], &Rates::new()).0.len(), 1);
    let over = [hold("a", 1, "/m", 5, 0, 1600, "lost")];
    assert_eq!(max_hold(&over, &limited, &[], &slow).0.len(), 1);
    // A waiter whose clock runs at double speed waits 500 ms of ours.
    let fast: Rates = [(7, 2.0)].into_iter().collect();
    assert!(lock_delay(&delay_history(Gone::Unclean, 1600), DELAY, &[], &fast).violations.is_empty());
    assert_eq!(lock_delay(&delay_history(Gone::Unclean, 1400), DELAY, &[], &fast).violations.len(), 1);
    // An observer whose process was replaced (its worker reports from a new pid) is not judged.
    let terms = [hold("b", 2, "/o", 20, 1000, 9000, "done")];
    let obs = vec![
        ("o".to_string(), 3, Some(10), ms(100)),
        ("o".to_string(), 4, None, ms(500)),
        ("o".to_string(), 4, Some(20), ms(1100)),
    ];
    let f = observer(&obs, &terms, &[], &[]);
    assert!(f.violations.is_empty() && f.checked == 1, "{f:?}");
}

#[test]
fn a_fast_clocked_waiter_shortens_the_delay_for_those_behind_it_and_only_for_them() {
    // n-4 ended uncleanly, last seen at 1000 ms. `a` (n-5, pid 8) waited first, `b` (n-6, pid 7)
    // came in after it.
    let history = |a_in: u64, b_in: u64| {
        let mut h = delay_history(Gone::Unclean, b_in);
        h.qevs = vec![
            QEv { worker: "a".into(), pid: 8, ..ev(1, "queued", 1, "n-0000000005", "n-0000000004", 500) },
            QEv { worker: "a".into(), pid: 8, ..ev(1, "acquired", 41, "n-0000000005", "-", a_in) },
            ev(1, "queued", 2, "n-0000000006", "n-0000000005", 600),
            ev(1, "acquired", 42, "n-0000000006", "-", b_in),
        ];
        h.listings[1].1.push("n-0000000006".into());
        h
    };
    // `a`'s clock runs at double speed: its delay lasts 500 ms of ours, and `b`, in after it,
    // 700 ms after the sighting, is not to blame (the soak of 2026-11-25: 986 ms, after a
    // waiter in a process at x2).
    let fast: Rates = [(8, 2.0)].into_iter().collect();
    let f = lock_delay(&history(1510, 1700), DELAY, &[], &fast);
    assert!(f.violations.is_empty() && f.behind_unclean == 2, "{f:?}");
    // With `a`'s clock true, both came in too soon.
    assert_eq!(lock_delay(&history(1510, 1700), DELAY, &[], &Rates::new()).violations.len(), 2);
    // `b` in before `a` (not behind it): its own clock bounds it.
    let f = lock_delay(&history(1510, 1400), DELAY, &[], &fast);
    assert_eq!(f.violations.len(), 1, "{f:?}");
    assert!(f.violations[0].starts_with("w entered"), "{f:?}");
    // `a` itself in before its own (fast) delay.
    assert_eq!(lock_delay(&history(1400, 2100), DELAY, &[], &fast).violations.len(), 1);
}
