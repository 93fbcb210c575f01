//! Dropping acquire futures at random points never leaves a node of ours behind.

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::InterProcessMutex;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_acquires_at_random_points_leave_no_node() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let holder = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/cancel").unwrap();
    let contender_session = session(&zk.connect_string()).await;
    let contender = InterProcessMutex::new(&contender_session, "/locks/cancel").unwrap();
    let seed = seed();
    eprintln!("cancellation seed: {seed} (replay with ZK_TEST_SEED={seed})");
    let mut rng = Rng(seed);
    let (mut acquired, mut dropped) = (0, 0);
    for _ in 0..150 {
        // Half the time the lock is busy, so the contender queues and waits.
        let busy = if rng.below(2) == 0 { Some(holder.acquire().await.unwrap()) } else { None };
        let outcome = match rng.below(3) {
            0 => {
                poll_n_times(contender.acquire(), 1 + rng.below(6), Duration::from_millis(5 + rng.below(20)))
                    .await
            }
            1 => tokio::time::timeout(Duration::from_micros(rng.below(4000)), contender.acquire()).await.ok(),
            _ => poll_n_times(
                contender.acquire_timeout(Duration::from_millis(3)),
                1 + rng.below(6),
                Duration::from_millis(5 + rng.below(20)),
            )
            .await
            .and_then(|r| r.transpose()),
        };
        match outcome {
            Some(Ok(guard)) => {
                acquired += 1;
                drop(guard);
            }
            Some(Err(e)) => panic!("acquire failed: {e}"),
            None => dropped += 1,
        }
        if let Some(g) = busy {
            g.release().await.unwrap();
        }
    }
    within("background cleanup", contender.settled()).await;
    within("holder cleanup", holder.settled()).await;
    let mut ours = Vec::new();
    for name in children(&admin, "/locks/cancel").await {
        if let Ok((_, stat)) = admin.get_data(&format!("/locks/cancel/{name}")).await {
            if stat.ephemeral_owner == raw(&contender_session).session_id().0 {
                ours.push(name);
            }
        }
    }
    eprintln!("acquired {acquired}, dropped {dropped}, creates {:?}", contender.stats());
    assert!(dropped > 20, "too few drops exercised: {dropped}");
    assert!(ours.is_empty(), "nodes left behind by dropped acquires: {ours:?}");
    assert!(children(&admin, "/locks/cancel").await.is_empty());
    // And the handle still works.
    contender.acquire().await.unwrap().release().await.unwrap();
}
