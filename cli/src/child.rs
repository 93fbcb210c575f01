//! The supervised command: its own process group, started with the lock's environment, and
//! stopped (the whole group) when the lock is lost, by the session-bounded kill deadline.

use std::future::Future;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::deadline;
use crate::exit::{self, Failure};
use crate::zk::Contact;

/// The command and its process group (the group's id is the command's pid).
pub struct Group {
    child: Child,
    pgid: libc::pid_t,
    /// Whether we handed the terminal's foreground to the group (and must take it back).
    foreground: bool,
}

/// Why supervision ended.
pub enum Ended {
    /// The command exited by itself (or after a forwarded signal) with this exit code.
    Exited(u8),
    /// The lock was lost (or `run --max-hold` passed); the group was stopped.
    Lost,
    /// No reply from ZooKeeper vouched for the safe window any more, though the client had not
    /// noticed a loss; the group was stopped (the watchdog).
    WindowSpent,
}

/// Whether zklock owns the terminal's foreground now (so the command must get it, or it would
/// be stopped by SIGTTIN when it reads the terminal).
fn terminal_foreground() -> bool {
    // SAFETY: plain syscalls on fd 0, no memory passed.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Gives the terminal's foreground to `pgid`, ignoring SIGTTOU for the call (a background
/// process may not change it otherwise). Async-signal-safe: also used between fork and exec.
fn set_foreground(pgid: libc::pid_t) {
    // SAFETY: signal(2) and tcsetpgrp(3) are async-signal-safe; no memory is passed.
    unsafe {
        let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(0, pgid);
        libc::signal(libc::SIGTTOU, old);
    }
}

/// Starts `argv` with `env` added, in a new process group of its own.
///
/// The command gets SIGKILL if zklock dies (PR_SET_PDEATHSIG; SIGKILL because a dead zklock can
/// no longer escalate, and a command that ignores SIGTERM would run on unprotected). If zklock
/// died between fork and prctl, the parent pid has changed: the command is not executed.
///
/// PR_SET_PDEATHSIG fires when the *thread* that forked exits: call this from the thread that
/// runs `block_on` (the main thread), never from a spawned task.
pub fn start(argv: &[String], env: &[(&str, String)]) -> Result<Group, Failure> {
    let (program, args) =
        argv.split_first().ok_or_else(|| Failure::new(exit::USAGE, "no command given after --"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    cmd.process_group(0);
    let parent = std::process::id() as libc::pid_t;
    let foreground = terminal_foreground();
    // Test hook: widen the fork-to-prctl window, so that the test can kill zklock inside it.
    let delay = std::env::var("ZKLOCK_TEST_FORK_DELAY_MS").ok().and_then(|v| v.parse::<u64>().ok());
    let delay = delay.map(|ms| libc::timespec {
        // `as _`: the field's own type (`time_t` is deprecated on musl, where it changes).
        tv_sec: (ms / 1000) as _,
        tv_nsec: ((ms % 1000) * 1_000_000) as _,
    });
    // SAFETY: only async-signal-safe calls (nanosleep, prctl, getppid, getpid, signal,
    // tcsetpgrp), no allocation, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(delay) = &delay {
                libc::nanosleep(delay, std::ptr::null_mut());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // zklock died before prctl: nobody would ever stop us. Do not run.
            // (Exit quietly: there is nobody to report an error to.)
            if libc::getppid() != parent {
                libc::_exit(127);
            }
            if foreground {
                set_foreground(libc::getpid());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| match e.kind() {
        ErrorKind::NotFound => Failure::new(exit::NOT_FOUND, format!("{program}: command not found")),
        ErrorKind::PermissionDenied => {
            Failure::new(exit::NOT_EXECUTABLE, format!("{program}: permission denied"))
        }
        _ => Failure::new(exit::NOT_EXECUTABLE, format!("{program}: {e}")),
    })?;
    let pgid = child.id().map(|p| p as libc::pid_t).unwrap_or(0);
    if foreground {
        // Both sides set it, as shells do, so that neither order of events races.
        set_foreground(pgid);
    }
    Ok(Group { child, pgid, foreground })
}

impl Group {
    /// Signals every process of the group; `false` when the group is empty.
    fn signal(&self, sig: libc::c_int) -> bool {
        if self.pgid <= 1 {
            return false;
        }
        // SAFETY: kill(2) has no memory-safety preconditions; a negative pid names the group.
        unsafe { libc::kill(-self.pgid, sig) == 0 }
    }

    fn is_empty(&self) -> bool {
        !self.signal(0)
    }

    /// Waits until no process of the group is left, or until `until`; `true` if it is empty.
    /// Orphaned members are reaped by init, so this polls kill(pgid, 0) locally (no ZooKeeper).
    async fn emptied(&self, until: Option<Instant>) -> bool {
        loop {
            if self.is_empty() {
                return true;
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// After the command exited: anything left in its group (background jobs) is stopped too
    /// before the lock is released: SIGTERM, then SIGKILL at `kill_by`.
    async fn stop_leftovers(&self, kill_by: Instant) {
        if self.is_empty() {
            return;
        }
        self.signal(libc::SIGTERM);
        if !self.emptied(Some(kill_by)).await {
            self.signal(libc::SIGKILL);
            self.emptied(None).await;
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.foreground {
            // SAFETY: see set_foreground.
            set_foreground(unsafe { libc::getpgrp() });
        }
    }
}

/// SIGINT and SIGTERM, caught from before our queue node exists (then passed on to the
/// command by [`supervise`]), so that none is lost in between.
pub struct Stops {
    interrupt: Signal,
    terminate: Signal,
}

impl Stops {
    pub fn new() -> Result<Stops, Failure> {
        let io = |e: std::io::Error| Failure::new(exit::UNAVAILABLE, format!("signal handling: {e}"));
        Ok(Stops {
            interrupt: signal(SignalKind::interrupt()).map_err(io)?,
            terminate: signal(SignalKind::terminate()).map_err(io)?,
        })
    }

    /// The exit code of a SIGINT or SIGTERM that already arrived, if any.
    pub async fn arrived(&mut self) -> Option<u8> {
        tokio::select! {
            biased;
            code = self.next() => Some(code),
            () = std::future::ready(()) => None,
        }
    }

    /// The exit code of the first of SIGINT (130) or SIGTERM (143).
    pub async fn next(&mut self) -> u8 {
        tokio::select! {
            _ = self.interrupt.recv() => exit::INTERRUPTED,
            _ = self.terminate.recv() => exit::TERMINATED,
        }
    }
}

/// How to stop the group after a loss.
pub struct Safety<'a> {
    /// The user's `--grace`.
    pub grace: Duration,
    /// Subtracted from the safe window (see [`deadline::default_margin`]).
    pub margin: Duration,
    /// The session's safe window (see [`crate::zk::Contact::session_safe_until`]); `None` once
    /// certainly lost.
    pub safe_until: &'a (dyn Fn() -> Option<Instant> + Sync),
    /// Fresh contacts move the watchdog.
    pub contact: Contact,
}

/// Waits for the command, stopping its whole group if `lost` resolves first (a loss, or
/// `run --max-hold` passing), or if the safe
/// window runs out before anyone noticed a loss (a watchdog). On a loss: SIGTERM to the group
/// at once, SIGKILL at [`deadline::kill_at`]. SIGINT and SIGTERM to zklock are passed on to the
/// group, with SIGKILL after `--grace`. `revoked` resolving sends the group one SIGTERM (a
/// request to finish; the command decides).
pub async fn supervise(
    mut group: Group,
    lost: impl Future<Output = ()>,
    revoked: impl Future<Output = ()>,
    safety: Safety<'_>,
    stops: &mut Stops,
) -> Result<Ended, Failure> {
    let Stops { interrupt, terminate } = stops;
    let mut contact = safety.contact.clone();
    tokio::pin!(lost, revoked);
    let mut state = Supervision::default();
    let far = || Instant::now() + Duration::from_secs(86_400 * 365);
    let code = loop {
        let watchdog = (safety.safe_until)().and_then(|s| s.checked_sub(safety.margin));
        let watching = state.lost_at.is_none();
        let kill_at = state.kill_at;
        tokio::select! {
            status = group.child.wait() => {
                let waiting = |e| Failure::new(exit::UNAVAILABLE, format!("waiting for the command: {e}"));
                break exit::of_status(status.map_err(waiting)?);
            }
            _ = &mut lost, if watching => {
                let now = Instant::now();
                state.lost(now, false);
                group.signal(libc::SIGTERM);
                state.kill_by(deadline::kill_at(now, safety.grace, (safety.safe_until)(), safety.margin));
            }
            _ = tokio::time::sleep_until(watchdog.unwrap_or_else(far).into()),
                if watching && watchdog.is_some() =>
            {
                // Nobody told us, but the window is spent: treat it as lost, and kill now.
                state.lost(Instant::now(), true);
                group.signal(libc::SIGTERM);
                state.kill_by(Instant::now());
            }
            _ = contact.changed(), if watching => {}
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(far).into()), if kill_at.is_some() => {
                group.signal(libc::SIGKILL);
                state.kill_at = None;
            }
            _ = interrupt.recv() => {
                group.signal(libc::SIGINT);
                state.kill_by(Instant::now() + safety.grace);
            }
            _ = terminate.recv() => {
                group.signal(libc::SIGTERM);
                state.kill_by(Instant::now() + safety.grace);
            }
            _ = &mut revoked, if !state.revoke_sent => {
                state.revoke_sent = true;
                crate::say::say(
                    crate::say::Level::Info,
                    "revocation requested; asking the command to finish (SIGTERM)",
                );
                group.signal(libc::SIGTERM);
            }
        }
    };
    // The command is gone; its group may not be. Nothing of it outlives the hold.
    let kill_by = match state.lost_at {
        Some(noticed) => state.kill_at.unwrap_or(noticed),
        None => deadline::kill_at(Instant::now(), safety.grace, (safety.safe_until)(), safety.margin),
    };
    group.stop_leftovers(kill_by).await;
    Ok(state.ended(code))
}

/// What [`supervise`] has seen and set: when a loss was noticed (and whether it was the
/// watchdog's), whether the revocation's SIGTERM went, and when the group gets SIGKILL.
#[derive(Default)]
struct Supervision {
    lost_at: Option<Instant>,
    window_spent: bool,
    revoke_sent: bool,
    kill_at: Option<Instant>,
}

impl Supervision {
    /// A loss noticed at `now`; `window_spent` when the watchdog noticed it (nobody told us).
    fn lost(&mut self, now: Instant, window_spent: bool) {
        self.lost_at = Some(now);
        self.window_spent = window_spent;
    }

    /// SIGKILL at `at`, or at the kill already set if that is sooner.
    fn kill_by(&mut self, at: Instant) {
        self.kill_at = Some(self.kill_at.map_or(at, |t| t.min(at)));
    }

    /// How the hold ended, the command having exited with `code`.
    fn ended(&self, code: u8) -> Ended {
        match (self.lost_at, self.window_spent) {
            (Some(_), true) => Ended::WindowSpent,
            (Some(_), false) => Ended::Lost,
            (None, _) => Ended::Exited(code),
        }
    }
}
