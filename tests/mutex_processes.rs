//! Mutual exclusion between OS processes, each with its own session.

mod common;

use std::process::Command;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_never_overlap_and_the_counter_is_exact() {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 20;
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    create_persistent(&admin, "/counter", b"0").await;
    let scratch = tempfile::tempdir().unwrap();
    let occupancy = scratch.path().join("inside");
    let worker = example_binary("counter_worker");
    let mut children_procs = Vec::new();
    for _ in 0..PROCESSES {
        children_procs.push(
            Command::new(&worker)
                .args([
                    zk.connect_string().as_str(),
                    "/locks/processes",
                    "/counter",
                    &ROUNDS.to_string(),
                    occupancy.to_str().unwrap(),
                ])
                .spawn()
                .expect("spawn worker"),
        );
    }
    let statuses = within(
        "workers",
        tokio::task::spawn_blocking(move || {
            children_procs.into_iter().map(|mut c| c.wait().expect("wait")).collect::<Vec<_>>()
        }),
    )
    .await
    .unwrap();
    for status in statuses {
        assert_eq!(status.code(), Some(0), "a worker failed (3 means two processes held the lock at once)");
    }
    assert_eq!(read_counter(&admin, "/counter").await, (PROCESSES * ROUNDS) as u64);
    assert!(children(&admin, "/locks/processes").await.is_empty());
}
