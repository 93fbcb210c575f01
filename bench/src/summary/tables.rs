//! The cross-peer tables: their lines (scenario and N), their columns (the peers that ran),
//! and one table of one metric.

use std::fmt::Write as _;

use crate::peers::{Peer, Recipe};
use crate::report::{Groups, Row};
use crate::stats::Spread;
use crate::Plan;

/// A line of the cross-peer tables: a label, a short label for plots, (scenario, n), and the
/// recipe when it is not the mutex (a peer without it shows "n/a").
pub struct Line {
    pub label: String,
    pub short: String,
    pub scenario: &'static str,
    pub n: usize,
    pub recipe: Option<Recipe>,
}

impl Line {
    /// Whether `peer` has no such recipe (its cells read "n/a").
    pub fn lacks(&self, peer: Peer) -> bool {
        self.recipe.is_some_and(|r| r.lacking(peer).is_some())
    }
}

/// A recipe's label and short label in the cross-peer tables.
pub fn recipe_labels(plan: &Plan, recipe: Recipe) -> (String, String) {
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

pub fn lines(plan: &Plan) -> Vec<Line> {
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
pub fn columns(groups: &Groups) -> Vec<Peer> {
    let mut peers: Vec<Peer> = groups.0.keys().filter(|k| k.0 != "raw-write").map(|k| k.2).collect();
    peers.sort();
    peers.dedup();
    peers
}

/// A table of one metric, a line per scenario and N and a column per peer, each cell made by
/// `cell_of` (`report::cell`, or `report::headline_cell` for the headline figure).
pub fn table(
    s: &mut String,
    groups: &Groups,
    plan: &Plan,
    title: &str,
    metric: fn(&Row) -> f64,
    decimals: usize,
    cell_of: fn(Option<Spread>, usize) -> String,
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
                spread => cell_of(spread, decimals),
            })
            .collect();
        if cells.iter().all(|c| c == "–" || c == "n/a") {
            continue;
        }
        let _ = writeln!(s, "| {} | {} |", l.label, cells.join(" | "));
    }
}

/// The lines of the cross-peer tables whose operations per second did not repeat (spread above
/// [`crate::stats::UNSTEADY`]), each with its peer and spread: "uncontended cycle · LockClient: 14 %".
pub fn unsteady(groups: &Groups, plan: &Plan) -> Vec<String> {
    let peers = columns(groups);
    let mut out = Vec::new();
    for l in lines(plan) {
        for p in &peers {
            let Some(spread) = groups.spread(l.scenario, l.n, *p, |r| r.rate) else { continue };
            if spread.unsteady() {
                let pct = spread.relative().unwrap_or(0.0) * 100.0;
                out.push(format!("{} · {}: {pct:.0} %", l.short, p.name()));
            }
        }
    }
    out
}
