//! `zk-bench`: zk-recipes side by side with Curator, kazoo, `zookeeper-client`'s `LockClient`
//! and the naive recipe, on one fresh local ZooKeeper, in one run.
//!
//! ```text
//! cargo run --release -p zk-bench -- [--quick] [--seconds S] [--repeats R]
//! ```
//! Writes `target/bench-report/{results.csv,summary.md,herd.png,handoffs.png}`. `--quick` runs
//! every scenario for a moment as a smoke test: it checks that every peer produced numbers and
//! that mutual exclusion held, and asserts nothing about speed.

mod clock;
mod driver;
mod peers;
mod report;
mod stats;

use std::fmt::Write as _;
use std::io::Write as IoWrite;
use std::path::PathBuf;
use std::time::Instant;

use peers::Peer;
use report::Row;
use zk_testcluster::{ClusterConfig, ZkCluster};

const LOCK_PEERS: [Peer; 4] = [Peer::ZkRecipes, Peer::LockClient, Peer::Curator, Peer::Kazoo];

struct Plan {
    secs: f64,
    repeats: usize,
    ns: Vec<usize>,
    many_locks: usize,
    many_tasks: usize,
    scale_waiters: usize,
    quick: bool,
}

struct Progress {
    done: usize,
    total: usize,
    started: Instant,
}

impl Progress {
    fn step(&mut self, what: &str) {
        self.done += 1;
        eprint!(
            "\r\x1b[2K[{}/{}, {:.0} s] {what}",
            self.done,
            self.total,
            self.started.elapsed().as_secs_f64()
        );
        let _ = IoWrite::flush(&mut std::io::stderr());
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// A row from a contended run: rate, packets per operation, overlaps, and the p50/p99 of the
/// latencies `latencies` derives from the (sorted) holds.
fn measured(
    scenario: &'static str,
    peer: Peer,
    n: usize,
    repeat: usize,
    mut c: peers::Contended,
    latencies: fn(&[stats::Hold]) -> Vec<u64>,
) -> Row {
    let overlaps = stats::overlaps(&mut c.holds);
    let mut lat = latencies(&c.holds);
    Row {
        scenario,
        peer,
        n,
        repeat,
        rate: c.holds.len() as f64 / c.secs,
        p50_us: us(stats::percentile(&mut lat, 50.0)),
        p99_us: us(stats::percentile(&mut lat, 99.0)),
        packets_per_op: c.packets as f64 / c.holds.len().max(1) as f64,
        overlaps,
        extra: 0.0,
    }
}

async fn run(plan: Plan, out: PathBuf) -> Result<bool, String> {
    let config =
        ClusterConfig { max_client_cnxns: 0, force_sync: false, heap_mb: 768, ..ClusterConfig::default() };
    let zk = ZkCluster::start(config).await.map_err(|e| e.to_string())?;
    let scratch = tempfile_dir()?;
    let contended = plan.ns.len() * (LOCK_PEERS.len() + 1);
    let mut progress = Progress {
        done: 0,
        total: LOCK_PEERS.len() + 1 + plan.repeats * (LOCK_PEERS.len() + contended) + 3 + LOCK_PEERS.len(),
        started: Instant::now(),
    };
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let mut run_id = 0;
    let mut path = |what: &str| {
        run_id += 1;
        format!("/bench/{what}-{run_id}")
    };

    for peer in LOCK_PEERS {
        progress.step(&format!("warm-up {}", peer.name()));
        peers::contend(&zk, peer, 8, plan.secs.min(1.0), &path("warmup"), &scratch).await?;
    }

    progress.step("raw create → delete loop");
    let mut raw = peers::raw_create_delete(&zk, plan.secs.min(3.0)).await?;
    let raw_p50 = stats::percentile(&mut raw, 50.0);
    rows.push(Row {
        scenario: "raw-write",
        peer: Peer::ZkRecipes,
        n: 1,
        repeat: 0,
        rate: 1e9 / raw_p50 as f64,
        p50_us: us(raw_p50) / 2.0,
        p99_us: us(stats::percentile(&mut raw, 99.0)) / 2.0,
        packets_per_op: 8.0,
        overlaps: 0,
        extra: 0.0,
    });
    for repeat in 0..plan.repeats {
        for peer in LOCK_PEERS {
            progress.step(&format!("uncontended {} (repeat {}/{})", peer.name(), repeat + 1, plan.repeats));
            let c = peers::contend(&zk, peer, 1, plan.secs, &path("uncontended"), &scratch).await?;
            rows.push(measured("uncontended", peer, 1, repeat, c, stats::cycles));
        }
        for &n in &plan.ns {
            for peer in LOCK_PEERS.iter().copied().chain([Peer::Naive]) {
                progress.step(&format!(
                    "contended N={n} {} (repeat {}/{})",
                    peer.name(),
                    repeat + 1,
                    plan.repeats
                ));
                let c = peers::contend(&zk, peer, n, plan.secs, &path("contended"), &scratch).await?;
                rows.push(measured("contended", peer, n, repeat, c, stats::handoffs));
            }
        }
    }

    for peer in [Peer::ZkRecipes, Peer::LockClient, Peer::Curator] {
        progress.step(&format!("many locks {}", peer.name()));
        let rate =
            peers::many_locks(&zk, peer, plan.many_locks, plan.many_tasks, plan.secs, &path("many")).await?;
        rows.push(Row {
            scenario: "many-locks",
            peer,
            n: plan.many_tasks,
            repeat: 0,
            rate,
            p50_us: 0.0,
            p99_us: 0.0,
            packets_per_op: 0.0,
            overlaps: 0,
            extra: plan.many_locks as f64,
        });
    }
    for peer in LOCK_PEERS {
        progress.step(&format!("scale {} waiters {}", plan.scale_waiters, peer.name()));
        let s = peers::scale(&zk, peer, plan.scale_waiters, &path("scale")).await?;
        rows.push(Row {
            scenario: "scale",
            peer,
            n: plan.scale_waiters,
            repeat: 0,
            rate: plan.scale_waiters as f64 / s.drain_secs,
            p50_us: s.drain_secs * 1e6,
            p99_us: 0.0,
            packets_per_op: 0.0,
            overlaps: 0,
            extra: s.rss_per_waiter,
        });
    }
    eprintln!();

    for r in &rows {
        if r.overlaps > 0 {
            problems.push(format!(
                "{} {} N={}: {} overlapping holds",
                r.scenario,
                r.peer.name(),
                r.n,
                r.overlaps
            ));
        }
        if r.rate.is_nan() || r.rate <= 0.0 {
            problems.push(format!("{} {} N={}: no numbers", r.scenario, r.peer.name(), r.n));
        }
    }
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    report::write_csv(&rows, &out.join("results.csv")).map_err(|e| e.to_string())?;
    let means = report::means(&rows);
    let summary = summarize(&means, &plan, raw_p50);
    std::fs::write(out.join("summary.md"), &summary).map_err(|e| e.to_string())?;
    report::plot(
        &means,
        "contended",
        &[Peer::ZkRecipes, Peer::LockClient, Peer::Curator, Peer::Kazoo, Peer::Naive],
        |r| r.packets_per_op,
        "Herd check: server packets per handoff",
        "packets per handoff (mntr)",
        &out.join("herd.png"),
    )?;
    report::plot(
        &means,
        "contended",
        &LOCK_PEERS,
        |r| r.rate,
        "Contended handoffs per second",
        "handoffs/s",
        &out.join("handoffs.png"),
    )?;
    println!("{summary}");
    println!("report: {}", out.display());
    for p in &problems {
        eprintln!("PROBLEM: {p}");
    }
    let _ = plan.quick;
    Ok(problems.is_empty())
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "–".into()
    }
}

fn summarize(
    means: &std::collections::BTreeMap<(&'static str, usize, Peer), Row>,
    plan: &Plan,
    raw_p50: u64,
) -> String {
    let mut s = String::new();
    let get = |scenario: &'static str, n: usize, peer: Peer| means.get(&(scenario, n, peer));
    let _ = writeln!(
        s,
        "## Benchmark ({} s per run, {} repeats, peers interleaved on one server)\n",
        plan.secs, plan.repeats
    );
    let _ = writeln!(
        s,
        "Raw `zookeeper-client` create → delete on one node: {:.0} µs per write round trip (p50).\n",
        raw_p50 as f64 / 2000.0
    );
    let _ = writeln!(s, "| scenario | N | peer | rate /s | p50 µs | p99 µs | packets/op | overlaps |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for r in means.values().filter(|r| r.scenario == "uncontended" || r.scenario == "contended") {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {} |",
            r.scenario,
            r.n,
            r.peer.name(),
            r.rate,
            r.p50_us,
            r.p99_us,
            r.packets_per_op,
            r.overlaps
        );
    }
    let _ = writeln!(
        s,
        "\n| many locks ({} paths, {} tasks/threads, one session) | cycles/s |",
        plan.many_locks, plan.many_tasks
    );
    let _ = writeln!(s, "|---|---|");
    for r in means.values().filter(|r| r.scenario == "many-locks") {
        let _ = writeln!(s, "| {} | {:.0} |", r.peer.name(), r.rate);
    }
    let _ = writeln!(
        s,
        "\n| scale: {} waiters on one lock, one process | resident bytes per waiter | drain time s |",
        plan.scale_waiters
    );
    let _ = writeln!(s, "|---|---|---|");
    for r in means.values().filter(|r| r.scenario == "scale") {
        let _ = writeln!(s, "| {} | {:.0} | {:.2} |", r.peer.name(), r.extra, r.p50_us / 1e6);
    }
    let _ = writeln!(s, "\n### Targets (ratios in this run)\n");
    for &n in &plan.ns {
        if let (Some(ours), Some(cur), Some(kaz)) = (
            get("contended", n, Peer::ZkRecipes),
            get("contended", n, Peer::Curator),
            get("contended", n, Peer::Kazoo),
        ) {
            let _ = writeln!(
                s,
                "- N={n}: handoffs/s {} Curator (target ≥1.5×), {} kazoo (target ≥2×); packets/handoff {:.1} vs Curator {:.1}; handoff p50 = {:.1}× a write round trip",
                ratio(ours.rate, cur.rate),
                ratio(ours.rate, kaz.rate),
                ours.packets_per_op,
                cur.packets_per_op,
                ours.p50_us / (raw_p50 as f64 / 2000.0)
            );
        }
    }
    if let (Some(lo), Some(hi)) = (
        plan.ns.first().and_then(|n| get("contended", *n, Peer::ZkRecipes)),
        plan.ns.last().and_then(|n| get("contended", *n, Peer::ZkRecipes)),
    ) {
        let _ = writeln!(
            s,
            "- packets/handoff N={} / N={}: {}",
            hi.n,
            lo.n,
            ratio(hi.packets_per_op, lo.packets_per_op)
        );
    }
    if let (Some(ours), Some(cur)) =
        (get("uncontended", 1, Peer::ZkRecipes), get("uncontended", 1, Peer::Curator))
    {
        let _ = writeln!(s, "- uncontended cycles/s: {} Curator (target ≥1×)", ratio(ours.rate, cur.rate));
    }
    if let (Some(ours), Some(cur)) = (
        get("many-locks", plan.many_tasks, Peer::ZkRecipes),
        get("many-locks", plan.many_tasks, Peer::Curator),
    ) {
        let _ = writeln!(s, "- many-locks cycles/s: {} Curator (target ≥2×)", ratio(ours.rate, cur.rate));
    }
    s
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("zk-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    if args.first().map(String::as_str) == Some("scale-child") {
        let [_, peer, connect, path, n] = args.as_slice() else {
            eprintln!("usage: zk-bench scale-child PEER CONNECT PATH N");
            std::process::exit(2);
        };
        let outcome = runtime.block_on(peers::scale_child(peer, connect, path, n.parse().unwrap_or(1)));
        if let Err(e) = outcome {
            eprintln!("scale-child: {e}");
            std::process::exit(1);
        }
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let plan = Plan {
        secs: arg(&args, "--seconds").and_then(|s| s.parse().ok()).unwrap_or(if quick { 0.5 } else { 5.0 }),
        repeats: arg(&args, "--repeats").and_then(|s| s.parse().ok()).unwrap_or(if quick { 1 } else { 3 }),
        ns: vec![2, 8, 32, 128],
        many_locks: 1000,
        many_tasks: 64,
        scale_waiters: if quick { 128 } else { 1024 },
        quick,
    };
    let out = arg(&args, "--out").map(PathBuf::from).unwrap_or_else(|| peers_target().join("bench-report"));
    match runtime.block_on(run(plan, out)) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("\nzk-bench: {e}");
            std::process::exit(2);
        }
    }
}

/// `target/` (the bench report goes to `target/bench-report/`).
fn peers_target() -> PathBuf {
    let profile = peers::target_dir();
    profile.parent().map(PathBuf::from).unwrap_or(profile)
}
