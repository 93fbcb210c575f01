//! Fault injection over every recipe: mutual exclusion, lease totals and leader terms under
//! ZooKeeper leader loss, follower freezes, rolling restarts, slow and cut client paths, session
//! moves, paused and killed worker processes; a checker that explains every overlap; fencing as
//! the final guard.
//!
//! ```text
//! cargo run --release --example chaos -- [--seconds S] [--seed N] [--phases a,b,..]
//!     [--broken none|ignore-safe-window|no-fence|over-admit] [--history PATH]
//! ```
//! `--seconds S` is the length of each phase (default 60); the phases are `mutex`, `rwlock`,
//! `semaphore`, `semmutex`, `multi`, `latch` and `selector` (default: all, in that order), on
//! one 3-node ensemble started once.
//!
//! Per phase: K=6 workers in 2 OS processes, each worker with its own `Session` through its own
//! fault proxy (in front of all three servers) for the whole phase: a session that expires is
//! renewed by the `Session` itself, and the recipe built from it carries on. While a worker
//! holds (or leads) it writes to a fenced "storage server" inside this program: `BEGIN token` …
//! `END token`, refused when a newer token has begun (Kleppmann's fencing; a reader's token is
//! checked against the newest writer's; a semaphore's leases are counted instead). Each worker
//! also reports each hold as an interval on the machine's monotonic clock. Faults come at
//! seeded random times, each kind in turn. The checker (`checker.rs`) then verifies both views
//! and explains every overlap; the process exits 1 on any fenced violation, unexplained
//! overlap, over-admission, refused writer not told of its loss, or node left behind.

mod checker;
mod resource;
mod workers;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use zk_recipes::Session;
use zk_testcluster::{FaultProxy, Mode, ZkCluster};

use checker::{Hold, Kind, Overlap, Pause};
use resource::{Epoch, History};
use workers::Broken;

const SESSION: Duration = Duration::from_secs(2);
const WORKERS_PER_PROCESS: usize = 3;
const PROCESSES: usize = 2;
/// The semaphore phase's maximum lease total.
const SEM_MAX: u32 = 3;
const PHASES: [&str; 7] = ["mutex", "rwlock", "semaphore", "semmutex", "multi", "latch", "selector"];

type Error = Box<dyn std::error::Error + Send + Sync>;

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

// ------------------------------------------------------------------ worker processes

fn worker_main(args: &[String]) -> Result<(), Error> {
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .ok_or(format!("missing {name}"))
    };
    let (addr, mode, seed) = (get("--resource")?, get("--mode")?, get("--seed")?.parse::<u64>()?);
    let broken = Broken::parse(&get("--broken")?).ok_or("bad --broken")?;
    let ids: Vec<String> = get("--ids")?.split(',').map(str::to_string).collect();
    let connects: Vec<String> = get("--connects")?.split(';').map(str::to_string).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for (i, (id, connect)) in ids.into_iter().zip(connects).enumerate() {
            let seed = seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let (mode, addr, stop) = (mode.clone(), addr.clone(), stop.clone());
            let worker = workers::Worker { id, index: i, connect, mode, addr, stop, seed, broken };
            tasks.push(tokio::spawn(workers::run(worker)));
        }
        // "stop" on stdin ends the run.
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        })
        .await?;
        stop_tx.send_replace(true);
        for t in tasks {
            if let Ok(Ok(Err(e))) = tokio::time::timeout(SESSION * 10, t).await {
                eprintln!("chaos worker: {e}");
            }
        }
        Ok::<(), Error>(())
    })
}

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

struct Spawner<'a> {
    /// Each worker's connect string, through its own proxy.
    connects: Vec<String>,
    addr: String,
    mode: &'a str,
    broken: Broken,
}

impl Spawner<'_> {
    fn spawn(&self, p: usize, seed: u64) -> Result<WorkerProcess, Error> {
        let ids: Vec<String> = (0..WORKERS_PER_PROCESS).map(|i| format!("p{p}w{i}")).collect();
        let connects = &self.connects[p * WORKERS_PER_PROCESS..(p + 1) * WORKERS_PER_PROCESS];
        let child = Command::new(worker_binary()?)
            .args(["--worker", "--resource", &self.addr, "--mode", self.mode, "--seed", &seed.to_string()])
            .args([
                "--broken",
                self.broken.name(),
                "--ids",
                &ids.join(","),
                "--connects",
                &connects.join(";"),
            ])
            .stdin(Stdio::piped())
            .spawn()?;
        Ok(WorkerProcess { child, ids })
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a child's pid.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

// ------------------------------------------------------------------ faults

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Fault {
    KillZkLeader,
    FreezeZkFollower,
    RollingRestart,
    PartitionClient,
    SlowPath,
    ShortCut,
    ResetConnection,
    SessionMove,
    PauseWorkerProcess,
    KillWorkerProcess,
}

const FAULTS: [Fault; 10] = [
    Fault::KillZkLeader,
    Fault::FreezeZkFollower,
    Fault::RollingRestart,
    Fault::PartitionClient,
    Fault::SlowPath,
    Fault::ShortCut,
    Fault::ResetConnection,
    Fault::SessionMove,
    Fault::PauseWorkerProcess,
    Fault::KillWorkerProcess,
];

/// One injected fault, with its span and what it hit.
#[derive(Clone, Debug)]
struct FaultRec {
    phase: String,
    fault: Fault,
    start: Duration,
    end: Duration,
    detail: String,
}

/// The seeded schedule: each kind in turn (a shuffled bag, refilled when empty, kept across
/// phases so that short phases still see every kind over the run).
struct Schedule {
    rng: Rng,
    bag: Vec<Fault>,
}

impl Schedule {
    fn next(&mut self) -> Fault {
        if self.bag.is_empty() {
            self.bag = FAULTS.to_vec();
        }
        let i = self.rng.below(self.bag.len() as u64) as usize;
        self.bag.remove(i)
    }
}

/// What a run shares with the progress line and the report.
#[derive(Default)]
struct Run {
    pauses: Vec<Pause>,
    kills: Vec<(u32, Duration)>,
    faults: Vec<FaultRec>,
}

/// Injects `fault`; returns what it hit. Process faults land on the process of the worker that
/// most recently began a write (the one most likely inside).
#[allow(clippy::too_many_arguments)]
async fn inject(
    fault: Fault,
    zk: &mut ZkCluster,
    proxies: &[FaultProxy],
    rng: &mut Rng,
    procs: &mut [WorkerProcess],
    spawner: &Spawner<'_>,
    state: &Mutex<History>,
    run: &Mutex<Run>,
    epoch: Epoch,
) -> Result<String, Error> {
    // A client-path fault hits the worker inside (if any) half the time (always when broken on
    // purpose), a random one else.
    let inside = match fault {
        Fault::PartitionClient | Fault::SlowPath | Fault::ShortCut | Fault::ResetConnection | Fault::SessionMove
            if spawner.broken != Broken::None || rng.below(2) == 0 =>
        {
            holder_now(state).await.and_then(|w| {
                let (p, i) = w.strip_prefix('p')?.split_once('w')?;
                Some(p.parse::<usize>().ok()? * WORKERS_PER_PROCESS + i.parse::<usize>().ok()?)
            })
        }
        _ => None,
    };
    let pick = |rng: &mut Rng| inside.unwrap_or_else(|| rng.below(proxies.len() as u64) as usize);
    let worker = |k: usize| format!("p{}w{}", k / WORKERS_PER_PROCESS, k % WORKERS_PER_PROCESS);
    Ok(match fault {
        Fault::KillZkLeader => match zk.leader().await {
            Ok(i) => {
                zk.kill(i).await?;
                tokio::time::sleep(Duration::from_millis(800)).await;
                zk.restart(i).await?;
                format!("server {i}")
            }
            Err(_) => "no leader".into(),
        },
        Fault::FreezeZkFollower => {
            let mut follower = None;
            for i in 0..zk.len() {
                if zk.mode(i).await == Some(Mode::Follower) {
                    follower = Some(i);
                }
            }
            match follower {
                Some(i) => {
                    zk.freeze(i)?;
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    zk.thaw(i)?;
                    format!("server {i}")
                }
                None => "no follower".into(),
            }
        }
        Fault::RollingRestart => {
            // Every server in turn, as an upgrade does: each back and the quorum led before
            // the next goes down.
            for i in 0..zk.len() {
                zk.restart(i).await?;
                zk.wait_for_leader().await?;
            }
            "servers 0,1,2".into()
        }
        Fault::PartitionClient => {
            let k = pick(rng);
            proxies[k].blackhole();
            tokio::time::sleep(SESSION * 3 / 2).await;
            proxies[k].heal();
            worker(k)
        }
        Fault::SlowPath => {
            // Replies and requests of one worker's path delayed 200-800 ms for 3 s: a disk stall
            // or a long GC on its server, as that client sees it.
            let (k, ms) = (pick(rng), 200 + rng.below(600));
            proxies[k].set_latency(Duration::from_millis(ms));
            tokio::time::sleep(Duration::from_secs(3)).await;
            proxies[k].set_latency(Duration::ZERO);
            format!("{} {ms} ms", worker(k))
        }
        Fault::ShortCut => {
            let k = pick(rng);
            proxies[k].cut();
            worker(k)
        }
        Fault::ResetConnection => {
            let k = pick(rng);
            proxies[k].reset();
            worker(k)
        }
        Fault::SessionMove => {
            // Replies held back so that requests are in flight, then a reset: the client
            // reconnects (to the next server of its list) with those requests unanswered.
            let k = pick(rng);
            proxies[k].set_reply_latency(Duration::from_millis(400));
            tokio::time::sleep(Duration::from_millis(250)).await;
            let carried = proxies[k].connections();
            proxies[k].reset();
            proxies[k].set_reply_latency(Duration::ZERO);
            format!("{} ({carried} connection)", worker(k))
        }
        Fault::PauseWorkerProcess | Fault::KillWorkerProcess => {
            let holder = holder_now(state).await;
            let p = holder
                .as_ref()
                .and_then(|w| procs.iter().position(|p| p.ids.contains(w)))
                .unwrap_or(rng.below(PROCESSES as u64) as usize);
            let pid = procs[p].child.id();
            if fault == Fault::PauseWorkerProcess {
                signal(pid, libc::SIGSTOP);
                let from = epoch.now();
                tokio::time::sleep(SESSION * 3 / 2).await; // a "GC pause" past the session timeout
                let to = epoch.now();
                signal(pid, libc::SIGCONT);
                run.lock().unwrap_or_else(|e| e.into_inner()).pauses.push(Pause { pid, from, to });
            } else {
                let _ = procs[p].child.kill();
                let _ = procs[p].child.wait();
                let at = epoch.now();
                run.lock().unwrap_or_else(|e| e.into_inner()).kills.push((pid, at));
                state.lock().unwrap_or_else(|e| e.into_inner()).close_pid(pid, at);
                procs[p] = spawner.spawn(p, rng.next())?;
            }
            format!("p{p} (pid {pid}; holding: {})", holder.as_deref().unwrap_or("-"))
        }
    })
}

/// The worker that most recently began a write still open, waiting up to 1 s for one.
async fn holder_now(state: &Mutex<History>) -> Option<String> {
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        if let Some(w) = state.lock().unwrap_or_else(|e| e.into_inner()).latest_open() {
            return Some(w);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

// ------------------------------------------------------------------ phases

fn cap(mode: &str) -> Option<u32> {
    (mode == "semaphore").then_some(SEM_MAX)
}

struct PhaseReport {
    lines: Vec<String>,
    violations: usize,
    history: History,
    overlaps: Vec<Overlap>,
}

#[allow(clippy::too_many_arguments)]
async fn phase(
    mode: &str,
    n: (usize, usize),
    secs: u64,
    zk: &mut ZkCluster,
    proxies: &[FaultProxy],
    schedule: &mut Schedule,
    run: &Arc<Mutex<Run>>,
    epoch: Epoch,
    broken: Broken,
) -> Result<PhaseReport, Error> {
    let mut rng = Rng(schedule.rng.next());
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let state = Arc::new(Mutex::new(History::default()));
    let server = tokio::spawn(resource::serve(listener, state.clone(), epoch, broken != Broken::NoFence));
    let connects = proxies.iter().map(FaultProxy::connect_string).collect();
    let spawner = Spawner { connects, addr, mode, broken };
    let mut procs: Vec<WorkerProcess> =
        (0..PROCESSES).map(|p| spawner.spawn(p, rng.next())).collect::<Result<_, _>>()?;
    let started = epoch.now();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let injected = Arc::new(AtomicUsize::new(0));
    let progress = tokio::spawn(progress(
        mode.to_string(),
        n,
        secs,
        state.clone(),
        run.clone(),
        injected.clone(),
        epoch,
    ));
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1500 + rng.below(2000))).await;
        if Instant::now() >= deadline {
            break;
        }
        let fault = schedule.next();
        let start = epoch.now();
        let detail = inject(fault, zk, proxies, &mut rng, &mut procs, &spawner, &state, run, epoch).await?;
        let end = epoch.now();
        eprintln!("  fault {:>7.2}-{:>7.2} s {fault:?}: {detail}", start.as_secs_f64(), end.as_secs_f64());
        run.lock().unwrap_or_else(|e| e.into_inner()).faults.push(FaultRec {
            phase: mode.to_string(),
            fault,
            start,
            end,
            detail,
        });
        injected.fetch_add(1, Ordering::Relaxed);
    }
    for p in &mut procs {
        if let Some(stdin) = p.child.stdin.as_mut() {
            let _ = writeln!(stdin, "stop");
        }
    }
    for mut p in procs {
        let _ = tokio::task::spawn_blocking(move || p.child.wait()).await;
    }
    progress.abort();
    server.abort();
    let ended = epoch.now();
    // Ephemeral nodes of killed sessions go when those sessions expire.
    let admin_session = Session::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let admin = admin_session.client()?;
    let empty_by = Instant::now() + SESSION * 10;
    let mut left = Vec::new();
    loop {
        left.clear();
        for path in workers::paths(mode) {
            for child in admin.list_children(&path).await.unwrap_or_default() {
                left.push(format!("{path}/{child}"));
            }
        }
        if left.is_empty() || Instant::now() >= empty_by {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    admin_session.close().await;
    let history = std::mem::take(&mut *state.lock().unwrap_or_else(|e| e.into_inner()));
    let run = run.lock().unwrap_or_else(|e| e.into_inner());
    let faults: Vec<&FaultRec> = run.faults.iter().filter(|f| f.phase == mode).collect();
    Ok(report(mode, secs, history, &run.pauses, &faults, &left, (started, ended)))
}

/// Everything the checker finds in one history, as numbers for the progress line.
fn tally(mode: &str, h: &History, pauses: &[Pause], now: Duration) -> (usize, usize, usize) {
    let cap = |_: &str| cap(mode);
    let fenced = checker::fenced(&h.ops, &cap, pauses, now);
    let overlaps = checker::overlaps(&h.holds, &cap, pauses);
    let unexplained = overlaps.iter().filter(|o| o.explanation.is_none()).count();
    (fenced.violations.len() + unexplained + h.lost_unseen.len(), overlaps.len() - unexplained, unexplained)
}

/// A progress line on stderr every 5 s: phase, elapsed and remaining time, faults, holds,
/// refused writes, violations so far.
async fn progress(
    mode: String,
    (n, of): (usize, usize),
    secs: u64,
    state: Arc<Mutex<History>>,
    run: Arc<Mutex<Run>>,
    injected: Arc<AtomicUsize>,
    epoch: Epoch,
) {
    let t0 = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let pauses = run.lock().unwrap_or_else(|e| e.into_inner()).pauses.clone();
        let (holds, refused, (violations, explained, _)) = {
            let h = state.lock().unwrap_or_else(|e| e.into_inner());
            let refused = h.ops.iter().filter(|o| o.refused).count();
            (h.holds.len(), refused, tally(&mode, &h, &pauses, epoch.now()))
        };
        let elapsed = t0.elapsed().as_secs();
        eprintln!(
            "chaos [phase {n}/{of}] {mode}: {elapsed}s in, {}s left; faults {}, holds {holds}, refused writes {refused}, overlaps explained {explained}, violations so far {violations}",
            secs.saturating_sub(elapsed),
            injected.load(Ordering::Relaxed)
        );
    }
}

fn report(
    mode: &str,
    secs: u64,
    mut h: History,
    pauses: &[Pause],
    faults: &[&FaultRec],
    left: &[String],
    (started, ended): (Duration, Duration),
) -> PhaseReport {
    let cap_of = |_: &str| cap(mode);
    // Operations still open when the phase ended (a task aborted mid-write): zero length.
    for op in &mut h.ops {
        if op.end.is_none() {
            op.end = Some(op.begin);
        }
    }
    let fenced = checker::fenced(&h.ops, &cap_of, pauses, ended);
    let overlaps = checker::overlaps(&h.holds, &cap_of, pauses);
    let unexplained = overlaps.iter().filter(|o| o.explanation.is_none()).count();
    let unseen = h.lost_unseen.len();
    let violations = fenced.violations.len() + unexplained + unseen + left.len();
    let accepted = h.ops.iter().filter(|o| o.accepted).count();
    let refused = h.ops.iter().filter(|o| o.refused).count();
    let mut causes: BTreeMap<&str, usize> = BTreeMap::new();
    for hold in &h.holds {
        *causes.entry(hold.cause.as_str()).or_default() += 1;
    }
    let causes: Vec<String> = causes.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let mut lines = vec![
        format!(
            "phase {mode}: {secs} s, {} faults, {} holds (ended by: {}), {} writes attempted, {accepted} accepted, {refused} refused by fencing",
            faults.len(),
            h.holds.len(),
            causes.join(", "),
            h.ops.len()
        ),
        format!(
            "  overlapping holds the recipe must not admit together: {} explained (a paused holder), {unexplained} unexplained",
            overlaps.len() - unexplained
        ),
    ];
    // One line per run of overlaps with the same earlier holders and the same verdict (a
    // paused holder overlaps every successor that came in while it slept).
    let mut groups: Vec<(&[usize], Option<&str>, Vec<&Overlap>)> = Vec::new();
    for o in &overlaps {
        match groups.last_mut() {
            Some((earlier, why, list))
                if *earlier == o.earlier.as_slice() && *why == o.explanation.as_deref() =>
            {
                list.push(o)
            }
            _ => groups.push((&o.earlier, o.explanation.as_deref(), vec![o])),
        }
    }
    for (earlier, why, list) in &groups {
        let earlier: Vec<String> = earlier.iter().map(|&i| describe(&h.holds[i])).collect();
        let (first, last) = (list[0], list[list.len() - 1]);
        lines.push(format!(
            "    {:.2}-{:.2} s {}: {} hold(s) began beside {}, the first {}: {}",
            first.at.as_secs_f64(),
            last.at.as_secs_f64(),
            first.resource,
            list.len(),
            earlier.join(", "),
            describe(&h.holds[first.later]),
            why.unwrap_or("UNEXPLAINED")
        ));
    }
    if let Some(cap) = cap(mode) {
        lines.push(format!(
            "  lease total: at most {} of {cap} held at once by the holds' intervals; above {cap} at the resource: {} explained (a paused holder), {} unexplained",
            max_total(&h.holds),
            fenced.over_total_explained,
            fenced.violations.len()
        ));
    } else {
        lines.push(format!(
            "  fenced view: accepted writes overlapping: {}; accepted tokens not increasing: {}",
            fenced.overlaps, fenced.token_order
        ));
        lines.push(format!(
            "  without fencing (every write a holder went on to do): {} overlapped another holder's",
            fenced.unfenced_overlaps
        ));
    }
    for v in fenced.violations.iter().take(10) {
        lines.push(format!("    VIOLATION {v}"));
    }
    lines.push(format!(
        "  refused writers told their hold was lost: {} (at most {} ms after the refusal); not told: {unseen}",
        h.lost_seen.len(),
        h.lost_seen.iter().map(|x| x.2).max().unwrap_or(0)
    ));
    lines.push(format!(
        "  nodes left after the workers stopped: {}{}",
        left.len(),
        if left.is_empty() { String::new() } else { format!(" {left:?}") }
    ));
    lines.push(generations_line(&h.generations));
    // Per fault kind: how many, and the longest wait from its start to the next accepted write.
    let mut accepted_at: Vec<Duration> = h
        .ops
        .iter()
        .filter(|o| o.accepted || (o.begun && o.kind != Kind::Exclusive && cap(mode).is_some()))
        .map(|o| o.begin)
        .collect();
    accepted_at.sort();
    let mut by_kind: BTreeMap<Fault, (usize, Duration)> = BTreeMap::new();
    for f in faults {
        let next = accepted_at.iter().find(|t| **t >= f.start).map_or(ended - f.start, |t| *t - f.start);
        let e = by_kind.entry(f.fault).or_default();
        e.0 += 1;
        e.1 = e.1.max(next);
    }
    let kinds: Vec<String> = by_kind
        .iter()
        .map(|(f, (n, gap))| format!("{f:?} {n} (next write within {} ms)", gap.as_millis()))
        .collect();
    lines.push(format!("  faults: {}", kinds.join(", ")));
    let mut gaps: Vec<(Duration, Duration)> = accepted_at.windows(2).map(|w| (w[1] - w[0], w[0])).collect();
    gaps.push((accepted_at.first().map_or(ended - started, |t| t.saturating_sub(started)), started));
    if let Some((len, from)) = gaps.into_iter().max() {
        let around: Vec<String> = faults
            .iter()
            .filter(|f| f.end + SESSION * 2 >= from && f.start <= from + len)
            .map(|f| format!("{:?}@{:.1}s", f.fault, f.start.as_secs_f64()))
            .collect();
        lines.push(format!(
            "  longest gap with no write: {} ms from {:.1} s; faults around it: {}",
            len.as_millis(),
            from.as_secs_f64(),
            if around.is_empty() { "none".into() } else { around.join(", ") }
        ));
    }
    PhaseReport { lines, violations, history: h, overlaps }
}

fn describe(h: &Hold) -> String {
    format!(
        "{} ({} token {} {:.2}-{:.2} s, {})",
        h.worker,
        h.kind.code(),
        h.token,
        h.start.as_secs_f64(),
        h.end.as_secs_f64(),
        h.cause
    )
}

/// The largest lease total the holds' intervals show at once.
fn max_total(holds: &[Hold]) -> u32 {
    let mut events: Vec<(Duration, i64)> = Vec::new();
    for h in holds {
        if let Kind::Lease(w) = h.kind {
            events.push((h.start, i64::from(w)));
            events.push((h.end.max(h.start), -i64::from(w)));
        }
    }
    events.sort(); // ends (negative) before starts at the same instant
    let (mut now, mut max) = (0i64, 0i64);
    for (_, d) in events {
        now += d;
        max = max.max(now);
    }
    max as u32
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

// ------------------------------------------------------------------ the JSON history

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn secs(d: Duration) -> String {
    format!("{:.6}", d.as_secs_f64())
}

/// Every event of the run, one JSON document (times in seconds since the run's epoch on the
/// machine's monotonic clock).
fn history_json(seed: u64, secs_per_phase: u64, phases: &[(String, PhaseReport)], run: &Run) -> String {
    let mut out = format!(
        "{{\"seed\":{seed},\"seconds_per_phase\":{secs_per_phase},\"session_timeout_ms\":{},\"phases\":[",
        SESSION.as_millis()
    );
    for (i, (mode, r)) in phases.iter().enumerate() {
        let h = &r.history;
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{{\"phase\":{},\"violations\":{},\"holds\":[", json_str(mode), r.violations));
        let holds: Vec<String> = h.holds.iter().map(|x| format!(
            "{{\"worker\":{},\"pid\":{},\"resource\":{},\"kind\":{},\"token\":{},\"start\":{},\"end\":{},\"deadline\":{},\"cause\":{}}}",
            json_str(&x.worker), x.pid, json_str(&x.resource), json_str(&x.kind.code()), x.token, secs(x.start), secs(x.end), secs(x.deadline), json_str(&x.cause))).collect();
        out.push_str(&holds.join(","));
        out.push_str("],\"writes\":[");
        let ops: Vec<String> = h.ops.iter().map(|o| format!(
            "{{\"worker\":{},\"pid\":{},\"resource\":{},\"kind\":{},\"token\":{},\"begin\":{},\"end\":{},\"begun\":{},\"accepted\":{},\"refused\":{}}}",
            json_str(&o.worker), o.pid, json_str(&o.resource), json_str(&o.kind.code()), o.token, secs(o.begin), o.end.map_or("null".into(), secs), o.begun, o.accepted, o.refused)).collect();
        out.push_str(&ops.join(","));
        out.push_str("],\"overlaps\":[");
        let overlaps: Vec<String> = r
            .overlaps
            .iter()
            .map(|o| {
                format!(
                    "{{\"at\":{},\"resource\":{},\"later\":{},\"earlier\":{:?},\"explanation\":{}}}",
                    secs(o.at),
                    json_str(&o.resource),
                    o.later,
                    o.earlier,
                    o.explanation.as_deref().map_or("null".into(), json_str)
                )
            })
            .collect();
        out.push_str(&overlaps.join(","));
        out.push_str("],\"told\":[");
        let told: Vec<String> = h
            .lost_seen
            .iter()
            .map(|(w, t, ms)| format!("{{\"worker\":{},\"token\":{t},\"after_ms\":{ms}}}", json_str(w)))
            .chain(
                h.lost_unseen
                    .iter()
                    .map(|(w, t)| format!("{{\"worker\":{},\"token\":{t},\"after_ms\":null}}", json_str(w))),
            )
            .collect();
        out.push_str(&told.join(","));
        out.push_str("]}");
    }
    out.push_str("],\"faults\":[");
    let faults: Vec<String> = run
        .faults
        .iter()
        .map(|f| {
            format!(
                "{{\"phase\":{},\"fault\":{},\"start\":{},\"end\":{},\"detail\":{}}}",
                json_str(&f.phase),
                json_str(&format!("{:?}", f.fault)),
                secs(f.start),
                secs(f.end),
                json_str(&f.detail)
            )
        })
        .collect();
    out.push_str(&faults.join(","));
    out.push_str("],\"pauses\":[");
    let pauses: Vec<String> = run
        .pauses
        .iter()
        .map(|p| format!("{{\"pid\":{},\"from\":{},\"to\":{}}}", p.pid, secs(p.from), secs(p.to)))
        .collect();
    out.push_str(&pauses.join(","));
    out.push_str("],\"kills\":[");
    let kills: Vec<String> =
        run.kills.iter().map(|(pid, at)| format!("{{\"pid\":{pid},\"at\":{}}}", secs(*at))).collect();
    out.push_str(&kills.join(","));
    out.push_str("]}\n");
    out
}

// ------------------------------------------------------------------ main

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
    let phases: Vec<String> = match arg("--phases") {
        Some(list) => list.split(',').map(str::to_string).collect(),
        None => PHASES.iter().map(|p| p.to_string()).collect(),
    };
    if let Some(bad) = phases.iter().find(|p| !PHASES.contains(&p.as_str())) {
        eprintln!("chaos: unknown phase {bad}; the phases are {}", PHASES.join(","));
        std::process::exit(2);
    }
    let Some(broken) = Broken::parse(&arg("--broken").unwrap_or_else(|| "none".into())) else {
        eprintln!("chaos: --broken takes none, ignore-safe-window, no-fence or over-admit");
        std::process::exit(2);
    };
    println!(
        "chaos: seed {seed} (replay with --seed {seed}), {secs} s per phase, phases {}, session timeout {SESSION:?}{}",
        phases.join(","),
        if broken == Broken::None { String::new() } else { format!(", BROKEN on purpose: {}", broken.name()) }
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let outcome = rt.block_on(async {
        let mut zk = ZkCluster::ensemble(3).await?;
        let proxies: Vec<FaultProxy> =
            (0..PROCESSES * WORKERS_PER_PROCESS).map(|_| zk.proxy()).collect::<Result<_, _>>()?;
        let epoch = Epoch(resource::mono_ns());
        let run = Arc::new(Mutex::new(Run::default()));
        let mut schedule = Schedule { rng: Rng(seed), bag: Vec::new() };
        let mut reports = Vec::new();
        for (i, mode) in phases.iter().enumerate() {
            let r = phase(
                mode,
                (i + 1, phases.len()),
                secs,
                &mut zk,
                &proxies,
                &mut schedule,
                &run,
                epoch,
                broken,
            )
            .await?;
            for l in &r.lines {
                println!("{l}");
            }
            let _ = std::io::stdout().flush();
            reports.push((mode.clone(), r));
        }
        Ok::<_, Error>((reports, run))
    });
    if let Ok(copy) = worker_binary() {
        let _ = std::fs::remove_file(copy);
    }
    let (reports, run) = match outcome {
        Ok(done) => done,
        Err(e) => {
            eprintln!("chaos failed to run: {e}");
            std::process::exit(2);
        }
    };
    let run = run.lock().unwrap_or_else(|e| e.into_inner());
    let violations: usize = reports.iter().map(|(_, r)| r.violations).sum();
    let mut kinds: BTreeMap<Fault, usize> = BTreeMap::new();
    for f in &run.faults {
        *kinds.entry(f.fault).or_default() += 1;
    }
    let kinds: Vec<String> = kinds.iter().map(|(f, n)| format!("{f:?} {n}")).collect();
    let holds: usize = reports.iter().map(|(_, r)| r.history.holds.len()).sum();
    let refused: usize =
        reports.iter().map(|(_, r)| r.history.ops.iter().filter(|o| o.refused).count()).sum();
    let explained: usize =
        reports.iter().map(|(_, r)| r.overlaps.iter().filter(|o| o.explanation.is_some()).count()).sum();
    println!(
        "total: {} phases, {} faults ({}), {holds} holds, {refused} writes refused by fencing, {explained} overlaps explained by a paused holder",
        reports.len(),
        run.faults.len(),
        kinds.join(", ")
    );
    if let Some(path) = arg("--history") {
        match std::fs::write(&path, history_json(seed, secs, &reports, &run)) {
            Ok(()) => println!("history: {path}"),
            Err(e) => eprintln!("chaos: could not write {path}: {e}"),
        }
    }
    println!("violations: {violations}");
    let _ = std::io::stdout().flush();
    if violations > 0 {
        std::process::exit(1);
    }
}
