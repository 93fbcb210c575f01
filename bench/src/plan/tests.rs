//! The plan's order: warm-ups before counted runs, peers in turn, the fleet last.

use super::*;
use crate::pin::{PinMode, Pinning};

fn plan(quick: bool) -> Plan {
    Plan {
        server: ZkVersion::DEFAULT,
        quick,
        secs: 2.0,
        repeats: 3,
        ns: vec![2, 8],
        many_locks: 10,
        many_tasks: 4,
        order_tasks: 2,
        sem_leases: 2,
        sem_contenders: 4,
        rw_reads: [90, 10],
        rw_contenders: 4,
        leader_candidates: 3,
        failover_kills: 5,
        failover_sessions: vec![crate::peers::FAILOVER_SESSION],
        beat_period: None,
        ensemble_n: 4,
        scale_waiters: 16,
        spread_ns: vec![16, 32],
        spread_procs: 2,
        peers: vec![Peer::ZkRecipes, Peer::ZkRecipesDrop, Peer::LockClient, Peer::Curator, Peer::Naive],
        skipped: Vec::new(),
        skip_missing: false,
        only: crate::cli::SCENARIOS.iter().map(|s| s.to_string()).collect(),
        pinning: Pinning::choose(PinMode::Off, vec![0, 1]),
        fleet: crate::peers::FleetPlan {
            sessions: 4,
            procs: 2,
            phase_secs: 1.0,
            timeout: Duration::from_secs(10),
        },
    }
}

/// A step with its run taken out: what it measures.
fn shape(step: Step) -> String {
    let neutral = Run::Repeat(0);
    let without = match step {
        Step::Uncontended(_, p) => Step::Uncontended(neutral, p),
        Step::Contended(_, n, p) => Step::Contended(neutral, n, p),
        Step::ManyLocks(_, p) => Step::ManyLocks(neutral, p),
        Step::PerOrder(_, p) => Step::PerOrder(neutral, p),
        Step::Recipe(_, r, p) => Step::Recipe(neutral, r, p),
        Step::Failover(_, r, p, t) => Step::Failover(neutral, r, p, t),
        Step::Scale(_, n, k, p) => Step::Scale(neutral, n, k, p),
        Step::Fencing(_, r, w) => Step::Fencing(neutral, r, w),
        Step::NetworkUncontended(_, p) => Step::NetworkUncontended(neutral, p),
        Step::NetworkContended(_, n, p) => Step::NetworkContended(neutral, n, p),
        Step::EnsembleUncontended(_, p) => Step::EnsembleUncontended(neutral, p),
        Step::EnsembleContended(_, p) => Step::EnsembleContended(neutral, p),
        other => other,
    };
    format!("{without:?}")
}

#[test]
fn every_measured_run_is_warmed_up_once_before_it_counts() {
    let plan = plan(false);
    let steps = plan.steps();
    let mut warmed = std::collections::HashSet::new();
    let mut counted = std::collections::HashSet::new();
    for step in &steps {
        match step.run() {
            Some(Run::WarmUp) => {
                assert!(warmed.insert(shape(*step)), "warmed up twice: {step:?}");
                assert!(!counted.contains(&shape(*step)), "warmed up after it counted: {step:?}");
            }
            Some(Run::Repeat(_)) => {
                assert!(warmed.contains(&shape(*step)), "counted without a warm-up: {step:?}");
                counted.insert(shape(*step));
            }
            None => {}
        }
    }
    assert_eq!(warmed, counted, "a warm-up of something never counted");
    // The yardsticks run on warmed servers: after the warm-ups of their server.
    let at = |s: &str| steps.iter().position(|x| format!("{x:?}") == s).unwrap();
    let first_counted = steps.iter().position(|s| s.run().is_some_and(|r| r != Run::WarmUp)).unwrap();
    assert!(at("RawWrite") < first_counted);
    let warming = |s: &Step| s.run() == Some(Run::WarmUp) || matches!(s, Step::Settle(_));
    assert!(steps[..at("RawWrite")].iter().all(warming));
    assert!(steps[at("EnsembleStart")..at("EnsembleRawWrite")].iter().skip(1).all(warming));
    // Each cluster settles once, after its warm-ups and before its yardstick.
    assert_eq!(at("RawWrite") - 1, at("Settle(Standalone)"));
    assert_eq!(at("EnsembleRawWrite") - 1, at("Settle(Ensemble)"));
    assert_eq!(plan.secs_of(Run::WarmUp), 1.0);
    assert_eq!(plan.kills_of(Run::WarmUp), 1);
    assert_eq!(plan.secs_of(Run::Repeat(2)), 2.0);
}

#[test]
fn a_smoke_test_has_no_warm_up() {
    let plan = plan(true);
    assert!(plan.steps().iter().all(|s| s.run() != Some(Run::WarmUp) && !matches!(s, Step::Settle(_))));
}

#[test]
fn each_repeat_starts_with_the_next_peer() {
    let plan = plan(false);
    let first_uncontended = |r: Run| {
        plan.steps().into_iter().find_map(|s| match s {
            Step::Uncontended(run, p) if run == r => Some(p),
            _ => None,
        })
    };
    assert_eq!(first_uncontended(Run::WarmUp), Some(Peer::ZkRecipes));
    assert_eq!(first_uncontended(Run::Repeat(0)), Some(Peer::ZkRecipes));
    assert_eq!(first_uncontended(Run::Repeat(1)), Some(Peer::ZkRecipesDrop));
    assert_eq!(first_uncontended(Run::Repeat(2)), Some(Peer::LockClient));
    let ensemble: Vec<Peer> = plan
        .steps()
        .into_iter()
        .filter_map(|s| match s {
            Step::EnsembleUncontended(Run::Repeat(1), p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(ensemble, [Peer::ZkRecipesDrop, Peer::LockClient, Peer::Curator, Peer::ZkRecipes]);
}

#[test]
fn the_fleet_comes_last_once_per_lock_peer_after_the_ensemble_alone_and_the_pings() {
    let steps = plan(true).steps();
    let start = steps.iter().position(|s| matches!(s, Step::FleetStart)).unwrap();
    let fleets: Vec<FleetPeer> = steps[start + 1..]
        .iter()
        .map(|s| match s {
            Step::Fleet(f) => *f,
            other => panic!("{other:?} after the fleet's start"),
        })
        .collect();
    let lock = |p| FleetPeer::Of(p);
    assert_eq!(
        fleets,
        [
            FleetPeer::Nobody,
            FleetPeer::Pings,
            lock(Peer::ZkRecipes),
            lock(Peer::LockClient),
            lock(Peer::Curator)
        ]
    );
    assert!(steps.iter().all(|s| !matches!(s, Step::Fleet(_)) || s.run().is_none()));
}
