//! The peers and how each runs a scenario. zk-recipes, `LockClient` and the naive recipe run in
//! this process (each contender with its own session); Curator and kazoo run in their driver
//! processes (`tests/peers/`), each contender a thread with its own session.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use zk_recipes::zookeeper_client::{Acls, Client, CreateMode, Error as ZkError, LockOptions, LockPrefix};
use zk_testcluster::{FaultProxy, ZkCluster};

use crate::clock::{now_ns, process_cpu_ns, self_cpu_ns};
use crate::driver::Driver;
use crate::ours;
use crate::stats::Hold;

#[allow(dead_code)]
#[path = "../../tests/common/peers.rs"]
mod drivers;

pub use drivers::{repo, target_dir};

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

/// The holds a contender logged and, for a read/write lock, which of them were writes.
#[derive(Default)]
pub struct Log {
    pub holds: Vec<Hold>,
    pub writes: Vec<Hold>,
}

impl Log {
    fn push(&mut self, hold: Hold, write: bool) {
        self.holds.push(hold);
        if write {
            self.writes.push(hold);
        }
    }

    fn extend(&mut self, other: Log) {
        self.holds.extend(other.holds);
        self.writes.extend(other.writes);
    }

    /// Parses a driver's `ACQUIRED_NS RELEASING_NS[ r|w]` lines.
    fn parse(text: &str) -> Log {
        let mut log = Log::default();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(Ok(a)), Some(Ok(r))) = (words.next().map(str::parse), words.next().map(str::parse))
            else {
                continue;
            };
            log.push((a, r), words.next() == Some("w"));
        }
        log
    }
}

/// What a contended run produced.
pub struct Contended {
    pub secs: f64,
    pub holds: Vec<Hold>,
    /// The holds that were writes (read/write lock runs; empty otherwise).
    pub writes: Vec<Hold>,
    pub server: ServerWork,
    /// User + system CPU time of the client process(es) during the run.
    pub cpu_ns: u64,
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

/// The servers' side of a run: packets (received + sent, `mntr`) and CPU time (user + system of
/// every node's JVM, `None` when a node's process can't be read), summed over every node.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerWork {
    pub packets: i64,
    pub cpu_ns: Option<u64>,
}

impl ServerWork {
    /// The cluster's counters now.
    pub async fn read(zk: &ZkCluster) -> Result<ServerWork, String> {
        let mut packets = 0;
        for i in 0..zk.len() {
            packets += zk.mntr(i).await.map_err(|e| e.to_string())?.packets();
        }
        let pids = zk.pids();
        let cpu_ns = if pids.len() == zk.len() {
            pids.iter().map(|&pid| process_cpu_ns(pid)).sum::<Option<u64>>()
        } else {
            None
        };
        Ok(ServerWork { packets, cpu_ns })
    }

    /// The work done since `self` was read.
    pub async fn since(self, zk: &ZkCluster) -> Result<ServerWork, String> {
        let now = ServerWork::read(zk).await?;
        Ok(ServerWork {
            packets: now.packets - self.packets,
            cpu_ns: now.cpu_ns.zip(self.cpu_ns).map(|(a, b)| a.saturating_sub(b)),
        })
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

/// The signal that ends a run: contenders check it between cycles, or wait for it.
pub type Stop = tokio::sync::watch::Receiver<bool>;

fn stopped(stop: &Stop) -> bool {
    *stop.borrow()
}

/// One contender's loop until `stop`, returning its holds.
async fn contender(
    peer: Peer,
    recipe: Recipe,
    session: Session,
    i: usize,
    path: String,
    stop: Stop,
) -> Result<Log, String> {
    let mut log = Log::default();
    let node = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    match session {
        Session::Ours(h) => return ours_contender(peer, recipe, h, i, path, stop).await,
        Session::Raw(client) if peer == Peer::LockClient => {
            while !stopped(&stop) {
                log.push(lockclient_cycle(&client, &path).await?, false);
            }
        }
        Session::Raw(client) => {
            let lock = format!("{path}/lock");
            while !stopped(&stop) {
                match client.create(&lock, b"", &node).await {
                    Ok(_) => {
                        let acquired = now_ns();
                        log.push((acquired, now_ns()), false);
                        client.delete(&lock, None).await.map_err(|e| e.to_string())?;
                    }
                    Err(ZkError::NodeExists) => match client.check_and_watch_stat(&lock).await {
                        Ok((None, _)) => {}
                        Ok((Some(_), watcher)) => {
                            watcher.changed().await;
                        }
                        Err(e) => return Err(e.to_string()),
                    },
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
    }
    Ok(log)
}

/// One contender of ours: contender `i` of a run of `recipe` on `path`, until `stop`.
async fn ours_contender(
    peer: Peer,
    recipe: Recipe,
    h: ours::Handle,
    i: usize,
    path: String,
    mut stop: Stop,
) -> Result<Log, String> {
    let mut log = Log::default();
    let e = |e: zk_recipes::Error| e.to_string();
    match recipe {
        Recipe::Mutex => {
            let mutex = ours::mutex(&h, &path)?;
            while !stopped(&stop) {
                let guard = mutex.acquire().await.map_err(e)?;
                let acquired = now_ns();
                log.push((acquired, now_ns()), false);
                if peer == Peer::ZkRecipesDrop {
                    drop(guard); // its release: the delete is sent now, confirmed in the background
                } else {
                    guard.release().await.map_err(e)?;
                }
            }
            mutex.settled().await;
        }
        Recipe::Semaphore(leases) => {
            let sem = ours::semaphore(&h, &path, leases)?;
            while !stopped(&stop) {
                let guard = sem.acquire().await.map_err(e)?;
                let acquired = now_ns();
                tokio::time::sleep(recipe.hold()).await;
                log.push((acquired, now_ns()), false);
                guard.release().await.map_err(e)?;
            }
            sem.settled().await;
        }
        Recipe::ReadWrite(percent) => {
            let rw = ours::rwlock(&h, &path)?;
            let mut k = 0;
            while !stopped(&stop) {
                let read = is_read(i, k, percent);
                k += 1;
                let guard = if read { rw.read().await } else { rw.write().await }.map_err(e)?;
                let acquired = now_ns();
                log.push((acquired, now_ns()), !read);
                guard.release().await.map_err(e)?;
            }
            rw.settled().await;
        }
        Recipe::Latch => {
            let id = format!("bench-{i}");
            while !stopped(&stop) {
                let latch = ours::latch(&h, &path, &id)?;
                latch.start().map_err(e)?;
                latch.await_leadership().await.map_err(e)?;
                let acquired = now_ns();
                log.push((acquired, now_ns()), false);
                latch.close().await;
            }
        }
        Recipe::Selector => {
            let selector = ours::selector(&h, &path, &format!("bench-{i}"))?;
            let terms = Arc::new(std::sync::Mutex::new(Vec::new()));
            let record = terms.clone();
            selector
                .start(move |_ctx| {
                    let record = record.clone();
                    async move {
                        let acquired = now_ns();
                        let term = (acquired, now_ns());
                        record.lock().unwrap_or_else(|p| p.into_inner()).push(term);
                    }
                })
                .map_err(e)?;
            let _ = stop.wait_for(|s| *s).await;
            selector.close().await;
            let terms = std::mem::take(&mut *terms.lock().unwrap_or_else(|p| p.into_inner()));
            log.holds = terms;
        }
    }
    Ok(log)
}

/// N contenders on one lock for `secs`.
pub async fn contend(
    target: &Target<'_>,
    peer: Peer,
    n: usize,
    secs: f64,
    path: &str,
    scratch: &Path,
) -> Result<Contended, String> {
    contend_on(target, peer, Recipe::Mutex, n, secs, path, scratch).await
}

/// N contenders, each with its own session, taking `recipe` on `path` for `secs`.
pub async fn contend_on(
    target: &Target<'_>,
    peer: Peer,
    recipe: Recipe,
    n: usize,
    secs: f64,
    path: &str,
    scratch: &Path,
) -> Result<Contended, String> {
    if let Some(why) = recipe.lacking(peer) {
        return Err(format!("{} has no {}: {why}", peer.name(), recipe.scenario()));
    }
    match peer {
        Peer::Curator | Peer::Kazoo => contend_in_driver(target, peer, recipe, n, secs, path, scratch).await,
        _ => contend_here(target, peer, recipe, n, secs, path).await,
    }
}

/// Waits (bounded) until `path` has no children: `LockClient` releases in the background, and
/// its deletes must be counted in the run's packets.
async fn drained(probe: &Client, path: &str) {
    let deadline = now_ns() + 10_000_000_000;
    while now_ns() < deadline && probe.list_children(path).await.map(|c| !c.is_empty()).unwrap_or(false) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn contend_here(
    target: &Target<'_>,
    peer: Peer,
    recipe: Recipe,
    n: usize,
    secs: f64,
    path: &str,
) -> Result<Contended, String> {
    let zk = target.zk;
    let probe = raw_connect(&zk.connect_string()).await?;
    let mut sessions = Vec::with_capacity(n);
    for _ in 0..n {
        sessions.push(session_for(peer, &target.connect).await?);
    }
    if peer == Peer::Naive {
        let _ = probe.mkdir(path, &CreateMode::Persistent.with_acls(Acls::anyone_all())).await;
    }
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let before = ServerWork::read(zk).await?;
    let cpu_before = self_cpu_ns();
    let started = now_ns();
    let tasks: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(i, s)| tokio::spawn(contender(peer, recipe, s, i, path.to_string(), stop_rx.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let _ = stop.send(true);
    let mut log = Log::default();
    for t in tasks {
        log.extend(t.await.map_err(|e| e.to_string())??);
    }
    let secs = (now_ns() - started) as f64 / 1e9;
    drained(&probe, path).await;
    let cpu_ns = self_cpu_ns().saturating_sub(cpu_before);
    let server = before.since(zk).await?;
    Ok(Contended { secs, holds: log.holds, writes: log.writes, server, cpu_ns })
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

async fn contend_in_driver(
    target: &Target<'_>,
    peer: Peer,
    recipe: Recipe,
    n: usize,
    secs: f64,
    path: &str,
    scratch: &Path,
) -> Result<Contended, String> {
    let zk = target.zk;
    let out = scratch.join(format!("{}-{n}.holds", peer.short()));
    let connect = &target.connect;
    let (n_s, out_s) = (n.to_string(), out.display().to_string());
    let (cs_us, what) = (recipe.hold().as_micros().to_string(), recipe.driver_arg(peer));
    let mut d = driver(peer, &["contend", connect, path, &n_s, &cs_us, &out_s, SESSION_MS, &what])?;
    tokio::task::block_in_place(|| d.expect("READY"))?;
    let before = ServerWork::read(zk).await?;
    let cpu_before = driver_cpu(&d)?;
    let started = now_ns();
    d.say("go");
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    d.say("stop");
    tokio::task::block_in_place(|| d.expect("DONE"))?;
    let secs = (now_ns() - started) as f64 / 1e9;
    let cpu_ns = driver_cpu(&d)?.saturating_sub(cpu_before);
    let server = before.since(zk).await?;
    tokio::task::block_in_place(|| d.finish())?;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let log = Log::parse(&text);
    Ok(Contended { secs, holds: log.holds, writes: log.writes, server, cpu_ns })
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

/// What a cycling run (many locks, per-order locks) produced.
pub struct Cycles {
    pub count: u64,
    pub secs: f64,
    pub server: ServerWork,
    pub cpu_ns: u64,
}

/// Lock paths per run in [`cycle_locks`] when every operation takes a fresh lock.
pub const FRESH: usize = i32::MAX as usize;

/// One process, one session, `tasks` concurrent tasks (threads in the drivers), each cycling
/// acquire → release over the paths `{prefix}/l{i % locks}`. With `locks` = [`FRESH`], every
/// operation takes a lock path never used before (per-order locks).
pub async fn cycle_locks(
    zk: &ZkCluster,
    peer: Peer,
    locks: usize,
    tasks: usize,
    secs: f64,
    prefix: &str,
) -> Result<Cycles, String> {
    let connect = zk.connect_string();
    if locks != FRESH {
        precreate(&connect, prefix, locks).await?;
    }
    if matches!(peer, Peer::Curator | Peer::Kazoo) {
        let (l, t, s) = (locks.to_string(), tasks.to_string(), secs.to_string());
        let mut d = driver(peer, &["many", &connect, prefix, &l, &t, &s, SESSION_MS])?;
        tokio::task::block_in_place(|| d.expect("READY"))?;
        let before = ServerWork::read(zk).await?;
        let cpu_before = driver_cpu(&d)?;
        let started = now_ns();
        d.say("go");
        let line = tokio::task::block_in_place(|| d.expect("COUNT"))?;
        let secs = (now_ns() - started) as f64 / 1e9;
        let cpu_ns = driver_cpu(&d)?.saturating_sub(cpu_before);
        let server = before.since(zk).await?;
        tokio::task::block_in_place(|| d.finish())?;
        let count = line.trim_start_matches("COUNT ").parse().map_err(|_| format!("bad line {line}"))?;
        return Ok(Cycles { count, secs, server, cpu_ns });
    }
    let session = match session_for(peer, &connect).await? {
        Session::Ours(h) => Ok(h),
        Session::Raw(c) => Err(c),
    };
    let session = Arc::new(session);
    let count = Arc::new(AtomicU64::new(0));
    let before = ServerWork::read(zk).await?;
    let cpu_before = self_cpu_ns();
    let started = now_ns();
    let end = started + (secs * 1e9) as u64;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (session, count, prefix) = (session.clone(), count.clone(), prefix.to_string());
        handles.push(tokio::spawn(async move {
            let mut i = t;
            while now_ns() < end {
                let path = format!("{prefix}/l{}", i % locks);
                match session.as_ref() {
                    Ok(h) => {
                        // A handle per acquisition: handles on one session still exclude each other.
                        let m = ours::mutex(h, &path)?;
                        let guard = m.acquire().await.map_err(|e| e.to_string())?;
                        if peer == Peer::ZkRecipesDrop {
                            drop(guard);
                        } else {
                            guard.release().await.map_err(|e| e.to_string())?;
                        }
                    }
                    Err(client) => {
                        lockclient_cycle(client, &path).await?;
                    }
                }
                count.fetch_add(1, Ordering::Relaxed);
                i += tasks;
            }
            Ok::<(), String>(())
        }));
    }
    for h in handles {
        h.await.map_err(|e| e.to_string())??;
    }
    let secs = (now_ns() - started) as f64 / 1e9;
    let cpu_ns = self_cpu_ns().saturating_sub(cpu_before);
    let server = before.since(zk).await?;
    Ok(Cycles { count: count.load(Ordering::Relaxed), secs, server, cpu_ns })
}

/// Creates the lock paths `{prefix}/l{i}`, `i < locks`, as PERSISTENT nodes: many long-lived
/// locks have paths that exist. (As CONTAINER parents, the servers' fast container reaper
/// would delete the idle ones between uses, and the scenario would measure parent creation,
/// which is the per-order scenario's subject.)
async fn precreate(connect: &str, prefix: &str, locks: usize) -> Result<(), String> {
    let probe = raw_connect(connect).await?;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    probe.mkdir(prefix, &persistent).await.map_err(|e| format!("mkdir {prefix}: {e}"))?;
    for chunk in (0..locks).collect::<Vec<_>>().chunks(100) {
        // Sent back to back, a hundred at a time.
        let paths: Vec<String> = chunk.iter().map(|i| format!("{prefix}/l{i}")).collect();
        let creates: Vec<_> = paths.iter().map(|p| probe.create(p, b"", &persistent)).collect();
        for (create, path) in creates.into_iter().zip(&paths) {
            match create.await {
                Ok(_) | Err(ZkError::NodeExists) => {}
                Err(e) => return Err(format!("create {path}: {e}")),
            }
        }
    }
    Ok(())
}

/// Nodes in the subtree at `root`, `root` included; 0 when it does not exist.
pub async fn subtree_size(probe: &Client, root: &str) -> Result<u64, String> {
    match probe.count_descendants_number(root).await {
        Ok(n) => Ok(n as u64 + 1),
        Err(ZkError::NoNode) => Ok(0),
        Err(e) => Err(format!("counting {root}: {e}")),
    }
}

/// How long a semaphore contender keeps its lease (every peer), so that holders coexist and the
/// check that at most `leases` hold at once has something to count.
pub const SEMAPHORE_HOLD: Duration = Duration::from_millis(1);

/// The session timeout of the failover scenario's candidates: a kill's handover waits for the
/// killed leader's session to expire (the servers' tick is 200 ms, so 1 s is allowed).
pub const FAILOVER_SESSION: Duration = Duration::from_secs(1);

/// A candidate of the failover scenario in its own process: a driver's `elect` mode, or our
/// `zk-bench elect-child`. It prints `STARTED`, then `LEADER <CLOCK_MONOTONIC ns>` when it leads.
fn candidate(peer: Peer, recipe: Recipe, connect: &str, path: &str, i: usize) -> Result<Driver, String> {
    let id = format!("candidate-{i}");
    let session_ms = FAILOVER_SESSION.as_millis().to_string();
    let what = recipe.driver_arg(peer);
    let mut d = match peer {
        Peer::Curator | Peer::Kazoo => driver(peer, &["elect", connect, path, &id, &session_ms, &what])?,
        _ => {
            let mut cmd = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
            cmd.args(["elect-child", &what, connect, path, &id, &session_ms]);
            Driver::spawn(peer.short(), cmd)?
        }
    };
    tokio::task::block_in_place(|| d.expect("STARTED"))?;
    Ok(d)
}

/// Waits (bounded) until the election at `path` has `n` participants' nodes.
async fn participants(probe: &Client, path: &str, n: usize) -> Result<(), String> {
    let deadline = now_ns() + 30_000_000_000;
    while probe.list_children(path).await.map(|c| c.len()).unwrap_or(0) != n {
        if now_ns() > deadline {
            return Err(format!("{path}: never {n} participants"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

fn leader_at(line: &str) -> Result<u64, String> {
    line.trim_start_matches("LEADER ").trim().parse().map_err(|_| format!("bad line {line}"))
}

/// Leader failover after a kill: two candidates, each in its own process with a
/// [`FAILOVER_SESSION`] session; the leader's process is killed (SIGKILL), and the handover is
/// the time from the kill to the follower's task starting. A new follower joins before the next
/// kill. Returns the handovers, ns.
pub async fn failover(
    zk: &ZkCluster,
    peer: Peer,
    recipe: Recipe,
    kills: usize,
    path: &str,
) -> Result<Vec<u64>, String> {
    if let Some(why) = recipe.lacking(peer) {
        return Err(format!("{} has no {}: {why}", peer.name(), recipe.scenario()));
    }
    let connect = zk.connect_string();
    let probe = raw_connect(&connect).await?;
    let mut leader = candidate(peer, recipe, &connect, path, 0)?;
    tokio::task::block_in_place(|| leader.expect("LEADER"))?;
    let mut handovers = Vec::with_capacity(kills);
    for k in 0..kills {
        let follower = candidate(peer, recipe, &connect, path, k + 1)?;
        participants(&probe, path, 2).await?;
        let killed = now_ns();
        // SAFETY: kill has no memory preconditions; the pid is our child's, not yet reaped.
        unsafe {
            libc::kill(leader.pid() as libc::pid_t, libc::SIGKILL);
        }
        let mut follower = follower;
        let line = tokio::task::block_in_place(|| follower.expect("LEADER"))?;
        handovers.push(leader_at(&line)?.saturating_sub(killed));
        drop(std::mem::replace(&mut leader, follower));
    }
    leader.say("quit");
    drop(leader);
    Ok(handovers)
}

/// The child side of [`failover`] for zk-recipes: a latch or a selector that never ends its
/// term, in its own process (the drivers' `elect` protocol).
pub async fn elect_child(
    recipe: &str,
    connect: &str,
    path: &str,
    id: &str,
    session_ms: u64,
) -> Result<(), String> {
    let h = ours::connect(connect, Duration::from_millis(session_ms)).await?;
    let e = |e: zk_recipes::Error| e.to_string();
    let announce = || {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "LEADER {}", now_ns());
        let _ = out.flush();
    };
    let (_latch, _selector);
    if recipe == Recipe::Latch.driver_arg(Peer::ZkRecipes) {
        let latch = ours::latch(&h, path, id)?;
        latch.start().map_err(e)?;
        println!("STARTED");
        latch.await_leadership().await.map_err(e)?;
        announce();
        _latch = Some(latch);
    } else {
        let selector = ours::selector(&h, path, id)?;
        selector
            .start(move |ctx| async move {
                announce();
                ctx.stopped().await;
            })
            .map_err(e)?;
        println!("STARTED");
        _selector = Some(selector);
    }
    tokio::task::spawn_blocking(|| {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if line.trim() == "quit" {
                break;
            }
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    Ok(())
}

/// What the scale scenario measured.
pub struct Scale {
    pub rss_per_waiter: f64,
    pub drain_secs: f64,
}

/// `waiters` queued behind a holder in one process (one session); resident memory per waiter and
/// the time for the whole queue to drain. Rust peers run in a child `zk-bench scale-child`
/// process, so that each peer's memory is measured alone.
pub async fn scale(zk: &ZkCluster, peer: Peer, waiters: usize, path: &str) -> Result<Scale, String> {
    let connect = zk.connect_string();
    let n = waiters.to_string();
    let mut d = match peer {
        Peer::Curator | Peer::Kazoo => driver(peer, &["queue", &connect, path, &n, SESSION_MS])?,
        _ => {
            let mut cmd = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
            cmd.args(["scale-child", peer.short(), &connect, path, &n]);
            Driver::spawn(peer.short(), cmd)?
        }
    };
    tokio::task::block_in_place(|| d.expect("BASE"))?;
    let base = crate::clock::rss_bytes(d.pid());
    d.say("spawn");
    tokio::task::block_in_place(|| d.expect("QUEUED"))?;
    let queued = crate::clock::rss_bytes(d.pid());
    d.say("go");
    let line = tokio::task::block_in_place(|| d.expect("DRAINED_NS"))?;
    tokio::task::block_in_place(|| d.finish())?;
    let ns: f64 = line.trim_start_matches("DRAINED_NS ").parse().map_err(|_| format!("bad line {line}"))?;
    Ok(Scale { rss_per_waiter: queued.saturating_sub(base) as f64 / waiters as f64, drain_secs: ns / 1e9 })
}

/// The child side of [`scale`] for the Rust peers: the same protocol as the drivers' `queue` mode.
pub async fn scale_child(peer: &str, connect: &str, path: &str, waiters: usize) -> Result<(), String> {
    use std::io::BufRead;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut wait_for = |word: &str| loop {
        match lines.next() {
            Some(Ok(l)) if l.trim() == word => return,
            Some(_) => {}
            None => std::process::exit(0),
        }
    };
    let peer = if peer == Peer::LockClient.short() { Peer::LockClient } else { Peer::ZkRecipes };
    let session = Arc::new(session_for(peer, connect).await?);
    let mut ours_guard = None;
    let mut theirs_guard = None;
    match session.as_ref() {
        Session::Ours(h) => {
            ours_guard = Some(ours::mutex(h, path)?.acquire().await.map_err(|e| e.to_string())?)
        }
        Session::Raw(client) => {
            let p = LockPrefix::new_curator(path, "lock-").map_err(|e| e.to_string())?;
            theirs_guard = Some(client.lock(p, b"", lock_options()?).await.map_err(|e| e.to_string())?);
        }
    }
    println!("BASE");
    wait_for("spawn");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..waiters {
        let (session, tx, path) = (session.clone(), tx.clone(), path.to_string());
        tokio::spawn(async move {
            let outcome = match session.as_ref() {
                Session::Ours(h) => {
                    async {
                        let m = ours::mutex(h, &path)?;
                        m.acquire()
                            .await
                            .map_err(|e| e.to_string())?
                            .release()
                            .await
                            .map_err(|e| e.to_string())
                    }
                    .await
                }
                Session::Raw(client) => lockclient_cycle(client, &path).await.map(drop),
            };
            let _ = tx.send(outcome);
        });
    }
    drop(tx);
    let probe = raw_connect(connect).await?;
    while probe.list_children(path).await.map(|c| c.len()).unwrap_or(0) < waiters + 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("QUEUED");
    wait_for("go");
    let t0 = now_ns();
    drop(theirs_guard);
    if let Some(g) = ours_guard {
        g.release().await.map_err(|e| e.to_string())?;
    }
    for _ in 0..waiters {
        rx.recv().await.ok_or("a waiter vanished")??;
    }
    println!("DRAINED_NS {}", now_ns() - t0);
    wait_for("exit");
    Ok(())
}
