//! Spawns child processes so that they die with the test process, whatever ends it.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process. Test
//! harnesses run tests on short-lived threads (and tokio's blocking pool retires idle threads), so
//! every spawn goes through one thread that lives as long as the process. If the test binary is
//! SIGKILLed (a nextest timeout, say), the kernel then SIGKILLs every server it started. `Drop` on
//! the cluster still kills each server by PID in the ordinary case; this is the second line.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type Job = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("zk-testcluster-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    // SAFETY: prctl and getppid are async-signal-safe; nothing else runs in the
                    // child between fork and exec.
                    unsafe {
                        cmd.pre_exec(|| {
                            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                            Ok(())
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning the process-lifetime spawner thread");
        Mutex::new(tx)
    })
}

/// Spawns `cmd` from the process-lifetime spawner thread.
pub(crate) fn spawn(cmd: Command) -> std::io::Result<Child> {
    let (tx, rx) = mpsc::channel();
    let closed = || std::io::Error::other("spawner thread is gone");
    spawner().lock().map_err(|_| closed())?.send((cmd, tx)).map_err(|_| closed())?;
    rx.recv().map_err(|_| closed())?
}

/// Closes `cmd`'s stdin and appends its stdout and stderr to `log` (created when missing): how
/// every server the harness starts is set up.
pub(crate) fn log_to(cmd: &mut Command, log: &std::path::Path) -> Result<(), crate::HarnessError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(crate::HarnessError::io(format!("opening {}", log.display())))?;
    let err = out.try_clone().map_err(crate::HarnessError::io("duplicating the log handle"))?;
    cmd.stdin(std::process::Stdio::null()).stdout(out).stderr(err);
    Ok(())
}
