//! Issue 50's targets (the bench on the newest server) against this run's medians.

use std::fmt::Write as _;

use super::targets::verdict;
use crate::peers::Peer;
use crate::report::Groups;
use crate::Plan;

/// One ratio of zk-recipes to `peer` in `scenario` with `n` contenders: `metric`'s medians.
fn ratio(
    groups: &Groups,
    scenario: &str,
    n: usize,
    peer: Peer,
    metric: fn(&crate::report::Row) -> f64,
) -> Option<f64> {
    let ours = groups.median(scenario, n, Peer::ZkRecipes, metric)?;
    let theirs = groups.median(scenario, n, peer, metric)?;
    (theirs > 0.0).then_some(ours / theirs)
}

/// Issue 50's targets: many locks and per-order locks ≥ 1.6× `LockClient` with server CPU per
/// cycle ≤ 0.7× its; contended ≥ 1.5× `LockClient` at every N; every recipe ≥ 2× Curator.
pub fn targets50(s: &mut String, groups: &Groups, plan: &Plan) {
    let mut lines = Vec::new();
    for (sc, n, what) in
        [("many-locks", plan.many_tasks, "many locks"), ("per-order", plan.order_tasks, "per-order locks")]
    {
        if let Some(r) = ratio(groups, sc, n, Peer::LockClient, |r| r.rate) {
            lines.push(format!("- {what} ≥ 1.6× LockClient: {r:.2}× — {}", verdict(r >= 1.6)));
        }
        if let Some(r) = ratio(groups, sc, n, Peer::LockClient, |r| r.server_cpu_us_per_op) {
            lines.push(format!(
                "- {what}: server CPU per cycle ≤ 0.7× LockClient's: {r:.2}× — {}",
                verdict(r <= 0.7)
            ));
        }
    }
    let contended: Vec<(String, f64)> = plan
        .ns
        .iter()
        .filter_map(|&n| {
            Some((format!("N={n}"), ratio(groups, "contended", n, Peer::LockClient, |r| r.rate)?))
        })
        .collect();
    lines.extend(at_least("contended ≥ 1.5× LockClient at every N", &contended, 1.5));
    let mut recipes: Vec<(String, f64)> = Vec::new();
    let mutex = [("uncontended", 1), ("many-locks", plan.many_tasks), ("per-order", plan.order_tasks)];
    let contended = plan.ns.iter().map(|&n| ("contended", n));
    for (sc, n) in mutex.into_iter().chain(contended) {
        if let Some(r) = ratio(groups, sc, n, Peer::Curator, |r| r.rate) {
            recipes.push((format!("{sc} N={n}"), r));
        }
    }
    for recipe in plan.all_recipes() {
        let (sc, n) = (recipe.scenario(), plan.contenders(recipe));
        if let Some(r) = ratio(groups, sc, n, Peer::Curator, |r| r.rate) {
            recipes.push((sc.to_string(), r));
        }
    }
    lines.extend(at_least("every recipe ≥ 2× Curator (loopback)", &recipes, 2.0));
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n### Issue 50 targets (medians of this run)\n");
    for line in lines {
        let _ = writeln!(s, "{line}");
    }
}

/// The target line for ratios that must each be at least `bound`: every ratio listed, met when
/// the lowest is; none when there are no ratios.
fn at_least(what: &str, ratios: &[(String, f64)], bound: f64) -> Option<String> {
    let worst = ratios.iter().map(|(_, r)| *r).reduce(f64::min)?;
    let list: Vec<String> = ratios.iter().map(|(w, r)| format!("{w}: {r:.2}×")).collect();
    Some(format!("- {what}: {} — {}", list.join(", "), verdict(worst >= bound)))
}
