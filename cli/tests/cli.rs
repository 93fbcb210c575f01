//! `zklock` as a user runs it, against real ZooKeeper.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use zk_testcluster::{ClusterConfig, TlsMode, ZkCluster};

const ZKLOCK: &str = env!("CARGO_BIN_EXE_zklock");
const PATIENCE: Duration = Duration::from_secs(60);

fn zklock(connect: &str) -> Command {
    let mut cmd = Command::new(ZKLOCK);
    cmd.env("ZK_CONNECT", connect).env_remove("RUST_LOG");
    cmd
}

/// Waits (bounded) for a child process to end.
async fn finish(child: std::process::Child) -> Output {
    tokio::time::timeout(PATIENCE, tokio::task::spawn_blocking(move || child.wait_with_output()))
        .await
        .expect("zklock hung")
        .expect("join")
        .expect("wait")
}

/// Polls for a condition on another process's state (a file it writes, a queue on the server).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

fn queue_len(connect: &str, path: &str) -> usize {
    let out = zklock(connect).args(["status", "--json", path]).output().expect("status");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    status["queue"].as_array().expect("queue").len()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_on_one_path_never_overlap() {
    let zk = ZkCluster::standalone().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!("echo start $$ >> {0}; sleep 0.3; echo end $$ >> {0}", log.display());
    let runs: Vec<_> = (0..3)
        .map(|_| {
            zklock(&zk.connect_string())
                .args(["run", "/locks/cli", "--", "sh", "-c", &script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for run in runs {
        let out = finish(run).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let log = lines(&log);
    assert_eq!(log.len(), 6, "{log:?}");
    for pair in log.chunks(2) {
        let (start, end) = (pair[0].strip_prefix("start "), pair[1].strip_prefix("end "));
        assert!(start.is_some() && start == end, "intervals overlap: {log:?}");
    }
    assert_eq!(queue_len(&zk.connect_string(), "/locks/cli"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_sees_the_token_and_its_status_is_passed_on() {
    let zk = ZkCluster::standalone().await.unwrap();
    let out = zklock(&zk.connect_string())
        .args([
            "run",
            "/locks/env",
            "--",
            "sh",
            "-c",
            "test -n \"$ZKLOCK_FENCING_TOKEN\" && test \"$ZKLOCK_PATH\" = /locks/env && exit 7",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
    let out = zklock(&zk.connect_string())
        .args(["run", "/locks/env", "--", "no-such-command-zk"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(queue_len(&zk.connect_string(), "/locks/env"), 0, "a failed exec left the lock held");
    // A file that is there but not executable: 126.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let out = zklock(&zk.connect_string()).args(["run", "/locks/env", "--"]).arg(&script).output().unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(queue_len(&zk.connect_string(), "/locks/env"), 0, "a failed exec left the lock held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wait_exits_busy_and_status_lists_the_queue() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let holder =
        zklock(&c).args(["run", "--id", "alpha", "/locks/busy", "--", "sleep", "30"]).spawn().unwrap();
    eventually("alpha holds", || queue_len(&c, "/locks/busy") == 1).await;
    let waiter = zklock(&c).args(["run", "--id", "beta", "/locks/busy", "--", "true"]).spawn().unwrap();
    eventually("beta queued", || queue_len(&c, "/locks/busy") == 2).await;

    let out = zklock(&c).args(["run", "--no-wait", "/locks/busy", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("held by alpha"));
    let out = zklock(&c).args(["run", "--timeout", "300ms", "/locks/busy", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75));

    let out = zklock(&c).args(["status", "--json", "/locks/busy"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((status["kind"].as_str(), status["free"].as_bool()), (Some("lock"), Some(false)));
    let rows = status["queue"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "busy checks left nodes: {rows:?}");
    assert_eq!((rows[0]["id"].as_str(), rows[0]["holder"].as_bool()), (Some("alpha"), Some(true)));
    assert_eq!((rows[1]["id"].as_str(), rows[1]["holder"].as_bool()), (Some("beta"), Some(false)));
    assert!(rows[0]["session"].as_str().unwrap().starts_with("0x"));
    let table = zklock(&c).args(["status", "/locks/busy"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("alpha") && table.contains("beta") && table.contains("2 in queue"), "{table}");

    // SIGTERM to the holding zklock: forwarded to `sleep`, the lock released, beta runs.
    Command::new("kill").arg(holder.id().to_string()).status().unwrap();
    let out = finish(holder).await;
    assert_eq!(out.status.code(), Some(128 + 15));
    assert!(finish(waiter).await.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_stops_the_command_with_the_lost_code() {
    let zk = ZkCluster::standalone().await.unwrap();
    let proxy = zk.proxy().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let run = zklock(&proxy.connect_string())
        .args(["run", "--session-timeout", "2s", "--grace", "1s", "/locks/lost", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("command started", || pidfile.exists() && !lines(&pidfile).is_empty()).await;
    let pid: u32 = lines(&pidfile)[0].parse().unwrap();
    proxy.blackhole();
    let out = finish(run).await;
    proxy.heal();
    assert_eq!(out.status.code(), Some(76), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lost the lock"));
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the command outlived the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_hands_over_when_the_leader_is_killed() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("leaders");
    let spawn = |id: &str| {
        let script = format!("echo {id} $ZKLOCK_FENCING_TOKEN >> {}; exec sleep 60", log.display());
        zklock(&c)
            .args([
                "elect",
                "--session-timeout",
                "1s",
                "--id",
                id,
                "/election/cli",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .spawn()
            .unwrap()
    };
    let mut first = spawn("one");
    eventually("one leads", || lines(&log).len() == 1).await;
    let second = spawn("two");
    eventually("two queued", || queue_len(&c, "/election/cli") == 2).await;
    first.kill().unwrap(); // SIGKILL: no cleanup; the session must time out
    let _ = first.wait();
    eventually("two leads", || lines(&log).len() == 2).await;
    let leaders = lines(&log);
    let token = |l: &str| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
    assert!(leaders[0].starts_with("one ") && leaders[1].starts_with("two "), "{leaders:?}");
    assert!(token(&leaders[1]) > token(&leaders[0]));
    Command::new("kill").arg(second.id().to_string()).status().unwrap();
    finish(second).await;
}

#[tokio::test]
async fn errors_are_one_line_with_a_code_never_a_panic() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = Command::new(ZKLOCK)
        .args([
            "run",
            "--session-timeout",
            "1s",
            "--connect",
            &format!("127.0.0.1:{port}"),
            "/locks/x",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("zklock: cannot connect") && !err.contains("panicked"), "{err}");

    let zk = ZkCluster::standalone().await.unwrap();
    let out = zklock(&zk.connect_string()).args(["run", "locks/relative", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("must start with '/'"), "{err}");
    let out = Command::new(ZKLOCK).env_remove("ZK_CONNECT").args(["status", "/x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_format_runs_and_a_curator_format_run_on_its_path_is_refused() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let holder = zklock(&c)
        .args(["--format", "kazoo", "run", "--id", "py-style", "/locks/kz", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    eventually("kazoo-format holder", || queue_len(&c, "/locks/kz") == 1).await;
    let out = zklock(&c).args(["status", "--json", "/locks/kz"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = status["queue"].as_array().unwrap();
    assert!(rows[0]["node"].as_str().unwrap().contains("__lock__"), "{rows:?}");
    let out = zklock(&c).args(["run", "/locks/kz", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("kazoo-format node"), "{err}");
    assert_eq!(queue_len(&c, "/locks/kz"), 1, "the refused run left a node");
    Command::new("kill").arg(holder.id().to_string()).status().unwrap();
    finish(holder).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flags_run_under_a_lock_on_the_secure_port_and_bad_tls_input_is_usage() {
    let zk =
        ZkCluster::start(ClusterConfig { tls: TlsMode::Mutual, ..ClusterConfig::default() }).await.unwrap();
    let secure = zk.secure_connect_string().unwrap();
    let f = zk.tls_files().unwrap();
    let path_of = |p: &Path| p.display().to_string();
    let (ca, cert, key) = (path_of(&f.ca), path_of(&f.client_cert), path_of(&f.client_key));
    // Mutual TLS through the flags: the command runs, under the lock, with its token.
    let out = zklock(&secure)
        .args(["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key, "run", "/locks/tls", "--"])
        .args(["sh", "-c", "test -n \"$ZKLOCK_FENCING_TOKEN\" && echo ran"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
    // The same through the environment, for status.
    let out = zklock(&secure)
        .env("ZK_TLS_CA", &ca)
        .env("ZK_TLS_CERT", &cert)
        .env("ZK_TLS_KEY", &key)
        .args(["status", "--json", "/locks/tls"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Without a client certificate the server refuses the handshake: unavailable, one line.
    let out = zklock(&secure)
        .args(["--session-timeout", "1s", "--tls-ca", &ca, "run", "/locks/tls", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.starts_with("zklock: cannot connect") && err.trim().lines().count() == 1, "{err}");
    // Half an identity, or a file that holds no CA, is bad input.
    let out = zklock(&secure).args(["--tls-ca", &ca, "--tls-cert", &cert, "status", "/x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    let out = zklock(&secure).args(["--tls-ca", &key, "status", "/x"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("TLS") && err.contains("client.key") && !err.contains("PRIVATE"), "{err}");
}
