//! `zk-bench`: zk-recipes side by side with Curator, kazoo, `zookeeper-client`'s `LockClient`
//! and the naive recipe, on fresh local ZooKeeper servers (a standalone one, then a 3-node
//! ensemble), in one run.
//!
//! ```text
//! cargo run --release -p zk-bench -- [--quick] [--seconds S] [--repeats R] [--pin auto|off] [--out DIR] [--skip-missing]
//! ```
//! Writes `target/bench-report/` (or `--out`): `results.csv`, `summary.md` (with `fencing.csv` when
//! the fencing scenario runs) and the plots
//! `ratios.png`, `herd.png`, `handoffs.png`, `cpu.png`, `handovers.png`. `--quick` runs every
//! scenario for a moment as a smoke test: it checks that every peer produced numbers and that every recipe's
//! invariant held (mutual exclusion, at most the semaphore's leases at once, no writer beside
//! another holder, one leader at a time); it asserts nothing about speed.

mod cli;
mod clock;
mod driver;
mod fencing;
mod jit;
mod ours;
mod peers;
mod pin;
mod plan;
mod progress;
mod report;
mod setup;
mod stats;
mod summary;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use cli::{Args, ChildCommand, SCENARIOS};
use peers::{Peer, Recipe, Target, FRESH};
pub use plan::Plan;
use plan::{describe, Run, Step};
use progress::Progress;
use report::{Groups, Row};
use zk_testcluster::{ClusterConfig, ZkCluster};

/// How often the servers' container reaper looks for empty containers (ZooKeeper's default is a
/// minute), and how many it may delete per minute (high enough that it never pauses).
const REAPER_INTERVAL_MS: u64 = 500;
/// The network scenarios' one-way delay, added by a proxy between every client and the server:
/// a 1 ms round trip, as between hosts in one datacenter, where the loopback's is mostly the
/// server's own work.
pub const NETWORK_ONE_WAY: std::time::Duration = std::time::Duration::from_micros(500);
/// The contenders of the network scenarios' contended runs.
pub const NETWORK_NS: [usize; 3] = [2, 8, 32];
const REAPER_MAX_PER_MINUTE: u64 = 600_000;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The raw `zookeeper-client` create → delete loop against `target`: its p50 cycle (ns) and its
/// row (a write round trip is half a cycle).
async fn raw_write(scenario: &'static str, target: &Target<'_>, plan: &Plan) -> Result<(u64, Row), String> {
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
fn server_row(server: peers::ServerWork, ops: f64, row: Row) -> Row {
    Row {
        packets_per_op: server.packets as f64 / ops,
        bytes_in_per_op: server.bytes_in as f64 / ops,
        bytes_out_per_op: server.bytes_out as f64 / ops,
        server_cpu_us_per_op: server_cpu_us(server, ops),
        ..row
    }
}

/// A row from a run of a recipe other than the mutex, its `overlaps` the violations of the
/// recipe's invariant: acquisitions beyond the leases (semaphore), writes beside another hold
/// (read/write lock), overlapping terms (leader election). Latencies are the leaders' handovers;
/// a semaphore's or a read/write lock's holds overlap by design, so they have none.
fn recipe_row(recipe: Recipe, peer: Peer, n: usize, repeat: usize, c: peers::Contended) -> Row {
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

fn server_cpu_us(server: peers::ServerWork, ops: f64) -> f64 {
    server.cpu_ns.map_or(f64::NAN, |ns| ns as f64 / 1000.0 / ops)
}

fn cycled(scenario: &'static str, peer: Peer, n: usize, repeat: usize, c: &peers::Cycles) -> Row {
    let ops = c.count.max(1) as f64;
    Row {
        cpu_us_per_op: c.cpu_ns as f64 / 1000.0 / ops,
        ..server_row(c.server, ops, Row::new(scenario, peer, n, repeat, c.count as f64 / c.secs))
    }
}

fn server_config(nodes: usize, heap_mb: u32, plan: &Plan) -> ClusterConfig {
    ClusterConfig {
        nodes,
        cpus: plan.pinning.servers(),
        max_client_cnxns: 0,
        force_sync: false,
        heap_mb,
        jvm_properties: vec![
            ("znode.container.checkIntervalMs".into(), REAPER_INTERVAL_MS.to_string()),
            ("znode.container.maxPerMinute".into(), REAPER_MAX_PER_MINUTE.to_string()),
        ],
        ..ClusterConfig::default()
    }
}

/// Waits for the container reaper to finish with the subtree at `root`: until it is gone, or
/// its size has not changed for 3 s (six reaper passes), at most 60 s. Returns the nodes left
/// and the seconds until the last change.
async fn after_reaper(
    probe: &zk_recipes::zookeeper_client::Client,
    root: &str,
) -> Result<(u64, f64), String> {
    let start = clock::now_ns();
    let secs = |t: u64| (t - start) as f64 / 1e9;
    let mut last = peers::subtree_size(probe, root).await?;
    let mut changed = start;
    loop {
        if last == 0 {
            return Ok((0, secs(changed)));
        }
        let now = clock::now_ns();
        if secs(now) - secs(changed) >= 3.0 || secs(now) >= 60.0 {
            return Ok((last, secs(changed)));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let size = peers::subtree_size(probe, root).await?;
        if size != last {
            last = size;
            changed = clock::now_ns();
        }
    }
}

async fn run(plan: Plan, out: PathBuf) -> Result<bool, String> {
    let steps = plan.steps();
    eprintln!(
        "zk-bench: {} steps, {} s per run, {} repeat(s); starting ZooKeeper...",
        steps.len(),
        plan.secs,
        plan.repeats
    );
    let mut standalone =
        Some(ZkCluster::start(server_config(1, 768, &plan)).await.map_err(|e| e.to_string())?);
    let mut progress = Progress::new(steps.iter().map(|s| plan.cost(*s)).collect());
    let zk_version = match &standalone {
        Some(zk) => zk.mntr(0).await.ok().and_then(|m| m.0.get("zk_version").cloned()).unwrap_or_default(),
        None => String::new(),
    };
    let scratch = tempfile_dir()?;
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let mut raw_p50 = 0;
    let mut run_id = 0;
    let mut path = |what: &str| {
        run_id += 1;
        format!("/bench/{what}-{run_id}")
    };
    let mut ensemble: Option<ZkCluster> = None;
    let mut proxy: Option<zk_testcluster::FaultProxy> = None;
    let mut network_raw_p50 = 0;
    // The ensemble's clients all reach one follower (as two in three clients of a 3-node
    // ensemble do): a client that happened to land on the leader would skip the forwarding hop
    // its peers pay, and the comparison would measure where each landed.
    let mut follower: Option<(usize, String)> = None;
    let mut ensemble_raw_p50 = 0;
    let mut fencing_servers: Option<fencing::Servers> = None;
    let mut fenced = Vec::new();

    let mut warm_rows = Vec::new();
    let mut warm_fenced = Vec::new();
    let mut settled = Vec::new();
    for step in steps {
        progress.step(&describe(step, &plan));
        let zk = || standalone.as_ref().ok_or_else(|| "the standalone server is gone".to_string());
        // The ensemble, reached through its follower (see `follower` above).
        let on_follower = || -> Result<Target<'_>, String> {
            let zk = ensemble.as_ref().ok_or("no ensemble")?;
            Ok(Target { zk, connect: follower.as_ref().ok_or("no follower")?.1.clone() })
        };
        // A warm-up runs as a repeat does, for at most WARM_UP_SECS; its rows are not counted.
        let run = step.run();
        let secs = run.map_or(plan.secs, |run| plan.secs_of(run));
        let r = run.map_or(0, Run::index);
        let (counted, fenced_before) = (rows.len(), fenced.len());
        match step {
            Step::RawWrite => {
                let row;
                (raw_p50, row) = raw_write("raw-write", &Target::direct(zk()?), &plan).await?;
                rows.push(Row { packets_per_op: 8.0, ..row });
            }
            Step::Settle(cluster) => {
                let t = match cluster {
                    plan::Cluster::Standalone => Target::direct(zk()?),
                    plan::Cluster::Ensemble => on_follower()?,
                };
                let (how, slices) = jit::settle(&t, &scratch, || path("settle")).await?;
                settled.push((cluster, how));
                warm_rows.extend(slices);
            }
            Step::Uncontended(_, peer) => {
                let t = Target::direct(zk()?);
                let c = peers::contend(&t, peer, 1, secs, &path("uncontended"), &scratch).await?;
                rows.push(measured("uncontended", peer, 1, r, c, stats::cycles));
            }
            Step::Contended(_, n, peer) => {
                let t = Target::direct(zk()?);
                let c = peers::contend(&t, peer, n, secs, &path("contended"), &scratch).await?;
                rows.push(measured("contended", peer, n, r, c, stats::handoffs));
            }
            Step::ManyLocks(_, peer) => {
                let prefix = path("many");
                let c =
                    peers::cycle_locks(zk()?, peer, plan.many_locks, plan.many_tasks, secs, &prefix).await?;
                rows.push(Row {
                    extra: plan.many_locks as f64,
                    ..cycled("many-locks", peer, plan.many_tasks, r, &c)
                });
            }
            Step::PerOrder(_, peer) => {
                let root = path(&format!("orders-{}", peer.short()));
                let c = peers::cycle_locks(zk()?, peer, FRESH, plan.order_tasks, secs, &root).await?;
                let probe = peers::raw_connect(&zk()?.connect_string()).await?;
                let at_end = peers::subtree_size(&probe, &root).await?;
                let (left, secs) = after_reaper(&probe, &root).await?;
                rows.push(Row {
                    left_at_end: at_end as f64,
                    left_after_reaper: left as f64,
                    reaper_secs: secs,
                    ..cycled("per-order", peer, plan.order_tasks, r, &c)
                });
            }
            Step::Recipe(_, recipe, peer) => {
                let n = plan.contenders(recipe);
                let t = Target::direct(zk()?);
                let c =
                    peers::contend_on(&t, peer, recipe, n, secs, &path(recipe.scenario()), &scratch).await?;
                rows.push(recipe_row(recipe, peer, n, r, c));
            }
            Step::Failover(run, recipe, peer, session) => {
                let kills = plan.kills_of(run);
                let scenario = failover_scenario(recipe);
                let split =
                    peers::failover(zk()?, (peer, plan.beat_period), recipe, kills, session, &path(scenario))
                        .await?;
                rows.push(peers::failover_row(scenario, peer, session, r, split));
            }
            Step::Scale(_, n, procs, peer) => {
                let s = peers::scale(zk()?, peer, n, procs, &path(peers::scale_scenario(procs))).await?;
                rows.push(s.row(peer, n, procs, r));
            }
            Step::FencingStart => {
                fencing_servers = Some(fencing::Servers::start(plan.skip_missing).await?);
            }
            Step::Fencing(_, resource, workers) => {
                let servers = fencing_servers.as_ref().ok_or("no fencing servers")?;
                let root = path(&format!("fencing-{}", resource.short()));
                fenced.extend(fencing::run(zk()?, servers, resource, workers, r, secs, &root).await?);
            }
            Step::NetworkStart => {
                let p = zk()?.proxy().map_err(|e| e.to_string())?;
                p.set_latency(NETWORK_ONE_WAY);
                proxy = Some(p);
            }
            Step::NetworkRawWrite => {
                let t = Target::through(zk()?, proxy.as_ref().ok_or("no proxy")?);
                let row;
                (network_raw_p50, row) = raw_write("network-raw-write", &t, &plan).await?;
                rows.push(row);
            }
            Step::NetworkUncontended(_, peer) => {
                let t = Target::through(zk()?, proxy.as_ref().ok_or("no proxy")?);
                let c = peers::contend(&t, peer, 1, secs, &path("uncontended"), &scratch).await?;
                // The proxy's threads run in this process: its CPU is not the peers'.
                let row = measured("network-uncontended", peer, 1, r, c, stats::cycles);
                rows.push(Row { cpu_us_per_op: f64::NAN, ..row });
            }
            Step::NetworkContended(_, n, peer) => {
                let t = Target::through(zk()?, proxy.as_ref().ok_or("no proxy")?);
                let c = peers::contend(&t, peer, n, secs, &path("contended"), &scratch).await?;
                let row = measured("network-contended", peer, n, r, c, stats::handoffs);
                rows.push(Row { cpu_us_per_op: f64::NAN, ..row });
            }
            Step::EnsembleStart => {
                proxy = None;
                // One cluster at a time: the standalone server's work is done.
                standalone = None;
                let ens = ZkCluster::start(server_config(3, 384, &plan)).await.map_err(|e| e.to_string())?;
                follower = Some(peers::a_follower(&ens).await?);
                ensemble = Some(ens);
            }
            Step::EnsembleRawWrite => {
                let t = on_follower()?;
                let row;
                (ensemble_raw_p50, row) = raw_write("ensemble-raw-write", &t, &plan).await?;
                rows.push(row);
            }
            Step::EnsembleUncontended(_, peer) => {
                let t = on_follower()?;
                let c = peers::contend(&t, peer, 1, secs, &path("uncontended"), &scratch).await?;
                rows.push(measured("ensemble-uncontended", peer, 1, r, c, stats::cycles));
            }
            Step::EnsembleContended(_, peer) => {
                let t = on_follower()?;
                let c = peers::contend(&t, peer, plan.ensemble_n, secs, &path("contended"), &scratch).await?;
                rows.push(measured("ensemble-contended", peer, plan.ensemble_n, r, c, stats::handoffs));
            }
        }
        if run == Some(Run::WarmUp) {
            warm_rows.extend(rows.drain(counted..));
            warm_fenced.extend(fenced.drain(fenced_before..));
        }
    }
    progress.finish();
    drop(proxy);
    let fencing_missing = fencing_servers.take().map(|s| s.missing).unwrap_or_default();
    drop(ensemble);
    drop(standalone);
    let _ = std::fs::remove_dir_all(&scratch);

    // A warm-up is not counted, but what it did wrong is still wrong.
    problems.extend(rows.iter().flat_map(row_problems));
    problems.extend(warm_rows.iter().flat_map(row_problems).map(|p| format!("warm-up: {p}")));
    problems.extend(fencing::problems(&warm_fenced).into_iter().map(|p| format!("warm-up: {p}")));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    report::write_csv(&rows, &out.join("results.csv")).map_err(|e| e.to_string())?;
    let groups = Groups::of(&rows);
    let context = summary::Context {
        plan: &plan,
        raw_p50_ns: raw_p50,
        network_raw_p50_ns: network_raw_p50,
        ensemble_raw_p50_ns: ensemble_raw_p50,
        ensemble_follower: follower.as_ref().map(|f| f.0),
        zk_version,
        reaper_ms: REAPER_INTERVAL_MS,
        settled: &settled,
    };
    let mut text = summary::summarize(&groups, &context);
    if plan.runs("fencing") {
        fencing::write_csv(&fenced, &out.join("fencing.csv")).map_err(|e| e.to_string())?;
        text += &fencing::summary(&fenced, &fencing_missing, plan.secs, plan.repeats);
        problems.extend(fencing::problems(&fenced));
    }
    std::fs::write(out.join("summary.md"), &text).map_err(|e| e.to_string())?;
    summary::plots(&groups, &plan, &out)?;
    println!("{text}");
    println!("report: {}", out.display());
    for p in &problems {
        eprintln!("PROBLEM: {p}");
    }
    Ok(problems.is_empty())
}

/// What is wrong with a run: its invariant violated, no numbers, or (zk-recipes' per-order locks)
/// nodes left after the container reaper.
fn row_problems(r: &Row) -> Vec<String> {
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

fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("zk-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// Peers left out, each with why.
type Skipped = Vec<(Peer, String)>;

/// The process peers that can run, installing missing ones through `scripts/ensure-peers` where
/// that works. `Err` is the one line to print when a peer is missing and not to be skipped.
fn available_peers(args: &Args) -> Result<(Vec<Peer>, Skipped), String> {
    let wanted = |p: &Peer| args.peers.is_empty() || args.peers.iter().any(|n| n == p.short());
    let process_peers: Vec<Peer> = [Peer::Curator, Peer::Kazoo].into_iter().filter(wanted).collect();
    let mut missing: Vec<(Peer, String)> =
        process_peers.iter().filter_map(|&p| setup::missing(p).map(|why| (p, why))).collect();
    let script = setup::ensure_peers_script();
    if !missing.is_empty() && !args.no_install {
        if let Some(script) = script.as_deref().filter(|_| setup::can_install()) {
            eprintln!("zk-bench: installing missing peers with {}", script.display());
            if let Err(e) = setup::run_ensure_peers(script) {
                eprintln!("zk-bench: {e}");
            }
            missing = process_peers.iter().filter_map(|&p| setup::missing(p).map(|why| (p, why))).collect();
        }
    }
    // Compile the Curator driver now, so that a failure is a reason rather than a panic later.
    if wanted(&Peer::Curator) && !missing.iter().any(|(p, _)| *p == Peer::Curator) {
        if let Err(why) = setup::compile_curator() {
            missing.push((Peer::Curator, why));
        }
    }
    let fix = match &script {
        Some(s) => format!("run {} (Debian/Ubuntu, as root or with sudo)", s.display()),
        None => {
            "install Apache Curator 5.x jars in /usr/share/java and a JDK, and kazoo for /usr/bin/python3"
                .into()
        }
    };
    if !missing.is_empty() && !args.skip_missing {
        let what: Vec<String> = missing.iter().map(|(p, why)| format!("{} ({why})", p.name())).collect();
        return Err(format!("missing peer {}; {fix}, or pass --skip-missing", what.join(", ")));
    }
    let skipped: Vec<(Peer, String)> =
        missing.into_iter().map(|(p, why)| (p, format!("{why}; {fix}"))).collect();
    for (p, why) in &skipped {
        eprintln!("zk-bench: skipping {}: {why}", p.name());
    }
    let peers =
        [Peer::ZkRecipes, Peer::ZkRecipesDrop, Peer::LockClient, Peer::Curator, Peer::Kazoo, Peer::Naive]
            .into_iter()
            .filter(wanted)
            .filter(|p| !skipped.iter().any(|(s, _)| s == p))
            .collect();
    Ok((peers, skipped))
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zk-bench: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    }
}

/// The internal child commands (their process inherits the clients' CPUs from ours).
fn run_child(child: &ChildCommand) {
    let (what, outcome) = match child {
        ChildCommand::ScaleChild { peer, connect, path, waiters, total, hold } => {
            let child = peers::scale_child(peer, connect, path, *waiters, *total, *hold == 1);
            ("scale-child", runtime().block_on(child))
        }
        ChildCommand::ElectChild { recipe, connect, path, id, session_ms, beat_period } => {
            let child = peers::elect_child(recipe, connect, path, id, *session_ms, *beat_period);
            ("elect-child", runtime().block_on(child))
        }
    };
    if let Err(e) = outcome {
        eprintln!("{what}: {e}");
        std::process::exit(1);
    }
}

fn main() {
    let args = Args::parse();
    if let Some(child) = &args.child {
        run_child(child);
        return;
    }
    // Pinned before any other thread starts: the runtime's workers, the driver processes and our
    // children inherit the clients' CPUs; the servers get theirs as the harness starts them.
    let pinning = match pin::available() {
        Ok(cpus) => pin::Pinning::choose(args.pin, cpus),
        Err(why) => pin::Pinning { available: Vec::new(), split: pin::Split::Off(why) },
    };
    if let Err(e) = pinning.pin_clients() {
        eprintln!("zk-bench: {e}");
        std::process::exit(2);
    }
    let runtime = runtime();
    let (peers, skipped) = match available_peers(&args) {
        Ok(found) => found,
        Err(line) => {
            eprintln!("zk-bench: {line}");
            std::process::exit(2);
        }
    };
    let quick = args.quick;
    let plan = Plan {
        quick,
        secs: args.seconds.unwrap_or(if quick { 0.5 } else { 5.0 }),
        repeats: args.repeats.map_or(if quick { 1 } else { 3 }, |r| r as usize),
        ns: vec![2, 8, 32, 128],
        many_locks: 1000,
        many_tasks: 64,
        order_tasks: 8,
        sem_leases: 4,
        sem_contenders: 16,
        rw_reads: [90, 10],
        rw_contenders: 8,
        leader_candidates: 4,
        failover_kills: args.failover_kills.map_or(if quick { 2 } else { 5 }, |k| k as usize),
        failover_sessions: if args.failover_sessions.is_empty() {
            vec![peers::FAILOVER_SESSION]
        } else {
            args.failover_sessions.iter().map(|s| Duration::from_secs(*s)).collect()
        },
        beat_period: args.beat_period,
        ensemble_n: 8,
        scale_waiters: if quick { 128 } else { 1024 },
        spread_ns: if quick { vec![16] } else { vec![1024, 4096] },
        spread_procs: if quick { 2 } else { 8 },
        peers,
        skipped,
        skip_missing: args.skip_missing,
        only: if args.only.is_empty() {
            SCENARIOS.iter().map(|s| s.to_string()).collect()
        } else {
            args.only.clone()
        },
        pinning,
    };
    let out = args.out.clone().unwrap_or_else(|| peers_target().join("bench-report"));
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
