//! The fleet scenario's table, CSV and problems.

use std::fmt::Write as _;
use std::path::Path;

use zk_testcluster::ZkVersion;

use crate::peers::{FleetPeer, FleetPlan, FleetRow, Phase};

/// Packets per session per second, both sides together.
fn per_session(r: &FleetRow) -> Option<f64> {
    (r.sessions > 0).then(|| (r.packets.0 + r.packets.1) as f64 / r.sessions as f64 / r.secs)
}

/// µs of CPU per session per second, or the total ms per second when there are no sessions.
fn cpu_cell(ns: u64, r: &FleetRow) -> String {
    let per_sec = ns as f64 / r.secs;
    match r.sessions {
        0 => format!("({:.1} ms/s in all)", per_sec / 1e6),
        n => format!("{:.1} ({:.1} ms/s in all)", per_sec / 1e3 / n as f64, per_sec / 1e6),
    }
}

pub fn summary(rows: &[FleetRow], plan: &FleetPlan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n### Fleet: {} sessions over {} processes on a 3-node ensemble, {} s session timeout\n\n\
         Each fleet connects its sessions (to any of the three servers, as its client picks), then \
         is measured {} s in each phase, after {:.1} s to settle: idle (holding nothing, waiting for \
         nothing), each session holding one lock of its own, and half the sessions holding while \
         each of the others waits for one of those locks. Packets: what the servers received from \
         the clients (`mntr` `zk_packets_received`, summed over the three: requests and pings alike; \
         a follower forwards writes and `sync`s to the leader over the quorum port, which this does \
         not count, but the leader's CPU does). CPU: user + system time of each server's JVM \
         (`/proc/<pid>/stat`) less its JIT compiler threads' (`fleet.csv` has theirs). \"no sessions\" \
         is the ensemble's own cost, in every other row too.\n",
        plan.sessions,
        plan.procs,
        plan.timeout.as_secs(),
        plan.phase_secs,
        plan.settle().as_secs_f64(),
    );
    let _ = writeln!(
        s,
        "| fleet | phase | packets per session per second | ÷ pings | leader CPU µs per session per second \
         | followers' CPU µs per session per second (both) | holding a lock (should) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    let pings = rows.iter().find(|r| r.peer == FleetPeer::Pings).and_then(per_session);
    for r in rows {
        let rate = per_session(r);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} ({}) |",
            r.peer.name(),
            r.phase.name(),
            rate.map_or("–".into(), |x| format!("{x:.2}")),
            rate.zip(pings).filter(|(_, p)| *p > 0.0).map_or("–".into(), |(x, p)| format!("{:.2}×", x / p)),
            cpu_cell(r.cpu_ns.0, r),
            cpu_cell(r.cpu_ns.1, r),
            r.holding,
            r.holders,
        );
    }
    s
}

/// A phase whose sessions held more locks than it should (two holders of one lock) or fewer (a
/// session that lost its lock).
pub fn problems(rows: &[FleetRow]) -> Vec<String> {
    rows.iter()
        .filter(|r| r.holding != r.holders)
        .map(|r| {
            format!(
                "fleet {} ({}): {} sessions held a lock, {} should",
                r.peer.name(),
                r.phase.name(),
                r.holding,
                r.holders
            )
        })
        .collect()
}

pub fn write_csv(rows: &[FleetRow], server: ZkVersion, path: &Path) -> std::io::Result<()> {
    let mut out = String::from(
        "server,fleet,phase,sessions,secs,leader_packets,follower_packets,leader_cpu_ms,follower_cpu_ms,\
         leader_jit_ms,follower_jit_ms,holding,holders\n",
    );
    for r in rows {
        let phase = match r.phase {
            Phase::Idle => "idle",
            Phase::Holding => "holding",
            Phase::HalfWaiting => "half-waiting",
        };
        let _ = writeln!(
            out,
            "{server},{},{phase},{},{:.2},{},{},{:.1},{:.1},{:.1},{:.1},{},{}",
            r.peer.short(),
            r.sessions,
            r.secs,
            r.packets.0,
            r.packets.1,
            r.cpu_ns.0 as f64 / 1e6,
            r.cpu_ns.1 as f64 / 1e6,
            r.jit_ns.0 as f64 / 1e6,
            r.jit_ns.1 as f64 / 1e6,
            r.holding,
            r.holders
        );
    }
    std::fs::write(path, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::Peer;

    fn row(phase: Phase, holding: usize, holders: usize) -> FleetRow {
        let peer = FleetPeer::Of(Peer::ZkRecipes);
        FleetRow {
            peer,
            phase,
            sessions: 4,
            secs: 1.0,
            packets: (4, 4),
            cpu_ns: (0, 0),
            jit_ns: (0, 0),
            holding,
            holders,
        }
    }

    #[test]
    fn a_phase_with_more_or_fewer_holders_than_it_should_have_is_a_problem() {
        assert!(problems(&[row(Phase::Holding, 4, 4), row(Phase::HalfWaiting, 2, 2)]).is_empty());
        assert_eq!(problems(&[row(Phase::HalfWaiting, 3, 2)]).len(), 1, "two holders of one lock");
        assert_eq!(problems(&[row(Phase::Holding, 3, 4)]).len(), 1, "a session lost its lock");
        assert_eq!(per_session(&row(Phase::Idle, 0, 0)), Some(2.0));
    }
}
