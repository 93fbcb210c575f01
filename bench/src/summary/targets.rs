//! The issues' targets against this run's medians, each met or not.

use std::fmt::Write as _;

use crate::peers::{Peer, Recipe};
use crate::report::{num, Groups, Row};
use crate::Plan;

pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
}

/// Issue 28's targets for the other recipes against this run's medians.
pub fn recipe_targets(s: &mut String, groups: &Groups, plan: &Plan, raw_rt_us: f64) {
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
pub fn targets(s: &mut String, groups: &Groups, plan: &Plan, raw_rt_us: f64) {
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
pub fn network_targets(s: &mut String, groups: &Groups, raw_rt_us: f64) {
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
