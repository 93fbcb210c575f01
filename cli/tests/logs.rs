//! Logs (issue 37, item 3): RUST_LOG picks the library's events (default: warn), written to
//! stderr as text or JSON lines, never mixed into stdout.

mod common;

use common::*;
use zk_testcluster::ZkCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_log_shows_the_library_events_on_stderr_and_stdout_is_untouched() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let quiet = zklock(&c).args(["status", "/locks/logs"]).output().unwrap();
    assert!(quiet.status.success(), "{}", String::from_utf8_lossy(&quiet.stderr));
    assert!(quiet.stderr.is_empty(), "default (warn): {}", String::from_utf8_lossy(&quiet.stderr));

    let loud = zklock(&c).env("RUST_LOG", "debug").args(["status", "/locks/logs"]).output().unwrap();
    let err = String::from_utf8_lossy(&loud.stderr);
    assert!(loud.status.success(), "{err}");
    // The library's session line, with its target.
    assert!(err.contains("zk_recipes::session: session connected"), "{err}");
    assert_eq!(loud.stdout, quiet.stdout, "logs leaked into stdout");

    // The command's output is its own: not a log line in it, whatever RUST_LOG says.
    let run = zklock(&c)
        .env("RUST_LOG", "trace")
        .args(["run", "/locks/logs", "--", "sh", "-c", "echo out; echo err >&2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&run.stdout), "out\n");
    assert!(err.lines().any(|l| l == "err") && err.contains("session connected"), "{err}");

    // JSON: every stderr line is an object with a level; the same events.
    let json = zklock(&c)
        .env("RUST_LOG", "zk_recipes=info")
        .args(["--log-format", "json", "status", "--json", "/locks/logs"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&json.stderr);
    assert!(json.status.success(), "{err}");
    let events: Vec<serde_json::Value> =
        err.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert!(events.iter().any(|e| e["fields"]["message"] == "session connected"), "{err}");
    assert!(events.iter().all(|e| e["level"].is_string()), "{err}");
    let status: serde_json::Value = serde_json::from_slice(&json.stdout).expect("stdout is only the status");
    assert_eq!(status["free"].as_bool(), Some(true));
    // The same through the environment.
    let env = zklock(&c)
        .env("RUST_LOG", "zk_recipes=info")
        .env("ZKLOCK_LOG_FORMAT", "json")
        .args(["status", "/locks/logs"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&env.stderr);
    assert!(err.lines().all(|l| l.starts_with('{')) && !err.is_empty(), "{err}");
}
