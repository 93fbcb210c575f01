//! Leader failover after a kill of the leader's process: the candidates, each in its own
//! process, and our own candidate's side (`zk-bench elect-child`).

use std::time::Duration;

use zk_recipes::zookeeper_client::Client;
use zk_testcluster::ZkCluster;

use super::{driver, raw_connect, Peer, Recipe};
use crate::clock::now_ns;
use crate::driver::Driver;
use crate::ours;

/// The session timeout of the failover scenario's candidates: a kill's handover waits for the
/// killed leader's session to expire (the servers' tick is 200 ms, so 1 s is allowed).
pub const FAILOVER_SESSION: Duration = Duration::from_secs(1);

/// A candidate of the failover scenario in its own process: a driver's `elect` mode, or our
/// `zk-bench elect-child`. It prints `STARTED`, then `LEADER <CLOCK_MONOTONIC ns>` when it leads.
fn candidate(peer: Peer, recipe: Recipe, connect: &str, path: &str, i: usize) -> Result<Driver, String> {
    let id = format!("candidate-{i}");
    let session_ms = FAILOVER_SESSION.as_millis().to_string();
    let what = recipe.driver_arg(peer);
    let mut d = match peer {
        Peer::Curator | Peer::Kazoo => driver(peer, &["elect", connect, path, &id, &session_ms, &what])?,
        _ => {
            let mut cmd = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
            cmd.args(["elect-child", &what, connect, path, &id, &session_ms]);
            Driver::spawn(peer.short(), cmd)?
        }
    };
    tokio::task::block_in_place(|| d.expect("STARTED"))?;
    Ok(d)
}

/// Waits (bounded) until the election at `path` has `n` participants' nodes.
async fn participants(probe: &Client, path: &str, n: usize) -> Result<(), String> {
    let deadline = now_ns() + 30_000_000_000;
    while probe.list_children(path).await.map(|c| c.len()).unwrap_or(0) != n {
        if now_ns() > deadline {
            return Err(format!("{path}: never {n} participants"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

fn leader_at(line: &str) -> Result<u64, String> {
    line.trim_start_matches("LEADER ").trim().parse().map_err(|_| format!("bad line {line}"))
}

/// Leader failover after a kill: two candidates, each in its own process with a
/// [`FAILOVER_SESSION`] session; the leader's process is killed (SIGKILL), and the handover is
/// the time from the kill to the follower's task starting. A new follower joins before the next
/// kill. Returns the handovers, ns.
pub async fn failover(
    zk: &ZkCluster,
    peer: Peer,
    recipe: Recipe,
    kills: usize,
    path: &str,
) -> Result<Vec<u64>, String> {
    if let Some(why) = recipe.lacking(peer) {
        return Err(format!("{} has no {}: {why}", peer.name(), recipe.scenario()));
    }
    let connect = zk.connect_string();
    let probe = raw_connect(&connect).await?;
    let mut leader = candidate(peer, recipe, &connect, path, 0)?;
    tokio::task::block_in_place(|| leader.expect("LEADER"))?;
    let mut handovers = Vec::with_capacity(kills);
    for k in 0..kills {
        let follower = candidate(peer, recipe, &connect, path, k + 1)?;
        participants(&probe, path, 2).await?;
        let killed = now_ns();
        // SAFETY: kill has no memory preconditions; the pid is our child's, not yet reaped.
        unsafe {
            libc::kill(leader.pid() as libc::pid_t, libc::SIGKILL);
        }
        let mut follower = follower;
        let line = tokio::task::block_in_place(|| follower.expect("LEADER"))?;
        handovers.push(leader_at(&line)?.saturating_sub(killed));
        drop(std::mem::replace(&mut leader, follower));
    }
    leader.say("quit");
    drop(leader);
    Ok(handovers)
}

/// The child side of [`failover`] for zk-recipes: a latch or a selector that never ends its
/// term, in its own process (the drivers' `elect` protocol).
pub async fn elect_child(
    recipe: &str,
    connect: &str,
    path: &str,
    id: &str,
    session_ms: u64,
) -> Result<(), String> {
    let h = ours::connect(connect, Duration::from_millis(session_ms)).await?;
    let e = |e: zk_recipes::Error| e.to_string();
    let announce = || {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "LEADER {}", now_ns());
        let _ = out.flush();
    };
    let (_latch, _selector);
    if recipe == Recipe::Latch.driver_arg(Peer::ZkRecipes) {
        let latch = ours::latch(&h, path, id)?;
        latch.start().map_err(e)?;
        println!("STARTED");
        latch.await_leadership().await.map_err(e)?;
        announce();
        _latch = Some(latch);
    } else {
        let selector = ours::selector(&h, path, id)?;
        selector
            .start(move |ctx| async move {
                announce();
                ctx.stopped().await;
            })
            .map_err(e)?;
        println!("STARTED");
        _selector = Some(selector);
    }
    tokio::task::spawn_blocking(|| {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if line.trim() == "quit" {
                break;
            }
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    Ok(())
}
