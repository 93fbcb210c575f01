//! The worker processes: what one runs (`--worker`: its workers, each with its own `Session`,
//! until "stop" on stdin), and how the orchestrator starts them from a private copy of this
//! program.

use std::process::{Child, Command, Stdio};

use crate::workers::{self, Broken};
use crate::{faults_clock, Error, SESSION, WORKERS_PER_PROCESS};

pub fn worker_main(args: &[String]) -> Result<(), Error> {
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
    let lockset = get("--pg").ok().zip(get("--redis").ok());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        // A clock-faulted process (`faults_clock.rs`) reports its clock before anything else.
        if let Ok(label) = get("--clock") {
            faults_clock::start_samples(&addr, label).await?;
        }
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for (i, (id, connect)) in ids.into_iter().zip(connects).enumerate() {
            let seed = seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let (mode, addr, stop, lockset) = (mode.clone(), addr.clone(), stop.clone(), lockset.clone());
            let worker = workers::Worker { id, index: i, connect, mode, addr, stop, seed, broken, lockset };
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

pub struct WorkerProcess {
    pub child: Child,
    pub ids: Vec<String>,
}

/// A private copy of this program for the worker processes, so that respawns keep working even
/// if the build replaces the binary during a long run.
pub fn worker_binary() -> Result<std::path::PathBuf, Error> {
    static COPY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    if let Some(path) = COPY.get() {
        return Ok(path.clone());
    }
    let copy = std::env::temp_dir().join(format!("zk-chaos-worker-{}", std::process::id()));
    std::fs::copy(std::env::current_exe()?, &copy)?;
    Ok(COPY.get_or_init(|| copy).clone())
}

pub struct Spawner<'a> {
    /// Each worker's connect string, through its own proxy.
    pub connects: Vec<String>,
    pub addr: String,
    pub mode: &'a str,
    pub broken: Broken,
    /// More arguments for the worker processes (the lockset phase's resources).
    pub extra: Vec<String>,
}

impl Spawner<'_> {
    pub fn spawn(&self, p: usize, seed: u64) -> Result<WorkerProcess, Error> {
        self.spawn_with(p, seed, &[], None)
    }

    /// As `spawn`, with `env` added to the process's environment, and `clock` labelling a faked
    /// clock (`faults_clock.rs`: the process then reports its clock).
    pub fn spawn_with(
        &self,
        p: usize,
        seed: u64,
        env: &[(String, String)],
        clock: Option<&str>,
    ) -> Result<WorkerProcess, Error> {
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
            .args(&self.extra)
            .args(clock.map(|c| ["--clock", c]).into_iter().flatten())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .spawn()?;
        Ok(WorkerProcess { child, ids })
    }
}
