//! Usage errors and notes about the arguments: clap's "did you mean" tips come
//! through, a session timeout ZooKeeper cannot carry is refused, and one the server changed is
//! reported.

mod common;

use std::process::{Command, Output};

use common::*;
use zk_testcluster::ZkCluster;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `zklock ARGS` without a server: for errors found while parsing the arguments.
fn offline(args: &[&str]) -> Output {
    Command::new(ZKLOCK).env_remove("ZK_CONNECT").env_remove("RUST_LOG").args(args).output().unwrap()
}

#[test]
fn a_misspelt_option_or_subcommand_gets_clap_tip_on_the_one_line() {
    for (args, tip) in [
        (
            &["run", "--conect", "h:1", "/locks/x", "--", "true"][..],
            "tip: a similar argument exists: '--connect'",
        ),
        (&["status", "--jsn", "/locks/x"][..], "tip: a similar argument exists: '--json'"),
        (&["statsu", "/locks/x"][..], "tip: a similar subcommand exists: 'status'"),
        (&["completions", "bsh"][..], "tip: a similar value exists: 'bash'"),
        (&["--no-wait", "run", "/locks/x", "--", "true"][..], "tip: 'run --no-wait' exists"),
    ] {
        let out = offline(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.starts_with("zklock: ") && err.contains(tip), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        // clap's advice to pass an option as a value does not fit zklock's options.
        assert!(!err.contains("as a value"), "{args:?}: {err}");
    }
    // A misspelt option of `run` is not taken for the command: no advice about `--`.
    let out = offline(&["run", "--conect", "h:1", "/locks/x", "true"]);
    let err = stderr(&out);
    assert!(err.contains("'--connect'") && !err.contains("the command goes after --"), "{err}");
    // A word that looks like nothing of ours still gets that advice.
    let out = offline(&["run", "/locks/x", "ls", "-la"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("the command goes after --") && !err.contains("tip:"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_timeout_zookeeper_cannot_carry_is_a_usage_error_for_every_subcommand() {
    // A real server, so that without the check each of these would run (0 becomes the
    // client's default of 6 s).
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let subcommands: [&[&str]; 7] = [
        &["run", "/locks/zero", "--", "true"],
        &["hold", "/locks/zero"],
        &["status", "/locks/zero"],
        &["ls", "/"],
        &["elect", "/election/zero", "--", "true"],
        &["revoke", "/locks/zero"],
        &["break", "--yes", "/locks/zero"],
    ];
    for timeout in ["0s", "0", "999us", "25days"] {
        for args in subcommands {
            let out = zklock(&c)
                .args(&args[..1])
                .args(["--session-timeout", timeout])
                .args(&args[1..])
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(64), "{args:?} {timeout}: {err}");
            assert!(err.contains("--session-timeout") && err.contains("session timeout must be at"), "{err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        }
    }
    // The bounds themselves pass. (1 ms against a closed port: the client crate gives its first
    // connection only the asked-for timeout, 8 ms here, which a busy machine may miss even on
    // a live server; what counts is that it is not refused as bad input.)
    let out = zklock(&c).args(["status", "--session-timeout", "24days", "/locks/zero"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = zklock(&format!("127.0.0.1:{port}"))
        .args(["status", "--session-timeout", "1ms", "/locks/zero"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.starts_with("zklock: cannot connect"), "{err}");
    assert_eq!(queue_len(&c, "/locks/zero"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_timeout_the_server_changed_is_noted_once() {
    // Sessions of 2 to 4 ticks of 1 s: 2 s to 4 s. (The client crate gives its first
    // connection the asked-for timeout: asking for 1 s leaves room on a busy machine.)
    let zk = one_second_ticks().await;
    let c = zk.connect_string();
    let notes = |err: &str| err.lines().filter(|l| l.starts_with("zklock: note: ")).count();

    let out =
        zklock(&c).args(["run", "--session-timeout", "1s", "/locks/short", "--", "true"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("zklock: note: the server set the session timeout to 2s (asked for 1s)"), "{err}");
    assert_eq!(notes(&err), 1, "{err}");

    let out = zklock(&c).args(["ls", "--session-timeout", "10s", "/"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("zklock: note: the server set the session timeout to 4s (asked for 10s)"), "{err}");
    assert_eq!(notes(&err), 1, "{err}");

    // Granted as asked: nothing to say.
    let out = zklock(&c).args(["status", "--session-timeout", "2500ms", "/locks/short"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    // The default (10s) changed: said with -v only.
    let out = zklock(&c).args(["status", "/locks/short"]).output().unwrap();
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    let out = zklock(&c).args(["status", "-v", "/locks/short"]).output().unwrap();
    let err = stderr(&out);
    assert!(err.contains("the server set the session timeout to 4s (asked for the default 10s)"), "{err}");
}
