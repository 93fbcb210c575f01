//! Contended runs: N contenders, each with its own session, taking one recipe on one path
//! for a while, in this process or in a driver process.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use zk_recipes::zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use super::{
    driver, driver_cpu, is_read, lockclient_cycle, raw_connect, session_for, Peer, Recipe, ServerWork,
    Session, Target, SESSION_MS,
};
use crate::clock::{now_ns, self_cpu_ns};
use crate::ours;
use crate::stats::Hold;

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
