//! Fault injection over every recipe: mutual exclusion, lease totals and leader terms under
//! ZooKeeper leader loss, follower freezes, rolling restarts, a leader partitioned from its
//! quorum, slow servers, slow and cut client paths, session moves, paused and killed worker
//! processes, clocks running slow or fast and wall clocks stepped (`faults_clock.rs`); a
//! checker that explains every overlap; fencing as the final guard.
//!
//! ```text
//! cargo run --release --example chaos -- [--seconds S] [--seed N] [--phases a,b,..]
//!     [--broken none|ignore-safe-window|no-fence|over-admit] [--history PATH] [--timeline PATH]
//!     [--faults Kind,Kind,..] [--every-kind] [--replay HISTORY] [--recheck HISTORY]
//!     [--keep-full-disk-data] [--sasl digest[:PASSWORD]|gssapi]
//! ```
//! `--every-kind` keeps the last phase going past its length until every fault kind (of
//! `--faults`, or all) was injected at least once in the run: CI's short round meets them all.
//! `--replay HISTORY` runs the phases, seeds and fault schedule a `--history` file recorded
//! again; `--recheck HISTORY` checks its recorded wire logs again, starting nothing
//! (`replay.rs`). `--keep-full-disk-data`: a server that ran out of transaction-log disk is not
//! restarted with an empty data directory afterwards (the runbook, `faults_grey.rs`), to watch
//! ZooKeeper's bug ZOOKEEPER-4882 happen.
//! `--sasl digest` or `--sasl gssapi` (cargo features `sasl-digest-md5`, `sasl-gssapi`) runs on
//! an ensemble that requires SASL (`sasl.rs`): every session authenticates, every recipe node is
//! creator-only, and each phase samples the nodes' ACLs while its faults land; `digest:PASSWORD`
//! gives the clients a wrong password, and the run must stop with a typed `AuthFailed`.
//! Every phase has a liveness watchdog (`watchdog.rs`): 15 s without a new hold, and it records
//! what every server has.
//! `--faults` limits the schedule to those kinds (as `faults.rs` names them: `ClockSlowWorker`..).
//! `RollingUpgrade` is drawn only when `--faults` names it: every server in turn restarted as
//! `ZK_UPGRADE_TO` (3.9.6 by default), the run having started at `ZK_VERSION`, e.g.
//! `ZK_VERSION=3.8.0 chaos --phases lockset --faults RollingUpgrade --every-kind`.
//! `--seconds S` is the length of each phase (default 60); the phases are `mutex`, `rwlock`,
//! `semaphore`, `semmutex`, `multi`, `latch`, `selector`, `lockset`, and the options' `delay`,
//! `maxhold`, `revoke` and `observer` (`workers_options.rs`, checked by `options_check.rs`)
//! (default: all, in that order), on one 3-node ensemble started once. `lockset` (`lockset.rs`)
//! is Jepsen's etcd lock-set against ZooKeeper, PostgreSQL and Redis, each fenced and unfenced,
//! with a set-full check and an independent linearizability checker (`linearizable.rs`); its
//! PostgreSQL and Redis are started once per run and stopped by PID at its end.
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
//!
//! `--history PATH` writes every event of the run as one JSON document. Every run draws its
//! timeline (`timeline.rs`) into a PNG, `target/chaos/timeline-<seed>.png` unless
//! `--timeline PATH` says where: one panel per phase, one row per worker with its holds, the
//! faults as shaded spans, pauses and kills of worker processes, and a red cross at each write
//! refused by fencing. A picture that cannot be drawn is reported on stderr; the exit code is
//! the checker's verdict only.

mod checker;
mod clock_check;
mod clock_map;
mod convergence;
mod delay_check;
mod faults;
mod faults_clock;
mod faults_grey;
// The fencing patterns (examples/fencing/): chaos uses the lock-set part of them.
#[path = "../fencing/mod.rs"]
mod fencing;
mod limit_check;
mod linearizable;
mod lockset;
mod lockset_check;
mod lockset_run;
mod options_check;
mod options_json;
mod options_witness;
mod processes;
mod replay;
mod report;
mod resource;
mod sasl;
mod timeline;
mod watchdog;
mod workers;
mod workers_options;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use zk_testcluster::{FaultProxy, ZkCluster};

use checker::Pause;
use faults::{inject, Fault, FaultRec, Run, Schedule, Stage};
use processes::{worker_binary, worker_main, Spawner, WorkerProcess};
use report::{history_json, PhaseReport};
use resource::{Epoch, History};
use workers::Broken;

const SESSION: Duration = Duration::from_secs(2);
const WORKERS_PER_PROCESS: usize = 3;
const PROCESSES: usize = 2;
/// The semaphore phase's maximum lease total.
const SEM_MAX: u32 = 3;
const PHASES: [&str; 12] = [
    "mutex",
    "rwlock",
    "semaphore",
    "semmutex",
    "multi",
    "latch",
    "selector",
    "lockset",
    "delay",
    "maxhold",
    "revoke",
    "observer",
];

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

// ------------------------------------------------------------------ phases

fn cap(mode: &str) -> Option<u32> {
    (mode == "semaphore").then_some(SEM_MAX)
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
    servers: Option<&lockset_run::Servers>,
    replayed: Option<replay::PhasePlan>,
) -> Result<PhaseReport, Error> {
    // The phase's seed and its faults: drawn, or as a replayed history recorded them.
    let phase_seed = replayed.as_ref().map_or_else(|| schedule.rng.next(), |p| p.seed);
    let mut rng = Rng(phase_seed);
    let mut source = match replayed {
        Some(plan) => replay::Source::Replay(plan.faults.into()),
        None => replay::Source::Draw,
    };
    let mut planned = Vec::new();
    let servers = servers.filter(|_| mode == "lockset");
    if let Some(s) = servers {
        lockset_run::reset(s, &zk.connect_string()).await?;
    }
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let state = Arc::new(Mutex::new(History::default()));
    let witness = (mode == "delay").then(|| {
        tokio::spawn(options_witness::run(zk.connect_string(), "/chaos/delay", state.clone(), epoch))
    });
    let server = tokio::spawn(resource::serve(listener, state.clone(), epoch, broken != Broken::NoFence));
    let connects = proxies.iter().map(FaultProxy::connect_string).collect();
    let extra = servers.map(lockset_run::Servers::args).unwrap_or_default();
    let spawner = Spawner { connects, addr, mode, broken, extra };
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
    let addrs = (0..zk.len()).map(|i| zk.client_addr(i)).collect::<Result<Vec<_>, _>>()?;
    let watchdog = tokio::spawn(watchdog::run(mode.to_string(), addrs, state.clone(), run.clone(), epoch));
    // `--sasl`: the ACL of the recipes' nodes, read while the faults land (sasl.rs).
    let acls_seen = Arc::new(Mutex::new(sasl::Seen::default()));
    let acl_sampler = sasl::identity().map(|expected| {
        tokio::spawn(sasl::sample(zk.connect_string(), workers::paths(mode), expected, acls_seen.clone()))
    });
    let mut n_faults = 0;
    let last_phase = n.0 == n.1;
    while !source.drawn() || Instant::now() < deadline || schedule.owes_a_kind(last_phase) {
        // The lockset phase: every other fault pauses the process of a worker between its read
        // and its write (what the unfenced sets are exposed to).
        let lockset = servers.is_some();
        let kind = || {
            n_faults += 1;
            if lockset && n_faults % 2 == 1 {
                Fault::PauseWorkerProcess
            } else {
                schedule.next()
            }
        };
        let Some((gap_ms, fault, fault_seed)) = source.next(&mut rng, kind) else { break };
        tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        if source.drawn() && Instant::now() >= deadline && !schedule.owes_a_kind(last_phase) {
            break;
        }
        // Recorded for the history, not replayed (a frozen server does not answer: bounded).
        let leader =
            tokio::time::timeout(Duration::from_millis(300), zk.leader()).await.ok().and_then(Result::ok);
        planned.push(replay::Planned { gap_ms, fault, seed: fault_seed, leader });
        // Each fault's choices from a seed of its own, so that a replay makes them again
        // whatever the faults before it drew.
        let mut fault_rng = Rng(fault_seed);
        let start = epoch.now();
        let detail = inject(
            fault,
            Stage { zk, proxies, procs: &mut procs, spawner: &spawner, state: &state, run, epoch },
            &mut fault_rng,
        )
        .await?;
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
        schedule.met.insert(fault);
    }
    for p in &mut procs {
        if let Some(stdin) = p.child.stdin.as_mut() {
            let _ = writeln!(stdin, "stop");
        }
    }
    for mut p in procs {
        let _ = tokio::task::spawn_blocking(move || p.child.wait()).await;
    }
    run.lock().unwrap_or_else(|e| e.into_inner()).plans.push(replay::PhasePlan {
        phase: mode.to_string(),
        seed: phase_seed,
        faults: planned,
    });
    progress.abort();
    watchdog.abort();
    if let Some(sampler) = acl_sampler {
        sampler.abort();
    }
    if run.lock().unwrap_or_else(|e| e.into_inner()).stalls.iter().any(|s| s.phase == mode) {
        zk.keep_logs();
    }
    server.abort();
    if let Some(w) = witness {
        w.abort();
    }
    let ended = epoch.now();
    // Ephemeral nodes of killed sessions go when those sessions expire.
    let admin_session = sasl::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
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
    let finals = match servers {
        Some(s) => Some(lockset_run::final_reads(s, &zk.connect_string()).await?),
        None => None,
    };
    let history = std::mem::take(&mut *state.lock().unwrap_or_else(|e| e.into_inner()));
    let run = run.lock().unwrap_or_else(|e| e.into_inner());
    let faults: Vec<&FaultRec> = run.faults.iter().filter(|f| f.phase == mode).collect();
    let mut r = report::report(mode, secs, history, &run.pauses, &faults, &left, (started, ended));
    if let Some(finals) = finals {
        lockset_check::attach(&mut r, &finals, &run.pauses);
    }
    options_check::attach(&mut r, mode, &run.pauses, &run.kills, &faults);
    if let Some(expected) = sasl::identity() {
        let (lines, violations) = acls_seen.lock().unwrap_or_else(|e| e.into_inner()).verdict(&expected);
        r.lines.extend(lines);
        r.violations += violations;
    }
    Ok(r)
}

/// Everything the checker finds in one history, as numbers for the progress line.
fn tally(mode: &str, h: &History, pauses: &[Pause], now: Duration) -> (usize, usize, usize) {
    let cap = |r: &str| cap(mode).or(workers_options::lease_cap(r));
    let fenced = checker::fenced(&h.ops, &cap, pauses, now);
    let mut overlaps = checker::overlaps(&h.holds, &cap, pauses);
    clock_check::explain(&mut overlaps, &h.holds, &clock_check::spans(&h.clocks, &[]));
    limit_check::explain(&mut overlaps, &h.holds, &h.ops, &h.opts.limited, &h.clocks.rates());
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
            "chaos [phase {n}/{of}] {mode}: {elapsed}s in, {}s left; faults {}, holds {holds}, refused \
             writes {refused}, overlaps explained {explained}, violations so far {violations}",
            secs.saturating_sub(elapsed),
            injected.load(Ordering::Relaxed)
        );
    }
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
    // `--recheck HISTORY`: the checker again, on the wire logs of a recorded run (replay.rs).
    if let Some(path) = arg("--recheck") {
        match replay::recheck_main(&path) {
            Ok(code) => std::process::exit(code),
            Err(e) => {
                eprintln!("chaos: --recheck {path}: {e}");
                std::process::exit(2);
            }
        }
    }
    // `--replay HISTORY`: the phases, seeds and faults a recorded run drew (replay.rs).
    let replaying = arg("--replay").map(|path| {
        let plans = std::fs::read_to_string(&path).map_err(Error::from).and_then(|t| {
            let doc = serde_json::from_str::<serde_json::Value>(&t)?;
            let broken = doc["broken"].as_str().unwrap_or("none").to_string();
            Ok((replay::load_schedule(&t)?, doc["seconds_per_phase"].as_u64().unwrap_or(60), broken))
        });
        plans.unwrap_or_else(|e| {
            eprintln!("chaos: --replay {path}: {e}");
            std::process::exit(2);
        })
    });
    let secs: u64 = match &replaying {
        Some((_, secs, _)) => *secs,
        None => arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(60),
    };
    let seed: u64 = arg("--seed").and_then(|s| s.parse().ok()).unwrap_or(0xc4a05);
    let phases: Vec<String> = match (&replaying, arg("--phases")) {
        (Some((plans, _, _)), _) => plans.iter().map(|p| p.phase.clone()).collect(),
        (None, Some(list)) => list.split(',').map(str::to_string).collect(),
        (None, None) => PHASES.iter().map(|p| p.to_string()).collect(),
    };
    // A replay misbehaves as the recorded run did, unless told otherwise.
    let recorded_broken = replaying.as_ref().map(|(_, _, broken)| broken.clone());
    let mut plans: std::collections::VecDeque<replay::PhasePlan> =
        replaying.map(|(plans, _, _)| plans.into()).unwrap_or_default();
    if let Some(bad) = phases.iter().find(|p| !PHASES.contains(&p.as_str())) {
        eprintln!("chaos: unknown phase {bad}; the phases are {}", PHASES.join(","));
        std::process::exit(2);
    }
    // `--faults A,B`: only these kinds (their `Debug` names), each in turn as usual.
    let kinds: Vec<Fault> = match arg("--faults") {
        Some(list) => {
            let names: Vec<&str> = list.split(',').collect();
            let known = |n: &str| faults::known().any(|f| format!("{f:?}") == n);
            if let Some(bad) = names.iter().find(|n| !known(n)) {
                eprintln!(
                    "chaos: unknown fault {bad}; the kinds are {:?}",
                    faults::known().collect::<Vec<_>>()
                );
                std::process::exit(2);
            }
            faults::known().filter(|f| names.contains(&format!("{f:?}").as_str())).collect()
        }
        None => faults::FAULTS.to_vec(),
    };
    let Some(broken) = Broken::parse(&arg("--broken").or(recorded_broken).unwrap_or_else(|| "none".into()))
    else {
        eprintln!("chaos: --broken takes none, ignore-safe-window, no-fence or over-admit");
        std::process::exit(2);
    };
    // `--sasl`: before any thread starts (it sets the environment the worker processes inherit).
    let sasl = sasl::setup(arg("--sasl").as_deref()).unwrap_or_else(|e| {
        eprintln!("chaos: {e}");
        std::process::exit(2);
    });
    println!(
        "chaos: seed {seed} (--history FILE records its schedule; --replay FILE runs it again), {secs} s per \
         phase, phases {}, session timeout {SESSION:?}{}",
        phases.join(","),
        if broken == Broken::None { String::new() } else { format!(", BROKEN on purpose: {}", broken.name()) }
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    // Replica convergence after the last phase (convergence.rs).
    let mut converged = None;
    let outcome = rt.block_on(async {
        // Partitionable, with the grey faults' disk-stall shim and log disks (faults_grey.rs).
        let mut zk = faults_grey::start_cluster(sasl.mode.clone()).await?;
        if let Some(line) = sasl::first_session(&zk.connect_string()).await? {
            println!("{line}");
        }
        let proxies: Vec<FaultProxy> =
            (0..PROCESSES * WORKERS_PER_PROCESS).map(|_| zk.proxy()).collect::<Result<_, _>>()?;
        let epoch = Epoch(resource::mono_ns());
        let run = Arc::new(Mutex::new(Run::default()));
        let mut schedule = Schedule {
            rng: Rng(seed),
            bag: Vec::new(),
            kinds: kinds.clone(),
            every_kind: args.iter().any(|a| a == "--every-kind"),
            met: Default::default(),
        };
        // Dropped (and so stopped) on an error too.
        let mut servers = match phases.iter().any(|p| p == "lockset") {
            true => Some(lockset_run::Servers::start().await?),
            false => None,
        };
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
                servers.as_ref(),
                plans.pop_front(),
            )
            .await?;
            for l in &r.lines {
                println!("{l}");
            }
            let _ = std::io::stdout().flush();
            reports.push((mode.clone(), r));
        }
        if let Some(s) = servers.as_mut() {
            s.stop();
        }
        converged = Some(convergence::check(&zk, &sasl::options(Duration::from_secs(10))).await);
        Ok::<_, Error>((reports, run, epoch))
    });
    if let Ok(copy) = worker_binary() {
        let _ = std::fs::remove_file(copy);
    }
    // The KDC of `--sasl gssapi` stopped by PID now: the exits below run no destructors.
    drop(sasl);
    let (reports, run, epoch) = match outcome {
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
    let refused: usize = reports
        .iter()
        .map(|(_, r)| {
            let ls = r.history.ls_ops.iter().filter(|o| o.outcome == lockset::Outcome::Refused).count();
            r.history.ops.iter().filter(|o| o.refused).count() + ls
        })
        .sum();
    let explained: usize =
        reports.iter().map(|(_, r)| r.overlaps.iter().filter(|o| o.explanation.is_some()).count()).sum();
    let episodes: usize = reports.iter().map(|(_, r)| r.episodes).sum();
    println!(
        "total: {} phases, {} faults ({}), {holds} holds, {refused} writes refused by fencing, {explained} \
         holds began beside a paused holder (explained; {episodes} pauses)",
        reports.len(),
        run.faults.len(),
        kinds.join(", ")
    );
    println!("{}", watchdog::summary(&run.stalls));
    if let Some(path) = arg("--history") {
        match std::fs::write(&path, history_json(seed, secs, &reports, &run, (epoch, broken))) {
            Ok(()) => println!("history: {path}"),
            Err(e) => eprintln!("chaos: could not write {path}: {e}"),
        }
    }
    let picture = arg("--timeline").unwrap_or_else(|| format!("target/chaos/timeline-{seed}.png"));
    match timeline::write(std::path::Path::new(&picture), seed, secs, &reports, &run) {
        Ok(()) => println!("timeline: {picture}"),
        Err(e) => eprintln!("chaos: could not draw the timeline {picture}: {e}"),
    }
    // Any difference between the servers' trees fails the run too.
    let violations = violations + converged.as_ref().map_or(0, convergence::print);
    println!("violations: {violations}");
    let _ = std::io::stdout().flush();
    if violations > 0 {
        std::process::exit(1);
    }
}
