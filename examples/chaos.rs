//! Fault injection: mutual exclusion under ZooKeeper leader loss, follower freezes, client
//! partitions, cuts and TCP resets, paused and killed worker processes; fencing as the final guard.
//!
//! ```text
//! cargo run --release --example chaos -- [--seconds S] [--seed N]     # default 60 s per phase
//! ```
//! A 3-node ensemble; K=6 workers in 2 OS processes, each worker with its own `Session` through
//! its own fault proxy, for the whole run: a session that expires is renewed by the `Session`
//! itself (never rebuilt by hand), and the recipe built from it carries on. The report says, per
//! worker, how many session generations it lived through. A worker that holds the lock (phase 1: `InterProcessMutex`; phase 2:
//! `LeaderLatch`) writes to a fenced "storage server" inside this program: `BEGIN token` …
//! `END token`, refused when a newer token has begun (Kleppmann's fencing). The server keeps the
//! unfenced view of the same writes too, to show what the lock alone guarantees. Faults come at
//! seeded random times; the checker then verifies: no two accepted writes overlap, accepted
//! tokens strictly increase, every refused writer was told it lost the lock (`lost()`:
//! Lost, or Suspended under the default policy), and the lock directory ends empty. Exits 1 on any
//! violation.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::{TcpListener, TcpStream};
use zk_recipes::{ConnectionState, InterProcessMutex, LeaderLatch, Leadership, LockOptions, Session};
use zk_testcluster::{FaultProxy, Mode, ZkCluster};

const SESSION: Duration = Duration::from_secs(2);
const WORKERS_PER_PROCESS: usize = 3;
const PROCESSES: usize = 2;

type Error = Box<dyn std::error::Error + Send + Sync>;

// ------------------------------------------------------------------ the fenced resource

#[derive(Clone, Debug)]
struct Write {
    token: u64,
    worker: String,
    begin: Duration,
    end: Duration,
    /// Passed the fence at BEGIN (so the holder went on to do the work).
    begun: bool,
    /// Passed the fence at BEGIN and at END: the storage accepted it.
    fenced_ok: bool,
}

#[derive(Default)]
struct Resource {
    max: u64,
    open: HashMap<(String, u64), (Duration, bool)>,
    writes: Vec<Write>,
    lost_seen: Vec<(String, u64, u64)>,
    lost_unseen: Vec<(String, u64)>,
    /// Per worker and worker process (pid), in order of first report: the latest session
    /// generation its one `Session` reached.
    generations: Vec<(String, u32, u64)>,
}

/// Serves `BEGIN w t`, `END w t`, `LOSTSEEN w t ms`, `LOSTUNSEEN w t`, `GEN w pid g` lines;
/// replies OK or REJECT.
async fn serve(listener: TcpListener, state: Arc<Mutex<Resource>>, epoch: Instant) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { return };
        let state = state.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = AsyncBufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let parts: Vec<&str> = line.split_whitespace().collect();
                let now = epoch.elapsed();
                let reply = {
                    let mut r = state.lock().unwrap();
                    match parts.as_slice() {
                        ["BEGIN", w, t] => {
                            let t: u64 = t.parse().unwrap_or(0);
                            if t >= r.max {
                                r.max = t;
                                r.open.insert((w.to_string(), t), (now, true));
                                "OK"
                            } else {
                                let refused = Write {
                                    token: t,
                                    worker: w.to_string(),
                                    begin: now,
                                    end: now,
                                    begun: false,
                                    fenced_ok: false,
                                };
                                r.writes.push(refused);
                                "REJECT"
                            }
                        }
                        ["END", w, t] => {
                            let t: u64 = t.parse().unwrap_or(0);
                            let (begin, _) = r.open.remove(&(w.to_string(), t)).unwrap_or((now, false));
                            let ok = t >= r.max;
                            r.writes.push(Write {
                                token: t,
                                worker: w.to_string(),
                                begin,
                                end: now,
                                begun: true,
                                fenced_ok: ok,
                            });
                            if ok {
                                "OK"
                            } else {
                                "REJECT"
                            }
                        }
                        ["LOSTSEEN", w, t, ms] => {
                            let entry = (w.to_string(), t.parse().unwrap_or(0), ms.parse().unwrap_or(0));
                            r.lost_seen.push(entry);
                            "OK"
                        }
                        ["LOSTUNSEEN", w, t] => {
                            let entry = (w.to_string(), t.parse().unwrap_or(0));
                            r.lost_unseen.push(entry);
                            "OK"
                        }
                        ["GEN", w, pid, g] => {
                            let (pid, g): (u32, u64) = (pid.parse().unwrap_or(0), g.parse().unwrap_or(0));
                            match r.generations.iter_mut().find(|(id, p, _)| id == w && *p == pid) {
                                Some(entry) => entry.2 = entry.2.max(g),
                                None => r.generations.push((w.to_string(), pid, g)),
                            }
                            "OK"
                        }
                        _ => "ERR",
                    }
                };
                if write.write_all(format!("{reply}\n").as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

// ------------------------------------------------------------------ workers (child processes)

struct ResourceClient {
    lines: tokio::io::Lines<AsyncBufReader<tokio::net::tcp::OwnedReadHalf>>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

impl ResourceClient {
    async fn connect(addr: &str) -> Result<ResourceClient, Error> {
        let (read, write) = TcpStream::connect(addr).await?.into_split();
        Ok(ResourceClient { lines: AsyncBufReader::new(read).lines(), write })
    }

    async fn ask(&mut self, line: String) -> Result<bool, Error> {
        self.write.write_all(format!("{line}\n").as_bytes()).await?;
        Ok(self.lines.next_line().await?.as_deref() == Some("OK"))
    }
}

/// After a refused write: were we told the lock is lost? Reports how long it took to learn.
async fn report_loss(
    res: &mut ResourceClient,
    id: &str,
    token: u64,
    lost: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let t0 = Instant::now();
    match tokio::time::timeout(SESSION * 3, lost).await {
        Ok(()) => res.ask(format!("LOSTSEEN {id} {token} {}", t0.elapsed().as_millis())).await?,
        Err(_) => res.ask(format!("LOSTUNSEEN {id} {token}")).await?,
    };
    Ok(())
}

/// One worker: its id and session's connect string, the lock path, the resource's address.
struct Worker {
    id: String,
    connect: String,
    path: String,
    addr: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
    seed: u64,
}

/// Connects this worker's one `Session` (retrying while its proxy is cut off); `None` once
/// told to stop.
async fn connect_session(connect: &str, stop: &std::sync::atomic::AtomicBool) -> Option<Session> {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match Session::connect(connect, SESSION).await {
            Ok(session) => return Some(session),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    None
}

/// Reports every session generation the worker's `Session` reaches (`GEN id pid generation`),
/// on a connection of its own, until the session is closed.
fn report_generations(session: &Session, id: String, addr: String) -> tokio::task::JoinHandle<()> {
    let mut states = session.states();
    tokio::spawn(async move {
        let Ok(mut res) = ResourceClient::connect(&addr).await else { return };
        let pid = std::process::id();
        let mut reported = 0;
        loop {
            let status = *states.borrow_and_update();
            let (state, generation) = (status.state, status.generation);
            if state == ConnectionState::Closed {
                return;
            }
            if generation != reported {
                reported = generation;
                if res.ask(format!("GEN {id} {pid} {generation}")).await.is_err() {
                    return;
                }
            }
            if states.changed().await.is_err() {
                return;
            }
        }
    })
}

async fn mutex_worker(w: Worker) -> Result<(), Error> {
    let Worker { id, connect, path, addr, stop, seed } = w;
    let mut rng = Rng(seed);
    let mut res = ResourceClient::connect(&addr).await?;
    // One session for the whole run: after an expiry it starts a new one by itself, and the
    // mutex's waiters queue again there.
    let Some(session) = connect_session(&connect, &stop).await else { return Ok(()) };
    let reporter = report_generations(&session, id.clone(), addr.clone());
    let mutex =
        InterProcessMutex::with_options(&session, &path, LockOptions::new().participant_id(id.clone()))?;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let guard = match mutex.acquire().await {
            Ok(g) => g,
            Err(zk_recipes::Error::SessionClosed) => break,
            Err(_) => {
                // A transient error (the connection is down, say): try again shortly.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let token = guard.fencing_token();
        if res.ask(format!("BEGIN {id} {token}")).await? {
            tokio::time::sleep(Duration::from_millis(5 + rng.below(35))).await; // the work; a pause may land here
            if !res.ask(format!("END {id} {token}")).await? {
                report_loss(&mut res, &id, token, guard.lost()).await?;
            }
        } else {
            report_loss(&mut res, &id, token, guard.lost()).await?;
        }
        let _ = guard.release().await;
    }
    mutex.settled().await;
    session.close().await;
    let _ = reporter.await;
    Ok(())
}

async fn latch_worker(w: Worker) -> Result<(), Error> {
    let Worker { id, connect, path, addr, stop, seed } = w;
    let mut rng = Rng(seed);
    let mut res = ResourceClient::connect(&addr).await?;
    // One session for the whole run; the latch rejoins on each new session by itself.
    let Some(session) = connect_session(&connect, &stop).await else { return Ok(()) };
    let reporter = report_generations(&session, id.clone(), addr.clone());
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let latch = LeaderLatch::new(&session, &path, &id)?;
        latch.start()?;
        let mut changes = latch.leadership();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let token = match tokio::time::timeout(Duration::from_millis(200), latch.await_leadership()).await
            {
                Ok(Ok(token)) => token,
                // The election stopped on an error: join again with a new latch, same session.
                Ok(Err(_)) => break,
                Err(_) => continue,
            };
            // Lead: write while Leader.
            let lost = changes.wait_for(|l| *l == Leadership::NotLeader);
            tokio::pin!(lost);
            let mut refused = false;
            while !refused && !stop.load(std::sync::atomic::Ordering::Relaxed) && latch.has_leadership() {
                if res.ask(format!("BEGIN {id} {token}")).await? {
                    tokio::time::sleep(Duration::from_millis(5 + rng.below(35))).await;
                    refused = !res.ask(format!("END {id} {token}")).await?;
                } else {
                    refused = true;
                }
            }
            if refused {
                report_loss(&mut res, &id, token, async {
                    let _ = (&mut lost).await;
                })
                .await?;
            }
        }
        latch.close().await;
        if session.is_closed() {
            break;
        }
        // Not too eagerly after an election that stopped on an error.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    session.close().await;
    let _ = reporter.await;
    Ok(())
}

fn worker_main(args: &[String]) -> Result<(), Error> {
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .ok_or(format!("missing {name}"))
    };
    let (addr, path, mode, seed) =
        (get("--resource")?, get("--path")?, get("--mode")?, get("--seed")?.parse::<u64>()?);
    let ids: Vec<String> = get("--ids")?.split(',').map(str::to_string).collect();
    let connects: Vec<String> = get("--connects")?.split(';').map(str::to_string).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (i, (id, connect)) in ids.into_iter().zip(connects).enumerate() {
            let (path, addr, stop, mode) = (path.clone(), addr.clone(), stop.clone(), mode.clone());
            let seed = seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let worker = Worker { id, connect, path, addr, stop, seed };
            tasks.push(tokio::spawn(async move {
                if mode == "latch" {
                    latch_worker(worker).await
                } else {
                    mutex_worker(worker).await
                }
            }));
        }
        // "stop" on stdin ends the run.
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        })
        .await?;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in tasks {
            let _ = tokio::time::timeout(SESSION * 10, t).await;
        }
        Ok::<(), Error>(())
    })
}

// ------------------------------------------------------------------ the orchestrator

/// xorshift64*: seeded and replayable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Fault {
    KillZkLeader,
    FreezeZkFollower,
    PartitionClient,
    ShortCut,
    ResetConnection,
    PauseWorkerProcess,
    KillWorkerProcess,
}

const FAULTS: [Fault; 7] = [
    Fault::KillZkLeader,
    Fault::FreezeZkFollower,
    Fault::PartitionClient,
    Fault::ShortCut,
    Fault::ResetConnection,
    Fault::PauseWorkerProcess,
    Fault::KillWorkerProcess,
];

struct WorkerProcess {
    child: Child,
    ids: Vec<String>,
}

/// A private copy of this program for the worker processes, so that respawns keep working even
/// if the build replaces the binary during a long run.
fn worker_binary() -> Result<std::path::PathBuf, Error> {
    static COPY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    if let Some(path) = COPY.get() {
        return Ok(path.clone());
    }
    let copy = std::env::temp_dir().join(format!("zk-chaos-worker-{}", std::process::id()));
    std::fs::copy(std::env::current_exe()?, &copy)?;
    Ok(COPY.get_or_init(|| copy).clone())
}

fn spawn_process(
    p: usize,
    proxies: &[FaultProxy],
    addr: &str,
    path: &str,
    mode: &str,
    seed: u64,
) -> Result<WorkerProcess, Error> {
    let ids: Vec<String> = (0..WORKERS_PER_PROCESS).map(|i| format!("p{p}w{i}")).collect();
    let connects: Vec<String> =
        (0..WORKERS_PER_PROCESS).map(|i| proxies[p * WORKERS_PER_PROCESS + i].connect_string()).collect();
    let child = Command::new(worker_binary()?)
        .args(["--worker", "--resource", addr, "--path", path, "--mode", mode, "--seed", &seed.to_string()])
        .args(["--ids", &ids.join(","), "--connects", &connects.join(";")])
        .stdin(Stdio::piped())
        .spawn()?;
    Ok(WorkerProcess { child, ids })
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

struct PhaseReport {
    lines: Vec<String>,
    violations: usize,
}

async fn phase(mode: &str, secs: u64, seed: u64) -> Result<PhaseReport, Error> {
    let mut zk = ZkCluster::ensemble(3).await?;
    let mut rng = Rng(seed);
    let epoch = Instant::now();
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let state = Arc::new(Mutex::new(Resource::default()));
    tokio::spawn(serve(listener, state.clone(), epoch));
    let proxies: Vec<FaultProxy> =
        (0..PROCESSES * WORKERS_PER_PROCESS).map(|_| zk.proxy()).collect::<Result<_, _>>()?;
    let path = format!("/chaos/{mode}");
    let mut procs: Vec<WorkerProcess> = (0..PROCESSES)
        .map(|p| spawn_process(p, &proxies, &addr, &path, mode, rng.next()))
        .collect::<Result<_, _>>()?;
    let mut injected: Vec<(Fault, Duration)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    // Watchdog: after 10 s without an accepted write, show who is in the queue and whose session
    // is still alive (for diagnosing an outage; it changes nothing). It ends with the phase.
    let watchdog = {
        let (state, path, connect) = (state.clone(), path.clone(), zk.connect_string());
        tokio::spawn(async move {
            let Ok(session) = Session::connect(&connect, Duration::from_secs(10)).await else { return };
            let Ok(admin) = session.client() else { return };
            let mut reported_at = Duration::ZERO;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let last = state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .writes
                    .iter()
                    .filter(|w| w.fenced_ok)
                    .map(|w| w.end)
                    .max();
                let now = epoch.elapsed();
                let Some(last) = last else { continue };
                if now.saturating_sub(last) > Duration::from_secs(10)
                    && now.saturating_sub(reported_at) > Duration::from_secs(10)
                {
                    reported_at = now;
                    let mut queue = Vec::new();
                    for name in admin.list_children(&path).await.unwrap_or_default() {
                        if let Ok((data, stat)) = admin.get_data(&format!("{path}/{name}")).await {
                            queue.push(format!(
                                "{} {:#x} {}",
                                String::from_utf8_lossy(&data),
                                stat.ephemeral_owner,
                                name.rsplit('-').next().unwrap_or("")
                            ));
                        }
                    }
                    queue.sort_by_key(|q| q.rsplit(' ').next().map(str::to_string));
                    eprintln!(
                        "watchdog {:.1}s: no accepted write for {:.1}s; queue (id owner seq): {queue:?}",
                        now.as_secs_f64(),
                        (now - last).as_secs_f64()
                    );
                }
            }
        })
    };
    // Each fault type in turn, in a seeded order, at seeded random times.
    let mut order = FAULTS.to_vec();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1500 + rng.below(2000))).await;
        if order.is_empty() {
            order = FAULTS.to_vec();
        }
        let fault = order.remove(rng.below(order.len() as u64) as usize);
        // Process faults land mid-critical-section: wait (bounded) until some worker holds.
        let holding = {
            let mut found = None;
            let until = Instant::now() + Duration::from_secs(1);
            while matches!(fault, Fault::PauseWorkerProcess | Fault::KillWorkerProcess)
                && found.is_none()
                && Instant::now() < until
            {
                // The latest BEGIN without END is the current holder (a killed worker's stays open).
                found = state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .open
                    .iter()
                    .max_by_key(|(_, (begin, _))| *begin)
                    .map(|((w, _), _)| w.clone());
                if found.is_none() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            found
        };
        let at = epoch.elapsed();
        let holder_proc = holding
            .as_ref()
            .and_then(|w| procs.iter().position(|p| p.ids.contains(w)))
            .unwrap_or(rng.below(PROCESSES as u64) as usize);
        match fault {
            Fault::KillZkLeader => {
                if let Ok(i) = zk.leader().await {
                    zk.kill(i).await?;
                    tokio::time::sleep(Duration::from_millis(800)).await;
                    zk.restart(i).await?;
                }
            }
            Fault::FreezeZkFollower => {
                let mut follower = None;
                for i in 0..zk.len() {
                    if zk.mode(i).await == Some(Mode::Follower) {
                        follower = Some(i);
                    }
                }
                if let Some(i) = follower {
                    zk.freeze(i)?;
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    zk.thaw(i)?;
                }
            }
            Fault::PartitionClient => {
                let k = rng.below(proxies.len() as u64) as usize;
                proxies[k].blackhole();
                tokio::time::sleep(SESSION * 3 / 2).await;
                proxies[k].heal();
            }
            Fault::ShortCut => proxies[rng.below(proxies.len() as u64) as usize].cut(),
            Fault::ResetConnection => proxies[rng.below(proxies.len() as u64) as usize].reset(),
            Fault::PauseWorkerProcess => {
                let pid = procs[holder_proc].child.id();
                signal(pid, "-STOP");
                if std::env::var_os("CHAOS_TRACE").is_some() {
                    let open = state.lock().unwrap_or_else(|e| e.into_inner()).open.clone();
                    eprintln!(
                        "pause p{holder_proc} ({:?}); holding before: {holding:?}; open now: {open:?}",
                        procs[holder_proc].ids
                    );
                }
                tokio::time::sleep(SESSION * 3 / 2).await; // a "GC pause" past the session timeout
                signal(pid, "-CONT");
            }
            Fault::KillWorkerProcess => {
                let _ = procs[holder_proc].child.kill();
                let _ = procs[holder_proc].child.wait();
                procs[holder_proc] = spawn_process(holder_proc, &proxies, &addr, &path, mode, rng.next())?;
            }
        }
        injected.push((fault, at));
    }
    for p in &mut procs {
        if let Some(stdin) = p.child.stdin.as_mut() {
            let _ = writeln!(stdin, "stop");
        }
    }
    for mut p in procs {
        let _ = tokio::task::spawn_blocking(move || p.child.wait()).await;
    }
    watchdog.abort();
    // Ephemeral nodes of killed sessions go when those sessions expire.
    let admin_session = Session::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let admin = admin_session.client()?;
    let empty_by = Instant::now() + SESSION * 10;
    let mut left = admin.list_children(&path).await.unwrap_or_default();
    while !left.is_empty() && Instant::now() < empty_by {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = admin.list_children(&path).await.unwrap_or_default();
    }
    let report = check(mode, &state.lock().unwrap_or_else(|e| e.into_inner()), &injected, left.len(), secs);
    admin_session.close().await;
    Ok(report)
}

fn check(
    mode: &str,
    r: &Resource,
    injected: &[(Fault, Duration)],
    leftover: usize,
    secs: u64,
) -> PhaseReport {
    let mut accepted: Vec<&Write> = r.writes.iter().filter(|w| w.fenced_ok).collect();
    accepted.sort_by_key(|w| w.begin);
    // Violation times: the second write of an overlapping or out-of-order accepted pair.
    // Tokens must grow from one holder to the next (a leader writes many times in one term,
    // with one token): a lower token, or the same token from another worker, is a violation.
    let stale =
        |w: &[&Write]| w[1].token < w[0].token || (w[1].token == w[0].token && w[1].worker != w[0].worker);
    let mut bad: Vec<Duration> =
        accepted.windows(2).filter(|w| w[1].begin < w[0].end || stale(w)).map(|w| w[1].begin).collect();
    let (overlaps, token_order) = (
        accepted.windows(2).filter(|w| w[1].begin < w[0].end).count(),
        accepted.windows(2).filter(|w| stale(w)).count(),
    );
    // Without fencing: every write a holder went on to do, overlapping another worker's.
    let mut done: Vec<&Write> = r.writes.iter().filter(|w| w.begun).collect();
    done.sort_by_key(|w| w.begin);
    let unfenced_overlaps = done
        .iter()
        .enumerate()
        .filter(|(i, w)| done[i + 1..].iter().take_while(|x| x.begin < w.end).any(|x| x.worker != w.worker))
        .count();
    let refused = r.writes.iter().filter(|w| !w.fenced_ok).count();
    let unseen = r.lost_unseen.len();
    bad.extend(std::iter::repeat_n(Duration::MAX, unseen + leftover)); // not tied to a moment: the last fault
    let violations = overlaps + token_order + unseen + leftover;
    let mut lines = vec![
        format!("phase {mode}: {secs} s, {} faults, {} writes attempted, {} accepted, {refused} refused by fencing", injected.len(), r.writes.len(), accepted.len()),
        format!("  accepted writes overlapping: {overlaps}; accepted tokens not increasing: {token_order} (so every write of a paused or expired holder was refused or came before its loss)"),
        format!("  refused writers told their lock was lost: {} (at most {} ms after the refusal); not told: {unseen}", r.lost_seen.len(), r.lost_seen.iter().map(|x| x.2).max().unwrap_or(0)),
        format!("  nodes left in the lock directory after the workers stopped: {leftover}"),
        format!("  without fencing (every write a holder went on to do): {unfenced_overlaps} overlapped another holder's write"),
        generations_line(&r.generations),
        format!("  {:<20} {:>8} {:>11} {:>11} {:>28}", "fault", "injected", "operations", "violations", "longest gap with no holder"),
    ];
    let mut by_type: BTreeMap<Fault, (usize, usize, usize, Duration)> = BTreeMap::new();
    for (i, (fault, at)) in injected.iter().enumerate() {
        let until = injected.get(i + 1).map_or(Duration::MAX, |n| n.1);
        let ops = accepted.iter().filter(|w| w.begin >= *at && w.begin < until).count();
        let faults_here =
            bad.iter().filter(|t| **t >= *at && (**t < until || (until == Duration::MAX))).count();
        let gap = accepted.iter().find(|w| w.begin >= *at).map_or(Duration::ZERO, |w| w.begin - *at);
        let e = by_type.entry(*fault).or_default();
        e.0 += 1;
        e.1 += ops;
        e.2 += faults_here;
        e.3 = e.3.max(gap);
    }
    for (fault, (n, ops, v, gap)) in by_type {
        lines.push(format!(
            "  {:<20} {:>8} {:>11} {:>11} {:>25} ms",
            format!("{fault:?}"),
            n,
            ops,
            v,
            gap.as_millis()
        ));
    }
    // The longest stretches without an accepted write, with the faults injected inside them.
    let mut gaps: Vec<(Duration, Duration)> =
        accepted.windows(2).map(|w| (w[1].begin.saturating_sub(w[0].end), w[0].end)).collect();
    gaps.sort_by_key(|g| std::cmp::Reverse(g.0));
    for (len, from) in gaps.into_iter().take(3).filter(|(len, _)| *len > SESSION * 2) {
        let inside: Vec<String> = injected
            .iter()
            .filter(|(_, at)| *at + SESSION * 2 >= from && *at <= from + len)
            .map(|(f, at)| format!("{f:?}@{:.1}s", at.as_secs_f64()))
            .collect();
        lines.push(format!(
            "  gap of {} ms from {:.1} s; faults around it: {}",
            len.as_millis(),
            from.as_secs_f64(),
            inside.join(", ")
        ));
    }
    PhaseReport { lines, violations }
}

/// `session generations per worker: p0w0 3, p0w1 1+2, ...`: each worker's one `Session` and the
/// generations it lived through (1 = never expired); a worker whose process was killed and
/// respawned has one figure per process, joined by `+`.
fn generations_line(generations: &[(String, u32, u64)]) -> String {
    let mut by_worker: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (id, _, generation) in generations {
        by_worker.entry(id.as_str()).or_default().push(*generation);
    }
    let renewed: u64 = generations.iter().map(|(_, _, g)| g.saturating_sub(1)).sum();
    let per: Vec<String> = by_worker
        .iter()
        .map(|(id, gens)| format!("{id} {}", gens.iter().map(u64::to_string).collect::<Vec<_>>().join("+")))
        .collect();
    format!(
        "  session generations per worker (one Session each, never rebuilt; + = a respawned process): {}; {renewed} expired sessions renewed in place",
        per.join(", ")
    )
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--worker") {
        if let Err(e) = worker_main(&args) {
            eprintln!("chaos worker: {e}");
            std::process::exit(2);
        }
        return;
    }
    let secs: u64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed: u64 = arg("--seed").and_then(|s| s.parse().ok()).unwrap_or(0xc4a05);
    println!(
        "chaos: seed {seed} (replay with --seed {seed}), {secs} s per phase, session timeout {SESSION:?}"
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let mut violations = 0;
    let phases = arg("--phases").unwrap_or_else(|| "mutex,latch".into());
    for mode in phases.split(',').filter(|m| matches!(*m, "mutex" | "latch")) {
        match rt.block_on(phase(mode, secs, seed)) {
            Ok(report) => {
                for l in &report.lines {
                    println!("{l}");
                }
                violations += report.violations;
            }
            Err(e) => {
                eprintln!("chaos phase {mode} failed to run: {e}");
                std::process::exit(2);
            }
        }
    }
    if let Ok(copy) = worker_binary() {
        let _ = std::fs::remove_file(copy);
    }
    println!("violations: {violations}");
    let _ = std::io::stdout().flush();
    if violations > 0 {
        std::process::exit(1);
    }
}
