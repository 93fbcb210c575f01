//! The supervised command: started with the lock's environment, stopped when the lock is lost.

use std::io::ErrorKind;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::exit::{self, Failure};

/// Why supervision ended.
pub enum Ended {
    /// The command exited by itself (or after a forwarded signal) with this exit code.
    Exited(u8),
    /// The lock was lost; the command was stopped.
    Lost,
}

/// Starts `argv` with `env` added. The child gets SIGTERM if zklock dies (PR_SET_PDEATHSIG), so
/// it never runs on without the lock that protects it.
pub fn start(argv: &[String], env: &[(&str, String)]) -> Result<Child, Failure> {
    let (program, args) =
        argv.split_first().ok_or_else(|| Failure::new(exit::USAGE, "no command given after --"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| match e.kind() {
        ErrorKind::NotFound => Failure::new(exit::NOT_FOUND, format!("{program}: command not found")),
        ErrorKind::PermissionDenied => {
            Failure::new(exit::NOT_EXECUTABLE, format!("{program}: permission denied"))
        }
        _ => Failure::new(exit::NOT_EXECUTABLE, format!("{program}: {e}")),
    })
}

fn send(child: &Child, sig: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// SIGTERM, then SIGKILL after `grace`; waits for the child to end.
async fn stop(child: &mut Child, grace: Duration) {
    send(child, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        send(child, libc::SIGKILL);
        let _ = child.wait().await;
    }
}

/// Waits for the child, stopping it if `lost` resolves first; forwards SIGINT and SIGTERM that
/// zklock receives and waits for the child to react (up to `grace`, then SIGKILL).
pub async fn supervise(
    mut child: Child,
    lost: impl std::future::Future<Output = ()>,
    grace: Duration,
) -> Result<Ended, Failure> {
    let io = |e: std::io::Error| Failure::new(exit::UNAVAILABLE, format!("signal handling: {e}"));
    let mut interrupt = signal(SignalKind::interrupt()).map_err(io)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(io)?;
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Failure::new(exit::UNAVAILABLE, format!("waiting for the command: {e}")))?;
                return Ok(Ended::Exited(exit::of_status(status)));
            }
            _ = &mut lost => {
                stop(&mut child, grace).await;
                return Ok(Ended::Lost);
            }
            _ = interrupt.recv() => forward(&mut child, libc::SIGINT, grace).await,
            _ = terminate.recv() => forward(&mut child, libc::SIGTERM, grace).await,
        }
    }
}

/// Passes a signal on, then gives the child `grace` to exit before SIGKILL; the wait loop
/// collects its status.
async fn forward(child: &mut Child, sig: libc::c_int, grace: Duration) {
    send(child, sig);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        send(child, libc::SIGKILL);
    }
}
