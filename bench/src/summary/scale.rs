//! The scale sections: a queue drained in one process, a queue of thousands spread over
//! several processes, and the thousands-of-waiters targets.

use std::fmt::Write as _;

use super::verdict;
use crate::peers::Peer;
use crate::report::{cell, num, Groups};
use crate::Plan;

/// The `scale` table: waiters on one lock in one process.
pub fn scale(s: &mut String, groups: &Groups, plan: &Plan) {
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
}

/// The `scale-spread` table and its targets: ≥ 1.5× every peer's handoffs/s at every N, and
/// ≤ 4 KB resident per queued waiter.
pub fn spread(s: &mut String, groups: &Groups, plan: &Plan) {
    const SC: &str = "scale-spread";
    let peers = groups.peers_of(SC);
    if peers.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n### Scale, spread: N waiters on one lock over {} processes, one session each (one run)\n\n\
         Each waiter takes the lock once and releases it; the drain runs from the holder's release to \
         the last waiter's hold. Packets and bytes (requests + replies, watch events not counted) are \
         the server's `mntr` counters over the drain, per handoff; resident bytes are the processes' \
         growth while queueing, summed, per waiter.\n",
        plan.spread_procs
    );
    let _ = writeln!(
        s,
        "| peer | N | handoffs/s | packets per handoff | bytes per handoff | resident bytes per waiter |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for &n in &plan.spread_ns {
        for &p in &peers {
            let m = |f| groups.median(SC, n, p, f).map_or("–".into(), |x| num(x, 0));
            let _ = writeln!(
                s,
                "| {} | {n} | {} | {} | {} | {} |",
                p.name(),
                m(|r| r.rate),
                groups.median(SC, n, p, |r| r.packets_per_op).map_or("–".into(), |x| num(x, 1)),
                m(|r| r.bytes_per_op()),
                m(|r| r.extra),
            );
        }
    }
    let _ = writeln!(s, "\n### Thousands-of-waiters targets (scale-spread, one run)\n");
    let ours = |n: usize, f| groups.median(SC, n, Peer::ZkRecipes, f);
    let mut ratios = Vec::new();
    let mut rss = Vec::new();
    for &n in &plan.spread_ns {
        let Some(a) = ours(n, |r| r.rate) else { continue };
        for &p in peers.iter().filter(|&&p| p != Peer::ZkRecipes) {
            if let Some(b) = groups.median(SC, n, p, |r| r.rate).filter(|b| *b > 0.0) {
                ratios.push((n, p, a / b));
            }
        }
        rss.extend(ours(n, |r| r.extra).map(|b| (n, b)));
    }
    if !ratios.is_empty() {
        let list: Vec<String> =
            ratios.iter().map(|(n, p, x)| format!("N={n}: {x:.2}× {}", p.name())).collect();
        let low = ratios.iter().map(|r| r.2).fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            s,
            "- handoffs/s ≥ 1.5× every peer at every N: {} — {}",
            list.join(", "),
            verdict(low >= 1.5)
        );
    }
    if !rss.is_empty() {
        let list: Vec<String> = rss.iter().map(|(n, b)| format!("N={n}: {:.1} KB", b / 1024.0)).collect();
        let max = rss.iter().map(|r| r.1).fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "- resident memory per queued waiter ≤ 4 KB: {} — {}",
            list.join(", "),
            verdict(max <= 4096.0)
        );
    }
    // How the bytes per handoff grow with N: flat when a waiter moving up does not list the queue.
    for &p in &peers {
        let bytes: Vec<(usize, f64)> = plan
            .spread_ns
            .iter()
            .filter_map(|&n| Some((n, groups.median(SC, n, p, |r| r.bytes_per_op())?)))
            .collect();
        if let (Some(first), Some(last)) = (bytes.first(), bytes.last()) {
            if bytes.len() > 1 {
                let list: Vec<String> = bytes.iter().map(|(n, b)| format!("N={n}: {}", num(*b, 0))).collect();
                let _ = writeln!(
                    s,
                    "- bytes per handoff, {}: {} ({})",
                    p.name(),
                    list.join(", "),
                    growth(first, last)
                );
            }
        }
    }
}

/// How bytes per handoff went from the smallest N to the largest: flat (within a quarter), or
/// the factor they grew by.
fn growth(first: &(usize, f64), last: &(usize, f64)) -> String {
    let factor = last.1 / first.1.max(1.0);
    if factor <= 1.25 {
        "flat in N: moving up lists nothing".into()
    } else {
        format!("×{factor:.1} from N={} to N={}: moving up lists the queue", first.0, last.0)
    }
}

#[cfg(test)]
mod tests {
    use super::growth;

    #[test]
    fn says_flat_only_when_the_bytes_stay_flat() {
        // The 2026-11-25 run: zk-recipes and LockClient at N = 1,024 and 4,096.
        assert_eq!(growth(&(1024, 392.0), &(4096, 377.0)), "flat in N: moving up lists nothing");
        assert_eq!(
            growth(&(1024, 30_422.0), &(4096, 250_645.0)),
            "×8.2 from N=1024 to N=4096: moving up lists the queue"
        );
    }
}
