//! The options users know from flock, consul lock and etcdctl lock, and the operator's tools,
//! against real ZooKeeper.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

use common::*;
use zk_testcluster::ZkCluster;

/// Starts `zklock hold ARGS` with piped stdin and stdout, and reads the first line it prints.
fn hold(connect: &str, args: &[&str]) -> (Child, String, BufReader<ChildStdout>) {
    let mut child = zklock(connect)
        .arg("hold")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    (child, line.trim().to_string(), out)
}

/// Ends a `hold` by closing its stdin; it must release and exit 0.
async fn release(mut child: Child) {
    drop(child.stdin.take());
    let out = finish(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

fn holders(connect: &str, path: &str) -> Vec<String> {
    status(connect, path)["queue"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["holder"].as_bool() == Some(true))
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_prints_the_token_and_releases_when_stdin_closes() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let (child, token, _out) = hold(&c, &["--id", "h", "/locks/hold"]);
    let token: i64 = token.parse().expect("a fencing token");
    let rows = status(&c, "/locks/hold");
    assert_eq!(rows["queue"][0]["fencing_token"].as_i64(), Some(token));
    release(child).await;
    assert_eq!(queue_len(&c, "/locks/hold"), 0);

    // --json, and a signal ends it as well (exit 0, released).
    let (child, json, _out) = hold(&c, &["--json", "/locks/hold"]);
    let mut text = json;
    let mut out = _out;
    while !text.trim_end().ends_with('}') {
        let mut more = String::new();
        out.read_line(&mut more).unwrap();
        text.push_str(&more);
    }
    let held: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(held["path"].as_str(), Some("/locks/hold"));
    assert!(held["node"].as_str().unwrap().starts_with("/locks/hold/"));
    assert!(held["fencing_token"].as_i64().unwrap() > token);
    kill("TERM", child.id());
    let out = finish(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(queue_len(&c, "/locks/hold"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holders_coexist_and_exclude_a_writer_with_the_conflict_exit_code() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let (r1, _, _o1) = hold(&c, &["--shared", "--id", "r1", "/locks/rw"]);
    let (r2, _, _o2) = hold(&c, &["-s", "--id", "r2", "/locks/rw"]);
    assert_eq!(holders(&c, "/locks/rw"), ["r1", "r2"]);
    let out =
        zklock(&c).args(["run", "--exclusive", "--no-wait", "/locks/rw", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", String::from_utf8_lossy(&out.stderr));
    let out = zklock(&c).args(["run", "-x", "-n", "-E", "9", "/locks/rw", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(9));
    let out = zklock(&c)
        .args(["run", "-x", "--timeout", "200ms", "-E", "0", "/locks/rw", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "a timeout with -E 0");
    // A plain mutex on a read/write path would not exclude the readers: refused.
    let out = zklock(&c).args(["run", "/locks/rw", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("--shared or --exclusive") && err.trim().lines().count() == 1, "{err}");
    release(r1).await;
    release(r2).await;
    let out = zklock(&c).args(["run", "-x", "-n", "/locks/rw", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_admits_n_holders() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let (a, _, _oa) = hold(&c, &["--limit", "2", "--id", "a", "/locks/sem"]);
    let (b, _, _ob) = hold(&c, &["--limit", "2", "--id", "b", "/locks/sem"]);
    assert_eq!(holders(&c, "/locks/sem"), ["a", "b"]);
    assert_eq!(status(&c, "/locks/sem")["kind"].as_str(), Some("semaphore"));
    let out =
        zklock(&c).args(["run", "--limit", "2", "--no-wait", "/locks/sem", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", String::from_utf8_lossy(&out.stderr));
    // Another N on the same path is bad input.
    let out =
        zklock(&c).args(["run", "--limit", "3", "--no-wait", "/locks/sem", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    release(a).await;
    let out =
        zklock(&c).args(["run", "--limit", "2", "--no-wait", "/locks/sem", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    release(b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dash_c_runs_the_string_through_the_shell() {
    let zk = ZkCluster::standalone().await.unwrap();
    let out = zklock(&zk.connect_string())
        .args(["run", "/locks/shell", "-c", "echo \"$ZKLOCK_PATH\" | tr a-z A-Z; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "/LOCKS/SHELL");
    let out = zklock(&zk.connect_string()).args(["run", "/x", "-c", "true", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "-c and a command together");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_observe_prints_the_leader_and_each_change() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let observer = zklock(&c)
        .args(["elect", "--observe", "--json", "/election/obs"])
        .stdout(std::fs::File::create(&seen).unwrap())
        .spawn()
        .unwrap();
    let leaders = || -> Vec<Option<String>> {
        lines(&seen)
            .iter()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["leader"].as_str().map(String::from)
            })
            .collect()
    };
    eventually("no leader yet", || leaders() == [None]).await;
    let one =
        zklock(&c).args(["elect", "--id", "one", "/election/obs", "-c", "exec sleep 60"]).spawn().unwrap();
    eventually("one leads", || leaders().last() == Some(&Some("one".into()))).await;
    let two =
        zklock(&c).args(["elect", "--id", "two", "/election/obs", "--", "sleep", "60"]).spawn().unwrap();
    eventually("two queued", || queue_len(&c, "/election/obs") == 2).await;
    kill("TERM", one.id());
    finish(one).await;
    eventually("two leads", || leaders().last() == Some(&Some("two".into()))).await;
    assert_eq!(leaders(), [None, Some("one".into()), Some("two".into())]);
    kill("TERM", two.id());
    finish(two).await;
    eventually("no leader again", || leaders().last() == Some(&None)).await;
    kill("TERM", observer.id());
    let out = finish(observer).await;
    assert_eq!(out.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_lists_every_lock_under_a_prefix_and_status_on_a_parent_is_not_free() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let (a, _, _oa) = hold(&c, &["--id", "alpha", "/app/locks/a"]);
    let (b, _, _ob) = hold(&c, &["--id", "beta", "/app/locks/deep/b"]);
    let waiter = zklock(&c).args(["run", "--id", "gamma", "/app/locks/a", "--", "true"]).spawn().unwrap();
    eventually("gamma queued", || queue_len(&c, "/app/locks/a") == 2).await;
    let leader =
        zklock(&c).args(["elect", "--id", "boss", "/app/election", "--", "sleep", "60"]).spawn().unwrap();
    eventually("boss leads", || queue_len(&c, "/app/election") == 1).await;
    // A failed assertion must not leave them running (a waiter retries the stopped server).
    let _reapers = (Reaper(waiter.id()), Reaper(leader.id()));

    let out = zklock(&c).args(["ls", "--json", "/app"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let found: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    // (path, kind, holders, waiters, queue): `queue` counts holders and waiters together.
    let summary: Vec<(&str, &str, String, Option<u64>, u64)> = found
        .iter()
        .map(|l| {
            let holders: Vec<&str> =
                l["holders"].as_array().unwrap().iter().map(|h| h.as_str().unwrap()).collect();
            (
                l["path"].as_str().unwrap(),
                l["kind"].as_str().unwrap(),
                holders.join(","),
                l["waiters"].as_u64(),
                l["queue"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("/app/election", "election", "boss".to_string(), Some(0), 1),
            ("/app/locks/a", "lock", "alpha".to_string(), Some(1), 2),
            ("/app/locks/deep/b", "lock", "beta".to_string(), Some(0), 1),
        ]
    );
    assert!(found.iter().all(|l| l["age_ms"].as_i64().is_some()));
    let table = zklock(&c).args(["ls", "/app/locks"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("/app/locks/a") && table.contains("alpha") && !table.contains("election"),
        "{table}"
    );
    // One holder and one waiter on /app/locks/a: HOLDERS 1, WAITERS 1 (not a queue of 2).
    let columns = |line: &str| line.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let mut lines = table.lines();
    assert_eq!(
        columns(lines.next().unwrap()),
        ["PATH", "KIND", "HOLDER", "HOLDERS", "WAITERS", "AGE", "ONCE-PER"],
        "{table}"
    );
    let rows: Vec<Vec<String>> = lines.map(columns).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert_eq!(rows[0][..5], ["/app/locks/a", "lock", "alpha", "1", "1"], "{table}");
    assert_eq!(rows[1][..5], ["/app/locks/deep/b", "lock", "beta", "1", "0"], "{table}");

    let parent = status(&c, "/app/locks");
    assert_eq!(parent["free"].as_bool(), Some(false), "{parent}");
    assert_eq!(parent["locks_under"], serde_json::json!(["/app/locks/a", "/app/locks/deep/b"]));
    let text = zklock(&c).args(["status", "/app/locks"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(!text.contains("free") && text.contains("2 under it"), "{text}");
    assert_eq!(status(&c, "/nothing/here")["free"].as_bool(), Some(true));

    release(a).await;
    assert!(finish(waiter).await.status.success());
    release(b).await;
    kill("TERM", leader.id());
    finish(leader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_deletes_the_holders_node_after_confirmation_and_voids_its_token() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let script = format!("echo $ZKLOCK_FENCING_TOKEN > {}; exec sleep 60", token_file.display());
    let holder = zklock(&c)
        .args(["run", "--id", "victim", "--grace", "200ms", "/locks/brk", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the holder runs", || !lines(&token_file).is_empty()).await;
    let token: i64 = lines(&token_file)[0].parse().unwrap();

    // Declined: nothing happens.
    let mut declined = zklock(&c)
        .args(["break", "/locks/brk"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    declined.stdin.take().unwrap().write_all(b"n\n").unwrap();
    let out = finish(declined).await;
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[y/N]"));
    assert_eq!(holders(&c, "/locks/brk"), ["victim"]);

    // Confirmed with --yes: the node goes, the token printed is the holder's.
    let out = zklock(&c).args(["break", "--yes", "--json", "/locks/brk"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let broken: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(broken["fencing_token"].as_i64(), Some(token));
    assert_eq!(broken["holder"].as_str(), Some("victim"));
    // The holder notices and stops its command.
    let out = finish(holder).await;
    assert_eq!(out.status.code(), Some(76), "{}", String::from_utf8_lossy(&out.stderr));

    // Nothing left to break; a node that is not in the queue is bad input.
    let out = zklock(&c).args(["break", "--yes", "/locks/brk"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let (h, _, _o) = hold(&c, &["/locks/brk"]);
    let out = zklock(&c).args(["break", "--yes", "--node", "nope", "/locks/brk"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let out = zklock(&c).args(["revoke", "--node", "nope", "/locks/brk"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    release(h).await;
    // A mutex is another queue than the read/write lock: a plain run on a path a `--shared`
    // hold holds is bad input, not a second holder.
    let (h, _, _o) = hold(&c, &["--shared", "/locks/kinds"]);
    let out = zklock(&c).args(["run", "/locks/kinds", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    release(h).await;

    // Several holders: --node picks one.
    let (r1, _, _o1) = hold(&c, &["--shared", "--id", "r1", "/locks/brk-rw"]);
    let (r2, _, _o2) = hold(&c, &["--shared", "--id", "r2", "/locks/brk-rw"]);
    let out = zklock(&c).args(["break", "--yes", "/locks/brk-rw"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("pick one with --node"), "{err}");
    let rows = status(&c, "/locks/brk-rw");
    let node = rows["queue"][1]["node"].as_str().unwrap().to_string();
    let out = zklock(&c).args(["break", "--yes", "--node", &node, "/locks/brk-rw"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("held by r2"));
    assert_eq!(holders(&c, "/locks/brk-rw"), ["r1"]);
    let out = finish(r2).await;
    assert_eq!(out.status.code(), Some(76), "{}", String::from_utf8_lossy(&out.stderr));
    release(r1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_asks_the_holder_to_release() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let (h, _, _o) = hold(&c, &["--id", "polite", "/locks/rev"]);
    let out = zklock(&c).args(["revoke", "--json", "/locks/rev"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let asked: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["id"].as_str(), Some("polite"));
    // `hold` releases on revocation and exits 0 (stdin still open).
    eventually("released", || queue_len(&c, "/locks/rev") == 0).await;
    let out = finish(h).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("revocation requested"));
    assert_eq!(queue_len(&c, "/locks/rev"), 0);

    // `run` passes the request on to its command as SIGTERM; the command decides.
    let run =
        zklock(&c).args(["run", "/locks/rev", "--", "sleep", "60"]).stderr(Stdio::piped()).spawn().unwrap();
    eventually("run holds", || queue_len(&c, "/locks/rev") == 1).await;
    let out = zklock(&c).args(["revoke", "/locks/rev"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("asked"));
    let out = finish(run).await;
    assert_eq!(out.status.code(), Some(128 + 15), "{}", String::from_utf8_lossy(&out.stderr));
    let out = zklock(&c).args(["revoke", "/locks/rev"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "nobody to revoke");
}

#[test]
fn completions_and_man_page_come_from_the_clap_definitions() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = Command::new(ZKLOCK).args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains("zklock") && script.contains("conflict-exit-code"), "{shell}");
    }
    let out = Command::new(ZKLOCK).arg("man").output().unwrap();
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH zklock 1") && page.contains(".SH \"EXIT STATUS\""), "{page}");
    let out = Command::new(ZKLOCK).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim().lines().count(), 1);
}

fn nodes(connect: &str, path: &str) -> Vec<String> {
    status(connect, path)["queue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["node"].as_str().unwrap().to_string())
        .collect()
}

/// A session that expires while `zklock run` *waits* queues again on a new session; the
/// command then runs once the holder lets go. (An expiry while
/// *holding* stays lost, exit 76: `cli.rs`, `a_lost_lock_stops_the_command_with_the_lost_code`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_while_waiting_queues_again_and_the_command_runs_later() {
    let zk = ZkCluster::standalone().await.unwrap();
    let proxy = zk.proxy().unwrap();
    let connect = zk.connect_string();
    let path = "/locks/requeue";
    let (holder, _, _out) = hold(&connect, &[path]);
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let waiter = zklock(&proxy.connect_string())
        .args(["run", "--session-timeout", "2s", path, "--", "touch", ran.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the waiter to queue", || queue_len(&connect, path) == 2).await;
    let first = nodes(&connect, path)[1].clone();
    proxy.blackhole();
    eventually("the waiter's session to expire", || !nodes(&connect, path).contains(&first)).await;
    proxy.heal();
    eventually("the waiter to queue again", || queue_len(&connect, path) == 2).await;
    assert_ne!(nodes(&connect, path)[1], first, "the same node after an expiry");
    assert!(!ran.exists(), "the command ran while the lock was held");
    release(holder).await;
    let out = finish(waiter).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(ran.exists());
}
