//! Logs: RUST_LOG picks the library's events (default: warn), written to
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

/// Every stderr line parsed as a JSON event (panics on one that is not), with its message.
fn events(stderr: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(stderr)
        .lines()
        .map(|l| {
            let e: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            let level = e["level"].as_str().unwrap_or_else(|| panic!("no level: {l}")).to_string();
            let message = e["fields"]["message"].as_str().unwrap_or_else(|| panic!("no message: {l}"));
            (level, message.to_string())
        })
        .collect()
}

/// Under `--log-format json` zklock's own messages are events too (busy,
/// waiting progress, the session timeout note, a usage error), and every `--json` output is
/// one object on one line (`hold` and `break` included, read by the docs' coproc pattern).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_format_json_is_json_all_the_way_and_json_outputs_one_line_each() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let json = |args: &[&str]| zklock(&c).args(["--log-format", "json"]).args(args).output().unwrap();
    // A holder, through the docs' coproc pattern with --json: the line read is the object.
    let script = "coproc LOCK { exec \"$Z\" hold --json /locks/j; }
                  read -r held <&\"${LOCK[0]}\"; echo \"$held\"
                  read -r go; kill \"$LOCK_PID\"; wait \"$LOCK_PID\"";
    let mut holder = std::process::Command::new("bash")
        .args(["-c", script])
        .env("ZK_CONNECT", &c)
        .env("Z", ZKLOCK)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let held: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?} {:?}", holder.wait()));
    assert!(held["fencing_token"].is_u64() && held["path"] == "/locks/j", "{held}");

    let busy = json(&["run", "-n", "/locks/j", "--", "true"]);
    assert_eq!(busy.status.code(), Some(75));
    let said = events(&busy.stderr);
    assert!(said.iter().any(|(l, m)| l == "ERROR" && m.contains("/locks/j is busy")), "{said:?}");
    let waited =
        json(&["run", "-v", "--timeout", "1", "--session-timeout", "100s", "/locks/j", "--", "true"]);
    assert_eq!(waited.status.code(), Some(75));
    let said = events(&waited.stderr);
    for want in [
        "note: the server set the session timeout",
        "waiting for /locks/j: 1 ahead",
        "was not acquired in time",
    ] {
        assert!(said.iter().any(|(_, m)| m.contains(want)), "{want}: {said:?}");
    }
    let usage = json(&["run", "/locks/j", "true"]);
    assert_eq!(usage.status.code(), Some(64));
    assert_eq!(events(&usage.stderr).len(), 1);

    // --json: one object, one line, for each command that reports.
    for args in [
        &["status", "--json", "/locks/j"][..],
        &["ls", "--json", "/locks"],
        &["deadlocks", "--json", "/locks"],
    ] {
        let out = json(args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        serde_json::from_str::<serde_json::Value>(&text).unwrap();
    }
    let broken = json(&["break", "--yes", "--json", "/locks/j"]);
    assert_eq!(broken.status.code(), Some(0), "{}", String::from_utf8_lossy(&broken.stderr));
    let text = String::from_utf8_lossy(&broken.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["fencing_token"],
        held["fencing_token"]
    );
    drop(holder.stdin.take());
    let _ = holder.wait();
    let mut other =
        zklock(&c).args(["hold", "/locks/r"]).stdin(std::process::Stdio::piped()).spawn().unwrap();
    eventually("held", || queue_len(&c, "/locks/r") == 1).await;
    let revoked = json(&["revoke", "--json", "/locks/r"]);
    assert_eq!(revoked.status.code(), Some(0), "{}", String::from_utf8_lossy(&revoked.stderr));
    assert_eq!(String::from_utf8_lossy(&revoked.stdout).lines().count(), 1, "{revoked:?}");
    assert_eq!(other.wait().unwrap().code(), Some(0));
}
