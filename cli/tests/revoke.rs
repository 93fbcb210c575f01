//! `zklock revoke` on a semaphore (one lease, or every lease holder) and on elections (a
//! `zklock elect` leader, a library `LeaderSelector`), against real ZooKeeper.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Stdio};
use std::time::Duration;

use common::*;
use zk_recipes::{LeaderSelector, SelectorOptions, Session, TermOutcome};
use zk_testcluster::ZkCluster;

/// Starts `zklock hold --json ARGS` and returns it with the node it holds.
fn hold(connect: &str, args: &[&str]) -> (Child, String, BufReader<ChildStdout>) {
    let mut child = zklock(connect)
        .args(["hold", "--json"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    // The JSON object is pretty-printed: read lines until it parses.
    let mut text = String::new();
    let held: serde_json::Value = loop {
        assert!(out.read_line(&mut text).unwrap() > 0, "hold printed no JSON: {text}");
        if let Ok(held) = serde_json::from_str(&text) {
            break held;
        }
    };
    (child, held["node"].as_str().unwrap().to_string(), out)
}

/// `zklock revoke --json ARGS`: the ids asked.
fn revoke(connect: &str, args: &[&str]) -> Vec<String> {
    let out = zklock(connect).args(["revoke", "--json"]).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let asked: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    asked.iter().map(|a| a["id"].as_str().unwrap().to_string()).collect()
}

/// `hold` releases on a revocation request and exits 0, saying so. Its stdin stays open until
/// its node (full path) is gone: closing it would release too. (Not by id: the request replaced
/// the node's data, the participant id, with `__REVOKE__`.)
async fn released_on_request(connect: &str, path: &str, node: &str, child: Child) {
    let nodes = || -> Vec<String> {
        let rows = status(connect, path)["queue"].as_array().cloned().unwrap_or_default();
        rows.iter().filter_map(|r| r["node"].as_str().map(|n| format!("{path}/{n}"))).collect()
    };
    eventually("released", || !nodes().iter().any(|n| n == node)).await;
    let out = finish(child).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("revocation requested"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_asks_one_lease_holder_or_all_of_a_semaphore() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let (one, one_node, _o1) = hold(&c, &["--limit", "2", "--id", "one", "/sem/rev"]);
    let (two, two_node, _o2) = hold(&c, &["--limit", "2", "--id", "two", "/sem/rev"]);

    // --node: that lease only.
    assert_eq!(revoke(&c, &["--node", &one_node, "/sem/rev"]), ["one"]);
    released_on_request(&c, "/sem/rev", &one_node, one).await;
    eventually("one lease left", || queue_len(&c, "/sem/rev") == 1).await;

    // Without --node: every lease holder.
    let (three, three_node, _o3) = hold(&c, &["--limit", "2", "--id", "three", "/sem/rev"]);
    let mut asked = revoke(&c, &["/sem/rev"]);
    asked.sort();
    assert_eq!(asked, ["three", "two"]);
    released_on_request(&c, "/sem/rev", &two_node, two).await;
    released_on_request(&c, "/sem/rev", &three_node, three).await;
    assert_eq!(queue_len(&c, "/sem/rev"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_asks_an_elected_command_to_finish() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let elect = zklock(&c)
        .args(["elect", "--id", "boss", "/el/rev", "--", "sleep", "600"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("boss leads", || status(&c, "/el/rev")["queue"][0]["id"].as_str() == Some("boss")).await;
    assert_eq!(revoke(&c, &["/el/rev"]), ["boss"]);
    // The command gets SIGTERM, as under `run`; zklock exits with its status.
    let out = finish(elect).await;
    assert_eq!(out.status.code(), Some(128 + 15), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("revocation requested"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_makes_a_selector_leader_step_down() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let session =
        tokio::time::timeout(PATIENCE, Session::connect(&c, Duration::from_secs(20))).await.unwrap().unwrap();
    let selector =
        LeaderSelector::with_options(&session, "/el/sel", SelectorOptions::new().participant_id("sel"))
            .unwrap();
    let mut terms = selector.terms();
    selector.start(|ctx| async move { ctx.stopped().await }).unwrap();
    tokio::time::timeout(PATIENCE, selector.await_leadership()).await.unwrap().unwrap();
    assert_eq!(revoke(&c, &["/el/sel"]), ["sel"]);
    let ended = tokio::time::timeout(PATIENCE, terms.recv()).await.unwrap().unwrap();
    assert_eq!(ended.outcome, TermOutcome::Revoked);
    // Without auto-requeue it left the election.
    eventually("the selector left", || queue_len(&c, "/el/sel") == 0).await;
    selector.close().await;
}
