//! Metrics: a recorder installed by the application sees counts that match the work
//! done, labelled by recipe and role, never by path. One test in this binary: the recorder is
//! process-wide.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::within;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use zk_recipes::{InterProcessMutex, LeaderLatch, Lock, LockOptions, LockStatus};

type Key = (String, Vec<(String, String)>);

fn snapshot(snapshotter: &metrics_util::debugging::Snapshotter) -> HashMap<Key, DebugValue> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<(String, String)> =
                key.labels().map(|l| (l.key().to_string(), l.value().to_string())).collect();
            labels.sort();
            ((key.name().to_string(), labels), value)
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    v.sort();
    v
}

fn counter(snap: &HashMap<Key, DebugValue>, name: &str, pairs: &[(&str, &str)]) -> u64 {
    match snap.get(&(name.to_string(), labels(pairs))) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        other => panic!("{name}: {other:?}"),
    }
}

fn samples(snap: &HashMap<Key, DebugValue>, name: &str, pairs: &[(&str, &str)]) -> usize {
    match snap.get(&(name.to_string(), labels(pairs))) {
        Some(DebugValue::Histogram(v)) => v.len(),
        None => 0,
        other => panic!("{name}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_the_work_done() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder in this binary");

    let zk = common::standalone().await;
    let session = common::session(&zk.connect_string()).await;
    let admin = common::client(&zk.connect_string()).await;
    // Every holder watches its node, so an operator's delete shows as a lost hold.
    let options = || LockOptions::new().metrics_role("orders").revocable(true);
    let ours = InterProcessMutex::with_options(&session, "/m/order-1", options()).unwrap();
    let other = InterProcessMutex::with_options(&session, "/m/order-1", options()).unwrap();

    // 3 acquisitions, each held and released.
    for _ in 0..3 {
        ours.acquire().await.unwrap().release().await.unwrap();
    }
    // Busy, timed out, cancelled: while `other` holds.
    let held = other.acquire().await.unwrap();
    assert!(ours.try_acquire().await.unwrap().is_none());
    assert!(ours.acquire_timeout(Duration::from_millis(50)).await.unwrap().is_none());
    assert!(tokio::time::timeout(Duration::from_millis(50), ours.acquire()).await.is_err());
    ours.settled().await;
    // A lost hold: an operator deletes the node.
    let mut status = held.status();
    admin.delete(held.node_path(), None).await.unwrap();
    within("lost", status.wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    drop(held);
    other.settled().await;

    // A leader latch acquires through the same engine: its term is an acquisition and a hold.
    let latch = LeaderLatch::with_options(
        &session,
        "/m/leader",
        zk_recipes::LatchOptions::new().participant_id("l").metrics_role("jobs"),
    )
    .unwrap();
    latch.start().unwrap();
    within("the latch leads", latch.await_leadership()).await.unwrap();
    latch.close().await;

    // A revocation request reaches a revocable holder, which then releases: honoured.
    let fleet = LockOptions::new().metrics_role("fleet").revocable(true);
    let revocable = InterProcessMutex::with_options(&session, "/m/revoke", fleet).unwrap();
    let held = revocable.acquire().await.unwrap();
    let mut status = held.status();
    zk_recipes::request_revocation(&session, held.node_path()).await.unwrap();
    within("revocation", status.wait_for(|s| *s == LockStatus::RevocationRequested)).await.unwrap();
    held.release().await.unwrap();

    // The lock delay: a hold that ends at its limit is no clean release; the next one waits.
    let delayed = || LockOptions::new().metrics_role("delayed").lock_delay(Duration::from_millis(200));
    let limited = delayed().max_hold(Duration::from_secs(2));
    let first = InterProcessMutex::with_options(&session, "/m/delay", limited).unwrap();
    let second = InterProcessMutex::with_options(&session, "/m/delay", delayed()).unwrap();
    let ended = first.acquire().await.unwrap();
    let mut delays = 0;
    let mut count =
        |e: &zk_recipes::QueueEvent| delays += matches!(e, zk_recipes::QueueEvent::LockDelay { .. }) as usize;
    let next =
        within("the next holder", second.acquire_with_events(None, &mut count)).await.unwrap().unwrap();
    next.release().await.unwrap();
    drop(ended);
    assert_eq!(delays, 1, "the next holder was queued before the limit passed");

    // A hold released well before its limit never counts as near it.
    let early = LockOptions::new().metrics_role("early").max_hold(Duration::from_secs(60));
    let early = InterProcessMutex::with_options(&session, "/m/early", early).unwrap();
    early.acquire().await.unwrap().release().await.unwrap();

    let snap = snapshot(&snapshotter);
    // The hold that ran into its limit passed 4/5 of it first (its timer fires before the
    // limit's, in the same task): counted once.
    let near = |role: &'static str| [("recipe", "mutex"), ("role", role)];
    assert_eq!(counter(&snap, "zk_recipes_holds_near_limit_total", &near("delayed")), 1, "{snap:#?}");
    assert_eq!(counter(&snap, "zk_recipes_holds_near_limit_total", &near("early")), 0, "{snap:#?}");
    let fleet = |event: &'static str| [("recipe", "mutex"), ("role", "fleet"), ("event", event)];
    assert_eq!(counter(&snap, "zk_recipes_revocations_total", &fleet("requested")), 1, "{snap:#?}");
    assert_eq!(counter(&snap, "zk_recipes_revocations_total", &fleet("honoured")), 1, "{snap:#?}");
    let delayed = [("recipe", "mutex"), ("role", "delayed")];
    assert_eq!(samples(&snap, "zk_recipes_lock_delay_seconds", &delayed), 1, "{snap:#?}");
    let latch_labels = [("recipe", "leader-latch"), ("role", "jobs"), ("outcome", "acquired")];
    assert_eq!(counter(&snap, "zk_recipes_acquires_total", &latch_labels), 1, "{snap:#?}");
    assert_eq!(samples(&snap, "zk_recipes_hold_seconds", &[("recipe", "leader-latch"), ("role", "jobs")]), 1);
    let role = [("recipe", "mutex"), ("role", "orders")];
    let outcome = |o: &'static str| [("recipe", "mutex"), ("role", "orders"), ("outcome", o)];
    assert_eq!(counter(&snap, "zk_recipes_acquires_total", &outcome("acquired")), 4, "{snap:#?}");
    assert_eq!(counter(&snap, "zk_recipes_acquires_total", &outcome("busy")), 1);
    assert_eq!(counter(&snap, "zk_recipes_acquires_total", &outcome("timeout")), 1);
    assert_eq!(counter(&snap, "zk_recipes_acquires_total", &outcome("cancelled")), 1);
    assert_eq!(samples(&snap, "zk_recipes_acquire_wait_seconds", &role), 4);
    assert_eq!(
        samples(&snap, "zk_recipes_hold_seconds", &role),
        4,
        "three releases and one lost hold let go"
    );
    assert_eq!(
        counter(
            &snap,
            "zk_recipes_holds_lost_total",
            &[("recipe", "mutex"), ("role", "orders"), ("cause", "node_deleted")]
        ),
        1
    );
    // One sample per node that joined a queue.
    assert_eq!(samples(&snap, "zk_recipes_queue_length_at_join", &role), 7);
    assert!(counter(&snap, "zk_recipes_session_transitions_total", &[("state", "connected")]) >= 1);
    // No label carries a path.
    for (name, labels) in snap.keys() {
        assert!(labels.iter().all(|(_, v)| !v.contains('/')), "{name} {labels:?}");
    }
}
