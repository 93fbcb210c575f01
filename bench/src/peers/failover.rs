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

/// A delay uniform in [0, [`FAILOVER_SESSION`]) before a kill (splitmix64 over `state`).
///
/// Without it the kill fell at the same phase of the server's expiry grid every time: the server
/// expires sessions only at multiples of its tick (200 ms), our session's beat and the client
/// crate's idle ping both repeat every fifth of the timeout (one tick at 1 s), and each follower
/// starts a fixed few ms after the previous expiry, so the killed leader had always just been
/// heard and its expiry was rounded up by almost a whole tick. A kill at a random moment, as a
/// crash comes, measures every peer at every phase.
fn kill_phase(state: &mut u64) -> Duration {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    FAILOVER_SESSION.mul_f64((z >> 11) as f64 / (1u64 << 53) as f64)
}

fn leader_at(line: &str) -> Result<u64, String> {
    line.trim_start_matches("LEADER ").trim().parse().map_err(|_| format!("bad line {line}"))
}

/// Leader failover after a kill: two candidates, each in its own process with a
/// [`FAILOVER_SESSION`] session; once both are in, after a random delay ([`kill_phase`]), the
/// leader's process is killed (SIGKILL), and the handover is the time from the kill to the
/// follower's task starting. A new follower joins before the next kill. Returns the handovers,
/// ns.
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
    let mut phase = now_ns() | 1;
    for k in 0..kills {
        let follower = candidate(peer, recipe, &connect, path, k + 1)?;
        participants(&probe, path, 2).await?;
        tokio::time::sleep(kill_phase(&mut phase)).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_phases_cover_the_session_timeout_and_stay_below_it() {
        let mut state = 12_345;
        let draws: Vec<Duration> = (0..1_000).map(|_| kill_phase(&mut state)).collect();
        assert!(draws.iter().all(|d| *d < FAILOVER_SESSION));
        let tenth = FAILOVER_SESSION / 10;
        assert!(draws.iter().any(|d| *d < tenth), "no draw in the first tenth");
        assert!(draws.iter().any(|d| *d > FAILOVER_SESSION - tenth), "no draw in the last tenth");
        let fifths = (0..5)
            .map(|k| draws.iter().filter(|d| d.as_nanos() * 5 / FAILOVER_SESSION.as_nanos() == k).count());
        assert!(fifths.into_iter().all(|c| (150..=250).contains(&c)), "not uniform over the timeout");
    }
}
