//! The sections of the recipes beside the mutex: semaphore, read/write lock, leader election,
//! and leader failover after a kill.

use std::fmt::Write as _;

use crate::peers::{Peer, Recipe};
use crate::report::{cell, headline_cell, Groups, Row};
use crate::Plan;

/// The violations of a run's invariant, summed over its repeats.
fn violations(groups: &Groups, scenario: &str, n: usize, peer: Peer) -> String {
    let rows = groups.0.iter().find(|((s, k, p), _)| *s == scenario && *k == n && *p == peer);
    rows.map_or("–".into(), |(_, rows)| rows.iter().map(|r| r.overlaps).sum::<usize>().to_string())
}

/// A recipe row's cells after the peer's name (and the mix): operations per second with its
/// spread, packets, bytes and client CPU per operation, the most holders at once, violations.
fn recipe_cells(groups: &Groups, scenario: &str, n: usize, p: Peer) -> String {
    let m = |f: fn(&Row) -> f64| groups.spread(scenario, n, p, f);
    format!(
        "{} | {} | {} | {} | {} | {}",
        headline_cell(m(|r| r.rate), 0),
        cell(m(|r| r.packets_per_op), 1),
        cell(m(Row::bytes_per_op), 0),
        cell(m(|r| r.cpu_us_per_op), 0),
        cell(m(|r| r.extra), 0),
        violations(groups, scenario, n, p)
    )
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
pub fn recipes(s: &mut String, groups: &Groups, plan: &Plan) {
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
             zk-recipes' `InterProcessSemaphore`, Curator's `InterProcessSemaphoreV2`, kazoo's \
             `Semaphore`. Violations: acquisitions while {} others held a lease, from the holds' \
             timestamps (must be 0).\n",
            plan.sem_leases,
            sem.hold().as_millis(),
            plan.sem_leases
        );
        let _ = writeln!(
            s,
            "| peer | releases/s | packets per release | bytes per release | client CPU µs per release \
             | most holders at once | violations |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for p in groups.peers_of(sem.scenario()) {
            let _ = writeln!(s, "| {} | {} |", p.name(), recipe_cells(groups, sem.scenario(), n, p));
        }
        na(s, sem, "", 6);
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
            "| peer | reads | operations/s | packets per operation | bytes per operation \
             | client CPU µs per operation | most holders at once | violations |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for &mix in &mixes {
            let Recipe::ReadWrite(pct) = mix else { continue };
            for p in groups.peers_of(mix.scenario()) {
                let _ = writeln!(
                    s,
                    "| {} | {pct} % | {} |",
                    p.name(),
                    recipe_cells(groups, mix.scenario(), n, p)
                );
            }
        }
        na(s, first, "", 7);
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
            "| peer | recipe | handovers/s | handover p50 µs | handover p99 µs | packets per handover \
             | bytes per handover | client CPU µs per handover | violations |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for &e in &elections {
            let what = if e == Recipe::Latch { "latch" } else { "selector (kazoo: Election)" };
            for p in groups.peers_of(e.scenario()) {
                let m = |f: fn(&Row) -> f64| groups.spread(e.scenario(), n, p, f);
                let _ = writeln!(
                    s,
                    "| {} | {what} | {} | {} | {} | {} | {} | {} | {} |",
                    p.name(),
                    headline_cell(m(|r| r.rate), 0),
                    cell(m(|r| r.p50_us), 0),
                    cell(m(|r| r.p99_us), 0),
                    cell(m(|r| r.packets_per_op), 1),
                    cell(m(Row::bytes_per_op), 0),
                    cell(m(|r| r.cpu_us_per_op), 0),
                    violations(groups, e.scenario(), n, p)
                );
            }
            if e == Recipe::Latch {
                na(s, e, "latch | ", 7);
            }
        }
    }
}

/// The failover section: handovers after a kill of the leader's process at each session
/// timeout measured, and where each went (`peers::failover`'s `Split`).
pub fn failovers(s: &mut String, groups: &Groups, plan: &Plan) {
    let recipes: Vec<Recipe> = plan
        .recipes("leader")
        .into_iter()
        .filter(|r| !groups.peers_of(crate::failover_scenario(*r)).is_empty())
        .collect();
    if recipes.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n### Leader failover after a kill: 2 candidates, each in its own process\n\n\
         The leader's process is killed (SIGKILL) {} times per run, each after a random delay in [0, \
         timeout), a new follower joining before each kill; handover: from the kill to the follower's \
         task starting (`LEADER` printed by the candidate, CLOCK_MONOTONIC). Where it goes (medians over \
         the kills): the server counts the timeout from the last packet it had from the session, read \
         from `cons` just before the kill (**quiet**: from that packet to the kill: the client's ping \
         cadence); it expires a session at the first multiple of its tick (200 ms) past that packet plus \
         the timeout (**rounding**); then the expiry's transaction, the deletion's event at the follower \
         and its recipe's handover (**after**). handover = timeout − quiet + rounding + after, per kill.\n",
        plan.failover_kills
    );
    for &session in &plan.failover_sessions {
        let n = session.as_millis() as usize;
        let _ = writeln!(s, "\n{} ms sessions:\n", n);
        let _ = writeln!(
            s,
            "| peer | recipe | handover p50 ms | handover p99 ms | quiet ms | rounding ms | after ms |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for &r in &recipes {
            let sc = crate::failover_scenario(r);
            let what = if r == Recipe::Latch { "latch" } else { "selector (kazoo: Election)" };
            for p in groups.peers_of(sc) {
                let ms = |f: fn(&Row) -> f64| groups.spread(sc, n, p, f).map(|x| x.scaled(1e-3));
                let split = |f: fn(&Row) -> f64| cell(groups.spread(sc, n, p, f), 0);
                if groups.spread(sc, n, p, |r| r.p50_us).is_none() {
                    continue;
                }
                let _ = writeln!(
                    s,
                    "| {} | {what} | {} | {} | {} | {} | {} |",
                    p.name(),
                    headline_cell(ms(|r| r.p50_us), 0),
                    cell(ms(|r| r.p99_us), 0),
                    split(|r| r.quiet_ms),
                    split(|r| r.rounding_ms),
                    split(|r| r.after_expiry_ms),
                );
            }
            if r == Recipe::Latch {
                let peers = recipe_peers(groups, plan);
                for p in peers.iter().filter(|p| r.lacking(**p).is_some()) {
                    let why = r.lacking(*p).unwrap_or_default();
                    let _ = writeln!(s, "| {} | latch | n/a: {why} | | | | |", p.name());
                }
            }
        }
    }
}
