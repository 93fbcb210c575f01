//! The flash-sale example (examples/flash_sale) run as a process, as a user runs it: a throwaway
//! ZooKeeper, PostgreSQL and Redis, four worker processes, one holder paused by SIGSTOP between
//! its window check and its writes.
//!
//! Fenced, its late writes must be refused by both stores and the run must pass; unfenced, the
//! same pause must do damage (the test that shows the fenced run's check can fail).

mod common;

use std::process::{Command, Output};

use common::example_binary;

fn run(args: &[&str]) -> (Output, String) {
    let out =
        Command::new(example_binary("flash_sale")).args(args).env_remove("ZK_CONNECT").output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, stdout)
}

#[test]
fn fenced_the_paused_holders_late_writes_are_refused_by_both_stores() {
    let (out, stdout) = run(&[]);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "is stopped (state T in /proc)",
        "Redis stock decrement: REFUSED (StaleToken",
        "PostgreSQL order:      REFUSED (StaleToken",
        "the paused holder's writes were both refused",
        "users with more than one order: none",
        "stock never negative: yes",
        "Flash sale passed",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    // Right after the resume the guard no longer claims the hold.
    let after = stdout.lines().find(|l| l.contains("right after the resume")).expect("the resume line");
    assert!(after.contains("ensure_safe -> Err("), "{after}");
    assert!(!after.contains("current_status() -> Held"), "{after}");
    // Exactly the stock was sold.
    assert!(stdout.contains("Redis says 0 left: 20 sold; PostgreSQL holds 20 orders"), "{stdout}");
}

#[test]
fn unfenced_the_paused_holders_late_writes_land() {
    let (out, stdout) = run(&["--unfenced"]);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "is stopped (state T in /proc)",
        "Redis stock decrement: LANDED",
        "PostgreSQL order:      LANDED",
        "the paused holder's late write landed in Redis and PostgreSQL",
        // Redis: one item too many left the stock (the paused user's second sale).
        "Redis says 0 left: 20 sold; PostgreSQL holds 19 orders",
        "DAMAGE: 20 items left the stock for 19 orders",
        // PostgreSQL: the newer holder's order overwritten with the stale token.
        "order was overwritten by the paused holder's late write",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
}

#[test]
fn bad_arguments_and_unreachable_servers_are_errors_not_hangs() {
    let (out, stdout) = run(&["--bogus"]);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument \"--bogus\""));

    // A port nobody listens on: bound, then closed again (never a fixed port).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let params = format!("host=127.0.0.1 port={port} user=postgres");
    let (out, stdout) = run(&["--postgres", &params, "--redis", &format!("redis://127.0.0.1:{port}/")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("postgres") && stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
}
