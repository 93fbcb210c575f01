//! What the resource servers ([`crate::PostgresServer`], [`crate::RedisServer`]) share: one
//! child process, started through the spawner (so it dies with the test process), waited for
//! until it serves, and stopped by PID with a bounded wait.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::{local, spawner, HarnessError};

/// How many times a start is retried with a fresh port when the server does not come up
/// (another process may take the port between our probe and the server's bind).
pub(crate) const START_ATTEMPTS: usize = 3;

/// How long [`ServerProcess::stop`] waits after the polite signal before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// One running server process, stopped by PID on [`ServerProcess::stop`] or drop.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Option<Child>,
    pid: u32,
    /// The signal that asks for a quick, clean exit (SIGINT for PostgreSQL's fast shutdown).
    stop_signal: libc::c_int,
}

impl ServerProcess {
    /// Spawns `cmd` with stdin closed and stdout and stderr appended to `log`.
    pub(crate) fn spawn(
        resource: &'static str,
        mut cmd: Command,
        log: &Path,
        stop_signal: libc::c_int,
    ) -> Result<ServerProcess, HarnessError> {
        spawner::log_to(&mut cmd, log)?;
        let child =
            spawner::spawn(cmd).map_err(HarnessError::io(format!("spawning the {resource} server")))?;
        Ok(ServerProcess { pid: child.id(), child: Some(child), stop_signal })
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process has exited (or was stopped).
    pub(crate) fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// Sends the stop signal by PID, waits up to [`STOP_GRACE`] for the exit, then SIGKILLs and
    /// reaps. Idempotent.
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        // A frozen process does not act on the stop signal until continued.
        let _ = local::signal(self.pid, libc::SIGCONT);
        let _ = local::signal(self.pid, self.stop_signal);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        tracing::warn!(pid = self.pid, "server ignored its stop signal; SIGKILL");
        let _ = local::signal(self.pid, libc::SIGKILL);
        let _ = child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Polls `ready` every few milliseconds until it says yes; fails when the process exits or
/// `timeout` passes, with the tail of `log` in the error.
pub(crate) async fn wait_ready<F, Fut>(
    resource: &'static str,
    addr: SocketAddr,
    process: &mut ServerProcess,
    log: &Path,
    timeout: Duration,
    mut ready: F,
) -> Result<(), HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if ready().await {
            return Ok(());
        }
        if process.exited() || started.elapsed() > timeout {
            return Err(HarnessError::ResourceNotReady {
                resource,
                addr,
                waited_ms: started.elapsed().as_millis(),
                log_tail: log_tail(log, 20),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The last `n` lines of the file at `path`, or a note that it cannot be read.
pub(crate) fn log_tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines = text.lines().collect::<Vec<_>>();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// A fresh temporary directory named `zk-testcluster-<what>-*`.
pub(crate) fn temp_dir(what: &str) -> Result<tempfile::TempDir, HarnessError> {
    tempfile::Builder::new()
        .prefix(&format!("zk-testcluster-{what}-"))
        .tempdir()
        .map_err(HarnessError::io(format!("creating a temporary directory for {what}")))
}

/// The first of `candidates` that is an existing file.
pub(crate) fn first_existing(candidates: impl IntoIterator<Item = PathBuf>) -> Option<PathBuf> {
    candidates.into_iter().find(|p| p.is_file())
}

/// Removes the server's temporary directory, or keeps it (and says where) as `ZK_TEST_KEEP_LOGS`
/// asks: `1` keeps it when the dropping thread is panicking, `always` keeps it in every case.
pub(crate) fn release_dir(dir: Option<tempfile::TempDir>, resource: &str) {
    let keep = match std::env::var("ZK_TEST_KEEP_LOGS").as_deref() {
        Ok("always") => true,
        Ok("") | Ok("0") | Err(_) => false,
        Ok(_) => std::thread::panicking(),
    };
    if let (true, Some(dir)) = (keep, dir) {
        let path = dir.keep();
        eprintln!("zk-testcluster: kept the {resource} server's directory {}", path.display());
    }
}
