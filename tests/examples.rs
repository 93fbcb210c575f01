//! Examples that check their own results, run small.

mod common;

use std::process::Command;

use common::example_binary as example;

/// Runs example `name` with `args` on its own throwaway server (`ZK_CONNECT` unset) and returns
/// what it printed; fails the test if it exits non-zero.
fn run(name: &str, args: &[&str]) -> String {
    let out =
        Command::new(example(name)).args(args).env_remove("ZK_CONNECT").output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// Fails the test unless `stdout` holds each of `lines`.
fn expect_lines(stdout: &str, lines: &[&str]) {
    for line in lines {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
}

#[test]
fn stock_segments_sells_exactly_the_stock_both_ways() {
    let stdout = run("stock_segments", &["4", "60", "3"]);
    expect_lines(&stdout, &["no oversell, every segment ended at 0"]);
}

/// The README's demo (`scripts/demo`, `examples/two_process.rs`), on its own throwaway server:
/// phase 2 sells exactly the stock and phase 3's waiter takes the lock from the killed holder
/// with a greater fencing token (it exits non-zero otherwise). Phase 1's oversell is a race and
/// is not asserted.
#[test]
fn the_demo_sells_exactly_under_the_lock_and_hands_over_after_a_kill() {
    let stdout = run("two_process", &[]);
    expect_lines(
        &stdout,
        &[
            "EXACT: no oversell, no lost update.",
            "[B] QUEUED position=1 behind A",
            "a write fenced with A's token would be refused",
            "Demo passed.",
        ],
    );
}

// `cargo run --example session_recovery` (a latch and a mutex waiter heal across a partition
// of 3x the session timeout) and `cargo run --example metrics` (the Prometheus endpoint shows
// the workload).

#[test]
fn the_metrics_example_serves_the_workload_on_its_endpoint() {
    // One round (it serves until killed without --seconds; tests/prometheus.rs scrapes that).
    let stdout = run("metrics", &["--seconds", "0"]);
    expect_lines(
        &stdout,
        &[r#"zk_recipes_acquires_total{recipe="mutex",role="orders",outcome="acquired"} 40"#],
    );
}

#[test]
fn the_session_recovery_example_heals_without_rebuilding() {
    let stdout = run("session_recovery", &[]);
    expect_lines(
        &stdout,
        &[
            "session state: Suspended",
            "session state: Lost",
            "session state: Connected (generation 2)",
            "latch leads again",
            "OK:",
        ],
    );
}

/// `examples/beat_window` (docs/performance.md, "The beat's period"): at the shortest period and
/// at the longest, the window of a session that reads it (and so asks for it) never lapses while
/// connected (the example exits non-zero if one did), and a longer period sends fewer requests.
#[test]
fn the_beat_window_example_keeps_each_window_open_at_every_period() {
    let stdout = run("beat_window", &["2", "4000", "0.05", "0.15"]);
    let requests = |period: &str| -> f64 {
        let row = stdout.lines().find(|l| l.starts_with(&format!("| {period} |"))).expect("a row per period");
        row.trim_end_matches('|').rsplit('|').next().unwrap().trim().parse().expect("requests per T")
    };
    assert!(requests("0.15") < requests("0.05"), "{stdout}");
}
