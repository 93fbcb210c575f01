//! `zk-bench`: zk-recipes side by side with Curator, kazoo, `zookeeper-client`'s `LockClient`
//! and the naive recipe, on fresh local ZooKeeper servers (a standalone one, then a 3-node
//! ensemble), in one run.
//!
//! ```text
//! cargo run --release -p zk-bench -- [--quick] [--seconds S] [--repeats R] [--out DIR] [--skip-missing]
//! ```
//! Writes `target/bench-report/` (or `--out`): `results.csv`, `summary.md` and the plots
//! `ratios.png`, `herd.png`, `handoffs.png`, `cpu.png`, `handovers.png`. `--quick` runs every
//! scenario for a moment as a smoke test: it checks that every peer produced numbers and that every recipe's
//! invariant held (mutual exclusion, at most the semaphore's leases at once, no writer beside
//! another holder, one leader at a time); it asserts nothing about speed.

mod clock;
mod driver;
mod ours;
mod peers;
mod progress;
mod report;
mod setup;
mod stats;
mod summary;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use peers::{Peer, Recipe, Target, FRESH};
use progress::Progress;
use report::{Groups, Row};
use zk_testcluster::{ClusterConfig, ZkCluster};

/// The lock peers, in the report's order.
const LOCK_PEERS: [Peer; 4] = [Peer::ZkRecipes, Peer::LockClient, Peer::Curator, Peer::Kazoo];
/// The peers of the scenarios where one contender cycles on its own (uncontended, many locks,
/// per-order locks): there, how a release is confirmed is on the critical path, so zk-recipes
/// also runs with the guard dropped (a background delete, as `LockClient`'s release).
const CYCLE_PEERS: [Peer; 5] =
    [Peer::ZkRecipes, Peer::ZkRecipesDrop, Peer::LockClient, Peer::Curator, Peer::Kazoo];
/// The peers of the other recipes (semaphore, read/write lock, leader election): those that
/// have them.
const RECIPE_PEERS: [Peer; 3] = [Peer::ZkRecipes, Peer::Curator, Peer::Kazoo];
/// The scenarios `--only` can pick.
const SCENARIOS: [&str; 11] = [
    "uncontended",
    "contended",
    "many-locks",
    "per-order",
    "semaphore",
    "rwlock",
    "leader",
    "failover",
    "scale",
    "network",
    "ensemble",
];
/// The peers `--peers` can pick (their short names).
const PEER_NAMES: [&str; 6] = ["zk-recipes", "zk-recipes-drop", "lockclient", "curator", "kazoo", "naive"];
/// The peers of the 3-node ensemble scenarios (zk-recipes with a dropped guard only uncontended,
/// as in [`CYCLE_PEERS`]).
const ENSEMBLE_PEERS: [Peer; 4] = [Peer::ZkRecipes, Peer::ZkRecipesDrop, Peer::LockClient, Peer::Curator];
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

/// Benchmarks zk-recipes' locks side by side with Apache Curator, kazoo, zookeeper-client's
/// LockClient and the naive one-node recipe, and its semaphore, read/write lock and leader
/// election beside Curator's and kazoo's, on throwaway local ZooKeeper servers (a standalone
/// server, then a 3-node ensemble), in one run.
///
/// Needs ZooKeeper 3.8 (scripts/ensure-zookeeper); Curator needs its jars and a JDK, kazoo
/// /usr/bin/python3 with kazoo (scripts/ensure-peers installs both on Debian/Ubuntu).
#[derive(Parser, Debug)]
#[command(name = "zk-bench", version, args_conflicts_with_subcommands = true)]
struct Args {
    /// Every scenario for a moment, as a smoke test (0.5 s runs, 1 repeat): checks that every
    /// peer produced numbers and that no two holds overlapped; asserts nothing about speed.
    #[arg(long)]
    quick: bool,
    /// Seconds per measured run [default: 5, or 0.5 with --quick].
    #[arg(long, value_name = "S", value_parser = positive_secs)]
    seconds: Option<f64>,
    /// Repeats of every measured scenario; the report shows the median and min–max [default: 3,
    /// or 1 with --quick].
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=100))]
    repeats: Option<u32>,
    /// Where the report goes [default: target/bench-report].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Leave out a peer that can't run here (and say so in the report) instead of stopping.
    #[arg(long)]
    skip_missing: bool,
    /// Never run scripts/ensure-peers to install a missing peer; only say what to run.
    #[arg(long)]
    no_install: bool,
    /// Only these scenarios (comma-separated): uncontended, contended, many-locks, per-order,
    /// semaphore, rwlock (read-heavy and write-heavy), leader (latch and selector handovers),
    /// failover (handovers after a kill of the leader's process), scale, network, ensemble. The raw write round trip is always measured.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(SCENARIOS))]
    only: Vec<String>,
    /// Only these peers (comma-separated): zk-recipes, lockclient, curator, kazoo, naive.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(PEER_NAMES))]
    peers: Vec<String>,
    #[command(subcommand)]
    child: Option<ChildCommand>,
}

#[derive(Subcommand, Debug)]
enum ChildCommand {
    /// (internal) One side of the scale scenario, in its own process.
    #[command(hide = true)]
    ScaleChild { peer: String, connect: String, path: String, waiters: usize },
    /// (internal) A candidate of the failover scenario, in its own process.
    #[command(hide = true)]
    ElectChild { recipe: String, connect: String, path: String, id: String, session_ms: u64 },
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 3600.0 => Ok(x),
        _ => Err(format!("{s:?} is not a number of seconds in (0, 3600]")),
    }
}

pub struct Plan {
    pub quick: bool,
    pub secs: f64,
    pub repeats: usize,
    pub ns: Vec<usize>,
    pub many_locks: usize,
    pub many_tasks: usize,
    pub order_tasks: usize,
    pub sem_leases: u32,
    pub sem_contenders: usize,
    /// The read/write lock's mixes: percentages of reads.
    pub rw_reads: [u32; 2],
    pub rw_contenders: usize,
    pub leader_candidates: usize,
    /// Kills of the leader's process per failover run.
    pub failover_kills: usize,
    pub ensemble_n: usize,
    pub scale_waiters: usize,
    pub peers: Vec<Peer>,
    pub skipped: Skipped,
    /// The scenarios to run (all of [`SCENARIOS`] unless `--only`).
    pub only: Vec<String>,
}

/// One step of the run, in order.
#[derive(Clone, Copy, Debug)]
enum Step {
    Warmup(Peer),
    RawWrite,
    Uncontended(usize, Peer),
    Contended(usize, usize, Peer),
    ManyLocks(usize, Peer),
    PerOrder(usize, Peer),
    /// A run of a recipe other than the mutex: (repeat, recipe, peer).
    Recipe(usize, Recipe, Peer),
    /// Leader failover after kills of the leader's process: (repeat, recipe, peer).
    Failover(usize, Recipe, Peer),
    Scale(Peer),
    NetworkStart,
    NetworkRawWrite,
    EnsembleRawWrite,
    NetworkUncontended(usize, Peer),
    NetworkContended(usize, usize, Peer),
    EnsembleStart,
    EnsembleWarmup(Peer),
    EnsembleUncontended(usize, Peer),
    EnsembleContended(usize, Peer),
}

impl Plan {
    fn runs(&self, scenario: &str) -> bool {
        self.only.iter().any(|s| s == scenario)
    }

    /// The recipes of the `--only` name `scenario` beside the mutex, in the report's order.
    pub fn recipes(&self, scenario: &str) -> Vec<Recipe> {
        match scenario {
            "semaphore" => vec![Recipe::Semaphore(self.sem_leases)],
            "rwlock" => self.rw_reads.iter().map(|&p| Recipe::ReadWrite(p)).collect(),
            "leader" => vec![Recipe::Latch, Recipe::Selector],
            _ => Vec::new(),
        }
    }

    /// Every recipe beside the mutex, in the report's order.
    pub fn all_recipes(&self) -> Vec<Recipe> {
        ["semaphore", "rwlock", "leader"].iter().flat_map(|s| self.recipes(s)).collect()
    }

    /// The contenders of a run of `recipe` (the rows' N; the mutex's scenarios have their own,
    /// and the ensemble's is given for it).
    pub fn contenders(&self, recipe: Recipe) -> usize {
        match recipe {
            Recipe::Semaphore(_) => self.sem_contenders,
            Recipe::ReadWrite(_) => self.rw_contenders,
            Recipe::Latch | Recipe::Selector => self.leader_candidates,
            Recipe::Mutex => self.ensemble_n,
        }
    }

    fn steps(&self) -> Vec<Step> {
        let has = |p: &Peer| self.peers.contains(p);
        // Warm-ups steady the numbers; a smoke test (--quick) needs none.
        let warm = !self.quick;
        let mut steps: Vec<Step> =
            LOCK_PEERS.iter().filter(|p| warm && has(p)).map(|&p| Step::Warmup(p)).collect();
        steps.push(Step::RawWrite);
        for r in 0..self.repeats {
            if self.runs("uncontended") {
                steps.extend(CYCLE_PEERS.iter().filter(|p| has(p)).map(|&p| Step::Uncontended(r, p)));
            }
            for &n in self.ns.iter().filter(|_| self.runs("contended")) {
                let peers = LOCK_PEERS.iter().chain([&Peer::Naive]).filter(|p| has(p));
                steps.extend(peers.map(|&p| Step::Contended(r, n, p)));
            }
            if self.runs("many-locks") {
                steps.extend(CYCLE_PEERS.iter().filter(|p| has(p)).map(|&p| Step::ManyLocks(r, p)));
            }
            if self.runs("per-order") {
                steps.extend(CYCLE_PEERS.iter().filter(|p| has(p)).map(|&p| Step::PerOrder(r, p)));
            }
            for scenario in ["semaphore", "rwlock", "leader"].into_iter().filter(|s| self.runs(s)) {
                for recipe in self.recipes(scenario) {
                    let peers = RECIPE_PEERS.iter().filter(|p| has(p) && recipe.lacking(**p).is_none());
                    steps.extend(peers.map(|&p| Step::Recipe(r, recipe, p)));
                }
            }
            if self.runs("failover") {
                for recipe in self.recipes("leader") {
                    let peers = RECIPE_PEERS.iter().filter(|p| has(p) && recipe.lacking(**p).is_none());
                    steps.extend(peers.map(|&p| Step::Failover(r, recipe, p)));
                }
            }
        }
        if self.runs("scale") {
            steps.extend(LOCK_PEERS.iter().filter(|p| has(p)).map(|&p| Step::Scale(p)));
        }
        if self.runs("network") {
            steps.extend([Step::NetworkStart, Step::NetworkRawWrite]);
            for r in 0..self.repeats {
                steps.extend(CYCLE_PEERS.iter().filter(|p| has(p)).map(|&p| Step::NetworkUncontended(r, p)));
                for n in NETWORK_NS {
                    steps.extend(
                        LOCK_PEERS.iter().filter(|p| has(p)).map(|&p| Step::NetworkContended(r, n, p)),
                    );
                }
            }
        }
        if !self.runs("ensemble") {
            return steps;
        }
        steps.push(Step::EnsembleStart);
        let contends = |p: &&Peer| **p != Peer::ZkRecipesDrop;
        steps.extend(
            ENSEMBLE_PEERS
                .iter()
                .filter(|p| warm && has(p))
                .filter(contends)
                .map(|&p| Step::EnsembleWarmup(p)),
        );
        steps.push(Step::EnsembleRawWrite);
        for r in 0..self.repeats {
            for &p in ENSEMBLE_PEERS.iter().filter(|p| has(p)) {
                steps.push(Step::EnsembleUncontended(r, p));
                if contends(&&p) {
                    steps.push(Step::EnsembleContended(r, p));
                }
            }
        }
        steps
    }

    /// Expected seconds for a step: its measured time plus setup (process start, sessions).
    fn cost(&self, step: Step) -> f64 {
        let setup = |p: Peer, sessions: usize| match p {
            Peer::Curator => 1.5 + sessions as f64 * 0.08,
            Peer::Kazoo => 0.6 + sessions as f64 * 0.01,
            _ => 0.1 + sessions as f64 * 0.005,
        };
        let warm = self.secs.min(1.0);
        match step {
            Step::Warmup(p) | Step::EnsembleWarmup(p) => warm + setup(p, 8),
            Step::RawWrite | Step::NetworkRawWrite | Step::EnsembleRawWrite => self.secs.min(3.0),
            Step::Uncontended(_, p) | Step::EnsembleUncontended(_, p) | Step::NetworkUncontended(_, p) => {
                self.secs + setup(p, 1)
            }
            Step::Contended(_, n, p) | Step::NetworkContended(_, n, p) => self.secs + setup(p, n),
            Step::EnsembleContended(_, p) => self.secs + setup(p, self.ensemble_n),
            Step::ManyLocks(_, p) => self.secs + setup(p, 1),
            Step::PerOrder(_, p) => self.secs + setup(p, 1) + if p == Peer::Kazoo { 3.5 } else { 1.0 },
            Step::Recipe(_, recipe, p) => self.secs + setup(p, self.contenders(recipe)),
            Step::Failover(_, _, p) => {
                (self.failover_kills + 1) as f64 * (setup(p, 1) + peers::FAILOVER_SESSION.as_secs_f64())
            }
            Step::Scale(p) => 1.0 + self.scale_waiters as f64 * 0.002 + setup(p, 1),
            Step::NetworkStart => 0.1,
            Step::EnsembleStart => 8.0,
        }
    }
}

fn describe(step: Step, plan: &Plan) -> String {
    let rep = |r: usize| format!("repeat {}/{}", r + 1, plan.repeats);
    match step {
        Step::Warmup(p) => format!("warm-up · {}", p.name()),
        Step::RawWrite => "raw create → delete loop".into(),
        Step::Uncontended(r, p) => format!("uncontended · {} · {}", p.name(), rep(r)),
        Step::Contended(r, n, p) => format!("contended N={n} · {} · {}", p.name(), rep(r)),
        Step::ManyLocks(r, p) => format!("many locks · {} · {}", p.name(), rep(r)),
        Step::PerOrder(r, p) => format!("per-order locks · {} · {}", p.name(), rep(r)),
        Step::Recipe(r, recipe, p) => format!("{} · {} · {}", recipe.scenario(), p.name(), rep(r)),
        Step::Failover(r, recipe, p) => format!("{} · {} · {}", failover_scenario(recipe), p.name(), rep(r)),
        Step::Scale(p) => format!("scale {} waiters · {}", plan.scale_waiters, p.name()),
        Step::NetworkStart => "starting a proxy: a 1 ms round trip".into(),
        Step::NetworkRawWrite => "raw create → delete loop, 1 ms network".into(),
        Step::EnsembleRawWrite => "raw create → delete loop, ensemble follower".into(),
        Step::NetworkUncontended(r, p) => format!("1 ms network uncontended · {} · {}", p.name(), rep(r)),
        Step::NetworkContended(r, n, p) => {
            format!("1 ms network contended N={n} · {} · {}", p.name(), rep(r))
        }
        Step::EnsembleStart => "starting a 3-node ensemble".into(),
        Step::EnsembleWarmup(p) => format!("ensemble warm-up · {}", p.name()),
        Step::EnsembleUncontended(r, p) => format!("ensemble uncontended · {} · {}", p.name(), rep(r)),
        Step::EnsembleContended(r, p) => {
            format!("ensemble contended N={} · {} · {}", plan.ensemble_n, p.name(), rep(r))
        }
    }
}

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

/// A row from a contended run: rate, packets and CPU per operation, overlaps, and the p50/p99
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
        packets_per_op: c.server.packets as f64 / ops,
        overlaps,
        cpu_us_per_op: c.cpu_ns as f64 / 1000.0 / ops,
        server_cpu_us_per_op: server_cpu_us(c.server, ops),
        ..Row::new(scenario, peer, n, repeat, c.holds.len() as f64 / c.secs)
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
        packets_per_op: c.server.packets as f64 / ops,
        cpu_us_per_op: c.cpu_ns as f64 / 1000.0 / ops,
        server_cpu_us_per_op: server_cpu_us(c.server, ops),
        ..Row::new(scenario, peer, n, repeat, c.count as f64 / c.secs)
    }
}

fn server_config(nodes: usize, heap_mb: u32) -> ClusterConfig {
    ClusterConfig {
        nodes,
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
    let mut standalone = Some(ZkCluster::start(server_config(1, 768)).await.map_err(|e| e.to_string())?);
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

    for step in steps {
        progress.step(&describe(step, &plan));
        let zk = || standalone.as_ref().ok_or_else(|| "the standalone server is gone".to_string());
        // The ensemble, reached through its follower (see `follower` above).
        let on_follower = || -> Result<Target<'_>, String> {
            let zk = ensemble.as_ref().ok_or("no ensemble")?;
            Ok(Target { zk, connect: follower.as_ref().ok_or("no follower")?.1.clone() })
        };
        match step {
            Step::Warmup(peer) => {
                peers::contend(
                    &Target::direct(zk()?),
                    peer,
                    8,
                    plan.secs.min(1.0),
                    &path("warmup"),
                    &scratch,
                )
                .await?;
            }
            Step::RawWrite => {
                let row;
                (raw_p50, row) = raw_write("raw-write", &Target::direct(zk()?), &plan).await?;
                rows.push(Row { packets_per_op: 8.0, ..row });
            }
            Step::Uncontended(r, peer) => {
                let t = Target::direct(zk()?);
                let c = peers::contend(&t, peer, 1, plan.secs, &path("uncontended"), &scratch).await?;
                rows.push(measured("uncontended", peer, 1, r, c, stats::cycles));
            }
            Step::Contended(r, n, peer) => {
                let t = Target::direct(zk()?);
                let c = peers::contend(&t, peer, n, plan.secs, &path("contended"), &scratch).await?;
                rows.push(measured("contended", peer, n, r, c, stats::handoffs));
            }
            Step::ManyLocks(r, peer) => {
                let prefix = path("many");
                let c = peers::cycle_locks(zk()?, peer, plan.many_locks, plan.many_tasks, plan.secs, &prefix)
                    .await?;
                rows.push(Row {
                    extra: plan.many_locks as f64,
                    ..cycled("many-locks", peer, plan.many_tasks, r, &c)
                });
            }
            Step::PerOrder(r, peer) => {
                let root = path(&format!("orders-{}", peer.short()));
                let c = peers::cycle_locks(zk()?, peer, FRESH, plan.order_tasks, plan.secs, &root).await?;
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
            Step::Recipe(r, recipe, peer) => {
                let n = plan.contenders(recipe);
                let t = Target::direct(zk()?);
                let c = peers::contend_on(&t, peer, recipe, n, plan.secs, &path(recipe.scenario()), &scratch)
                    .await?;
                rows.push(recipe_row(recipe, peer, n, r, c));
            }
            Step::Failover(r, recipe, peer) => {
                let kills = plan.failover_kills;
                let scenario = failover_scenario(recipe);
                let mut h = peers::failover(zk()?, peer, recipe, kills, &path(scenario)).await?;
                let p50 = stats::percentile(&mut h, 50.0);
                rows.push(Row {
                    p50_us: us(p50),
                    p99_us: us(stats::percentile(&mut h, 99.0)),
                    extra: peers::FAILOVER_SESSION.as_millis() as f64,
                    ..Row::new(scenario, peer, 2, r, 1e9 / p50.max(1) as f64)
                });
            }
            Step::Scale(peer) => {
                let s = peers::scale(zk()?, peer, plan.scale_waiters, &path("scale")).await?;
                rows.push(Row {
                    p50_us: s.drain_secs * 1e6,
                    extra: s.rss_per_waiter,
                    ..Row::new("scale", peer, plan.scale_waiters, 0, plan.scale_waiters as f64 / s.drain_secs)
                });
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
            Step::NetworkUncontended(r, peer) => {
                let t = Target::through(zk()?, proxy.as_ref().ok_or("no proxy")?);
                let c = peers::contend(&t, peer, 1, plan.secs, &path("uncontended"), &scratch).await?;
                // The proxy's threads run in this process: its CPU is not the peers'.
                let row = measured("network-uncontended", peer, 1, r, c, stats::cycles);
                rows.push(Row { cpu_us_per_op: f64::NAN, ..row });
            }
            Step::NetworkContended(r, n, peer) => {
                let t = Target::through(zk()?, proxy.as_ref().ok_or("no proxy")?);
                let c = peers::contend(&t, peer, n, plan.secs, &path("contended"), &scratch).await?;
                let row = measured("network-contended", peer, n, r, c, stats::handoffs);
                rows.push(Row { cpu_us_per_op: f64::NAN, ..row });
            }
            Step::EnsembleStart => {
                proxy = None;
                // One cluster at a time: the standalone server's work is done.
                standalone = None;
                let ens = ZkCluster::start(server_config(3, 384)).await.map_err(|e| e.to_string())?;
                follower = Some(peers::a_follower(&ens).await?);
                ensemble = Some(ens);
            }
            Step::EnsembleRawWrite => {
                let t = on_follower()?;
                let row;
                (ensemble_raw_p50, row) = raw_write("ensemble-raw-write", &t, &plan).await?;
                rows.push(row);
            }
            Step::EnsembleWarmup(peer) => {
                let t = on_follower()?;
                peers::contend(&t, peer, plan.ensemble_n, plan.secs.min(1.0), &path("warmup"), &scratch)
                    .await?;
            }
            Step::EnsembleUncontended(r, peer) => {
                let t = on_follower()?;
                let c = peers::contend(&t, peer, 1, plan.secs, &path("uncontended"), &scratch).await?;
                rows.push(measured("ensemble-uncontended", peer, 1, r, c, stats::cycles));
            }
            Step::EnsembleContended(r, peer) => {
                let t = on_follower()?;
                let c = peers::contend(&t, peer, plan.ensemble_n, plan.secs, &path("contended"), &scratch)
                    .await?;
                rows.push(measured("ensemble-contended", peer, plan.ensemble_n, r, c, stats::handoffs));
            }
        }
    }
    progress.finish();
    drop(proxy);
    drop(ensemble);
    drop(standalone);
    let _ = std::fs::remove_dir_all(&scratch);

    for r in &rows {
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
    }
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
    };
    let text = summary::summarize(&groups, &context);
    std::fs::write(out.join("summary.md"), &text).map_err(|e| e.to_string())?;
    summary::plots(&groups, &plan, &out)?;
    println!("{text}");
    println!("report: {}", out.display());
    for p in &problems {
        eprintln!("PROBLEM: {p}");
    }
    Ok(problems.is_empty())
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

fn main() {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zk-bench: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    };
    if let Some(ChildCommand::ScaleChild { peer, connect, path, waiters }) = &args.child {
        if let Err(e) = runtime.block_on(peers::scale_child(peer, connect, path, *waiters)) {
            eprintln!("scale-child: {e}");
            std::process::exit(1);
        }
        return;
    }
    if let Some(ChildCommand::ElectChild { recipe, connect, path, id, session_ms }) = &args.child {
        if let Err(e) = runtime.block_on(peers::elect_child(recipe, connect, path, id, *session_ms)) {
            eprintln!("elect-child: {e}");
            std::process::exit(1);
        }
        return;
    }
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
        failover_kills: if quick { 2 } else { 5 },
        ensemble_n: 8,
        scale_waiters: if quick { 128 } else { 1024 },
        peers,
        skipped,
        only: if args.only.is_empty() {
            SCENARIOS.iter().map(|s| s.to_string()).collect()
        } else {
            args.only.clone()
        },
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
