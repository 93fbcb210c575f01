//! The fleet scenario: many sessions, over several processes, on a 3-node ensemble, in three
//! phases (idle, each holding one lock, half of them waiting), and what each phase costs the
//! servers: the packets they receive from the clients (requests and pings, `mntr`'s
//! `zk_packets_received`) and their CPU time (`/proc/<pid>/stat`, less their JIT compiler
//! threads'), on the leader and on the followers. Every driver process speaks one line protocol
//! (`zk-bench fleet-child`, `bench/peers/CuratorFleet.java`, `bench/peers/kazoo_fleet.py`):
//!
//! ```text
//! <driver> CONNECT PREFIX FIRST COUNT SESSION_MS
//!   connects sessions FIRST..FIRST+COUNT, prints READY; then, on stdin:
//!   hold   session g takes the lock PREFIX/l<g>; prints HELD once every one holds
//!   half   every odd g releases its lock and queues for PREFIX/l<g-1>; prints WAITING
//!   count  prints HOLDING <sessions holding a lock now>
//!   exit   closes its sessions and exits
//! ```

use std::time::Duration;

use zk_testcluster::ZkCluster;

use super::Peer;
use crate::clock::process_cpu_ns;
use crate::driver::Driver;
use crate::jit::compiler_cpu;

mod child;
pub use child::fleet_child;

/// Who makes up a fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetPeer {
    /// No session at all: what the ensemble costs on its own.
    Nobody,
    /// Raw `zookeeper-client` clients that only connect: the client crate's own pings, the floor.
    Pings,
    /// A lock peer's sessions.
    Of(Peer),
}

impl FleetPeer {
    pub fn name(self) -> &'static str {
        match self {
            FleetPeer::Nobody => "no sessions (the ensemble alone)",
            FleetPeer::Pings => "zookeeper-client, connected only (its pings)",
            FleetPeer::Of(p) => p.name(),
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            FleetPeer::Nobody => "nobody",
            FleetPeer::Pings => "pings",
            FleetPeer::Of(p) => p.short(),
        }
    }

    /// The phases this fleet goes through (the pings' clients have no locks).
    pub fn phases(self) -> &'static [Phase] {
        match self {
            FleetPeer::Nobody | FleetPeer::Pings => &[Phase::Idle],
            FleetPeer::Of(_) => &[Phase::Idle, Phase::Holding, Phase::HalfWaiting],
        }
    }
}

/// A phase of a fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Connected, holding nothing, waiting for nothing.
    Idle,
    /// Every session holds one lock of its own.
    Holding,
    /// Half the sessions hold a lock; each of the others waits for one of those.
    HalfWaiting,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Holding => "each holding one lock",
            Phase::HalfWaiting => "half holding, half waiting",
        }
    }

    /// The sessions that hold a lock in this phase, of `n`.
    fn holders(self, n: usize) -> usize {
        match self {
            Phase::Idle => 0,
            Phase::Holding => n,
            Phase::HalfWaiting => n.div_ceil(2),
        }
    }
}

/// The fleet's shape: sessions, processes, seconds measured per phase, session timeout.
#[derive(Clone, Copy, Debug)]
pub struct FleetPlan {
    pub sessions: usize,
    pub procs: usize,
    pub phase_secs: f64,
    pub timeout: Duration,
}

impl FleetPlan {
    /// The pause between a phase's start and its measured window: the sessions' requests of the
    /// transition (connects, creates, listings) done, their steady state left.
    pub fn settle(&self) -> Duration {
        Duration::from_secs_f64((self.phase_secs / 4.0).clamp(0.5, 3.0))
    }
}

/// One phase of a fleet, measured.
#[derive(Clone, Debug)]
pub struct FleetRow {
    pub peer: FleetPeer,
    pub phase: Phase,
    pub sessions: usize,
    pub secs: f64,
    /// Packets the leader and the followers (together) received from clients in the window.
    pub packets: (i64, i64),
    /// CPU time of the leader's process and of the followers' (together), ns, without their JIT
    /// compiler threads' (`jit_ns`): a fresh server compiles for its first minutes, which is not
    /// what a session costs it.
    pub cpu_ns: (u64, u64),
    pub jit_ns: (u64, u64),
    /// Sessions holding a lock at the window's end, and how many should.
    pub holding: usize,
    pub holders: usize,
}

/// Each server's received packets, CPU time and its JIT compiler threads' CPU time (ns) now.
async fn counters(zk: &ZkCluster) -> Result<Vec<(i64, u64, u64)>, String> {
    let pids = zk.pids();
    let mut now = Vec::with_capacity(zk.len());
    for (i, &pid) in pids.iter().enumerate() {
        let packets = patient_mntr(zk, i).await?.packets_received();
        let cpu = process_cpu_ns(pid).ok_or_else(|| format!("no /proc/{pid}/stat"))?;
        let jit = compiler_cpu(pid).ok_or_else(|| format!("no /proc/{pid}/task"))?.as_nanos() as u64;
        now.push((packets, cpu, jit));
    }
    Ok(now)
}

/// Node `i`'s `mntr`, asked up to three times: with a thousand sessions connected, a server on
/// one shared core may take longer than the harness's 2 s to answer one (seen on a 2-core
/// machine while other jobs ran), which is not a fault of the fleet under measurement.
async fn patient_mntr(zk: &ZkCluster, i: usize) -> Result<zk_testcluster::Mntr, String> {
    let mut last = String::new();
    for _ in 0..3 {
        match zk.mntr(i).await {
            Ok(m) => return Ok(m),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// Measures `phase` for `secs` on `zk`, after the fleet's `settle`.
async fn measure(
    zk: &ZkCluster,
    peer: FleetPeer,
    phase: Phase,
    plan: &FleetPlan,
) -> Result<FleetRow, String> {
    tokio::time::sleep(plan.settle()).await;
    let leader = zk.wait_for_leader().await.map_err(|e| e.to_string())?;
    let before = counters(zk).await?;
    let t0 = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(plan.phase_secs)).await;
    let after = counters(zk).await?;
    let secs = t0.elapsed().as_secs_f64();
    if zk.leader().await.ok() != Some(leader) {
        return Err(format!("fleet {}: the ensemble's leader changed during a phase", peer.name()));
    }
    let (mut packets, mut cpu_ns, mut jit_ns) = ((0, 0), (0, 0), (0, 0));
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let jit = a.2.saturating_sub(b.2);
        let (p, c) = (a.0 - b.0, a.1.saturating_sub(b.1).saturating_sub(jit));
        if i == leader {
            (packets.0, cpu_ns.0, jit_ns.0) = (p, c, jit);
        } else {
            packets.1 += p;
            cpu_ns.1 += c;
            jit_ns.1 += jit;
        }
    }
    let sessions = if peer == FleetPeer::Nobody { 0 } else { plan.sessions };
    let holders = phase.holders(sessions);
    Ok(FleetRow { peer, phase, sessions, secs, packets, cpu_ns, jit_ns, holding: 0, holders })
}

/// The fleet of `peer` on `zk`: its processes started, its sessions connected, each phase
/// entered and measured, then closed. Locks under `prefix`.
pub async fn fleet(
    zk: &ZkCluster,
    peer: FleetPeer,
    plan: &FleetPlan,
    prefix: &str,
) -> Result<Vec<FleetRow>, String> {
    if peer == FleetPeer::Nobody {
        return Ok(vec![measure(zk, peer, Phase::Idle, plan).await?]);
    }
    let connect = zk.connect_string();
    let (n, procs) = (plan.sessions, plan.procs.clamp(1, plan.sessions.max(1)));
    let timeout_ms = plan.timeout.as_millis().to_string();
    let mut ds = Vec::with_capacity(procs);
    let mut first = 0;
    for i in 0..procs {
        let count = n / procs + usize::from(i < n % procs);
        let args = [connect.as_str(), prefix, &first.to_string(), &count.to_string(), &timeout_ms];
        ds.push(driver_fleet(peer, &args)?);
        first += count;
    }
    let all = |ds: &mut Vec<Driver>, word: Option<&str>, answer: &str| -> Result<Vec<String>, String> {
        ds.iter_mut().for_each(|d| word.into_iter().for_each(|w| d.say(w)));
        tokio::task::block_in_place(|| ds.iter_mut().map(|d| d.expect(answer)).collect())
    };
    all(&mut ds, None, "READY")?;
    let mut rows = Vec::new();
    for &phase in peer.phases() {
        match phase {
            Phase::Idle => {}
            Phase::Holding => drop(all(&mut ds, Some("hold"), "HELD")?),
            Phase::HalfWaiting => drop(all(&mut ds, Some("half"), "WAITING")?),
        }
        let mut row = measure(zk, peer, phase, plan).await?;
        let counts = all(&mut ds, Some("count"), "HOLDING")?;
        row.holding =
            counts.iter().filter_map(|l| l.strip_prefix("HOLDING ")?.trim().parse::<usize>().ok()).sum();
        rows.push(row);
    }
    for d in ds {
        tokio::task::block_in_place(|| d.finish())?;
    }
    Ok(rows)
}

/// A driver process of `peer`'s fleet: ours (`zk-bench fleet-child`) for the Rust peers, the
/// bench's own Curator and kazoo fleet drivers (`bench/peers/`) for theirs.
fn driver_fleet(peer: FleetPeer, args: &[&str]) -> Result<Driver, String> {
    let cmd = match peer {
        FleetPeer::Of(Peer::Curator) => crate::setup::curator_fleet(args),
        FleetPeer::Of(Peer::Kazoo) => crate::setup::kazoo_fleet(args),
        _ => {
            let mut cmd = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
            cmd.arg("fleet-child").arg(peer.short()).args(args);
            cmd
        }
    };
    Driver::spawn(peer.short(), cmd)
}
