//! The peers and how each runs a scenario. zk-recipes, `LockClient` and the naive recipe run in
//! this process (each contender with its own session); Curator and kazoo run in their driver
//! processes (`tests/peers/`), each contender a thread with its own session.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use zk_recipes::zookeeper_client::{Acls, Client, CreateMode, Error as ZkError, LockOptions, LockPrefix};
use zk_recipes::InterProcessMutex;
use zk_testcluster::ZkCluster;

use crate::clock::now_ns;
use crate::driver::Driver;
use crate::stats::Hold;

#[allow(dead_code)]
#[path = "../../tests/common/peers.rs"]
mod drivers;

pub use drivers::target_dir;

/// Session timeout for every contender.
const SESSION: Duration = Duration::from_secs(20);
const SESSION_MS: &str = "20000";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    ZkRecipes,
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
            Peer::LockClient => "zookeeper-client LockClient",
            Peer::Curator => "Curator 5.4",
            Peer::Kazoo => "kazoo 2.8",
            Peer::Naive => "naive (one node, exists watch)",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Peer::ZkRecipes => "zk-recipes",
            Peer::LockClient => "lockclient",
            Peer::Curator => "curator",
            Peer::Kazoo => "kazoo",
            Peer::Naive => "naive",
        }
    }
}

/// What a contended run produced.
pub struct Contended {
    pub secs: f64,
    pub holds: Vec<Hold>,
    pub packets: i64,
}

async fn connect_n(zk: &ZkCluster, n: usize) -> Result<Vec<Client>, String> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(zk_recipes::connect(&zk.connect_string(), SESSION).await.map_err(|e| e.to_string())?);
    }
    Ok(clients)
}

async fn packets(zk: &ZkCluster) -> Result<i64, String> {
    Ok(zk.mntr(0).await.map_err(|e| e.to_string())?.packets())
}

/// One contender's loop until `stop`, returning its holds.
async fn contender(
    peer: Peer,
    client: Client,
    path: String,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Hold>, String> {
    let mut holds = Vec::new();
    let mutex = InterProcessMutex::new(client.clone(), &path).map_err(|e| e.to_string())?;
    let node = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    while !stop.load(Ordering::Relaxed) {
        match peer {
            Peer::ZkRecipes => {
                let guard = mutex.acquire().await.map_err(|e| e.to_string())?;
                let acquired = now_ns();
                holds.push((acquired, now_ns()));
                guard.release().await.map_err(|e| e.to_string())?;
            }
            Peer::LockClient => {
                let prefix = LockPrefix::new_curator(&path, "lock-").map_err(|e| e.to_string())?;
                let options = LockOptions::new(Acls::anyone_all())
                    .with_ancestor_options(CreateMode::Container.with_acls(Acls::anyone_all()))
                    .map_err(|e| e.to_string())?;
                let lock = client.lock(prefix, b"", options).await.map_err(|e| e.to_string())?;
                let acquired = now_ns();
                holds.push((acquired, now_ns()));
                drop(lock); // its release: a background delete
            }
            Peer::Naive => {
                let lock = format!("{path}/lock");
                match client.create(&lock, b"", &node).await {
                    Ok(_) => {
                        let acquired = now_ns();
                        holds.push((acquired, now_ns()));
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
            Peer::Curator | Peer::Kazoo => unreachable!("process peers run in their drivers"),
        }
    }
    mutex.settled().await;
    Ok(holds)
}

/// N contenders on one lock for `secs`.
pub async fn contend(
    zk: &ZkCluster,
    peer: Peer,
    n: usize,
    secs: f64,
    path: &str,
    scratch: &Path,
) -> Result<Contended, String> {
    match peer {
        Peer::Curator | Peer::Kazoo => contend_in_driver(zk, peer, n, secs, path, scratch).await,
        _ => contend_here(zk, peer, n, secs, path).await,
    }
}

async fn contend_here(
    zk: &ZkCluster,
    peer: Peer,
    n: usize,
    secs: f64,
    path: &str,
) -> Result<Contended, String> {
    let clients = connect_n(zk, n).await?;
    if peer == Peer::Naive {
        let _ = clients[0].mkdir(path, &CreateMode::Persistent.with_acls(Acls::anyone_all())).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let before = packets(zk).await?;
    let started = now_ns();
    let tasks: Vec<_> = clients
        .iter()
        .map(|c| tokio::spawn(contender(peer, c.clone(), path.to_string(), stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut holds = Vec::new();
    for t in tasks {
        holds.extend(t.await.map_err(|e| e.to_string())??);
    }
    let secs = (now_ns() - started) as f64 / 1e9;
    // LockClient releases in the background: let the queue drain before counting packets.
    while clients[0].list_children(path).await.map(|c| !c.is_empty()).unwrap_or(false) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let packets = packets(zk).await? - before;
    Ok(Contended { secs, holds, packets })
}

fn driver(peer: Peer, args: &[&str]) -> Result<Driver, String> {
    let cmd = match peer {
        Peer::Curator => drivers::curator(args),
        Peer::Kazoo => drivers::kazoo(args),
        other => return Err(format!("{} has no driver process", other.name())),
    };
    Driver::spawn(peer.short(), cmd)
}

async fn contend_in_driver(
    zk: &ZkCluster,
    peer: Peer,
    n: usize,
    secs: f64,
    path: &str,
    scratch: &Path,
) -> Result<Contended, String> {
    let out = scratch.join(format!("{}-{n}.holds", peer.short()));
    let connect = zk.connect_string();
    let (n_s, out_s) = (n.to_string(), out.display().to_string());
    let mut d = driver(peer, &["contend", &connect, path, &n_s, "0", &out_s, SESSION_MS])?;
    tokio::task::block_in_place(|| d.expect("READY"))?;
    let before = packets(zk).await?;
    let started = now_ns();
    d.say("go");
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    d.say("stop");
    tokio::task::block_in_place(|| d.expect("DONE"))?;
    let secs = (now_ns() - started) as f64 / 1e9;
    let packets = packets(zk).await? - before;
    tokio::task::block_in_place(|| d.finish())?;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let holds = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(a, r)| Some((a.parse().ok()?, r.parse().ok()?)))
        .collect();
    Ok(Contended { secs, holds, packets })
}

/// The cost of one write round trip: a raw create → delete loop on one node. Returns cycles.
pub async fn raw_create_delete(zk: &ZkCluster, secs: f64) -> Result<Vec<u64>, String> {
    let client = zk_recipes::connect(&zk.connect_string(), SESSION).await.map_err(|e| e.to_string())?;
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

/// One process, one session, `tasks` concurrent tasks cycling over `locks` paths. Returns cycles/s.
pub async fn many_locks(
    zk: &ZkCluster,
    peer: Peer,
    locks: usize,
    tasks: usize,
    secs: f64,
    prefix: &str,
) -> Result<f64, String> {
    if matches!(peer, Peer::Curator) {
        let connect = zk.connect_string();
        let (l, t, s) = (locks.to_string(), tasks.to_string(), secs.to_string());
        let mut d = driver(peer, &["many", &connect, prefix, &l, &t, &s, SESSION_MS])?;
        tokio::task::block_in_place(|| d.expect("READY"))?;
        d.say("go");
        let line = tokio::task::block_in_place(|| d.expect("COUNT"))?;
        tokio::task::block_in_place(|| d.finish())?;
        let count: f64 = line.trim_start_matches("COUNT ").parse().map_err(|_| format!("bad line {line}"))?;
        return Ok(count / secs);
    }
    let client = zk_recipes::connect(&zk.connect_string(), SESSION).await.map_err(|e| e.to_string())?;
    let count = Arc::new(AtomicU64::new(0));
    let end = now_ns() + (secs * 1e9) as u64;
    let started = now_ns();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (client, count, prefix) = (client.clone(), count.clone(), prefix.to_string());
        handles.push(tokio::spawn(async move {
            let mut i = t;
            while now_ns() < end {
                let path = format!("{prefix}/l{}", i % locks);
                match peer {
                    Peer::ZkRecipes => {
                        // A handle per acquisition: handles on one session still exclude each other.
                        let m = InterProcessMutex::new(client.clone(), &path).map_err(|e| e.to_string())?;
                        m.acquire()
                            .await
                            .map_err(|e| e.to_string())?
                            .release()
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    _ => {
                        let p = LockPrefix::new_curator(&path, "lock-").map_err(|e| e.to_string())?;
                        let o = LockOptions::new(Acls::anyone_all())
                            .with_ancestor_options(CreateMode::Container.with_acls(Acls::anyone_all()))
                            .map_err(|e| e.to_string())?;
                        drop(client.lock(p, b"", o).await.map_err(|e| e.to_string())?);
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
    Ok(count.load(Ordering::Relaxed) as f64 / ((now_ns() - started) as f64 / 1e9))
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
    let client = zk_recipes::connect(connect, SESSION).await.map_err(|e| e.to_string())?;
    let lockclient = peer == Peer::LockClient.short();
    let opts = || {
        LockOptions::new(Acls::anyone_all())
            .with_ancestor_options(CreateMode::Container.with_acls(Acls::anyone_all()))
    };
    let holder = InterProcessMutex::new(client.clone(), path).map_err(|e| e.to_string())?;
    let mut ours_guard = None;
    let mut theirs_guard = None;
    if lockclient {
        let p = LockPrefix::new_curator(path, "lock-").map_err(|e| e.to_string())?;
        theirs_guard =
            Some(client.lock(p, b"", opts().map_err(|e| e.to_string())?).await.map_err(|e| e.to_string())?);
    } else {
        ours_guard = Some(holder.acquire().await.map_err(|e| e.to_string())?);
    }
    println!("BASE");
    wait_for("spawn");
    let done = Arc::new(AtomicU64::new(0));
    for _ in 0..waiters {
        let (client, done, path) = (client.clone(), done.clone(), path.to_string());
        tokio::spawn(async move {
            if lockclient {
                let p = LockPrefix::new_curator(&path, "lock-").expect("prefix");
                let o = LockOptions::new(Acls::anyone_all())
                    .with_ancestor_options(CreateMode::Container.with_acls(Acls::anyone_all()))
                    .expect("options");
                drop(client.lock(p, b"", o).await.expect("lock"));
            } else {
                let m = InterProcessMutex::new(client, &path).expect("path");
                m.acquire().await.expect("acquire").release().await.expect("release");
            }
            done.fetch_add(1, Ordering::SeqCst);
        });
    }
    while client.list_children(path).await.map(|c| c.len()).unwrap_or(0) < waiters + 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("QUEUED");
    wait_for("go");
    let t0 = now_ns();
    drop(theirs_guard);
    if let Some(g) = ours_guard {
        g.release().await.map_err(|e| e.to_string())?;
    }
    while done.load(Ordering::SeqCst) < waiters as u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    println!("DRAINED_NS {}", now_ns() - t0);
    wait_for("exit");
    Ok(())
}
