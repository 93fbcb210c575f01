//! `zk-bench`: zk-recipes side by side with Curator, kazoo, `zookeeper-client`'s `LockClient`
//! and the naive recipe, on fresh local ZooKeeper servers (a standalone one, then a 3-node
//! ensemble), in one run.
//!
//! ```text
//! cargo run --release -p zk-bench -- [--quick] [--seconds S] [--repeats R] [--pin auto|off]
//!     [--out DIR] [--skip-missing] [--only LIST] [--peers LIST]
//! ```
//! Writes `target/bench-report/` (or `--out`): `results.csv`, `summary.md` (with `fencing.csv` when
//! the fencing scenario runs) and the plots
//! `ratios.png`, `herd.png`, `handoffs.png`, `cpu.png`, `handovers.png`. `--quick` runs every
//! scenario for a moment as a smoke test: it checks that every peer produced numbers and that every recipe's
//! invariant held (mutual exclusion, at most the semaphore's leases at once, no writer beside
//! another holder, one leader at a time); it asserts nothing about speed.

mod cli;
mod clock;
mod driver;
mod fencing;
mod jit;
mod ours;
mod peers;
mod pin;
mod plan;
mod progress;
mod report;
mod rows;
mod runner;
mod setup;
mod stats;
mod summary;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use cli::{Args, ChildCommand, SCENARIOS};
use peers::Peer;
pub use plan::Plan;
pub use rows::{failover_scenario, server_row};

/// The network scenarios' one-way delay, added by a proxy between every client and the server:
/// a 1 ms round trip, as between hosts in one datacenter, where the loopback's is mostly the
/// server's own work.
pub const NETWORK_ONE_WAY: std::time::Duration = std::time::Duration::from_micros(500);
/// The contenders of the network scenarios' contended runs.
pub const NETWORK_NS: [usize; 3] = [2, 8, 32];

/// Peers left out, each with why.
type Skipped = Vec<(Peer, String)>;

/// The process peers that can run, installing missing ones through `scripts/ensure-peers` where
/// that works. `Err` is the one line to print when a peer is missing and not to be skipped.
fn available_peers(args: &Args) -> Result<(Vec<Peer>, Skipped), String> {
    let wanted = |p: &Peer| args.peers.is_empty() || args.peers.iter().any(|n| n == p.short());
    let process_peers: Vec<Peer> = [Peer::Curator, Peer::Kazoo].into_iter().filter(wanted).collect();
    let mut missing: Vec<(Peer, String)> =
        process_peers.iter().filter_map(|&p| setup::missing(p).map(|why| (p, why))).collect();
    let script = setup::ensure_peers_script();
    if !missing.is_empty() && !args.no_install {
        if let Some(script) = script.as_deref().filter(|_| setup::can_install()) {
            eprintln!("zk-bench: installing missing peers with {}", script.display());
            if let Err(e) = setup::run_ensure_peers(script) {
                eprintln!("zk-bench: {e}");
            }
            missing = process_peers.iter().filter_map(|&p| setup::missing(p).map(|why| (p, why))).collect();
        }
    }
    // Compile the Curator driver now, so that a failure is a reason rather than a panic later.
    if wanted(&Peer::Curator) && !missing.iter().any(|(p, _)| *p == Peer::Curator) {
        if let Err(why) = setup::compile_curator() {
            missing.push((Peer::Curator, why));
        }
    }
    let fix = match &script {
        Some(s) => format!("run {} (Debian/Ubuntu, as root or with sudo)", s.display()),
        None => {
            "install Apache Curator 5.x jars in /usr/share/java and a JDK, and kazoo for /usr/bin/python3"
                .into()
        }
    };
    if !missing.is_empty() && !args.skip_missing {
        let what: Vec<String> = missing.iter().map(|(p, why)| format!("{} ({why})", p.name())).collect();
        return Err(format!("missing peer {}; {fix}, or pass --skip-missing", what.join(", ")));
    }
    let skipped: Vec<(Peer, String)> =
        missing.into_iter().map(|(p, why)| (p, format!("{why}; {fix}"))).collect();
    for (p, why) in &skipped {
        eprintln!("zk-bench: skipping {}: {why}", p.name());
    }
    let peers =
        [Peer::ZkRecipes, Peer::ZkRecipesDrop, Peer::LockClient, Peer::Curator, Peer::Kazoo, Peer::Naive]
            .into_iter()
            .filter(wanted)
            .filter(|p| !skipped.iter().any(|(s, _)| s == p))
            .collect();
    Ok((peers, skipped))
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zk-bench: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    }
}

/// The internal child commands (their process inherits the clients' CPUs from ours).
fn run_child(child: &ChildCommand) {
    let (what, outcome) = match child {
        ChildCommand::Scale { peer, connect, path, waiters, total, hold } => {
            let child = peers::scale_child(peer, connect, path, *waiters, *total, *hold == 1);
            ("scale-child", runtime().block_on(child))
        }
        ChildCommand::Fleet { peer, connect, prefix, first, count, session_ms } => {
            let child = peers::fleet_child(peer, connect, prefix, *first, *count, *session_ms);
            ("fleet-child", runtime().block_on(child))
        }
        ChildCommand::Elect { recipe, connect, path, id, session_ms, beat_period } => {
            let child = peers::elect_child(recipe, connect, path, id, *session_ms, *beat_period);
            ("elect-child", runtime().block_on(child))
        }
    };
    if let Err(e) = outcome {
        eprintln!("{what}: {e}");
        std::process::exit(1);
    }
}

fn main() {
    let args = Args::parse();
    if let Some(child) = &args.child {
        run_child(child);
        return;
    }
    // Pinned before any other thread starts: the runtime's workers, the driver processes and our
    // children inherit the clients' CPUs; the servers get theirs as the harness starts them.
    let pinning = match pin::available() {
        Ok(cpus) => pin::Pinning::choose(args.pin, cpus),
        Err(why) => pin::Pinning { available: Vec::new(), split: pin::Split::Off(why) },
    };
    if let Err(e) = pinning.pin_clients() {
        eprintln!("zk-bench: {e}");
        std::process::exit(2);
    }
    let runtime = runtime();
    let (peers, skipped) = match available_peers(&args) {
        Ok(found) => found,
        Err(line) => {
            eprintln!("zk-bench: {line}");
            std::process::exit(2);
        }
    };
    let servers = match &args.server {
        Some(list) => list.clone(),
        None => match zk_testcluster::ZkVersion::from_env() {
            Ok(v) => vec![v],
            Err(e) => {
                eprintln!("zk-bench: {e}");
                std::process::exit(2);
            }
        },
    };
    let plan = plan_of(&args, (peers, skipped), pinning);
    let out = args.out.clone().unwrap_or_else(|| peers_target().join("bench-report"));
    match runtime.block_on(runner::run_on(plan, &servers, &out)) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("\nzk-bench: {e}");
            std::process::exit(2);
        }
    }
}

/// The plan the options ask for, on the default server (`run_on` sets each server's), with the
/// peers `available_peers` found and those it left out.
fn plan_of(args: &Args, found: (Vec<Peer>, Skipped), pinning: pin::Pinning) -> Plan {
    let quick = args.quick;
    Plan {
        server: zk_testcluster::ZkVersion::DEFAULT,
        quick,
        secs: args.seconds.unwrap_or(if quick { 0.5 } else { 5.0 }),
        repeats: args.repeats.map_or(if quick { 1 } else { 3 }, |r| r as usize),
        ns: vec![2, 8, 32, 128],
        many_locks: 1000,
        many_tasks: 64,
        order_tasks: 8,
        sem_leases: 4,
        sem_contenders: 16,
        rw_reads: [90, 10],
        rw_contenders: 8,
        leader_candidates: 4,
        failover_kills: args.failover_kills.map_or(if quick { 2 } else { 5 }, |k| k as usize),
        failover_sessions: if args.failover_sessions.is_empty() {
            vec![peers::FAILOVER_SESSION]
        } else {
            args.failover_sessions.iter().map(|s| Duration::from_secs(*s)).collect()
        },
        beat_period: args.beat_period,
        ensemble_n: 8,
        scale_waiters: if quick { 128 } else { 1024 },
        spread_ns: if quick { vec![16] } else { vec![1024, 4096] },
        spread_procs: if quick { 2 } else { 8 },
        peers: found.0,
        skipped: found.1,
        skip_missing: args.skip_missing,
        only: if args.only.is_empty() {
            SCENARIOS.iter().map(|s| s.to_string()).collect()
        } else {
            args.only.clone()
        },
        pinning,
        fleet: peers::FleetPlan {
            sessions: args.fleet_sessions.map_or(if quick { 20 } else { 1000 }, |n| n as usize),
            procs: args.fleet_procs.map_or(if quick { 2 } else { 4 }, |p| p as usize),
            phase_secs: args.fleet_phase.unwrap_or(if quick { 1.0 } else { 20.0 }),
            timeout: Duration::from_secs(args.fleet_timeout),
        },
    }
}

/// `target/` (the bench report goes to `target/bench-report/`).
fn peers_target() -> PathBuf {
    let profile = peers::target_dir();
    profile.parent().map(PathBuf::from).unwrap_or(profile)
}
