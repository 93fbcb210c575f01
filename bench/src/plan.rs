//! The run's plan: what the options ask for, and the steps that make it up, in order, each with
//! its expected cost (for the progress line) and its description.

use std::time::Duration;

use zk_testcluster::ZkVersion;

use crate::fencing::{self, Resource};
use crate::peers::{FleetPeer, FleetPlan, Peer, Recipe};
use crate::pin::Pinning;
use crate::rows::failover_scenario;
use crate::{Skipped, NETWORK_NS};

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
/// The peers of the 3-node ensemble scenarios (zk-recipes with a dropped guard only uncontended,
/// as in [`CYCLE_PEERS`]).
const ENSEMBLE_PEERS: [Peer; 4] = [Peer::ZkRecipes, Peer::ZkRecipesDrop, Peer::LockClient, Peer::Curator];

/// What a run measures, on which server, with which peers.
#[derive(Clone)]
pub struct Plan {
    /// The ZooKeeper release every server of the run runs (`--server`).
    pub server: ZkVersion,
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
    /// The failover scenario's session timeouts (a run of it for each).
    pub failover_sessions: Vec<Duration>,
    /// `--beat-period`: the failover scenario's zk-recipes candidates' beat period (a fraction
    /// of the negotiated timeout; `None`: the library's default).
    pub beat_period: Option<f64>,
    pub ensemble_n: usize,
    pub scale_waiters: usize,
    /// The `scale-spread` queues' waiters, and the processes (one session each) they spread over.
    pub spread_ns: Vec<usize>,
    pub spread_procs: usize,
    pub peers: Vec<Peer>,
    pub skipped: Skipped,
    /// `--skip-missing`: a resource server of the fencing scenario that cannot start is left
    /// out (and named in the report) instead of stopping the run.
    pub skip_missing: bool,
    /// The scenarios to run (all of [`crate::cli::SCENARIOS`] unless `--only`).
    pub only: Vec<String>,
    /// Which CPUs the servers and the clients run on (`--pin`).
    pub pinning: Pinning,
    /// The fleet scenario's sessions, processes, phases and session timeout.
    pub fleet: FleetPlan,
}

/// Which cluster a [`Step::Settle`] loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cluster {
    Standalone,
    Ensemble,
}

/// `peers` in the order of run `r`: rotated by its index, so that no peer is always the first
/// after a warm-up, a settling or another scenario (whatever drift is left in the servers falls
/// on each peer in turn).
fn in_turn<'a>(peers: impl Iterator<Item = &'a Peer>, r: Run) -> Vec<Peer> {
    let mut peers: Vec<Peer> = peers.copied().collect();
    if !peers.is_empty() {
        let k = r.index() % peers.len();
        peers.rotate_left(k);
    }
    peers
}

/// Which run of a scenario a step is: its warm-up (run, not counted), or a counted repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    WarmUp,
    Repeat(usize),
}

impl Run {
    /// The repeat's index (0 for the warm-up, whose rows are not counted).
    pub fn index(self) -> usize {
        match self {
            Run::WarmUp => 0,
            Run::Repeat(r) => r,
        }
    }
}

/// The longest warm-up run, s (a run is shorter when `--seconds` is).
pub const WARM_UP_SECS: f64 = 1.0;

/// One step of the run, in order. A measured step names its [`Run`]: every scenario runs once
/// per peer (and per N) as a warm-up, not counted, before its counted repeats.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    RawWrite,
    /// Load the cluster until its servers' JIT compilers are quiet (see `jit.rs`), after its
    /// warm-ups and before its first counted run.
    Settle(Cluster),
    Uncontended(Run, Peer),
    Contended(Run, usize, Peer),
    ManyLocks(Run, Peer),
    PerOrder(Run, Peer),
    /// A run of a recipe other than the mutex: (run, recipe, peer).
    Recipe(Run, Recipe, Peer),
    /// Leader failover after kills of the leader's process: (run, recipe, peer, session
    /// timeout).
    Failover(Run, Recipe, Peer, Duration),
    /// A queue drained: (run, waiters, processes they spread over, peer).
    Scale(Run, usize, usize, Peer),
    /// Start the fencing scenario's PostgreSQL and Redis servers.
    FencingStart,
    /// Fenced and unfenced writes at a resource: (run, resource, workers).
    Fencing(Run, Resource, usize),
    NetworkStart,
    NetworkRawWrite,
    EnsembleRawWrite,
    NetworkUncontended(Run, Peer),
    NetworkContended(Run, usize, Peer),
    EnsembleStart,
    EnsembleUncontended(Run, Peer),
    EnsembleContended(Run, Peer),
    /// Start the fleet's 3-node ensemble (or keep the ensemble scenario's).
    FleetStart,
    /// A fleet of sessions through its phases (one run, no warm-up: it measures what sessions
    /// cost at rest, not a speed).
    Fleet(FleetPeer),
}

impl Step {
    /// The run of a measured step; `None` for the others (starts, raw writes).
    pub fn run(self) -> Option<Run> {
        match self {
            Step::Uncontended(r, _)
            | Step::Contended(r, _, _)
            | Step::ManyLocks(r, _)
            | Step::PerOrder(r, _)
            | Step::Recipe(r, _, _)
            | Step::Failover(r, _, _, _)
            | Step::Scale(r, _, _, _)
            | Step::Fencing(r, _, _)
            | Step::NetworkUncontended(r, _)
            | Step::NetworkContended(r, _, _)
            | Step::EnsembleUncontended(r, _)
            | Step::EnsembleContended(r, _) => Some(r),
            Step::RawWrite
            | Step::Settle(_)
            | Step::FencingStart
            | Step::NetworkStart
            | Step::NetworkRawWrite
            | Step::EnsembleRawWrite
            | Step::EnsembleStart
            | Step::FleetStart
            | Step::Fleet(_) => None,
        }
    }
}

impl Plan {
    pub fn runs(&self, scenario: &str) -> bool {
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

    /// Whether the scenarios get a warm-up run (not with `--quick`, a smoke test).
    pub fn warms_up(&self) -> bool {
        !self.quick
    }

    /// The runs of every measured scenario, in order: the warm-up, then the repeats.
    fn runs_in_order(&self) -> Vec<Run> {
        let warm = self.warms_up().then_some(Run::WarmUp);
        warm.into_iter().chain((0..self.repeats).map(Run::Repeat)).collect()
    }

    /// Seconds of a measured run: `--seconds`, or at most [`WARM_UP_SECS`] for a warm-up.
    pub fn secs_of(&self, run: Run) -> f64 {
        match run {
            Run::WarmUp => self.secs.min(WARM_UP_SECS),
            Run::Repeat(_) => self.secs,
        }
    }

    /// Kills of the leader per failover run: one in a warm-up.
    pub fn kills_of(&self, run: Run) -> usize {
        match run {
            Run::WarmUp => 1,
            Run::Repeat(_) => self.failover_kills,
        }
    }

    /// The standalone server's scenarios in one run (a warm-up or a repeat), peers interleaved.
    fn standalone_run(&self, r: Run, steps: &mut Vec<Step>) {
        let has = |p: &Peer| self.peers.contains(p);
        if self.runs("uncontended") {
            steps.extend(
                in_turn(CYCLE_PEERS.iter().filter(|p| has(p)), r)
                    .into_iter()
                    .map(|p| Step::Uncontended(r, p)),
            );
        }
        for &n in self.ns.iter().filter(|_| self.runs("contended")) {
            let peers = in_turn(LOCK_PEERS.iter().chain([&Peer::Naive]).filter(|p| has(p)), r);
            steps.extend(peers.into_iter().map(|p| Step::Contended(r, n, p)));
        }
        if self.runs("many-locks") {
            steps.extend(
                in_turn(CYCLE_PEERS.iter().filter(|p| has(p)), r).into_iter().map(|p| Step::ManyLocks(r, p)),
            );
        }
        if self.runs("per-order") {
            steps.extend(
                in_turn(CYCLE_PEERS.iter().filter(|p| has(p)), r).into_iter().map(|p| Step::PerOrder(r, p)),
            );
        }
        for scenario in ["semaphore", "rwlock", "leader"].into_iter().filter(|s| self.runs(s)) {
            for recipe in self.recipes(scenario) {
                let peers =
                    in_turn(RECIPE_PEERS.iter().filter(|p| has(p) && recipe.lacking(**p).is_none()), r);
                steps.extend(peers.into_iter().map(|p| Step::Recipe(r, recipe, p)));
            }
        }
        if self.runs("failover") {
            for &session in &self.failover_sessions {
                for recipe in self.recipes("leader") {
                    let peers = RECIPE_PEERS.iter().filter(|p| has(p) && recipe.lacking(**p).is_none());
                    steps.extend(peers.map(|&p| Step::Failover(r, recipe, p, session)));
                }
            }
        }
    }

    pub fn steps(&self) -> Vec<Step> {
        let has = |p: &Peer| self.peers.contains(p);
        let runs = self.runs_in_order();
        let counted = || runs.iter().copied().filter(|r| *r != Run::WarmUp);
        let warm_up = || runs.iter().copied().filter(|r| *r == Run::WarmUp);
        let mut steps = Vec::new();
        // The raw write loop, the yardstick, runs on a server the warm-up has warmed.
        for r in warm_up() {
            self.standalone_run(r, &mut steps);
            steps.push(Step::Settle(Cluster::Standalone));
        }
        steps.push(Step::RawWrite);
        for r in counted() {
            self.standalone_run(r, &mut steps);
        }
        if self.runs("scale") {
            // One counted run: a process's memory and a queue's drain do not need repeats.
            for r in warm_up().chain([Run::Repeat(0)]) {
                let n = self.scale_waiters;
                steps.extend(LOCK_PEERS.iter().filter(|p| has(p)).map(|&p| Step::Scale(r, n, 1, p)));
            }
        }
        if self.runs("scale-spread") {
            for r in warm_up().chain([Run::Repeat(0)]) {
                for &n in &self.spread_ns {
                    let procs = self.spread_procs;
                    steps.extend(LOCK_PEERS.iter().filter(|p| has(p)).map(|&p| Step::Scale(r, n, procs, p)));
                }
            }
        }
        if self.runs("fencing") {
            steps.push(Step::FencingStart);
            for &r in &runs {
                for resource in Resource::ALL {
                    steps.extend(fencing::WORKERS.map(|w| Step::Fencing(r, resource, w)));
                }
            }
        }
        if self.runs("network") {
            steps.push(Step::NetworkStart);
            let network_run = |r: Run, steps: &mut Vec<Step>| {
                let cycle = in_turn(CYCLE_PEERS.iter().filter(|p| has(p)), r);
                steps.extend(cycle.into_iter().map(|p| Step::NetworkUncontended(r, p)));
                for n in NETWORK_NS {
                    let lock = in_turn(LOCK_PEERS.iter().filter(|p| has(p)), r);
                    steps.extend(lock.into_iter().map(|p| Step::NetworkContended(r, n, p)));
                }
            };
            for r in warm_up() {
                network_run(r, &mut steps);
            }
            steps.push(Step::NetworkRawWrite);
            for r in counted() {
                network_run(r, &mut steps);
            }
        }
        if self.runs("ensemble") {
            self.ensemble_steps(&mut steps);
        }
        if self.runs("fleet") {
            self.fleet_steps(&mut steps);
        }
        steps
    }

    /// The fleet's steps: its ensemble, then the ensemble alone, the pings and each lock peer.
    fn fleet_steps(&self, steps: &mut Vec<Step>) {
        let has = |p: &Peer| self.peers.contains(p);
        steps.push(Step::FleetStart);
        let lock_peers = LOCK_PEERS.iter().filter(|p| has(p)).map(|&p| FleetPeer::Of(p));
        steps.extend([FleetPeer::Nobody, FleetPeer::Pings].into_iter().chain(lock_peers).map(Step::Fleet));
    }

    /// The ensemble scenario's steps: its start, warm-ups, settling, yardstick and repeats.
    fn ensemble_steps(&self, steps: &mut Vec<Step>) {
        let has = |p: &Peer| self.peers.contains(p);
        let runs = self.runs_in_order();
        let counted = || runs.iter().copied().filter(|r| *r != Run::WarmUp);
        let warm_up = || runs.iter().copied().filter(|r| *r == Run::WarmUp);
        steps.push(Step::EnsembleStart);
        let ensemble_run = |r: Run, steps: &mut Vec<Step>| {
            for p in in_turn(ENSEMBLE_PEERS.iter().filter(|p| has(p)), r) {
                steps.push(Step::EnsembleUncontended(r, p));
                if p != Peer::ZkRecipesDrop {
                    steps.push(Step::EnsembleContended(r, p));
                }
            }
        };
        for r in warm_up() {
            ensemble_run(r, steps);
            steps.push(Step::Settle(Cluster::Ensemble));
        }
        steps.push(Step::EnsembleRawWrite);
        for r in counted() {
            ensemble_run(r, steps);
        }
    }

    /// Expected seconds for a step: its measured time plus setup (process start, sessions).
    pub fn cost(&self, step: Step) -> f64 {
        let setup = |p: Peer, sessions: usize| match p {
            Peer::Curator => 1.5 + sessions as f64 * 0.08,
            Peer::Kazoo => 0.6 + sessions as f64 * 0.01,
            _ => 0.1 + sessions as f64 * 0.005,
        };
        let secs = step.run().map_or(self.secs, |r| self.secs_of(r));
        match step {
            Step::RawWrite | Step::NetworkRawWrite | Step::EnsembleRawWrite => self.secs.min(3.0),
            // Usually a few slices; the progress line is corrected as it goes.
            Step::Settle(_) => 4.0 * crate::jit::SLICE.as_secs_f64(),
            Step::Uncontended(_, p) | Step::EnsembleUncontended(_, p) | Step::NetworkUncontended(_, p) => {
                secs + setup(p, 1)
            }
            Step::Contended(_, n, p) | Step::NetworkContended(_, n, p) => secs + setup(p, n),
            Step::EnsembleContended(_, p) => secs + setup(p, self.ensemble_n),
            Step::ManyLocks(_, p) => secs + setup(p, 1),
            Step::PerOrder(_, p) => secs + setup(p, 1) + if p == Peer::Kazoo { 3.5 } else { 1.0 },
            Step::Recipe(_, recipe, p) => secs + setup(p, self.contenders(recipe)),
            Step::Failover(r, _, p, t) => {
                (self.kills_of(r) + 1) as f64 * (setup(p, 1) + 1.5 * t.as_secs_f64())
            }
            Step::Scale(_, n, procs, p) => 1.0 + n as f64 * 0.002 + procs as f64 * setup(p, 1),
            Step::NetworkStart => 0.1,
            Step::FencingStart => 3.0,
            Step::Fencing(_, _, workers) => 2.0 * secs + 0.2 + workers as f64 * 0.05,
            Step::EnsembleStart => 8.0,
            Step::FleetStart => 8.0,
            Step::Fleet(f) => {
                let phase = self.fleet.phase_secs + self.fleet.settle().as_secs_f64();
                let sessions = self.fleet.sessions / self.fleet.procs.max(1);
                let start = match f {
                    FleetPeer::Of(p) => setup(p, sessions),
                    FleetPeer::Nobody | FleetPeer::Pings => setup(Peer::LockClient, sessions),
                };
                start + f.phases().len() as f64 * phase
            }
        }
    }
}

pub fn describe(step: Step, plan: &Plan) -> String {
    let rep = |r: Run| match r {
        Run::WarmUp => "warm-up".to_string(),
        Run::Repeat(r) => format!("repeat {}/{}", r + 1, plan.repeats),
    };
    match step {
        Step::RawWrite => "raw create → delete loop".into(),
        Step::Settle(Cluster::Standalone) => "loading the server until its JIT compilers are quiet".into(),
        Step::Settle(Cluster::Ensemble) => "loading the ensemble until its JIT compilers are quiet".into(),
        Step::Uncontended(r, p) => format!("uncontended · {} · {}", p.name(), rep(r)),
        Step::Contended(r, n, p) => format!("contended N={n} · {} · {}", p.name(), rep(r)),
        Step::ManyLocks(r, p) => format!("many locks · {} · {}", p.name(), rep(r)),
        Step::PerOrder(r, p) => format!("per-order locks · {} · {}", p.name(), rep(r)),
        Step::Recipe(r, recipe, p) => format!("{} · {} · {}", recipe.scenario(), p.name(), rep(r)),
        Step::Failover(r, recipe, p, t) => {
            format!("{} · {} s sessions · {} · {}", failover_scenario(recipe), t.as_secs(), p.name(), rep(r))
        }
        Step::Scale(r, n, 1, p) => format!("scale {n} waiters · {} · {}", p.name(), rep(r)),
        Step::Scale(r, n, procs, p) => {
            format!("scale {n} waiters over {procs} processes · {} · {}", p.name(), rep(r))
        }
        Step::NetworkStart => "starting a proxy: a 1 ms round trip".into(),
        Step::FencingStart => "fencing: starting PostgreSQL and Redis".into(),
        Step::Fencing(r, resource, w) => {
            format!(
                "fencing · {} · {w} worker{} · {}",
                resource.name(),
                if w == 1 { "" } else { "s" },
                rep(r)
            )
        }
        Step::NetworkRawWrite => "raw create → delete loop, 1 ms network".into(),
        Step::EnsembleRawWrite => "raw create → delete loop, ensemble follower".into(),
        Step::NetworkUncontended(r, p) => format!("1 ms network uncontended · {} · {}", p.name(), rep(r)),
        Step::NetworkContended(r, n, p) => {
            format!("1 ms network contended N={n} · {} · {}", p.name(), rep(r))
        }
        Step::EnsembleStart => "starting a 3-node ensemble".into(),
        Step::FleetStart => "fleet: a 3-node ensemble".into(),
        Step::Fleet(f) => format!("fleet of {} sessions · {}", plan.fleet.sessions, f.name()),
        Step::EnsembleUncontended(r, p) => format!("ensemble uncontended · {} · {}", p.name(), rep(r)),
        Step::EnsembleContended(r, p) => {
            format!("ensemble contended N={} · {} · {}", plan.ensemble_n, p.name(), rep(r))
        }
    }
}

#[cfg(test)]
mod tests;
