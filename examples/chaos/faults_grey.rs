//! The grey failures: a server whose disk stalls, a full transaction-log disk, the leader paused
//! past the session timeout, one-way partitions (a worker's requests or its replies; one server
//! to another), and a worker moved to a follower that lags. Each is a [`Fault`] of the shuffled
//! bag; `faults::inject` hands them here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zk_testcluster::{ClusterConfig, FaultProxy, Mode, SaslMode, ZkCluster};

use crate::faults::Fault;
use crate::{Error, Rng, SESSION, WORKERS_PER_PROCESS};

/// How long a grey fault lasts: past the 2 s session timeout, as a real one would.
const SPAN: Duration = Duration::from_secs(3);
/// [`Fault::PauseZkLeader`]: the leader SIGSTOPped this long, past the session timeout (and past
/// `syncLimit`, 10 ticks of 200 ms, after which its followers give up on it).
const LEADER_PAUSE: Duration = Duration::from_secs(3);
/// [`Fault::OneWayServers`]: one server's messages to another held this long.
const ONE_WAY: Duration = Duration::from_secs(4);
/// [`Fault::LaggingFollower`]: how long the worker stays pinned to the lagging follower.
const LAG_SPAN: Duration = Duration::from_secs(4);

/// Whether the servers have log disks of their own ([`start_cluster`]).
static LOG_DISKS: AtomicBool = AtomicBool::new(false);

/// Starts the run's ensemble: partitionable, a disk-stall shim in every server (`forceSync` on)
/// and each server's transaction log on a 512 MiB tmpfs of its own (memory is taken only as
/// used). Mounting needs `CAP_SYS_ADMIN`; without it the run goes on without log disks, and
/// [`Fault::FullLogDisk`] says so each time it comes up.
pub async fn start_cluster(sasl: SaslMode) -> Result<ZkCluster, Error> {
    let config = ClusterConfig { nodes: 3, sasl, ..Default::default() }.partitionable(true).disk_stall(true);
    match ZkCluster::start(config.clone().log_disk_mb(Some(512))).await {
        Ok(zk) => {
            LOG_DISKS.store(true, Ordering::Relaxed);
            Ok(zk)
        }
        Err(e) => {
            eprintln!("chaos: no log disks ({e}); FullLogDisk will be skipped");
            Ok(ZkCluster::start(config).await?)
        }
    }
}

fn worker(k: usize) -> String {
    format!("p{}w{}", k / WORKERS_PER_PROCESS, k % WORKERS_PER_PROCESS)
}

/// Every server's role now, `None` for one that does not serve.
async fn roles(zk: &ZkCluster) -> Vec<Option<Mode>> {
    let mut roles = Vec::with_capacity(zk.len());
    for i in 0..zk.len() {
        roles.push(zk.mode(i).await);
    }
    roles
}

/// The leader half the time, a random server else; with its role for the report.
async fn a_server(zk: &ZkCluster, rng: &mut Rng) -> (usize, &'static str) {
    let leader = zk.leader().await.ok();
    let i = match leader {
        Some(l) if rng.below(2) == 0 => l,
        _ => rng.below(zk.len() as u64) as usize,
    };
    (i, if Some(i) == leader { "leader" } else { "follower" })
}

/// How many times server `i` has logged a full disk so far.
fn enospc(zk: &ZkCluster, i: usize) -> usize {
    let log = zk.server_log(i).ok().and_then(|p| std::fs::read(p).ok()).unwrap_or_default();
    String::from_utf8_lossy(&log).matches("No space left on device").count()
}

/// Whether a server that ran out of log disk is restarted with an empty data directory, as
/// docs/safety.md tells operators to (yes, unless `--keep-full-disk-data`: to watch
/// ZOOKEEPER-4882 happen).
fn follow_runbook() -> bool {
    !std::env::args().any(|a| a == "--keep-full-disk-data")
}

/// Waits (up to 30 s, not an error if not) until every server serves again and one leads.
async fn settle(zk: &ZkCluster) -> Result<(), Error> {
    zk.wait_for_leader().await?;
    let until = Instant::now() + Duration::from_secs(30);
    while roles(zk).await.iter().any(Option::is_none) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Injects grey fault `fault`; `k` is the worker a client-path fault hits. Returns what it hit.
pub async fn inject(
    fault: Fault,
    zk: &mut ZkCluster,
    proxies: &[FaultProxy],
    k: usize,
    rng: &mut Rng,
) -> Result<String, Error> {
    Ok(match fault {
        Fault::DiskStall => {
            // Every fsync/fdatasync 300-800 ms late for 3 s, on one server (the leader half the
            // time) or, every other time, on a majority (the leader and a follower). Their pings
            // and reads pass; their logs, and so their acknowledgements, crawl. One stalled server
            // does not hold writes (the other two are a quorum: the leader commits on its
            // followers' acknowledgements); a stalled majority does.
            let ms = 300 + rng.below(500);
            let (i, role) = a_server(zk, rng).await;
            let mut stalled = vec![i];
            let leader = zk.leader().await.ok();
            if let (true, Some(l)) = (rng.below(2) == 0, leader) {
                let f = (0..zk.len()).filter(|&j| j != l).nth(rng.below(zk.len() as u64 - 1) as usize);
                stalled = vec![l, f.unwrap_or((l + 1) % zk.len())];
            }
            for &j in &stalled {
                zk.stall_disk(j, Duration::from_millis(ms))?;
            }
            tokio::time::sleep(SPAN).await;
            for &j in &stalled {
                zk.unstall_disk(j)?;
            }
            let which = match stalled.as_slice() {
                [l, f] => format!("servers {l} (leader) and {f}: a majority"),
                _ => format!("server {i} ({role})"),
            };
            format!("{which}, fsync +{ms} ms for {} s", SPAN.as_secs())
        }
        Fault::FullLogDisk => {
            // One server's transaction-log tmpfs filled for 3 s, then freed; a server that died
            // of it (or stays out of service) is restarted, as an operator would.
            if !LOG_DISKS.load(Ordering::Relaxed) {
                return Ok(
                    "skipped: the servers have no log disks (mounting a tmpfs needs CAP_SYS_ADMIN)".into()
                );
            }
            let (i, role) = a_server(zk, rng).await;
            let errors_before = enospc(zk, i);
            let filled = zk.fill_log_disk(i)?;
            tokio::time::sleep(SPAN).await;
            let during = roles(zk).await[i];
            zk.free_log_disk(i)?;
            let exited = zk.has_exited(i);
            let until = Instant::now() + Duration::from_secs(10);
            let mut serving = zk.mode(i).await.is_some();
            while !exited && !serving && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(50)).await;
                serving = zk.mode(i).await.is_some();
            }
            let after = if exited || !serving {
                zk.restart(i).await?;
                if exited {
                    "exited; restarted"
                } else {
                    "out of service; restarted"
                }
            } else {
                "serving again without a restart"
            };
            settle(zk).await?;
            let errors = enospc(zk, i).saturating_sub(errors_before);
            // A server that hit ENOSPC and went on has a hole in its transaction log, and can
            // lose acknowledged transactions at its next restart (ZOOKEEPER-4882, open
            // upstream): the runbook (docs/safety.md) restarts it with no data, once the
            // others serve, so that it takes the leader's state.
            let runbook = if errors > 0 && follow_runbook() {
                zk.restart_with_empty_data(i).await?;
                settle(zk).await?;
                "; then restarted with an empty data directory (the runbook for ZOOKEEPER-4882)"
            } else {
                ""
            };
            let during = during.map_or("out".to_string(), |m| format!("{m:?}").to_lowercase());
            format!(
                "server {i} ({role}) log disk full ({} MiB filler) for {} s: {errors} ENOSPC in its log, \
                 {during} at the end; {after}{runbook}",
                filled >> 20,
                SPAN.as_secs(),
            )
        }
        Fault::PauseZkLeader => match zk.leader().await {
            Ok(i) => {
                zk.freeze(i)?;
                tokio::time::sleep(LEADER_PAUSE).await;
                let during = roles(zk).await.iter().position(|m| *m == Some(Mode::Leader));
                zk.thaw(i)?;
                settle(zk).await?;
                let during = during.map_or("none".into(), |j| format!("server {j}"));
                format!(
                    "server {i} (leader) SIGSTOP {} s; leader meanwhile: {during}",
                    LEADER_PAUSE.as_secs()
                )
            }
            Err(_) => "no leader".into(),
        },
        Fault::OneWayRequests => {
            // The worker's requests and pings held, the servers' replies and events flowing.
            proxies[k].hold_requests();
            tokio::time::sleep(SESSION * 3 / 2).await;
            proxies[k].heal();
            format!("{} requests held {} s", worker(k), (SESSION * 3 / 2).as_secs_f64())
        }
        Fault::OneWayReplies => {
            // The worker's requests reach the servers (and take effect); nothing comes back.
            proxies[k].hold_replies();
            tokio::time::sleep(SESSION * 3 / 2).await;
            proxies[k].heal();
            format!("{} replies held {} s", worker(k), (SESSION * 3 / 2).as_secs_f64())
        }
        Fault::OneWayServers => match zk.leader().await {
            // The leader's messages to one follower held (the follower's flow), or a follower's
            // to the leader (the leader's flow).
            Ok(l) => {
                let f = (0..zk.len()).filter(|&j| j != l).nth(rng.below(zk.len() as u64 - 1) as usize);
                let f = f.unwrap_or((l + 1) % zk.len());
                let (from, to) = if rng.below(2) == 0 { (l, f) } else { (f, l) };
                zk.partition_one_way(from, to)?;
                tokio::time::sleep(ONE_WAY).await;
                let during = roles(zk).await;
                zk.heal_partition()?;
                settle(zk).await?;
                let role = |m: Option<Mode>| m.map_or("out".to_string(), |m| format!("{m:?}").to_lowercase());
                format!(
                    "server {from} -> server {to} held {} s (leader was {l}); meanwhile {from} {}, {to} {}",
                    ONE_WAY.as_secs(),
                    role(during[from]),
                    role(during[to])
                )
            }
            Err(_) => "no leader".into(),
        },
        Fault::LaggingFollower => {
            // A follower hears the leader 0.8-1.5 s late (below syncLimit, so it keeps serving a
            // stale view), and the worker's path reaches that follower only.
            let (Ok(l), Some(f)) = (zk.leader().await, {
                let r = roles(zk).await;
                let followers: Vec<usize> = (0..r.len()).filter(|&j| r[j] == Some(Mode::Follower)).collect();
                (!followers.is_empty()).then(|| followers[rng.below(followers.len() as u64) as usize])
            }) else {
                return Ok("no leader or follower".into());
            };
            let ms = 800 + rng.below(700);
            zk.delay_link(l, f, Duration::from_millis(ms))?;
            proxies[k].pin_to(zk.client_addr(f)?);
            tokio::time::sleep(LAG_SPAN).await;
            proxies[k].unpin();
            zk.delay_link(l, f, Duration::ZERO)?;
            format!(
                "{} pinned to server {f} (follower {ms} ms behind leader {l}) for {} s",
                worker(k),
                LAG_SPAN.as_secs()
            )
        }
        other => return Err(format!("{other:?} is not a grey fault").into()),
    })
}
