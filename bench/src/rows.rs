//! A run's rows from what the peers measured, and what a row says went wrong.

use crate::peers::{self, Peer, Recipe, Target};
use crate::report::Row;
use crate::{stats, Plan};

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The raw `zookeeper-client` create → delete loop against `target`: its p50 cycle (ns) and its
/// row (a write round trip is half a cycle).
pub async fn raw_write(
    scenario: &'static str,
    target: &Target<'_>,
    plan: &Plan,
) -> Result<(u64, Row), String> {
    let mut raw = peers::raw_create_delete(target, plan.secs.min(3.0)).await?;
    let p50 = stats::percentile(&mut raw, 50.0);
    let row = Row {
        p50_us: us(p50) / 2.0,
        p99_us: us(stats::percentile(&mut raw, 99.0)) / 2.0,
        ..Row::new(scenario, Peer::ZkRecipes, 1, 0, 1e9 / p50.max(1) as f64)
    };
    Ok((p50, row))
}

/// A row from a contended run: rate, packets, bytes and CPU per operation, overlaps, and the p50/p99
/// of the latencies `latencies` derives from the (sorted) holds.
pub fn measured(
    scenario: &'static str,
    peer: Peer,
    n: usize,
    repeat: usize,
    mut c: peers::Contended,
    latencies: fn(&[stats::Hold]) -> Vec<u64>,
) -> Row {
    let overlaps = stats::overlaps(&mut c.holds);
    let mut lat = latencies(&c.holds);
    let ops = c.holds.len().max(1) as f64;
    Row {
        p50_us: us(stats::percentile(&mut lat, 50.0)),
        p99_us: us(stats::percentile(&mut lat, 99.0)),
        overlaps,
        cpu_us_per_op: c.cpu_ns as f64 / 1000.0 / ops,
        ..server_row(c.server, ops, Row::new(scenario, peer, n, repeat, c.holds.len() as f64 / c.secs))
    }
}

/// `row` with the servers' work per operation: packets, bytes both ways, CPU.
pub fn server_row(server: peers::ServerWork, ops: f64, row: Row) -> Row {
    Row {
        packets_per_op: server.packets as f64 / ops,
        bytes_in_per_op: server.bytes_in as f64 / ops,
        bytes_out_per_op: server.bytes_out as f64 / ops,
        server_cpu_us_per_op: server.cpu_ns.map_or(f64::NAN, |ns| ns as f64 / 1000.0 / ops),
        ..row
    }
}

/// A row from a run of a recipe other than the mutex, its `overlaps` the violations of the
/// recipe's invariant: acquisitions beyond the leases (semaphore), writes beside another hold
/// (read/write lock), overlapping terms (leader election). Latencies are the leaders' handovers;
/// a semaphore's or a read/write lock's holds overlap by design, so they have none.
pub fn recipe_row(recipe: Recipe, peer: Peer, n: usize, repeat: usize, c: peers::Contended) -> Row {
    let depth = stats::max_depth(&c.holds);
    let violations = match recipe {
        Recipe::Semaphore(leases) => Some(stats::over_depth(&c.holds, leases as usize)),
        Recipe::ReadWrite(_) => Some(stats::writer_conflicts(&c.holds, &c.writes)),
        Recipe::Mutex | Recipe::Latch | Recipe::Selector => None,
    };
    let row = measured(recipe.scenario(), peer, n, repeat, c, stats::handoffs);
    match violations {
        Some(v) => Row { overlaps: v, extra: depth as f64, p50_us: f64::NAN, p99_us: f64::NAN, ..row },
        None => row,
    }
}

/// A row from a run of many locks or per-order locks: cycles per second and the work per cycle.
pub fn cycled(scenario: &'static str, peer: Peer, n: usize, repeat: usize, c: &peers::Cycles) -> Row {
    let ops = c.count.max(1) as f64;
    Row {
        cpu_us_per_op: c.cpu_ns as f64 / 1000.0 / ops,
        ..server_row(c.server, ops, Row::new(scenario, peer, n, repeat, c.count as f64 / c.secs))
    }
}

/// The scenario name of a failover run's rows (handovers after a kill of the leader's process).
pub fn failover_scenario(recipe: Recipe) -> &'static str {
    match recipe {
        Recipe::Latch => "failover-latch",
        _ => "failover-selector",
    }
}

/// What a scenario's `overlaps` violate.
fn invariant(scenario: &str) -> &'static str {
    match scenario {
        "semaphore" => "acquisitions beyond the leases",
        "rwlock-read-heavy" | "rwlock-write-heavy" => "writes held beside another hold",
        "leader-latch" | "leader-selector" => "overlapping leadership terms",
        _ => "overlapping holds",
    }
}

/// What is wrong with a run: its invariant violated, no numbers, or (zk-recipes' per-order locks)
/// nodes left after the container reaper.
pub fn row_problems(r: &Row) -> Vec<String> {
    let mut problems = Vec::new();
    if r.overlaps > 0 {
        problems.push(format!(
            "{} {} N={}: {} {}",
            r.scenario,
            r.peer.name(),
            r.n,
            r.overlaps,
            invariant(r.scenario)
        ));
    }
    if r.rate.is_nan() || r.rate <= 0.0 {
        problems.push(format!("{} {} N={}: no numbers", r.scenario, r.peer.name(), r.n));
    }
    if r.scenario == "per-order"
        && matches!(r.peer, Peer::ZkRecipes | Peer::ZkRecipesDrop)
        && r.left_after_reaper > 0.0
    {
        problems.push(format!(
            "per-order {}: {} nodes left after the container reaper",
            r.peer.name(),
            r.left_after_reaper
        ));
    }
    problems
}
