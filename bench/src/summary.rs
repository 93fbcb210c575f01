//! `summary.md` and the plots, from the grouped runs.
//!
//! Here: the run's context and the summary's order. The cross-peer tables are in `tables`, the
//! semaphore, read/write lock, leader election and failover sections in `recipes`, the issues'
//! targets in `targets`, the plots in `plots`, the date and the machine in `environment`.

use std::fmt::Write as _;

use crate::peers::Peer;
use crate::plan::WARM_UP_SECS;
use crate::report::{cell, headline_cell, mark, Groups, Row, UNSTEADY_LEGEND};
use crate::Plan;

mod environment;
pub mod fleet;
mod plots;
mod recipes;
mod scale;
mod tables;
mod targets;
mod targets50;

use environment::{machine, today};
pub use plots::plots;
use recipes::{failovers, recipes};
use tables::{columns, lines, table, unsteady};
use targets::{network_targets, recipe_targets, targets, verdict};
use targets50::targets50;

pub struct Context<'a> {
    pub plan: &'a Plan,
    pub raw_p50_ns: u64,
    /// The raw create → delete cycle through the network scenarios' proxy (0 when not run).
    pub network_raw_p50_ns: u64,
    /// The raw create → delete cycle through the ensemble's follower (0 when not run).
    pub ensemble_raw_p50_ns: u64,
    /// The ensemble server every ensemble client connects to (a follower).
    pub ensemble_follower: Option<usize>,
    pub zk_version: String,
    pub reaper_ms: u64,
    /// How each cluster's JIT compilers settled after its warm-ups (see `jit.rs`).
    pub settled: &'a [(crate::plan::Cluster, crate::jit::Settled)],
}

/// zk-recipes' median rate ÷ `peer`'s, marked "†" when either did not repeat.
fn ratio_cell(groups: &Groups, scenario: &str, n: usize, peer: Peer) -> String {
    let rate = |p| groups.spread(scenario, n, p, |r| r.rate);
    match (rate(Peer::ZkRecipes), rate(peer)) {
        (Some(a), Some(b)) if b.median > 0.0 => {
            format!("{:.2}×{}", a.median / b.median, mark(a.unsteady() || b.unsteady()))
        }
        _ => "–".into(),
    }
}

/// The lines on how the figures were made to repeat: pinning, warm-up, spread.
fn repeatability(s: &mut String, cx: &Context) {
    let plan = cx.plan;
    let _ = writeln!(s, "- {}", plan.pinning.describe(plan.runs("network"), plan.runs("fencing")));
    if plan.warms_up() {
        let _ = writeln!(
            s,
            "- warm-up: before its counted repeats, every scenario ran once per peer (and per N) for {} s, \
             not counted (failover: one kill; scale: one queue); the raw write loops ran after it",
            plan.secs.min(WARM_UP_SECS)
        );
        for (cluster, how) in cx.settled {
            let which = match cluster {
                crate::plan::Cluster::Standalone => "the standalone server",
                crate::plan::Cluster::Ensemble => "the ensemble",
            };
            let _ = writeln!(
                s,
                "- JIT: then {which} was loaded (a contended mutex, N = 8, zk-recipes and LockClient in \
                 turn, not counted) until its JIT compiler threads used at most {} ms of CPU per second \
                 in {} one-second slices in a row: {}",
                crate::jit::QUIET_PER_SEC.as_millis(),
                crate::jit::QUIET_SLICES,
                how.describe()
            );
        }
        let _ = writeln!(
            s,
            "- peers in turn: each repeat starts its scenarios' peers one further along (repeat 1 with \
             the first, repeat 2 with the second, ...)"
        );
    } else {
        let _ = writeln!(s, "- warm-up: none (--quick, a smoke test)");
    }
    let _ = writeln!(
        s,
        "- every cell: the median over the repeats, and (min–max) when there was more than one; the \
         headline figures (operations per second, failover handovers) also show the spread, \
         (max − min) ÷ median, and † marks one above 10 %"
    );
}

/// `text` with every heading (`## `, `### `) naming the server its figures came from.
pub fn on_server(text: &str, server: zk_testcluster::ZkVersion) -> String {
    let mut out = String::with_capacity(text.len() + 256);
    for line in text.lines() {
        out.push_str(line);
        if line.starts_with("## ") || line.starts_with("### ") {
            let _ = write!(out, " · ZooKeeper {server}");
        }
        out.push('\n');
    }
    out
}

pub fn summarize(groups: &Groups, cx: &Context) -> String {
    let plan = cx.plan;
    let mut s = String::new();
    let raw_rt_us = cx.raw_p50_ns as f64 / 2000.0;
    let _ = writeln!(
        s,
        "## Benchmark ({} s per run, {} repeat{}, peers interleaved)\n",
        plan.secs,
        plan.repeats,
        if plan.repeats == 1 { "" } else { "s" }
    );
    let _ = writeln!(s, "- date: {}; machine: {}", today(), machine(plan.pinning.available.len()));
    if let Some(fraction) = plan.beat_period.filter(|_| plan.runs("failover")) {
        let _ = writeln!(
            s,
            "- beat period (--beat-period): the failover scenario's zk-recipes candidates beat {fraction} of \
             the negotiated session timeout after each answer (the library's default: 0.05)"
        );
    }
    let _ = writeln!(
        s,
        "- servers: ZooKeeper {} (`--server`; it reports {}) on loopback, a standalone server, then a \
         3-node ensemble; forceSync=no; container reaper every {} ms",
        plan.server,
        if cx.zk_version.is_empty() {
            "nothing"
        } else {
            cx.zk_version.split([',', '-']).next().unwrap_or("")
        },
        cx.reaper_ms
    );
    let _ = writeln!(
        s,
        "- raw `zookeeper-client` create → delete on one node: {raw_rt_us:.0} µs per write round trip (p50)"
    );
    if cx.network_raw_p50_ns > 0 {
        let _ = writeln!(
            s,
            "- \"1 ms network\" rows: every client reaches the standalone server through a proxy that \
             delays each byte {} µs each way; raw write round trip through it: {:.0} µs (p50)",
            crate::NETWORK_ONE_WAY.as_micros(),
            cx.network_raw_p50_ns as f64 / 2000.0
        );
    }
    if let Some(i) = cx.ensemble_follower {
        let _ = writeln!(
            s,
            "- \"3-node ensemble\" rows: every client connects to the same follower (server {i}), so each \
             write is forwarded to the leader; raw write round trip there: {:.0} µs (p50)",
            cx.ensemble_raw_p50_ns as f64 / 2000.0
        );
    }
    repeatability(&mut s, cx);
    for (p, why) in &plan.skipped {
        let _ = writeln!(s, "- **skipped: {}** ({why})", p.name());
    }

    table(
        &mut s,
        groups,
        plan,
        "Operations per second (cycles; handoffs when contended; releases, operations or leadership \
         handovers for the other recipes)",
        |r| r.rate,
        0,
        headline_cell,
    );
    if plan.repeats > 1 {
        let swung = unsteady(groups, plan);
        let which = if swung.is_empty() { "none".to_string() } else { swung.join("; ") };
        let _ = writeln!(s, "\n{UNSTEADY_LEGEND} Here: {which}.");
    }
    table(
        &mut s,
        groups,
        plan,
        "Latency p50, µs (a full cycle uncontended, a handoff contended, a leadership handover)",
        |r| r.p50_us,
        0,
        cell,
    );
    table(
        &mut s,
        groups,
        plan,
        "Server packets per operation (`mntr`, both directions, every node)",
        |r| r.packets_per_op,
        1,
        cell,
    );
    table(
        &mut s,
        groups,
        plan,
        "Server bytes per operation (`mntr`, every node: the requests' bytes, `zk_bytes_received_count`, \
         and the replies', `zk_response_bytes`, which leaves out watch events)",
        Row::bytes_per_op,
        0,
        cell,
    );
    table(
        &mut s,
        groups,
        plan,
        "Client CPU per operation, µs (user + system, the client's whole process)",
        |r| r.cpu_us_per_op,
        1,
        cell,
    );
    table(
        &mut s,
        groups,
        plan,
        "Server CPU per operation, µs (user + system of every node's JVM)",
        |r| r.server_cpu_us_per_op,
        1,
        cell,
    );
    let _ = writeln!(
        s,
        "\nCPU: `getrusage(RUSAGE_SELF)` of the bench process for the peers that run in it (zk-recipes, \
         LockClient, naive); `utime + stime` from `/proc/<pid>/stat` of the driver process for Curator \
         (a JVM) and kazoo (CPython), over the same measured window. Each includes its runtime (JIT, GC, \
         interpreter) and the peer's own bookkeeping of holds. The client's CPU is not shown for the \
         1 ms network rows: the proxy's threads run in the bench process. Server CPU: `utime + stime` \
         of every ZooKeeper process from `/proc/<pid>/stat` (10 ms ticks) over the same window."
    );

    let _ = writeln!(
        s,
        "\n### Ratios: zk-recipes ÷ each peer (operations per second, medians)\n\n\
         † where either side's operations per second spread more than 10 % over the repeats.\n"
    );
    let others: Vec<Peer> = columns(groups)
        .into_iter()
        .filter(|p| !matches!(p, Peer::ZkRecipes | Peer::ZkRecipesDrop | Peer::Naive))
        .collect();
    let _ = write!(s, "| scenario |");
    for p in &others {
        let _ = write!(s, " ÷ {} |", p.name());
    }
    let _ = write!(s, "\n|---|");
    for _ in &others {
        let _ = write!(s, "---|");
    }
    let _ = writeln!(s);
    for l in lines(plan) {
        let cells: Vec<String> = others
            .iter()
            .map(|p| if l.lacks(*p) { "n/a".into() } else { ratio_cell(groups, l.scenario, l.n, *p) })
            .collect();
        if cells.iter().all(|c| c == "–" || c == "n/a") {
            continue;
        }
        let _ = writeln!(s, "| {} | {} |", l.label, cells.join(" | "));
    }

    let _ = writeln!(
        s,
        "\n### Per-order locks: nodes left behind\n\nA fresh lock path `…/l<i>` per cycle under a \
         parent that does not exist before the run. \"At end\": nodes under the parent (itself \
         included) when the run stops; \"after the reaper\": once the count reaches 0 or stops \
         changing for 3 s (the servers' container reaper runs every {} ms, so that is six passes).\n",
        cx.reaper_ms
    );
    let _ = writeln!(
        s,
        "| peer | cycles/s | parents created as | at end | after the reaper | count last changed after s |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for p in groups.peers_of("per-order") {
        let n = plan.order_tasks;
        let parents = if p == Peer::Kazoo { "persistent parents" } else { "container parents" };
        let _ = writeln!(
            s,
            "| {} | {} | {parents} | {} | {} | {} |",
            p.name(),
            headline_cell(groups.spread("per-order", n, p, |r| r.rate), 0),
            cell(groups.spread("per-order", n, p, |r| r.left_at_end), 0),
            cell(groups.spread("per-order", n, p, |r| r.left_after_reaper), 0),
            cell(groups.spread("per-order", n, p, |r| r.reaper_secs), 1),
        );
    }

    recipes(&mut s, groups, plan);
    failovers(&mut s, groups, plan);

    scale::scale(&mut s, groups, plan);
    scale::spread(&mut s, groups, plan);

    targets(&mut s, groups, plan, raw_rt_us);
    network_targets(&mut s, groups, cx.network_raw_p50_ns as f64 / 2000.0);
    recipe_targets(&mut s, groups, plan, raw_rt_us);
    targets50(&mut s, groups, plan);
    s
}
