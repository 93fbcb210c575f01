//! The `leader` example in real processes: a graceful close and a `kill -9` both hand leadership
//! over, with growing fencing tokens. Runs the `bench_failover` example for one round; it exits
//! non-zero when a handover fails.

mod common;

use std::process::Command;

use common::example_binary;

#[test]
fn the_leader_example_hands_over_on_close_and_on_kill() {
    example_binary("leader");
    let out = Command::new(example_binary("bench_failover"))
        .args(["1", "1000"])
        .output()
        .expect("run bench_failover");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "handover failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("failover after a graceful close"), "{stdout}");
    assert!(stdout.contains("failover after kill -9"), "{stdout}");
}
