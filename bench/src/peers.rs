//! The peers and how each runs a scenario. zk-recipes, `LockClient` and the naive recipe run in
//! this process (each contender with its own session); Curator and kazoo run in their driver
//! processes (`tests/peers/`), each contender a thread with its own session.
//!
//! Here: the peers, the recipes, where they connect and the sessions and driver processes they
//! run in. Each kind of run has a module of its own: `contend` (N contenders on one recipe),
//! `cycles` (many locks, per-order locks), `failover`, `scale` (one process or spread);
//! `server_work` reads what the servers did during a run.

use std::time::Duration;

use zk_recipes::zookeeper_client::{Acls, Client, CreateMode, LockOptions, LockPrefix};
use zk_testcluster::{FaultProxy, ZkCluster};

use crate::clock::{now_ns, process_cpu_ns};
use crate::driver::Driver;
use crate::ours;
use crate::stats::Hold;

#[allow(dead_code)]
#[path = "../../tests/common/peers.rs"]
mod drivers;

pub use drivers::{repo, target_dir};

mod contend;
mod cycles;
mod failover;
mod fleet;
mod scale;
mod server_work;

pub use contend::{contend, contend_on, Contended};
pub use cycles::{cycle_locks, subtree_size, Cycles, FRESH};
pub use failover::{elect_child, failover, failover_row, FAILOVER_SESSION};
pub use fleet::{fleet, fleet_child, FleetPeer, FleetPlan, FleetRow, Phase};
pub use scale::{scale, scale_child, scale_scenario};
pub use server_work::ServerWork;

/// Session timeout for every contender.
const SESSION: Duration = Duration::from_secs(20);
const SESSION_MS: &str = "20000";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    ZkRecipes,
    /// zk-recipes with the guard dropped instead of `release().await`: the delete is sent at
    /// once and confirmed in the background, as `LockClient`'s release (its only one).
    ZkRecipesDrop,
    LockClient,
    Curator,
    Kazoo,
    /// The seed documents' recipe: everyone creates one EPHEMERAL node; on NodeExists, an exists
    /// watch and a retry. Herd by design.
    Naive,
}

impl Peer {
    pub fn name(self) -> &'static str {
        match self {
            Peer::ZkRecipes => "zk-recipes",
            Peer::ZkRecipesDrop => "zk-recipes, guard dropped",
            Peer::LockClient => "zookeeper-client LockClient",
            Peer::Curator => "Curator 5.4",
            Peer::Kazoo => "kazoo 2.8",
            Peer::Naive => "naive (one node, exists watch)",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Peer::ZkRecipes => "zk-recipes",
            Peer::ZkRecipesDrop => "zk-recipes-drop",
            Peer::LockClient => "lockclient",
            Peer::Curator => "curator",
            Peer::Kazoo => "kazoo",
            Peer::Naive => "naive",
        }
    }
}

/// What the contenders of a contended run take, in every peer that has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Recipe {
    /// The lock (the mutex scenarios).
    Mutex,
    /// A semaphore with this many leases, each holder keeping its lease [`SEMAPHORE_HOLD`].
    Semaphore(u32),
    /// A read/write lock where this percentage (a multiple of 10) of the operations are reads:
    /// contender `i`'s `k`-th operation reads when `(k + i) % 10 < percent / 10` (the drivers'
    /// rule too).
    ReadWrite(u32),
    /// Leader election with a latch: a term is a new latch that starts, leads, and leaves with a
    /// clean close (a closed latch can't start again, in Curator as in zk-recipes).
    Latch,
    /// Leader election with a selector: one auto-requeued selector per contender, whose task
    /// returns at once; a term is one run of the task.
    Selector,
}

impl Recipe {
    /// The scenario name of its rows (`--only` names group them: see `main.rs`).
    pub fn scenario(self) -> &'static str {
        match self {
            Recipe::Mutex => "contended",
            Recipe::Semaphore(_) => "semaphore",
            Recipe::ReadWrite(p) if p >= 50 => "rwlock-read-heavy",
            Recipe::ReadWrite(_) => "rwlock-write-heavy",
            Recipe::Latch => "leader-latch",
            Recipe::Selector => "leader-selector",
        }
    }

    /// How long a holder keeps what it took (the critical section).
    pub fn hold(self) -> Duration {
        match self {
            Recipe::Semaphore(_) => SEMAPHORE_HOLD,
            _ => Duration::ZERO,
        }
    }

    /// The drivers' RECIPE argument (`tests/peers/`).
    fn driver_arg(self, peer: Peer) -> String {
        match self {
            Recipe::Mutex => "mutex".into(),
            Recipe::Semaphore(leases) => format!("semaphore:{leases}"),
            Recipe::ReadWrite(p) => format!("rw:{p}"),
            Recipe::Latch => "latch".into(),
            Recipe::Selector if peer == Peer::Kazoo => "election".into(),
            Recipe::Selector => "selector".into(),
        }
    }

    /// Why `peer` can't run this recipe (the report's "n/a"), or `None` when it can.
    pub fn lacking(self, peer: Peer) -> Option<&'static str> {
        match (self, peer) {
            (Recipe::Mutex, _) | (_, Peer::ZkRecipes | Peer::Curator) => None,
            (Recipe::Latch, Peer::Kazoo) => Some(
                "kazoo has no latch: its Election runs a function while it leads, as a selector \
                 (measured in the selector row)",
            ),
            (Recipe::ReadWrite(_), Peer::Kazoo) => Some(
                "kazoo 2.8's ReadLock deadlocks beside queued writers: a reader waits for a writer \
                 queued after it, which waits for the reader (python-zk/kazoo#649, fixed in 2.9)",
            ),
            (_, Peer::Kazoo) => None,
            (_, Peer::LockClient) => Some("zookeeper-client has only a lock"),
            (_, Peer::ZkRecipesDrop | Peer::Naive) => Some("a mutex variant"),
        }
    }
}

/// Whether contender `i`'s `k`-th operation of a read/write mix with `percent` reads is a read.
pub fn is_read(i: usize, k: u64, percent: u32) -> bool {
    (k + i as u64) % 10 < u64::from(percent / 10)
}

/// A raw `zookeeper-client` session (for `LockClient`, the naive recipe and raw operations).
pub async fn raw_connect(connect: &str) -> Result<Client, String> {
    Client::connector()
        .with_session_timeout(SESSION)
        .connect(connect)
        .await
        .map_err(|e| format!("connect {connect}: {e}"))
}

/// Where the peers connect: a cluster, directly or through a proxy that delays every byte (a
/// network between the clients and the servers). The server-side counters are the cluster's.
pub struct Target<'a> {
    pub zk: &'a ZkCluster,
    pub connect: String,
}

impl<'a> Target<'a> {
    pub fn direct(zk: &'a ZkCluster) -> Target<'a> {
        Target { zk, connect: zk.connect_string() }
    }

    pub fn through(zk: &'a ZkCluster, proxy: &FaultProxy) -> Target<'a> {
        Target { zk, connect: proxy.connect_string() }
    }
}

/// How a contender reaches ZooKeeper: a session of ours, or a raw client for the other peers.
enum Session {
    Ours(ours::Handle),
    Raw(Client),
}

async fn session_for(peer: Peer, connect: &str) -> Result<Session, String> {
    Ok(match peer {
        Peer::ZkRecipes | Peer::ZkRecipesDrop => Session::Ours(ours::connect(connect, SESSION).await?),
        _ => Session::Raw(raw_connect(connect).await?),
    })
}

fn lock_options() -> Result<LockOptions<'static>, String> {
    LockOptions::new(Acls::anyone_all())
        .with_ancestor_options(CreateMode::Container.with_acls(Acls::anyone_all()))
        .map_err(|e| e.to_string())
}

/// One acquire → release cycle of `LockClient` on `path`, returning the hold.
async fn lockclient_cycle(client: &Client, path: &str) -> Result<Hold, String> {
    let prefix = LockPrefix::new_curator(path, "lock-").map_err(|e| e.to_string())?;
    let lock = client.lock(prefix, b"", lock_options()?).await.map_err(|e| e.to_string())?;
    let acquired = now_ns();
    let hold = (acquired, now_ns());
    drop(lock); // its release: a background delete
    Ok(hold)
}

fn driver(peer: Peer, args: &[&str]) -> Result<Driver, String> {
    let cmd = match peer {
        Peer::Curator => drivers::curator(args),
        Peer::Kazoo => drivers::kazoo(args),
        other => return Err(format!("{} has no driver process", other.name())),
    };
    Driver::spawn(peer.short(), cmd)
}

fn driver_cpu(d: &Driver) -> Result<u64, String> {
    process_cpu_ns(d.pid()).ok_or_else(|| format!("no /proc/{}/stat", d.pid()))
}

/// The cost of one write round trip: a raw create → delete loop on one node. Returns cycles.
pub async fn raw_create_delete(target: &Target<'_>, secs: f64) -> Result<Vec<u64>, String> {
    let client = raw_connect(&target.connect).await?;
    let node = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let end = now_ns() + (secs * 1e9) as u64;
    let mut cycles = Vec::new();
    while now_ns() < end {
        let t0 = now_ns();
        client.create("/raw-write", b"", &node).await.map_err(|e| e.to_string())?;
        client.delete("/raw-write", None).await.map_err(|e| e.to_string())?;
        cycles.push(now_ns() - t0);
    }
    Ok(cycles)
}

/// A follower of `zk` (its index and its connect string), once the ensemble has a leader.
pub async fn a_follower(zk: &ZkCluster) -> Result<(usize, String), String> {
    let leader = zk.wait_for_leader().await.map_err(|e| e.to_string())?;
    let i = (0..zk.len()).find(|&i| i != leader).ok_or("the ensemble has no follower")?;
    let addr = zk.client_addr(i).map_err(|e| e.to_string())?;
    Ok((i, addr.to_string()))
}

/// How long a semaphore contender keeps its lease (every peer), so that holders coexist and the
/// check that at most `leases` hold at once has something to count.
pub const SEMAPHORE_HOLD: Duration = Duration::from_millis(1);
