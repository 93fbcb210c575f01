//! The liveness watchdog: when a phase goes [`STALL`] without a new hold, it records what every
//! server has, so that a stall can be explained afterwards. The 60-minute soak had a 74 s stall
//! of the semaphore that its history could not explain (docs/safety.md, "The soak").
//!
//! Per server, from four-letter words only (they need no session, so they answer while there is
//! no quorum): `srvr` (its role and zxid), `dump` (every ephemeral node with its owner session;
//! on the leader, the sessions it tracks for expiry) and `cons` (the sessions connected to it).
//! Then, for every node under the phase's lock paths: which servers have it, its owner, whether
//! the leader tracks that session, and which server that session is connected to. A node no
//! server's leader tracks is a ghost that only a new leader's start removes; a node some servers
//! lack is a divergence; a node whose owner is connected is a live contender, and a stall with
//! only those is a waiter that missed an event.
//!
//! Each stall is printed on stderr, kept in the history (`stalls`) and in the summary, and the
//! servers' logs are kept (`ZkCluster::keep_logs`). A stall does not fail the run: the checker
//! judges safety; this is evidence.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::faults::Run;
use crate::resource::{Epoch, History};

/// How long a phase may go without a new hold before the watchdog looks. The soak's other
/// phases went at most 7.1 s without one, through every fault kind.
pub const STALL: Duration = Duration::from_secs(15);
/// While a stall lasts, it looks again after this long, at most [`LOOKS`] times a stall.
const AGAIN: Duration = Duration::from_secs(30);
const LOOKS: usize = 3;

/// One look at the servers during a stall.
#[derive(Clone, Debug)]
pub struct Stall {
    pub phase: String,
    /// When the look was taken, and since when no hold had begun (since the run's epoch).
    pub at: Duration,
    pub since: Duration,
    /// What the servers had, one line each (the analysis first, then the raw answers).
    pub lines: Vec<String>,
}

/// What one server's `dump` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dump {
    /// The sessions its session tracker lists (on the leader: those it will expire).
    pub tracked: BTreeSet<u64>,
    /// Every ephemeral node, with its owner session.
    pub ephemerals: BTreeMap<String, u64>,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim().strip_prefix("0x")?, 16).ok()
}

/// Parses `dump`: the `SessionTracker dump:` section's session ids (a leader lists them under
/// expiry buckets, a follower as `Global Sessions`), and the `ephemeral nodes dump:` section's
/// `0xSESSION:` lines, each followed by its nodes' paths (tab-indented).
pub fn parse_dump(text: &str) -> Dump {
    #[derive(PartialEq)]
    enum Part {
        None,
        Sessions,
        Ephemerals,
    }
    let mut dump = Dump::default();
    let (mut part, mut owner) = (Part::None, None);
    for line in text.lines() {
        if line.starts_with("SessionTracker dump") {
            part = Part::Sessions;
        } else if line.starts_with("ephemeral nodes dump") {
            part = Part::Ephemerals;
        } else if line.starts_with("Connections dump") {
            part = Part::None;
        } else if part == Part::Sessions {
            // `0x1000...` alone (leader, tab-indented) or `0x1000...\t4000ms` (follower).
            if let Some(id) = line.split_whitespace().next().and_then(hex) {
                dump.tracked.insert(id);
            }
        } else if part == Part::Ephemerals {
            if let Some(path) = line.strip_prefix('\t') {
                if let Some(id) = owner {
                    dump.ephemerals.insert(path.trim().to_string(), id);
                }
            } else if let Some(id) = line.strip_suffix(':').and_then(hex) {
                owner = Some(id);
            }
        }
    }
    dump
}

/// The session ids of `cons` (`sid=0x…` of each connection that has a session).
pub fn parse_cons(text: &str) -> BTreeSet<u64> {
    text.split("sid=").skip(1).filter_map(|rest| hex(rest.split([',', ')']).next()?)).collect()
}

/// One server's answers.
#[derive(Clone, Debug, Default)]
pub struct ServerView {
    /// `leader`, `follower`, or `None` when it does not serve.
    pub mode: Option<String>,
    pub zxid: Option<u64>,
    pub dump: Dump,
    pub connected: BTreeSet<u64>,
}

fn srvr_line<'a>(srvr: &'a str, key: &str) -> Option<&'a str> {
    srvr.lines().find_map(|l| l.strip_prefix(key)).map(str::trim)
}

/// The analysis: one line per node under `prefixes` (on any server), oldest sequence first.
pub fn analyse(servers: &[ServerView], prefixes: &[String]) -> Vec<String> {
    let leader = servers.iter().position(|s| s.mode.as_deref() == Some("leader"));
    let mut nodes: BTreeMap<(String, String), BTreeMap<usize, u64>> = BTreeMap::new();
    for (i, s) in servers.iter().enumerate() {
        for (path, owner) in &s.dump.ephemerals {
            if prefixes.iter().any(|p| path.starts_with(&format!("{p}/"))) {
                // Sorted by sequence number (the last 10 characters), as the recipes sort.
                let seq = path.get(path.len().saturating_sub(10)..).unwrap_or_default().to_string();
                nodes.entry((seq, path.clone())).or_default().insert(i, *owner);
            }
        }
    }
    let mut out = Vec::new();
    let serving: Vec<usize> = (0..servers.len()).filter(|&i| servers[i].mode.is_some()).collect();
    for ((_, path), on) in nodes {
        let owners: BTreeSet<u64> = on.values().copied().collect();
        let owner = owners.iter().next().copied().unwrap_or_default();
        let present: Vec<usize> = on.keys().copied().collect();
        let missing: Vec<usize> = serving.iter().copied().filter(|i| !on.contains_key(i)).collect();
        let tracked = leader.map(|l| servers[l].dump.tracked.contains(&owner));
        let connected: Vec<usize> =
            (0..servers.len()).filter(|&i| servers[i].connected.contains(&owner)).collect();
        let verdict = if !missing.is_empty() || owners.len() > 1 {
            "DIVERGED: the servers disagree on it"
        } else if tracked == Some(false) {
            "GHOST: the leader does not track its owner, so nothing will expire it"
        } else if connected.is_empty() {
            "owner connected nowhere: gone once its session expires"
        } else {
            "live: its owner is connected"
        };
        out.push(format!(
            "{path} owner {owner:#x}{}: on servers {present:?}{}; leader tracks the owner: {}; owner \
             connected to servers {connected:?}: {verdict}",
            if owners.len() > 1 { format!(" (owners {owners:x?})") } else { String::new() },
            if missing.is_empty() { String::new() } else { format!(", missing on {missing:?}") },
            tracked.map_or("no leader".to_string(), |t| if t { "yes".into() } else { "NO".into() }),
        ));
    }
    if out.is_empty() {
        out.push(format!("no ephemeral node under {prefixes:?} on any server"));
    }
    out
}

/// Asks every server, and returns the analysis and the raw answers.
async fn look(addrs: &[SocketAddr], prefixes: &[String]) -> Vec<String> {
    let ask = |addr: SocketAddr, word: &'static str| async move {
        zk_testcluster::four_letter_at(addr, word).await.unwrap_or_else(|e| format!("(no answer: {e})"))
    };
    let mut views = Vec::new();
    let mut raw = Vec::new();
    for (i, &addr) in addrs.iter().enumerate() {
        let (srvr, dump, cons) = (ask(addr, "srvr").await, ask(addr, "dump").await, ask(addr, "cons").await);
        let view = ServerView {
            mode: srvr_line(&srvr, "Mode:").map(str::to_string),
            zxid: srvr_line(&srvr, "Zxid:").and_then(hex),
            dump: parse_dump(&dump),
            connected: parse_cons(&cons),
        };
        raw.push(format!(
            "server {i}: mode {}, zxid {}, tracks {} sessions, {} ephemerals, {} sessions connected: {:x?}",
            view.mode.as_deref().unwrap_or("not serving"),
            view.zxid.map_or("-".into(), |z| format!("{z:#x}")),
            view.dump.tracked.len(),
            view.dump.ephemerals.len(),
            view.connected.len(),
            view.connected,
        ));
        for line in dump.lines().chain(cons.lines()) {
            raw.push(format!("server {i}:   {line}"));
        }
        views.push(view);
    }
    let mut lines = analyse(&views, prefixes);
    lines.extend(raw);
    lines
}

/// Watches one phase until aborted: each second, the time since the newest hold began (or the
/// phase began); past [`STALL`], a look at the servers.
pub async fn run(
    phase: String,
    addrs: Vec<SocketAddr>,
    state: Arc<Mutex<History>>,
    record: Arc<Mutex<Run>>,
    epoch: Epoch,
) {
    let started = epoch.now();
    let prefixes = crate::workers::paths(&phase);
    let (mut looked_since, mut looks) = (None, 0);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let since = {
            let h = state.lock().unwrap_or_else(|e| e.into_inner());
            h.holds.iter().map(|x| x.start).max().unwrap_or(started).max(started)
        };
        let now = epoch.now();
        let gap = now.saturating_sub(since);
        let due = match looked_since {
            Some((s, last)) if s == since => looks < LOOKS && now.saturating_sub(last) >= AGAIN,
            _ => gap >= STALL,
        };
        if !due {
            continue;
        }
        if looked_since.is_none_or(|(s, _)| s != since) {
            looks = 0;
        }
        looks += 1;
        looked_since = Some((since, now));
        let lines = look(&addrs, &prefixes).await;
        eprintln!(
            "chaos WATCHDOG: {phase}: no hold began for {:.1} s (since {:.2} s); what the servers have:",
            gap.as_secs_f64(),
            since.as_secs_f64()
        );
        for l in &lines {
            eprintln!("  {l}");
        }
        let stall = Stall { phase: phase.clone(), at: now, since, lines };
        record.lock().unwrap_or_else(|e| e.into_inner()).stalls.push(stall);
    }
}

/// The summary's line: none, or each stall's phase, start and length (as far as it was seen).
pub fn summary(stalls: &[Stall]) -> String {
    if stalls.is_empty() {
        return format!("liveness: no phase went {} s without a new hold", STALL.as_secs());
    }
    // One entry per stall (looks at the same one share `since`).
    let mut longest: BTreeMap<(String, u128), Duration> = BTreeMap::new();
    for s in stalls {
        let gap = s.at.saturating_sub(s.since);
        let e = longest.entry((s.phase.clone(), s.since.as_millis())).or_default();
        *e = (*e).max(gap);
    }
    let each: Vec<String> = longest
        .iter()
        .map(|((phase, since), gap)| {
            format!("{phase} from {:.1} s, seen {:.1} s", *since as f64 / 1e3, gap.as_secs_f64())
        })
        .collect();
    format!(
        "liveness: {} stall(s) past {} s without a new hold (not a safety verdict; the servers' state is in \
         the log and the history): {}",
        longest.len(),
        STALL.as_secs(),
        each.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEADER_DUMP: &str = "SessionTracker dump:\nSession Sets (2)/(2):\n\
                               1 expire at Wed Nov 25 00:00:56 UTC 2026:\n\t0x10001d45cff0000\n\
                               1 expire at Wed Nov 25 00:00:58 UTC 2026:\n\t0x30001d45cff0001\n\
                               ephemeral nodes dump:\nSessions with Ephemerals (2):\n0x10001d45cff0000:\n\
                               \t/chaos/semaphore/_c_1-p0w1-lease-0000000003\n0x20001d45cff0009:\n\
                               \t/chaos/semaphore/_c_2-p1w2-lease-0000000001\n\t/other/x-0000000000\n\
                               Connections dump:\nConnections Sets (1)/(1):\n\
                               1 expire at Wed Nov 25 00:01:07 UTC 2026:\n\
                               \tip: /127.0.0.1:40890 sessionId: 0x0\n";
    const FOLLOWER_DUMP: &str = "SessionTracker dump:\nGlobal Sessions(2):\n0x10001d45cff0000\t4000ms\n\
                                 0x30001d45cff0001\t4000ms\nephemeral nodes dump:\n\
                                 Sessions with Ephemerals (1):\n0x10001d45cff0000:\n\
                                 \t/chaos/semaphore/_c_1-p0w1-lease-0000000003\nConnections dump:\n\
                                 Connections Sets (0)/(0):\n";
    const CONS: &str = " /127.0.0.1:41282[0](queued=0,recved=1,sent=0)\n \
                        /127.0.0.1:41276[1](queued=0,recved=4,sent=4,sid=0x10001d45cff0000,lop=CREA,\
                        est=1795564852033,to=4000)\n";

    #[test]
    fn dump_and_cons_are_parsed() {
        let d = parse_dump(LEADER_DUMP);
        assert_eq!(d.tracked, BTreeSet::from([0x100_01d4_5cff_0000, 0x300_01d4_5cff_0001]));
        assert_eq!(d.ephemerals.len(), 3);
        assert_eq!(d.ephemerals["/chaos/semaphore/_c_2-p1w2-lease-0000000001"], 0x200_01d4_5cff_0009);
        let f = parse_dump(FOLLOWER_DUMP);
        assert_eq!(f.tracked.len(), 2);
        assert_eq!(f.ephemerals.len(), 1);
        assert_eq!(parse_cons(CONS), BTreeSet::from([0x100_01d4_5cff_0000]));
    }

    fn view(mode: &str, dump: &str, cons: &str) -> ServerView {
        ServerView {
            mode: Some(mode.into()),
            zxid: Some(1),
            dump: parse_dump(dump),
            connected: parse_cons(cons),
        }
    }

    #[test]
    fn ghosts_divergences_and_live_nodes_are_told_apart() {
        let servers = [
            view("follower", FOLLOWER_DUMP, ""),
            view("leader", LEADER_DUMP, CONS),
            view("follower", FOLLOWER_DUMP, ""),
        ];
        let lines = analyse(&servers, &["/chaos/semaphore".to_string()]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        // Sorted by sequence: the lease 1 first. Only the leader has it, and it does not track
        // its owner.
        assert!(lines[0].starts_with("/chaos/semaphore/_c_2-p1w2-lease-0000000001"), "{lines:?}");
        assert!(lines[0].contains("missing on [0, 2]") && lines[0].contains("DIVERGED"), "{lines:?}");
        assert!(lines[1].contains("live: its owner is connected") && lines[1].contains("[1]"), "{lines:?}");

        // Everywhere, but its owner is tracked by no leader: a ghost.
        let ghost = LEADER_DUMP.replace("\t0x10001d45cff0000\n", "");
        let servers = [
            view("follower", FOLLOWER_DUMP, ""),
            view("leader", &ghost, ""),
            view("follower", FOLLOWER_DUMP, ""),
        ];
        let lines = analyse(&servers, &["/chaos/semaphore".to_string()]);
        let lease3 = lines.iter().find(|l| l.contains("lease-0000000003")).expect("lease 3");
        assert!(lease3.contains("GHOST"), "{lines:?}");

        let none = analyse(&servers, &["/chaos/mutex".to_string()]);
        assert_eq!(none.len(), 1);
        assert!(none[0].starts_with("no ephemeral node"), "{none:?}");
    }

    #[test]
    fn the_summary_counts_each_stall_once() {
        let s = |since: u64, at: u64| Stall {
            phase: "semaphore".into(),
            at: Duration::from_secs(at),
            since: Duration::from_secs(since),
            lines: vec![],
        };
        assert!(summary(&[]).starts_with("liveness: no phase"));
        let line = summary(&[s(100, 115), s(100, 145), s(300, 316)]);
        assert!(line.contains("2 stall(s)"), "{line}");
        assert!(line.contains("semaphore from 100.0 s, seen 45.0 s"), "{line}");
    }
}
