//! The run: the servers it starts, its steps in order (each dispatched to its scenario family's
//! function), and the report it writes.
//!
//! The families: `clusters` (the servers, proxies and raw write loops: the yardsticks), `locks`
//! (the mutex on the standalone server, on the 1 ms network and on the ensemble), `recipes`
//! (the other recipes, failover, scale, fencing), `fleet` (many sessions at rest on an ensemble).

use std::path::{Path, PathBuf};

use zk_testcluster::{FaultProxy, ZkCluster, ZkVersion};

use crate::peers::Target;
use crate::plan::{self, describe, Run, Step};
use crate::progress::Progress;
use crate::report::{self, Groups, Row};
use crate::rows::row_problems;
use crate::{fencing, jit, summary, Plan};

mod clusters;
mod fleet;
mod locks;
mod recipes;

/// How often the servers' container reaper looks for empty containers (ZooKeeper's default is a
/// minute), and how many it may delete per minute (high enough that it never pauses).
pub const REAPER_INTERVAL_MS: u64 = 500;
const REAPER_MAX_PER_MINUTE: u64 = 600_000;

/// A measured step's run: its seconds and its repeat's index.
#[derive(Clone, Copy)]
struct Measure {
    secs: f64,
    repeat: usize,
}

/// What the steps measured so far.
#[derive(Default)]
struct Results {
    rows: Vec<Row>,
    fenced: Vec<fencing::Sample>,
    /// The warm-ups' rows: not counted, but their invariants are checked.
    warm_rows: Vec<Row>,
    warm_fenced: Vec<fencing::Sample>,
    settled: Vec<(plan::Cluster, jit::Settled)>,
    /// The raw create → delete loops' p50 cycles, ns: standalone, 1 ms network, ensemble.
    raw_p50: u64,
    network_raw_p50: u64,
    ensemble_raw_p50: u64,
    fleet: Vec<crate::peers::FleetRow>,
}

/// A run in progress: its plan, the servers up now, and what it measured.
pub struct Bench {
    plan: Plan,
    scratch: PathBuf,
    run_id: std::cell::Cell<usize>,
    standalone: Option<ZkCluster>,
    ensemble: Option<ZkCluster>,
    proxy: Option<FaultProxy>,
    /// The ensemble's clients all reach one follower (as two in three clients of a 3-node
    /// ensemble do): a client that happened to land on the leader would skip the forwarding hop
    /// its peers pay, and the comparison would measure where each landed.
    follower: Option<(usize, String)>,
    fencing_servers: Option<fencing::Servers>,
    zk_version: String,
    results: Results,
}

impl Bench {
    /// A fresh path for a run of `what`.
    fn path(&self, what: &str) -> String {
        self.run_id.set(self.run_id.get() + 1);
        format!("/bench/{what}-{}", self.run_id.get())
    }

    fn zk(&self) -> Result<&ZkCluster, String> {
        self.standalone.as_ref().ok_or_else(|| "the standalone server is gone".to_string())
    }

    /// The standalone server through the 1 ms network's proxy.
    fn through_proxy(&self) -> Result<Target<'_>, String> {
        Ok(Target::through(self.zk()?, self.proxy.as_ref().ok_or("no proxy")?))
    }

    /// The ensemble, reached through its follower (see `follower`).
    fn on_follower(&self) -> Result<Target<'_>, String> {
        let zk = self.ensemble.as_ref().ok_or("no ensemble")?;
        Ok(Target { zk, connect: self.follower.as_ref().ok_or("no follower")?.1.clone() })
    }

    /// Runs one step, through its family's function.
    async fn step(&mut self, step: Step, m: Measure) -> Result<(), String> {
        match step {
            Step::RawWrite => clusters::raw_write(self).await,
            Step::Settle(cluster) => clusters::settle(self, cluster).await,
            Step::NetworkStart => clusters::network_start(self),
            Step::NetworkRawWrite => clusters::network_raw_write(self).await,
            Step::EnsembleStart => clusters::ensemble_start(self).await,
            Step::EnsembleRawWrite => clusters::ensemble_raw_write(self).await,
            Step::Uncontended(_, peer) => locks::uncontended(self, peer, m).await,
            Step::Contended(_, n, peer) => locks::contended(self, n, peer, m).await,
            Step::ManyLocks(_, peer) => locks::many_locks(self, peer, m).await,
            Step::PerOrder(_, peer) => locks::per_order(self, peer, m).await,
            Step::NetworkUncontended(_, peer) => locks::network_uncontended(self, peer, m).await,
            Step::NetworkContended(_, n, peer) => locks::network_contended(self, n, peer, m).await,
            Step::EnsembleUncontended(_, peer) => locks::ensemble_uncontended(self, peer, m).await,
            Step::EnsembleContended(_, peer) => locks::ensemble_contended(self, peer, m).await,
            Step::Recipe(_, recipe, peer) => recipes::recipe(self, recipe, peer, m).await,
            Step::Failover(run, recipe, peer, t) => recipes::failover(self, run, recipe, (peer, t), m).await,
            Step::Scale(_, n, procs, peer) => recipes::scale(self, n, procs, peer, m).await,
            Step::FencingStart => recipes::fencing_start(self).await,
            Step::Fencing(_, resource, workers) => recipes::fencing(self, resource, workers, m).await,
            Step::FleetStart => fleet::start(self).await,
            Step::Fleet(peer) => fleet::fleet(self, peer).await,
        }
    }
}

/// Runs `plan` on each of `servers` in turn, each report in `out` (one server) or in its own
/// folder `out/<version>/`, with `out/summary.md` and `out/results.csv` gathering every server's.
/// `Ok(false)` when a run went wrong, `Err` when one could not finish.
pub async fn run_on(plan: Plan, servers: &[ZkVersion], out: &Path) -> Result<bool, String> {
    if let [server] = servers {
        return run(Plan { server: *server, ..plan }, out).await;
    }
    let mut ok = true;
    let (mut summary, mut csv) = (String::new(), String::new());
    for &server in servers {
        let dir = out.join(server.to_string());
        ok &= run(Plan { server, ..plan.clone() }, &dir).await?;
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).map_err(|e| format!("{name}: {e}"));
        summary += &format!("# ZooKeeper {server} ([its report]({server}/))\n\n{}\n", read("summary.md")?);
        let lines = read("results.csv")?;
        let skip = usize::from(!csv.is_empty());
        csv.extend(lines.lines().skip(skip).map(|l| format!("{l}\n")));
    }
    std::fs::write(out.join("summary.md"), summary).map_err(|e| e.to_string())?;
    std::fs::write(out.join("results.csv"), csv).map_err(|e| e.to_string())?;
    println!("reports: {} (one folder per server)", out.display());
    Ok(ok)
}

/// Runs `plan`'s steps and writes the report into `out`. `Ok(false)` when a run went wrong (a
/// violated invariant, a peer without numbers: printed), `Err` when the run could not finish.
async fn run(plan: Plan, out: &Path) -> Result<bool, String> {
    let steps = plan.steps();
    eprintln!(
        "zk-bench: {} steps, {} s per run, {} repeat(s); starting ZooKeeper...",
        steps.len(),
        plan.secs,
        plan.repeats
    );
    let standalone = ZkCluster::start(server_config(1, 768, &plan)).await.map_err(|e| e.to_string())?;
    let zk_version = standalone.mntr(0).await.ok().and_then(|m| m.0.get("zk_version").cloned());
    let mut progress = Progress::new(steps.iter().map(|s| plan.cost(*s)).collect());
    let mut bench = Bench {
        scratch: tempfile_dir()?,
        plan,
        run_id: Default::default(),
        standalone: Some(standalone),
        ensemble: None,
        proxy: None,
        follower: None,
        fencing_servers: None,
        zk_version: zk_version.unwrap_or_default(),
        results: Results::default(),
    };
    for step in steps {
        progress.step(&describe(step, &bench.plan));
        // A warm-up runs as a repeat does, for at most WARM_UP_SECS; its rows are not counted.
        let run = step.run();
        let m = Measure {
            secs: run.map_or(bench.plan.secs, |run| bench.plan.secs_of(run)),
            repeat: run.map_or(0, Run::index),
        };
        let (counted, fenced_before) = (bench.results.rows.len(), bench.results.fenced.len());
        bench.step(step, m).await?;
        if run == Some(Run::WarmUp) {
            let r = &mut bench.results;
            r.warm_rows.extend(r.rows.drain(counted..));
            r.warm_fenced.extend(r.fenced.drain(fenced_before..));
        }
    }
    progress.finish();
    bench.report(out)
}

impl Bench {
    /// Stops the servers and writes the report; `Ok(false)` when something went wrong (printed).
    fn report(mut self, out: &Path) -> Result<bool, String> {
        drop(self.proxy.take());
        let fencing_missing = self.fencing_servers.take().map(|s| s.missing).unwrap_or_default();
        drop(self.ensemble.take());
        drop(self.standalone.take());
        let _ = std::fs::remove_dir_all(&self.scratch);
        let (plan, r) = (&self.plan, &self.results);
        // A warm-up is not counted, but what it did wrong is still wrong.
        let mut problems: Vec<String> = r.rows.iter().flat_map(row_problems).collect();
        problems.extend(r.warm_rows.iter().flat_map(row_problems).map(|p| format!("warm-up: {p}")));
        problems.extend(fencing::problems(&r.warm_fenced).into_iter().map(|p| format!("warm-up: {p}")));
        std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
        report::write_csv(&r.rows, plan.server, &out.join("results.csv")).map_err(|e| e.to_string())?;
        let groups = Groups::of(&r.rows);
        let context = summary::Context {
            plan,
            raw_p50_ns: r.raw_p50,
            network_raw_p50_ns: r.network_raw_p50,
            ensemble_raw_p50_ns: r.ensemble_raw_p50,
            ensemble_follower: self.follower.as_ref().map(|f| f.0),
            zk_version: self.zk_version.clone(),
            reaper_ms: REAPER_INTERVAL_MS,
            settled: &r.settled,
        };
        let mut text = summary::summarize(&groups, &context);
        if plan.runs("fencing") {
            fencing::write_csv(&r.fenced, &out.join("fencing.csv")).map_err(|e| e.to_string())?;
            text += &fencing::summary(&r.fenced, &fencing_missing, plan.secs, plan.repeats);
            problems.extend(fencing::problems(&r.fenced));
        }
        if plan.runs("fleet") {
            summary::fleet::write_csv(&r.fleet, plan.server, &out.join("fleet.csv"))
                .map_err(|e| e.to_string())?;
            text += &summary::fleet::summary(&r.fleet, &plan.fleet);
            problems.extend(summary::fleet::problems(&r.fleet));
        }
        let text = summary::on_server(&text, plan.server);
        std::fs::write(out.join("summary.md"), &text).map_err(|e| e.to_string())?;
        summary::plots(&groups, plan, out)?;
        println!("{text}");
        println!("report: {}", out.display());
        for p in &problems {
            eprintln!("PROBLEM: {p}");
        }
        Ok(problems.is_empty())
    }
}

/// The servers' configuration: `nodes` of them, pinned as the plan says, the reaper quick.
fn server_config(nodes: usize, heap_mb: u32, plan: &Plan) -> zk_testcluster::ClusterConfig {
    zk_testcluster::ClusterConfig {
        nodes,
        cpus: plan.pinning.servers(),
        max_client_cnxns: 0,
        force_sync: false,
        heap_mb,
        jvm_properties: vec![
            ("znode.container.checkIntervalMs".into(), REAPER_INTERVAL_MS.to_string()),
            ("znode.container.maxPerMinute".into(), REAPER_MAX_PER_MINUTE.to_string()),
        ],
        version: plan.server,
        ..zk_testcluster::ClusterConfig::default()
    }
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("zk-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}
