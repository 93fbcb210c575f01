//! The command line: the options, the internal child commands, and the names `--only` and
//! `--peers` accept.

use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{value_parser, Parser, Subcommand};
use zk_testcluster::ZkVersion;

use crate::pin::PinMode;

/// The scenarios `--only` can pick.
pub const SCENARIOS: [&str; 14] = [
    "uncontended",
    "contended",
    "many-locks",
    "per-order",
    "semaphore",
    "rwlock",
    "leader",
    "failover",
    "scale",
    "scale-spread",
    "fencing",
    "network",
    "ensemble",
    "fleet",
];
/// The peers `--peers` can pick (their short names).
pub const PEER_NAMES: [&str; 6] =
    ["zk-recipes", "zk-recipes-drop", "lockclient", "curator", "kazoo", "naive"];

/// Benchmarks zk-recipes' locks side by side with Apache Curator, kazoo, zookeeper-client's
/// LockClient and the naive one-node recipe, and its semaphore, read/write lock and leader
/// election beside Curator's and kazoo's, on throwaway local ZooKeeper servers (a standalone
/// server, then a 3-node ensemble), in one run.
///
/// Runs on ZooKeeper 3.9.3 by default, or the releases --server names (scripts/ensure-zookeeper
/// and scripts/ensure-zookeeper-versions fetch them); Curator needs its jars and a JDK, kazoo
/// /usr/bin/python3 with kazoo (scripts/ensure-peers installs both on Debian/Ubuntu).
#[derive(Parser, Debug)]
#[command(name = "zk-bench", version, args_conflicts_with_subcommands = true)]
pub struct Args {
    /// Every scenario for a moment, as a smoke test (0.5 s runs, 1 repeat): checks that every
    /// peer produced numbers and that no two holds overlapped; asserts nothing about speed.
    #[arg(long)]
    pub quick: bool,
    /// Seconds per measured run [default: 5, or 0.5 with --quick].
    #[arg(long, value_name = "S", value_parser = positive_secs)]
    pub seconds: Option<f64>,
    /// Repeats of every measured scenario; the report shows the median and min–max [default: 3,
    /// or 1 with --quick].
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeats: Option<u32>,
    /// Where the report goes [default: target/bench-report].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Leave out a peer that can't run here (and say so in the report) instead of stopping.
    #[arg(long)]
    pub skip_missing: bool,
    /// Pin the ZooKeeper servers and the clients (this process, its peers and every process it
    /// starts) to separate CPUs: `auto` gives the servers the first half of the CPUs this
    /// process may use (on 2: CPU 0 for the servers, CPU 1 for the clients) and pins nothing on
    /// a single CPU; `off` leaves every process to the scheduler. The report says which.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = PinMode::Auto)]
    pub pin: PinMode,
    /// Never run scripts/ensure-peers to install a missing peer; only say what to run.
    #[arg(long)]
    pub no_install: bool,
    /// Only these scenarios (comma-separated): uncontended, contended, many-locks, per-order,
    /// semaphore, rwlock (read-heavy and write-heavy), leader (latch and selector handovers),
    /// failover (handovers after a kill of the leader's process), scale (waiters in one process),
    /// scale-spread (thousands of waiters over 8 processes), fencing (a fenced write
    /// against an unfenced one at ZooKeeper, PostgreSQL and Redis), network, ensemble, fleet (what
    /// many idle, holding and waiting sessions cost a 3-node ensemble). The raw write round trip is
    /// always measured.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        value_parser = PossibleValuesParser::new(SCENARIOS)
    )]
    pub only: Vec<String>,
    /// Only these peers (comma-separated): zk-recipes, lockclient, curator, kazoo, naive.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        value_parser = PossibleValuesParser::new(PEER_NAMES)
    )]
    pub peers: Vec<String>,
    /// The failover scenario's session timeouts, in seconds (comma-separated) [default: 1].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = value_parser!(u64).range(1..=60))]
    pub failover_sessions: Vec<u64>,
    /// Kills of the leader's process per failover run [default: 5; --quick: 2].
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub failover_kills: Option<u32>,
    /// The failover scenario's zk-recipes candidates beat this fraction of the negotiated
    /// session timeout after each answer (`ConnectOptions::beat_period`: 0.05 to 0.15)
    /// [default: the library's, a twentieth]. Named in the report when set.
    #[arg(long, value_name = "F", value_parser = beat_fraction)]
    pub beat_period: Option<f64>,
    /// The ZooKeeper releases to run on (comma-separated, e.g. `3.8.0,3.9.3`): the whole run once
    /// per server, each report in its own folder of --out (`<out>/3.9.3/`) and a `summary.md`
    /// and `results.csv` at --out with every server's [default: $ZK_VERSION, else the harness's
    /// default, 3.9.3]. `scripts/ensure-zookeeper-versions VERSION` fetches one.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = server_version)]
    pub server: Option<Vec<ZkVersion>>,
    /// The fleet scenario's sessions, spread over --fleet-procs processes [default: 1000; --quick:
    /// 20].
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(2..=100_000))]
    pub fleet_sessions: Option<u32>,
    /// The processes the fleet's sessions spread over [default: 4; --quick: 2].
    #[arg(long, value_name = "P", value_parser = value_parser!(u32).range(1..=64))]
    pub fleet_procs: Option<u32>,
    /// Seconds the fleet scenario measures each phase (idle, holding, half waiting) [default: 20;
    /// --quick: 1].
    #[arg(long, value_name = "S", value_parser = positive_secs)]
    pub fleet_phase: Option<f64>,
    /// The fleet's session timeout, in seconds [default: 10].
    #[arg(long, value_name = "S", default_value_t = 10, value_parser = value_parser!(u64).range(4..=40))]
    pub fleet_timeout: u64,
    #[command(subcommand)]
    pub child: Option<ChildCommand>,
}

#[derive(Subcommand, Debug)]
pub enum ChildCommand {
    /// (internal) One side of the scale scenario, in its own process.
    #[command(hide = true, name = "scale-child")]
    Scale { peer: String, connect: String, path: String, waiters: usize, total: usize, hold: u8 },
    /// (internal) A candidate of the failover scenario, in its own process.
    #[command(hide = true, name = "elect-child")]
    Elect {
        recipe: String,
        connect: String,
        path: String,
        id: String,
        session_ms: u64,
        /// `ConnectOptions::beat_period` (the library's default when absent).
        #[arg(long)]
        beat_period: Option<f64>,
    },
    /// (internal) Some of the fleet scenario's sessions, in their own process.
    #[command(hide = true, name = "fleet-child")]
    Fleet { peer: String, connect: String, prefix: String, first: usize, count: usize, session_ms: u64 },
}

/// A ZooKeeper release as `--server` takes it (`3.9.3`).
fn server_version(s: &str) -> Result<ZkVersion, String> {
    s.parse().map_err(|e: zk_testcluster::HarnessError| e.to_string())
}

/// A beat period as `ConnectOptions::beat_period` takes it (the library checks the range again).
fn beat_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.05..=0.15).contains(&x) => Ok(x),
        _ => Err(format!("{s:?} is not a fraction of the session timeout in [0.05, 0.15]")),
    }
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 3600.0 => Ok(x),
        _ => Err(format!("{s:?} is not a number of seconds in (0, 3600]")),
    }
}
