//! The run's plan: what the options ask for, and the steps that make it up, in order, each with
//! its expected cost (for the progress line) and its description.

use crate::fencing::{self, Resource};
use crate::peers::{self, Peer, Recipe};
use crate::{failover_scenario, Skipped, NETWORK_NS};

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
    /// `--skip-missing`: a resource server of the fencing scenario that cannot start is left
    /// out (and named in the report) instead of stopping the run.
    pub skip_missing: bool,
    /// The scenarios to run (all of [`crate::cli::SCENARIOS`] unless `--only`).
    pub only: Vec<String>,
}

/// One step of the run, in order.
#[derive(Clone, Copy, Debug)]
pub enum Step {
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
    /// Start the fencing scenario's PostgreSQL and Redis servers.
    FencingStart,
    /// Fenced and unfenced writes at a resource: (repeat, resource, workers).
    Fencing(usize, Resource, usize),
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

    pub fn steps(&self) -> Vec<Step> {
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
        if self.runs("fencing") {
            steps.push(Step::FencingStart);
            for r in 0..self.repeats {
                for resource in Resource::ALL {
                    steps.extend(fencing::WORKERS.map(|w| Step::Fencing(r, resource, w)));
                }
            }
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
    pub fn cost(&self, step: Step) -> f64 {
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
            Step::FencingStart => 3.0,
            Step::Fencing(_, _, workers) => 2.0 * self.secs + 0.2 + workers as f64 * 0.05,
            Step::EnsembleStart => 8.0,
        }
    }
}

pub fn describe(step: Step, plan: &Plan) -> String {
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
        Step::EnsembleWarmup(p) => format!("ensemble warm-up · {}", p.name()),
        Step::EnsembleUncontended(r, p) => format!("ensemble uncontended · {} · {}", p.name(), rep(r)),
        Step::EnsembleContended(r, p) => {
            format!("ensemble contended N={} · {} · {}", plan.ensemble_n, p.name(), rep(r))
        }
    }
}
