//! `summary.md` and the plots, from the grouped runs.

use std::fmt::Write as _;
use std::path::Path;

use crate::peers::{Peer, Recipe};
use crate::report::{self, cell, num, Groups, Row};
use crate::Plan;

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
}

/// A line of the cross-peer tables: a label, a short label for plots, (scenario, n), and the
/// recipe when it is not the mutex (a peer without it shows "n/a").
struct Line {
    label: String,
    short: String,
    scenario: &'static str,
    n: usize,
    recipe: Option<Recipe>,
}

impl Line {
    /// Whether `peer` has no such recipe (its cells read "n/a").
    fn lacks(&self, peer: Peer) -> bool {
        self.recipe.is_some_and(|r| r.lacking(peer).is_some())
    }
}

/// A recipe's label and short label in the cross-peer tables.
fn recipe_labels(plan: &Plan, recipe: Recipe) -> (String, String) {
    let n = plan.contenders(recipe);
    match recipe {
        Recipe::Semaphore(leases) => (
            format!(
                "semaphore: releases ({leases} leases, {n} contenders, {} ms holds)",
                recipe.hold().as_millis()
            ),
            "semaphore".into(),
        ),
        Recipe::ReadWrite(p) => {
            (format!("read/write lock, {p} % reads: operations ({n} contenders)"), format!("rw {p}% reads"))
        }
        Recipe::Latch => {
            (format!("leader latch: handovers after a clean close ({n} candidates)"), "latch".into())
        }
        Recipe::Selector => {
            (format!("leader selector: handovers after the task returns ({n} candidates)"), "selector".into())
        }
        Recipe::Mutex => ("mutex".into(), "mutex".into()),
    }
}

fn lines(plan: &Plan) -> Vec<Line> {
    let line = |label: String, short: &str, scenario, n| Line {
        label,
        short: short.into(),
        scenario,
        n,
        recipe: None,
    };
    let mut v = vec![line("uncontended cycle".into(), "uncontended", "uncontended", 1)];
    for &n in &plan.ns {
        v.push(line(format!("contended handoff, N = {n}"), &format!("N={n}"), "contended", n));
    }
    v.push(line(
        format!("many locks ({} paths, {} tasks, one session)", plan.many_locks, plan.many_tasks),
        "many locks",
        "many-locks",
        plan.many_tasks,
    ));
    v.push(line(
        format!("per-order locks (fresh path per cycle, {} tasks, one session)", plan.order_tasks),
        "per-order",
        "per-order",
        plan.order_tasks,
    ));
    for recipe in plan.all_recipes() {
        let (label, short) = recipe_labels(plan, recipe);
        v.push(Line {
            recipe: Some(recipe),
            ..line(label, &short, recipe.scenario(), plan.contenders(recipe))
        });
    }
    v.push(line("1 ms network: uncontended cycle".into(), "net uncont.", "network-uncontended", 1));
    for n in crate::NETWORK_NS {
        v.push(line(
            format!("1 ms network: contended handoff, N = {n}"),
            &format!("net N={n}"),
            "network-contended",
            n,
        ));
    }
    v.push(line("3-node ensemble: uncontended cycle".into(), "ens. uncont.", "ensemble-uncontended", 1));
    v.push(line(
        format!("3-node ensemble: contended handoff, N = {}", plan.ensemble_n),
        &format!("ens. N={}", plan.ensemble_n),
        "ensemble-contended",
        plan.ensemble_n,
    ));
    v
}

/// The peer columns of the cross-peer tables: the lock peers that ran, then the naive recipe.
fn columns(groups: &Groups) -> Vec<Peer> {
    let mut peers: Vec<Peer> = groups.0.keys().filter(|k| k.0 != "raw-write").map(|k| k.2).collect();
    peers.sort();
    peers.dedup();
    peers
}

fn table(
    s: &mut String,
    groups: &Groups,
    plan: &Plan,
    title: &str,
    metric: fn(&Row) -> f64,
    decimals: usize,
) {
    let peers = columns(groups);
    let _ = writeln!(s, "\n### {title}\n");
    let _ = write!(s, "| scenario |");
    for p in &peers {
        let _ = write!(s, " {} |", p.name());
    }
    let _ = write!(s, "\n|---|");
    for _ in &peers {
        let _ = write!(s, "---|");
    }
    let _ = writeln!(s);
    for l in lines(plan) {
        let cells: Vec<String> = peers
            .iter()
            .map(|p| match groups.spread(l.scenario, l.n, *p, metric) {
                None if l.lacks(*p) => "n/a".into(),
                spread => cell(spread, decimals),
            })
            .collect();
        if cells.iter().all(|c| c == "–" || c == "n/a") {
            continue;
        }
        let _ = writeln!(s, "| {} | {} |", l.label, cells.join(" | "));
    }
}

/// Today's date (UTC), from the system clock.
fn today() -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// "model name × cores, Linux release".
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpu}, {cores} cores, Linux {}", kernel.trim())
}

fn ratio_cell(groups: &Groups, scenario: &str, n: usize, peer: Peer) -> String {
    match (
        groups.median(scenario, n, Peer::ZkRecipes, |r| r.rate),
        groups.median(scenario, n, peer, |r| r.rate),
    ) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
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
    let _ = writeln!(s, "- date: {}; machine: {}", today(), machine());
    let _ = writeln!(
        s,
        "- servers: ZooKeeper {} on loopback, a standalone server, then a 3-node ensemble; forceSync=no; \
         container reaper every {} ms",
        if cx.zk_version.is_empty() { "3.8" } else { cx.zk_version.split([',', '-']).next().unwrap_or("") },
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
    let _ =
        writeln!(s, "- every cell: the median over the repeats, and (min–max) when there was more than one");
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
    );
    table(
        &mut s,
        groups,
        plan,
        "Latency p50, µs (a full cycle uncontended, a handoff contended, a leadership handover)",
        |r| r.p50_us,
        0,
    );
    table(
        &mut s,
        groups,
        plan,
        "Server packets per operation (`mntr`, both directions, every node)",
        |r| r.packets_per_op,
        1,
    );
    table(
        &mut s,
        groups,
        plan,
        "Client CPU per operation, µs (user + system, the client's whole process)",
        |r| r.cpu_us_per_op,
        1,
    );
    table(
        &mut s,
        groups,
        plan,
        "Server CPU per operation, µs (user + system of every node's JVM)",
        |r| r.server_cpu_us_per_op,
        1,
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

    let _ = writeln!(s, "\n### Ratios: zk-recipes ÷ each peer (operations per second, medians)\n");
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
            cell(groups.spread("per-order", n, p, |r| r.rate), 0),
            cell(groups.spread("per-order", n, p, |r| r.left_at_end), 0),
            cell(groups.spread("per-order", n, p, |r| r.left_after_reaper), 0),
            cell(groups.spread("per-order", n, p, |r| r.reaper_secs), 1),
        );
    }

    recipes(&mut s, groups, plan);
    failovers(&mut s, groups, plan);

    let _ = writeln!(s, "\n### Scale: {} waiters on one lock, one process (one run)\n", plan.scale_waiters);
    let _ = writeln!(s, "| peer | resident bytes per waiter | drain time s |");
    let _ = writeln!(s, "|---|---|---|");
    for p in groups.peers_of("scale") {
        let n = plan.scale_waiters;
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} |",
            p.name(),
            cell(groups.spread("scale", n, p, |r| r.extra), 0),
            groups.median("scale", n, p, |r| r.p50_us).unwrap_or(f64::NAN) / 1e6
        );
    }

    targets(&mut s, groups, plan, raw_rt_us);
    network_targets(&mut s, groups, cx.network_raw_p50_ns as f64 / 2000.0);
    recipe_targets(&mut s, groups, plan, raw_rt_us);
    s
}

/// The violations of a run's invariant, summed over its repeats.
fn violations(groups: &Groups, scenario: &str, n: usize, peer: Peer) -> String {
    let rows = groups.0.iter().find(|((s, k, p), _)| *s == scenario && *k == n && *p == peer);
    rows.map_or("–".into(), |(_, rows)| rows.iter().map(|r| r.overlaps).sum::<usize>().to_string())
}

/// The peers of the other recipes' tables: those that ran one, or lack one.
fn recipe_peers(groups: &Groups, plan: &Plan) -> Vec<Peer> {
    let mut peers: Vec<Peer> = plan
        .all_recipes()
        .iter()
        .flat_map(|r| groups.peers_of(r.scenario()))
        .chain(plan.peers.iter().copied().filter(|p| matches!(p, Peer::Curator | Peer::Kazoo)))
        .collect();
    peers.sort();
    peers.dedup();
    peers
}

/// The semaphore, read/write lock and leader election sections: each peer that has the recipe,
/// with its invariant's violations; "n/a" and why for a peer that lacks it.
fn recipes(s: &mut String, groups: &Groups, plan: &Plan) {
    let ran = |r: &Recipe| plan.all_recipes().contains(r) && !groups.peers_of(r.scenario()).is_empty();
    let peers = recipe_peers(groups, plan);
    let na = |s: &mut String, recipe: Recipe, label: &str, columns: usize| {
        for p in &peers {
            if let Some(why) = recipe.lacking(*p) {
                let _ = writeln!(s, "| {} | {label}n/a: {why} |{}", p.name(), " |".repeat(columns - 1));
            }
        }
    };
    let sem = Recipe::Semaphore(plan.sem_leases);
    if ran(&sem) {
        let n = plan.contenders(sem);
        let _ = writeln!(
            s,
            "\n### Semaphore: {} leases, {n} contenders (a session each), each keeping its lease {} ms\n\n\
             zk-recipes' `InterProcessSemaphore`, Curator's `InterProcessSemaphoreV2`, kazoo's `Semaphore`. \
             Violations: acquisitions while {} others held a lease, from the holds' timestamps (must be 0).\n",
            plan.sem_leases,
            sem.hold().as_millis(),
            plan.sem_leases
        );
        let _ = writeln!(
            s,
            "| peer | releases/s | packets per release | client CPU µs per release | most holders at once | violations |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for p in groups.peers_of(sem.scenario()) {
            let m = |f: fn(&Row) -> f64| groups.spread(sem.scenario(), n, p, f);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                p.name(),
                cell(m(|r| r.rate), 0),
                cell(m(|r| r.packets_per_op), 1),
                cell(m(|r| r.cpu_us_per_op), 0),
                cell(m(|r| r.extra), 0),
                violations(groups, sem.scenario(), n, p)
            );
        }
        na(s, sem, "", 5);
    }
    let mixes: Vec<Recipe> = plan.recipes("rwlock").into_iter().filter(|r| ran(r)).collect();
    if let Some(&first) = mixes.first() {
        let n = plan.contenders(first);
        let _ = writeln!(
            s,
            "\n### Read/write lock: {n} contenders (a session each), no critical section\n\n\
             zk-recipes' `InterProcessReadWriteLock`, Curator's `InterProcessReadWriteLock`. Contender `i`'s \
             `k`-th operation reads when `(k + i) % 10 < reads / 10`. Violations: writes held beside any \
             other hold, reader or writer (must be 0).\n"
        );
        let _ = writeln!(
            s,
            "| peer | reads | operations/s | packets per operation | client CPU µs per operation | most holders at once | violations |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for &mix in &mixes {
            let Recipe::ReadWrite(pct) = mix else { continue };
            for p in groups.peers_of(mix.scenario()) {
                let m = |f: fn(&Row) -> f64| groups.spread(mix.scenario(), n, p, f);
                let _ = writeln!(
                    s,
                    "| {} | {pct} % | {} | {} | {} | {} | {} |",
                    p.name(),
                    cell(m(|r| r.rate), 0),
                    cell(m(|r| r.packets_per_op), 1),
                    cell(m(|r| r.cpu_us_per_op), 0),
                    cell(m(|r| r.extra), 0),
                    violations(groups, mix.scenario(), n, p)
                );
            }
        }
        na(s, first, "", 6);
    }
    let elections: Vec<Recipe> = plan.recipes("leader").into_iter().filter(|r| ran(r)).collect();
    if let Some(&first) = elections.first() {
        let n = plan.contenders(first);
        let _ = writeln!(
            s,
            "\n### Leader election: {n} candidates (a session each), every term ended at once\n\n\
             Handover: from the leader ending its term cleanly (a latch's `close()`, a selector's task \
             returning, kazoo's `Election.run` function returning) to the next leader's task starting. \
             zk-recipes' and Curator's `LeaderLatch` (a new latch per term: a closed latch can't start \
             again) and `LeaderSelector` (auto-requeue), kazoo's `Election`. Violations: terms that \
             overlap (must be 0). After a kill of the leader's process: see the failover section.\n"
        );
        let _ = writeln!(
            s,
            "| peer | recipe | handovers/s | handover p50 µs | handover p99 µs | packets per handover | client CPU µs per handover | violations |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for &e in &elections {
            let what = if e == Recipe::Latch { "latch" } else { "selector (kazoo: Election)" };
            for p in groups.peers_of(e.scenario()) {
                let m = |f: fn(&Row) -> f64| groups.spread(e.scenario(), n, p, f);
                let _ = writeln!(
                    s,
                    "| {} | {what} | {} | {} | {} | {} | {} | {} |",
                    p.name(),
                    cell(m(|r| r.rate), 0),
                    cell(m(|r| r.p50_us), 0),
                    cell(m(|r| r.p99_us), 0),
                    cell(m(|r| r.packets_per_op), 1),
                    cell(m(|r| r.cpu_us_per_op), 0),
                    violations(groups, e.scenario(), n, p)
                );
            }
            if e == Recipe::Latch {
                na(s, e, "latch | ", 6);
            }
        }
    }
}

/// The failover section: handovers after a kill of the leader's process, beside the session
/// timeout that dominates them.
fn failovers(s: &mut String, groups: &Groups, plan: &Plan) {
    let recipes: Vec<Recipe> = plan
        .recipes("leader")
        .into_iter()
        .filter(|r| !groups.peers_of(crate::failover_scenario(*r)).is_empty())
        .collect();
    if recipes.is_empty() {
        return;
    }
    let timeout_ms = crate::peers::FAILOVER_SESSION.as_millis();
    let _ = writeln!(
        s,
        "\n### Leader failover after a kill: 2 candidates, each in its own process, {timeout_ms} ms sessions\n\n\
         The leader's process is killed (SIGKILL) {} times per run, a new follower joining before each \
         kill; handover: from the kill to the follower's task starting (`LEADER` printed by the candidate, \
         CLOCK_MONOTONIC). The killed leader's node goes when its session expires, so the session timeout \
         ({timeout_ms} ms, the servers' tick 200 ms) is most of it. The server counts the timeout from the \
         last packet it had from the session (a client pings when idle for a fraction of the timeout), \
         not from the kill, so a handover can be shorter than the timeout: how much shorter depends on \
         each client's ping schedule, not on its recipe.\n",
        plan.failover_kills
    );
    let _ = writeln!(s, "| peer | recipe | handover p50 ms | handover p99 ms | p50 − session timeout, ms |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    for r in recipes {
        let sc = crate::failover_scenario(r);
        let what = if r == Recipe::Latch { "latch" } else { "selector (kazoo: Election)" };
        for p in groups.peers_of(sc) {
            let ms = |f: fn(&Row) -> f64| groups.spread(sc, 2, p, f).map(|x| x.scaled(1e-3));
            let beyond = groups.spread(sc, 2, p, |r| r.p50_us / 1000.0 - r.extra);
            let _ = writeln!(
                s,
                "| {} | {what} | {} | {} | {} |",
                p.name(),
                cell(ms(|r| r.p50_us), 0),
                cell(ms(|r| r.p99_us), 0),
                cell(beyond, 0)
            );
        }
        if r == Recipe::Latch {
            let peers = recipe_peers(groups, plan);
            for p in peers.iter().filter(|p| r.lacking(**p).is_some()) {
                let why = r.lacking(*p).unwrap_or_default();
                let _ = writeln!(s, "| {} | latch | n/a: {why} | | |", p.name());
            }
        }
    }
}

/// Issue 28's targets for the other recipes against this run's medians.
fn recipe_targets(s: &mut String, groups: &Groups, plan: &Plan, raw_rt_us: f64) {
    let recipes: Vec<Recipe> =
        plan.all_recipes().into_iter().filter(|r| !groups.peers_of(r.scenario()).is_empty()).collect();
    if recipes.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n### Issue 28 targets (medians of this run)\n");
    for recipe in &recipes {
        let (sc, n) = (recipe.scenario(), plan.contenders(*recipe));
        let Some(ours) = groups.median(sc, n, Peer::ZkRecipes, |r| r.rate) else { continue };
        let mut parts = Vec::new();
        let mut all_met = true;
        for peer in [Peer::Curator, Peer::Kazoo] {
            match groups.median(sc, n, peer, |r| r.rate) {
                Some(theirs) if theirs > 0.0 => {
                    all_met &= ours / theirs >= 1.5;
                    parts.push(format!("{:.2}× {}", ours / theirs, peer.name()));
                }
                _ => {
                    if let Some(why) = recipe.lacking(peer) {
                        parts.push(format!("{}: n/a ({why})", peer.name()));
                    }
                }
            }
        }
        let _ = writeln!(s, "- {sc} ≥ 1.5× Curator and kazoo: {} — {}", parts.join(", "), verdict(all_met));
    }
    let sem = Recipe::Semaphore(plan.sem_leases);
    let (sc, n) = (sem.scenario(), plan.contenders(sem));
    if let (Some(a), Some(b)) = (
        groups.median(sc, n, Peer::ZkRecipes, |r| r.packets_per_op),
        groups.median(sc, n, Peer::Curator, |r| r.packets_per_op),
    ) {
        let _ = writeln!(
            s,
            "- semaphore packets per release ≤ Curator's: {a:.1} against {b:.1} — {}",
            verdict(a <= b)
        );
    }
    for e in [Recipe::Latch, Recipe::Selector] {
        if let Some(p50) = groups.median(e.scenario(), plan.contenders(e), Peer::ZkRecipes, |r| r.p50_us) {
            if raw_rt_us > 0.0 {
                let _ = writeln!(
                    s,
                    "- {} handover p50 after a clean close ≤ 2 raw write round trips: {:.0} µs = {:.2} round \
                     trips — {}",
                    e.scenario(),
                    p50,
                    p50 / raw_rt_us,
                    verdict(p50 <= 2.0 * raw_rt_us)
                );
            }
        }
    }
}

/// Issue 18's targets against this run's medians.
fn targets(s: &mut String, groups: &Groups, plan: &Plan, raw_rt_us: f64) {
    let _ = writeln!(s, "\n### Issue 18 targets (medians of this run)\n");
    let ours = |sc: &str, n: usize, m: fn(&Row) -> f64| groups.median(sc, n, Peer::ZkRecipes, m);
    let lc = |sc: &str, n: usize| groups.median(sc, n, Peer::LockClient, |r| r.rate);
    if let (Some(a), Some(b)) = (ours("uncontended", 1, |r| r.rate), lc("uncontended", 1)) {
        let _ = writeln!(
            s,
            "- uncontended cycles/s ≥ 1.2× LockClient: {:.2}× — {}",
            a / b,
            verdict(a / b >= 1.2)
        );
    }
    let dropped = |sc: &str, n: usize| groups.median(sc, n, Peer::ZkRecipesDrop, |r| r.rate);
    if let (Some(a), Some(b)) = (dropped("uncontended", 1), lc("uncontended", 1)) {
        let _ = writeln!(
            s,
            "- the same, guard dropped (a background delete, as LockClient's release): {:.2}× — {}",
            a / b,
            verdict(a / b >= 1.2)
        );
    }
    if let Some(p) = ours("uncontended", 1, |r| r.packets_per_op) {
        // 6 for the create, the listing and the delete, and 3 for the watch on our own node that
        // tells a holder its node was deleted (on by default since issue 24: a promise, kept).
        let _ = writeln!(
            s,
            "- packets per uncontended cycle ≤ 9 (6, and 3 for the own-node watch): {p:.1} — {}",
            verdict(p <= 9.05)
        );
    }
    let mut worst: Option<f64> = None;
    let mut packets = Vec::new();
    for &n in &plan.ns {
        if let (Some(a), Some(b)) = (ours("contended", n, |r| r.rate), lc("contended", n)) {
            worst = Some(worst.map_or(a / b, |w: f64| w.min(a / b)));
        }
        if let Some(p) = ours("contended", n, |r| r.packets_per_op) {
            packets.push((n, p));
        }
    }
    if let Some(w) = worst {
        let _ =
            writeln!(s, "- contended ≥ 1.2× LockClient at every N: lowest {w:.2}× — {}", verdict(w >= 1.2));
    }
    if !packets.is_empty() {
        let list: Vec<String> = packets.iter().map(|(n, p)| format!("N={n}: {p:.1}")).collect();
        let max = packets.iter().map(|(_, p)| *p).fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "- packets per handoff ≤ 9, flat in N: {} — {}",
            list.join(", "),
            verdict(max <= 9.05)
        );
    }
    handoff_p50s(
        s,
        groups,
        "contended",
        &plan.ns,
        raw_rt_us,
        2.0,
        "handoff p50 ≤ 2× the raw write round trip",
    );
    if let (Some(a), Some(b)) =
        (ours("many-locks", plan.many_tasks, |r| r.rate), lc("many-locks", plan.many_tasks))
    {
        let _ = writeln!(s, "- many locks ≥ 1.2× LockClient: {:.2}× — {}", a / b, verdict(a / b >= 1.2));
    }
    if let (Some(a), Some(b)) = (dropped("many-locks", plan.many_tasks), lc("many-locks", plan.many_tasks)) {
        let _ = writeln!(s, "- the same, guards dropped: {:.2}× — {}", a / b, verdict(a / b >= 1.2));
    }
    if let Some(left) = ours("per-order", plan.order_tasks, |r| r.left_after_reaper) {
        let _ = writeln!(
            s,
            "- per-order locks leave 0 nodes once the reaper has run: {} — {}",
            num(left, 0),
            verdict(left == 0.0)
        );
    }
}

/// The same targets where a round trip is the network's (the 1 ms network rows).
fn network_targets(s: &mut String, groups: &Groups, raw_rt_us: f64) {
    let rate = |peer: Peer, sc: &str, n: usize| groups.median(sc, n, peer, |r| r.rate);
    let lc = rate(Peer::LockClient, "network-uncontended", 1);
    for (peer, what) in [(Peer::ZkRecipes, "release awaited"), (Peer::ZkRecipesDrop, "guard dropped")] {
        if let (Some(a), Some(b)) = (rate(peer, "network-uncontended", 1), lc) {
            let _ = writeln!(
                s,
                "- 1 ms network: uncontended ≥ 1.2× LockClient ({what}): {:.2}× — {}",
                a / b,
                verdict(a / b >= 1.2)
            );
        }
    }
    for n in crate::NETWORK_NS {
        if let (Some(a), Some(b)) =
            (rate(Peer::ZkRecipes, "network-contended", n), rate(Peer::LockClient, "network-contended", n))
        {
            let _ = writeln!(
                s,
                "- 1 ms network: contended N = {n} ≥ 1.2× LockClient: {:.2}× — {}",
                a / b,
                verdict(a / b >= 1.2)
            );
        }
    }
    handoff_p50s(
        s,
        groups,
        "network-contended",
        &crate::NETWORK_NS,
        raw_rt_us,
        1.2,
        "1 ms network: handoff p50 ≤ 1.2× the raw write round trip through the proxy (one hop)",
    );
}

/// The target line for zk-recipes' handoff p50 in `scenario` against the raw write round trip.
fn handoff_p50s(
    s: &mut String,
    groups: &Groups,
    scenario: &str,
    ns: &[usize],
    raw_rt_us: f64,
    limit: f64,
    what: &str,
) {
    let p50s: Vec<(usize, f64)> = ns
        .iter()
        .filter_map(|&n| Some((n, groups.median(scenario, n, Peer::ZkRecipes, |r| r.p50_us)?)))
        .collect();
    if raw_rt_us > 0.0 && !p50s.is_empty() {
        let list: Vec<String> = p50s.iter().map(|(n, p)| format!("N={n}: {:.2}×", p / raw_rt_us)).collect();
        let max = p50s.iter().map(|(_, p)| p / raw_rt_us).fold(0.0, f64::max);
        let _ = writeln!(s, "- {what}: {} — {}", list.join(", "), verdict(max <= limit));
    }
}

/// `ratios.png`, `herd.png`, `handoffs.png`, `cpu.png`, and `handovers.png` when leader
/// election ran.
pub fn plots(groups: &Groups, plan: &Plan, out: &Path) -> Result<(), String> {
    let others = [Peer::LockClient, Peer::Curator, Peer::Kazoo];
    let ratio_groups: Vec<(String, Vec<(Peer, f64)>)> = lines(plan)
        .into_iter()
        .map(|l| {
            let ours = groups.median(l.scenario, l.n, Peer::ZkRecipes, |r| r.rate);
            let bars = others
                .iter()
                .filter_map(|&p| Some((p, ours? / groups.median(l.scenario, l.n, p, |r| r.rate)?)))
                .collect();
            (l.short, bars)
        })
        .filter(|(_, b): &(String, Vec<(Peer, f64)>)| !b.is_empty())
        .collect();
    report::bars(
        &ratio_groups,
        "zk-recipes ÷ each peer, operations per second (lines at 1 and 1.2)",
        "ratio (above 1: zk-recipes faster)",
        &[1.0, 1.2],
        plotters::chart::SeriesLabelPosition::UpperRight,
        &out.join("ratios.png"),
    )?;
    let cpu_groups: Vec<(String, Vec<(Peer, f64)>)> = lines(plan)
        .into_iter()
        .map(|l| {
            let bars = columns(groups)
                .into_iter()
                .filter_map(|p| Some((p, groups.median(l.scenario, l.n, p, |r| r.cpu_us_per_op)?)))
                .collect();
            (l.short, bars)
        })
        .filter(|(_, b): &(String, Vec<(Peer, f64)>)| !b.is_empty())
        .collect();
    report::bars(
        &cpu_groups,
        "Client CPU per operation (user + system)",
        "µs per cycle or handoff",
        &[],
        plotters::chart::SeriesLabelPosition::UpperLeft,
        &out.join("cpu.png"),
    )?;
    report::plot(
        groups,
        "contended",
        &[Peer::ZkRecipes, Peer::LockClient, Peer::Curator, Peer::Kazoo, Peer::Naive],
        |r| r.packets_per_op,
        "Herd check: server packets per handoff against N",
        "packets per handoff (mntr)",
        &out.join("herd.png"),
    )?;
    report::plot(
        groups,
        "contended",
        &[Peer::ZkRecipes, Peer::LockClient, Peer::Curator, Peer::Kazoo],
        |r| r.rate,
        "Contended handoffs per second",
        "handoffs/s",
        &out.join("handoffs.png"),
    )?;
    let mut handovers: Vec<(String, Vec<(Peer, f64)>)> = Vec::new();
    for e in plan.recipes("leader") {
        let n = plan.contenders(e);
        let short = recipe_labels(plan, e).1;
        for (what, metric) in [("p50", (|r: &Row| r.p50_us) as fn(&Row) -> f64), ("p99", |r: &Row| r.p99_us)]
        {
            let bars: Vec<(Peer, f64)> = groups
                .peers_of(e.scenario())
                .into_iter()
                .filter_map(|p| Some((p, groups.median(e.scenario(), n, p, metric)? / 1000.0)))
                .collect();
            if !bars.is_empty() {
                handovers.push((format!("{short} {what}"), bars));
            }
        }
    }
    if handovers.is_empty() {
        return Ok(());
    }
    report::bars(
        &handovers,
        "Leader handover after a clean close (medians)",
        "ms",
        &[],
        plotters::chart::SeriesLabelPosition::UpperLeft,
        &out.join("handovers.png"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }
}
