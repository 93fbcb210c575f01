//! The mutex scenarios: uncontended, contended, many locks and per-order locks on the standalone
//! server, and the uncontended and contended runs on the 1 ms network and on the ensemble.

use super::{Bench, Measure};
use crate::clock;
use crate::peers::{self, Peer, Target, FRESH};
use crate::report::Row;
use crate::rows::{cycled, measured};
use crate::stats;

pub async fn uncontended(b: &mut Bench, peer: Peer, m: Measure) -> Result<(), String> {
    let path = b.path("uncontended");
    let c = peers::contend(&Target::direct(b.zk()?), peer, 1, m.secs, &path, &b.scratch).await?;
    b.results.rows.push(measured("uncontended", peer, 1, m.repeat, c, stats::cycles));
    Ok(())
}

pub async fn contended(b: &mut Bench, n: usize, peer: Peer, m: Measure) -> Result<(), String> {
    let path = b.path("contended");
    let c = peers::contend(&Target::direct(b.zk()?), peer, n, m.secs, &path, &b.scratch).await?;
    b.results.rows.push(measured("contended", peer, n, m.repeat, c, stats::handoffs));
    Ok(())
}

pub async fn many_locks(b: &mut Bench, peer: Peer, m: Measure) -> Result<(), String> {
    let (locks, tasks) = (b.plan.many_locks, b.plan.many_tasks);
    let prefix = b.path("many");
    let c = peers::cycle_locks(b.zk()?, peer, locks, tasks, m.secs, &prefix).await?;
    b.results.rows.push(Row { extra: locks as f64, ..cycled("many-locks", peer, tasks, m.repeat, &c) });
    Ok(())
}

pub async fn per_order(b: &mut Bench, peer: Peer, m: Measure) -> Result<(), String> {
    let root = b.path(&format!("orders-{}", peer.short()));
    let tasks = b.plan.order_tasks;
    let c = peers::cycle_locks(b.zk()?, peer, FRESH, tasks, m.secs, &root).await?;
    let probe = peers::raw_connect(&b.zk()?.connect_string()).await?;
    let at_end = peers::subtree_size(&probe, &root).await?;
    let (left, secs) = after_reaper(&probe, &root).await?;
    b.results.rows.push(Row {
        left_at_end: at_end as f64,
        left_after_reaper: left as f64,
        reaper_secs: secs,
        ..cycled("per-order", peer, tasks, m.repeat, &c)
    });
    Ok(())
}

pub async fn network_uncontended(b: &mut Bench, peer: Peer, m: Measure) -> Result<(), String> {
    let path = b.path("uncontended");
    let c = peers::contend(&b.through_proxy()?, peer, 1, m.secs, &path, &b.scratch).await?;
    // The proxy's threads run in this process: its CPU is not the peers'.
    let row = measured("network-uncontended", peer, 1, m.repeat, c, stats::cycles);
    b.results.rows.push(Row { cpu_us_per_op: f64::NAN, ..row });
    Ok(())
}

pub async fn network_contended(b: &mut Bench, n: usize, peer: Peer, m: Measure) -> Result<(), String> {
    let path = b.path("contended");
    let c = peers::contend(&b.through_proxy()?, peer, n, m.secs, &path, &b.scratch).await?;
    let row = measured("network-contended", peer, n, m.repeat, c, stats::handoffs);
    b.results.rows.push(Row { cpu_us_per_op: f64::NAN, ..row });
    Ok(())
}

pub async fn ensemble_uncontended(b: &mut Bench, peer: Peer, m: Measure) -> Result<(), String> {
    let path = b.path("uncontended");
    let c = peers::contend(&b.on_follower()?, peer, 1, m.secs, &path, &b.scratch).await?;
    b.results.rows.push(measured("ensemble-uncontended", peer, 1, m.repeat, c, stats::cycles));
    Ok(())
}

pub async fn ensemble_contended(b: &mut Bench, peer: Peer, m: Measure) -> Result<(), String> {
    let (path, n) = (b.path("contended"), b.plan.ensemble_n);
    let c = peers::contend(&b.on_follower()?, peer, n, m.secs, &path, &b.scratch).await?;
    b.results.rows.push(measured("ensemble-contended", peer, n, m.repeat, c, stats::handoffs));
    Ok(())
}

/// Waits for the container reaper to finish with the subtree at `root`: until it is gone, or
/// its size has not changed for 3 s (six reaper passes), at most 60 s. Returns the nodes left
/// and the seconds until the last change.
async fn after_reaper(
    probe: &zk_recipes::zookeeper_client::Client,
    root: &str,
) -> Result<(u64, f64), String> {
    let start = clock::now_ns();
    let secs = |t: u64| (t - start) as f64 / 1e9;
    let mut last = peers::subtree_size(probe, root).await?;
    let mut changed = start;
    loop {
        if last == 0 {
            return Ok((0, secs(changed)));
        }
        let now = clock::now_ns();
        if secs(now) - secs(changed) >= 3.0 || secs(now) >= 60.0 {
            return Ok((last, secs(changed)));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let size = peers::subtree_size(probe, root).await?;
        if size != last {
            last = size;
            changed = clock::now_ns();
        }
    }
}
