//! The plots: ratios, client CPU, the herd check, handoffs and leader handovers.

use std::path::Path;

use super::tables::{columns, lines, recipe_labels};
use crate::peers::Peer;
use crate::report::{self, Groups, Row};
use crate::Plan;

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
