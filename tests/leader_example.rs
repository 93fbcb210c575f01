//! The `leader` example in real processes: a graceful close and a `kill -9` both hand leadership
//! over, with growing fencing tokens. Runs the `bench_failover` example for one round; it exits
//! non-zero when a handover fails.

use std::process::Command;

#[test]
fn the_leader_example_hands_over_on_close_and_on_kill() {
    let exe = std::env::current_exe().expect("test binary path");
    let examples = exe.parent().and_then(|d| d.parent()).expect("target dir").join("examples");
    if !examples.join("bench_failover").exists() || !examples.join("leader").exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo)
            .args(["build", "--example", "leader", "--example", "bench_failover"])
            .status()
            .expect("cargo");
        assert!(built.success());
    }
    let out = Command::new(examples.join("bench_failover"))
        .args(["1", "1000"])
        .output()
        .expect("run bench_failover");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "handover failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("failover after a graceful close"), "{stdout}");
    assert!(stdout.contains("failover after kill -9"), "{stdout}");
}
