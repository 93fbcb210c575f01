//! The clock faults (Debian's libfaketime, through `zk_testcluster::FakeClock`):
//! - [`Fault::ClockSlowWorker`], [`Fault::ClockFastWorker`]: a worker process (the current
//!   holder's, if any) respawned with every clock at 0.5× or 2× for [`WORKER_SPAN`], then
//!   respawned on the true clock, with one of its workers' paths blackholed past the session
//!   timeout in the middle (a clock matters once contact is lost). Its session's safe window and
//!   its dead-connection detection run on that clock: at 0.5× both last twice as long in real
//!   time as they should; at 2× it gives up early.
//! - [`Fault::ClockStepWorker`]: a worker process respawned under a wall clock that steps an hour
//!   forward, then an hour back, then to the true time, while it runs; its monotonic clock is
//!   left alone. Nothing in the recipes or the client reads the wall clock, so nothing changes.
//! - [`Fault::ClockFastServer`]: the server with the highest id restarted with its clock at
//!   [`SERVER_RATE`] (and the leader restarted if it is not that server, so that the election
//!   hands it the lead: the leader's clock expires sessions), for [`SERVER_SPAN`] with a worker's
//!   path blackholed past the session timeout in the middle, then restarted on the true clock.
//!
//! A clock-faulted worker process reports its clock (`clock_map.rs`), so that the history holds
//! its times on the machine's true clock and the run fails if the fault did not take effect;
//! overlaps without fencing while the assumption is broken are attributed to it
//! (`clock_check.rs`).

use std::io::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use zk_testcluster::{FakeClock, FaultProxy, ZkCluster};

use crate::faults::{holder_now, Fault, Run, Stage};
use crate::resource::{mono_ns, Epoch, History, ResourceClient};
use crate::{Error, Rng, Spawner, WorkerProcess, PROCESSES, SESSION, WORKERS_PER_PROCESS};

/// How long a worker process runs on a faked rate.
pub const WORKER_SPAN: Duration = Duration::from_secs(6);
/// How long each wall-clock offset of [`Fault::ClockStepWorker`] lasts.
pub const STEP_SPAN: Duration = Duration::from_secs(3);
/// The fast server's rate, and how long it runs so.
pub const SERVER_RATE: f64 = 2.0;
pub const SERVER_SPAN: Duration = Duration::from_secs(6);
/// How long a worker's path is cut off within a rate fault: past the session timeout, so that
/// the safe window (measured on the faulted clock) is what stops the holder.
const CUT: Duration = Duration::from_millis(SESSION.as_millis() as u64 * 3 / 2);
/// How long a worker process asked to stop may take before it is killed.
const STOP_PATIENCE: Duration = Duration::from_secs(6);
/// How often a clock-faulted process samples its clock (on that clock).
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Injects one of the clock faults; returns what it hit.
pub async fn inject(fault: Fault, stage: Stage<'_, '_>, rng: &mut Rng) -> Result<String, Error> {
    let Stage { zk, proxies, procs, spawner, state, run, epoch } = stage;
    if fault == Fault::ClockFastServer {
        let k = rng.below(proxies.len() as u64) as usize;
        return fast_server(zk, &proxies[k], &worker(k)).await;
    }
    let holder = holder_now(state, None).await;
    let p = holder
        .as_ref()
        .and_then(|w| procs.iter().position(|p| p.ids.contains(w)))
        .unwrap_or(rng.below(PROCESSES as u64) as usize);
    let to = Respawn { p, spawner, state, run, epoch };
    let old = procs[p].child.id();
    let detail = match fault {
        Fault::ClockSlowWorker | Fault::ClockFastWorker => {
            let rate = if fault == Fault::ClockSlowWorker { 0.5 } else { 2.0 };
            to.respawn(procs, rng.next(), &FakeClock::Rate(rate).env()?, Some(&format!("x{rate}"))).await?;
            let faked = procs[p].child.id();
            // Its clock matters once it loses contact: one of its workers (the holder, if it is
            // one) cut off past the session timeout, in the middle of the span.
            let k = holder
                .as_deref()
                .and_then(|w| procs[p].ids.iter().position(|id| id == w))
                .map_or(p * WORKERS_PER_PROCESS, |i| p * WORKERS_PER_PROCESS + i);
            cut_off(&proxies[k], WORKER_SPAN).await;
            to.respawn(procs, rng.next(), &[], None).await?;
            format!(
                "p{p} (pid {old}) respawned as pid {faked} with its clocks at x{rate} for {} s, {} cut off \
                 {} ms within",
                WORKER_SPAN.as_secs(),
                worker(k),
                CUT.as_millis()
            )
        }
        _ => {
            let file = std::env::temp_dir().join(format!("zk-chaos-faketime-{}-p{p}", std::process::id()));
            std::fs::write(&file, "+0\n")?;
            to.respawn(procs, rng.next(), &FakeClock::wall_steps_env(&file)?, Some("step")).await?;
            let faked = procs[p].child.id();
            for offset in ["+3600", "-3600", "+0"] {
                tokio::time::sleep(STEP_SPAN).await;
                std::fs::write(&file, format!("{offset}\n"))?;
            }
            tokio::time::sleep(STEP_SPAN / 2).await;
            to.respawn(procs, rng.next(), &[], None).await?;
            let _ = std::fs::remove_file(&file);
            format!(
                "p{p} (pid {old}) respawned as pid {faked}, its wall clock stepped +1 h, -1 h, back, {} s \
                 each",
                STEP_SPAN.as_secs()
            )
        }
    };
    Ok(format!("{detail}; holding: {}", holder.as_deref().unwrap_or("-")))
}

/// The server with the highest id on a fast clock, made leader, then restored.
async fn fast_server(zk: &mut ZkCluster, proxy: &FaultProxy, cut: &str) -> Result<String, Error> {
    let target = zk.len() - 1;
    zk.restart_with_env(target, &FakeClock::Rate(SERVER_RATE).env()?).await?;
    let mut handed = String::new();
    if let Ok(leader) = zk.wait_for_leader().await {
        if leader != target {
            // Among servers with the same history, the election picks the highest id.
            zk.restart(leader).await?;
            handed = format!(", server {leader} restarted to hand it the lead");
        }
    }
    let leader = zk.wait_for_leader().await.map_or("none".into(), |l| format!("server {l}"));
    cut_off(proxy, SERVER_SPAN).await;
    zk.restart_with_env(target, &[]).await?;
    zk.wait_for_leader().await?;
    Ok(format!(
        "server {target} at x{SERVER_RATE} for {} s{handed}; leader meanwhile: {leader}; {cut} cut off {} ms \
         within",
        SERVER_SPAN.as_secs(),
        CUT.as_millis()
    ))
}

/// A worker's path blackholed for [`CUT`] in the middle of `span`, which this waits out.
async fn cut_off(proxy: &FaultProxy, span: Duration) {
    let before = span.saturating_sub(CUT) / 2;
    tokio::time::sleep(before).await;
    proxy.blackhole();
    tokio::time::sleep(CUT).await;
    proxy.heal();
    tokio::time::sleep(span.saturating_sub(CUT + before)).await;
}

fn worker(k: usize) -> String {
    format!("p{}w{}", k / WORKERS_PER_PROCESS, k % WORKERS_PER_PROCESS)
}

/// Worker process `p` and what its respawn touches.
struct Respawn<'a> {
    p: usize,
    spawner: &'a Spawner<'a>,
    state: &'a Mutex<History>,
    run: &'a Mutex<Run>,
    epoch: Epoch,
}

impl Respawn<'_> {
    /// Stops worker process `p` (asked on its stdin, so that its sessions close; killed if it
    /// takes longer than [`STOP_PATIENCE`]) and starts it again with `env`; `clock` labels a
    /// faked clock (its samples then go to the resource).
    async fn respawn(
        &self,
        procs: &mut [WorkerProcess],
        seed: u64,
        env: &[(String, String)],
        clock: Option<&str>,
    ) -> Result<(), Error> {
        let (p, epoch) = (self.p, self.epoch);
        let pid = procs[p].child.id();
        if let Some(stdin) = procs[p].child.stdin.as_mut() {
            let _ = writeln!(stdin, "stop");
        }
        let until = Instant::now() + STOP_PATIENCE;
        while procs[p].child.try_wait()?.is_none() {
            if Instant::now() >= until {
                let _ = procs[p].child.kill();
                let _ = procs[p].child.wait();
                self.run.lock().unwrap_or_else(|e| e.into_inner()).kills.push((pid, epoch.now()));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.state.lock().unwrap_or_else(|e| e.into_inner()).close_pid(pid, epoch.now());
        procs[p] = self.spawner.spawn_with(p, seed, env, clock)?;
        Ok(())
    }
}

/// One `CLOCK pid label mono_ns wall_ns` line: this process's clocks as it reads them.
fn sample_line(label: &str) -> String {
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("CLOCK {} {label} {} {wall}", std::process::id(), mono_ns())
}

/// In a clock-faulted worker process, before its workers start: a few samples of its clocks to
/// the resource (the first map its times), then one every [`SAMPLE_EVERY`] of its clock.
pub async fn start_samples(addr: &str, label: String) -> Result<(), Error> {
    let mut res = ResourceClient::connect(addr).await?;
    for _ in 0..5 {
        res.ask(sample_line(&label)).await?;
    }
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(SAMPLE_EVERY).await;
            if res.ask(sample_line(&label)).await.is_err() {
                return;
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};
    use std::sync::mpsc;

    /// A guard against hangs, not a speed assertion.
    const PATIENCE: Duration = Duration::from_secs(30);
    const CHILD: &str = "CHAOS_CLOCK_PROBE_SLEEP_MS";

    /// The child half of the probe below (this test binary, run again under libfaketime): a
    /// tokio runtime as the worker processes build it, which prints `ready`, sleeps on a tokio
    /// timer for the given time of its clock, and prints `fired`. Run directly (no `CHILD` in
    /// the environment), it has nothing to do.
    #[test]
    fn probe_child() {
        let Some(ms) = std::env::var(CHILD).ok().and_then(|v| v.parse::<u64>().ok()) else { return };
        let rt =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        rt.block_on(async {
            println!("PROBE ready");
            tokio::time::sleep(Duration::from_millis(ms)).await;
            println!("PROBE fired");
        });
    }

    /// Starts the probe child under `env`, and returns whether its timer of `sleep` (on its
    /// clock) fired before a timer of `ours` on the true clock, started when it said `ready`.
    fn fired_first(env: &[(String, String)], sleep: Duration, ours: Duration) -> bool {
        let mut child = Command::new(std::env::current_exe().expect("exe"))
            .args(["--exact", "faults_clock::tests::probe_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, sleep.as_millis().to_string())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .spawn()
            .expect("probe child");
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                // (libtest may print its `test ... ` before it on the same line.)
                if let Some((_, word)) = line.split_once("PROBE ") {
                    let _ = tx.send(word.trim().to_string());
                }
            }
        });
        assert_eq!(rx.recv_timeout(PATIENCE).as_deref(), Ok("ready"));
        let first = match rx.recv_timeout(ours) {
            Ok(word) => {
                assert_eq!(word, "fired");
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                assert_eq!(rx.recv_timeout(PATIENCE).as_deref(), Ok("fired"), "it fires at all");
                false
            }
            Err(e) => panic!("probe child: {e}"),
        };
        let status = child.wait().expect("wait");
        assert!(status.success(), "{status}");
        first
    }

    /// A worker process under `Rate(2.0)`: its tokio timer of 2 s fires before our timer of
    /// 1.5 s started when it was set (at the true rate it fires after ours); under `Rate(0.5)`,
    /// its timer of 1 s fires after our 1.5 s (at the true rate, before). Event order, both ways:
    /// this fails when the fault is a no-op. The worker processes' `Instant`, tokio's timer and
    /// `mono_ns` all read `CLOCK_MONOTONIC` through libc's `clock_gettime`, which libfaketime
    /// fakes; tokio parks in `epoll_wait`, whose timeout libfaketime scales by the rate.
    #[test]
    fn a_worker_process_clock_runs_at_the_faked_rate() {
        let fast = FakeClock::Rate(2.0).env().expect("libfaketime");
        assert!(
            fired_first(&fast, Duration::from_secs(2), Duration::from_millis(1500)),
            "2x: its 2 s before our 1.5 s"
        );
        let slow = FakeClock::Rate(0.5).env().expect("libfaketime");
        assert!(
            !fired_first(&slow, Duration::from_secs(1), Duration::from_millis(1500)),
            "0.5x: its 1 s after our 1.5 s"
        );
    }
}
