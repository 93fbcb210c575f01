//! The faults: a seeded schedule of every kind in turn, each injected and logged with its span.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use zk_testcluster::{FaultProxy, Mode, ZkCluster, ZkVersion};

use crate::checker::Pause;
use crate::resource::{Epoch, History};
use crate::workers::Broken;
use crate::{Error, Rng, Spawner, WorkerProcess, PROCESSES, SESSION, WORKERS_PER_PROCESS};
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a child's pid.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

// ------------------------------------------------------------------ faults

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
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
    PartitionServer,
    SlowServer,
    ClockSlowWorker,
    ClockFastWorker,
    ClockStepWorker,
    ClockFastServer,
    DiskStall,
    FullLogDisk,
    PauseZkLeader,
    OneWayRequests,
    OneWayReplies,
    OneWayServers,
    LaggingFollower,
    RollingUpgrade,
}

pub const FAULTS: [Fault; 23] = [
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
    Fault::PartitionServer,
    Fault::SlowServer,
    Fault::ClockSlowWorker,
    Fault::ClockFastWorker,
    Fault::ClockStepWorker,
    Fault::ClockFastServer,
    Fault::DiskStall,
    Fault::FullLogDisk,
    Fault::PauseZkLeader,
    Fault::OneWayRequests,
    Fault::OneWayReplies,
    Fault::OneWayServers,
    Fault::LaggingFollower,
];

/// The kinds drawn only when `--faults` names them (never by default): [`Fault::RollingUpgrade`]
/// changes the servers' version for the rest of the run.
pub const OPT_IN: [Fault; 1] = [Fault::RollingUpgrade];

/// Every kind `--faults` and a replayed history may name.
pub fn known() -> impl Iterator<Item = Fault> {
    FAULTS.into_iter().chain(OPT_IN)
}

/// How long [`Fault::PartitionServer`] cuts the leader off from the other servers: twice the
/// session timeout, so that the sessions on the old leader must move to the majority (the old
/// leader stops serving once it steps down, within `syncLimit` ticks) or expire.
const SERVER_PARTITION: Duration = Duration::from_secs(4);

/// One injected fault, with its span and what it hit.
#[derive(Clone, Debug)]
pub struct FaultRec {
    pub phase: String,
    pub fault: Fault,
    pub start: Duration,
    pub end: Duration,
    pub detail: String,
}

/// The seeded schedule: each kind in turn (a shuffled bag, refilled when empty, kept across
/// phases so that short phases still see every kind over the run).
pub struct Schedule {
    pub rng: Rng,
    pub bag: Vec<Fault>,
    /// The kinds the bag is refilled with (`--faults`; every kind by default).
    pub kinds: Vec<Fault>,
    /// `--every-kind`: the last phase goes on past its length until every kind was injected.
    pub every_kind: bool,
    /// The kinds injected so far.
    pub met: std::collections::BTreeSet<Fault>,
}

impl Schedule {
    /// Whether a run with `--every-kind` still owes a kind (in its last phase).
    pub fn owes_a_kind(&self, last_phase: bool) -> bool {
        self.every_kind && last_phase && self.kinds.iter().any(|k| !self.met.contains(k))
    }

    pub fn next(&mut self) -> Fault {
        if self.bag.is_empty() {
            self.bag = self.kinds.clone();
        }
        let i = self.rng.below(self.bag.len() as u64) as usize;
        self.bag.remove(i)
    }
}

/// What a run shares with the progress line and the report.
#[derive(Default)]
pub struct Run {
    pub pauses: Vec<Pause>,
    pub kills: Vec<(u32, Duration)>,
    pub faults: Vec<FaultRec>,
    /// Each phase's fault schedule, to replay it (`replay.rs`).
    pub plans: Vec<crate::replay::PhasePlan>,
    /// The liveness watchdog's looks at the servers (`watchdog.rs`).
    pub stalls: Vec<crate::watchdog::Stall>,
}

/// What a fault acts on: the ensemble, the workers' proxies and processes (and how to start
/// one again), and the phase's and the run's records.
pub struct Stage<'a, 'b> {
    pub zk: &'a mut ZkCluster,
    pub proxies: &'a [FaultProxy],
    pub procs: &'a mut [WorkerProcess],
    pub spawner: &'a Spawner<'b>,
    pub state: &'a Mutex<History>,
    pub run: &'a Mutex<Run>,
    pub epoch: Epoch,
}

/// Injects `fault`, its random choices from `rng`; returns what it hit. Process faults land on
/// the process of the worker that most recently began a write (the one most likely inside).
pub async fn inject(fault: Fault, stage: Stage<'_, '_>, rng: &mut Rng) -> Result<String, Error> {
    let Stage { zk, proxies, procs, spawner, state, run, epoch } = stage;
    // A client-path fault hits the worker inside (if any) half the time (always when broken on
    // purpose), a random one else.
    let inside = match fault {
        Fault::PartitionClient
        | Fault::SlowPath
        | Fault::ShortCut
        | Fault::ResetConnection
        | Fault::SessionMove
        | Fault::OneWayRequests
        | Fault::OneWayReplies
        | Fault::LaggingFollower
            if spawner.broken != Broken::None || rng.below(2) == 0 =>
        {
            holder_now(state, None).await.and_then(|w| {
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
        Fault::RollingUpgrade => rolling_upgrade(zk).await?,
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
        Fault::PartitionServer => match zk.leader().await {
            // The leader cut off from both followers (clients still reach it): it steps down,
            // the two others elect a new leader, its clients must move there; then it rejoins.
            Ok(k) => {
                zk.partition(k)?;
                tokio::time::sleep(SERVER_PARTITION).await;
                let during = zk.leader().await.ok().filter(|&j| j != k);
                zk.heal_partition()?;
                zk.wait_for_leader().await?;
                // Give the old leader time to rejoin before the next fault (not an error if not).
                let until = Instant::now() + Duration::from_secs(30);
                while zk.mode(k).await.is_none() && Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let during = during.map_or("none".into(), |j| format!("server {j}"));
                format!(
                    "server {k} (leader) isolated {} s; leader meanwhile: {during}",
                    SERVER_PARTITION.as_secs()
                )
            }
            Err(_) => "no leader".into(),
        },
        Fault::SlowServer => {
            // Every reply of one server delayed 200-800 ms for 3 s, for every client: a disk
            // stall or a long GC on that server (its quorum traffic is not slowed).
            let (i, ms) = (rng.below(zk.len() as u64) as usize, 200 + rng.below(600));
            let server = zk.client_addr(i)?;
            for p in proxies {
                p.set_server_latency(server, Duration::from_millis(ms));
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
            for p in proxies {
                p.set_server_latency(server, Duration::ZERO);
            }
            format!("server {i} {ms} ms")
        }
        Fault::ClockSlowWorker | Fault::ClockFastWorker | Fault::ClockStepWorker | Fault::ClockFastServer => {
            let stage = Stage { zk, proxies, procs, spawner, state, run, epoch };
            crate::faults_clock::inject(fault, stage, rng).await?
        }
        Fault::DiskStall
        | Fault::FullLogDisk
        | Fault::PauseZkLeader
        | Fault::OneWayRequests
        | Fault::OneWayReplies
        | Fault::OneWayServers
        | Fault::LaggingFollower => crate::faults_grey::inject(fault, zk, proxies, pick(rng), rng).await?,
        Fault::PauseWorkerProcess | Fault::KillWorkerProcess => {
            // The lockset phase: a worker between its read and its write, of a fenced and of an
            // unfenced set in turn.
            let lockset = state.lock().unwrap_or_else(|e| e.into_inner()).is_lockset();
            let pauses = run.lock().unwrap_or_else(|e| e.into_inner()).pauses.len();
            let holder = holder_now(state, lockset.then_some(pauses % 2 == 1)).await;
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

/// A rolling upgrade (`--faults RollingUpgrade`): every server in turn, the followers first and
/// the leader last, restarted as the version `ZK_UPGRADE_TO` names (3.9.6 by default) on its own
/// data, each back and the quorum led before the next goes down. The run starts at `ZK_VERSION`
/// (`ZK_VERSION=3.8.0`: from Debian 12's server). Once every server runs that version, it is a
/// rolling restart.
async fn rolling_upgrade(zk: &mut ZkCluster) -> Result<String, Error> {
    let to = match std::env::var("ZK_UPGRADE_TO") {
        Ok(v) if !v.trim().is_empty() => v.parse::<ZkVersion>()?,
        _ => ZkVersion::V3_9_6,
    };
    let leader = zk.leader().await.ok();
    let mut order: Vec<usize> = (0..zk.len()).filter(|&i| Some(i) != leader).collect();
    order.extend(leader);
    let mut steps = Vec::new();
    for i in order {
        let from = zk.version(i)?;
        zk.restart_as(i, to).await?;
        zk.wait_for_leader().await?;
        steps.push(format!("server {i} {from} -> {}", zk.server_version(i).await?));
    }
    Ok(steps.join(", "))
}

/// The worker that most recently began a write still open (`fenced`: a lock-set worker
/// between its read and its write of a fenced set, or an unfenced one), waiting up to 1 s for
/// one; then any.
pub async fn holder_now(state: &Mutex<History>, fenced: Option<bool>) -> Option<String> {
    let until = Instant::now() + Duration::from_secs(1);
    let pick = |h: &History| match fenced {
        Some(f) => h.in_work(Some(f)),
        None => h.latest_open(),
    };
    while Instant::now() < until {
        if let Some(w) = pick(&state.lock().unwrap_or_else(|e| e.into_inner())) {
            return Some(w);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    state.lock().unwrap_or_else(|e| e.into_inner()).latest_open()
}
