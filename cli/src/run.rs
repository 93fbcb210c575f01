//! `zklock run`: the command under the lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use zk_recipes::{LockGuard, LockStatus, LossPolicy};

use crate::acquire::{self, acquire, check_holds, command_of, margin, Taking};
use crate::args::{Cli, RunArgs};
use crate::child::{self, Ended, Group, Safety, Stops};
use crate::exit::{self, window_spent, Failure};
use crate::minhold::{self, Kept};
use crate::once;
use crate::progress::Progress;
use crate::zk::{Conn, Contact};

pub async fn run(cli: &Cli, args: &RunArgs) -> Result<u8, Failure> {
    check_holds(args.lock.min_hold, args.max_hold)?;
    let policy = if args.ride_out { LossPolicy::SessionOnly } else { LossPolicy::SuspendedIsLost };
    let taking = Taking { started: std::time::Instant::now(), policy, for_parent: false };
    let mut stops = Stops::new()?;
    crate::metrics::serve(args.metrics_addr)?;
    let conn = acquire::connect(cli, &args.lock).await?;
    let (_lock, guard) = acquire(cli, &conn, &args.lock, &taking, &mut stops).await?;
    // `--max-hold` and `--min-hold` count from the acquisition, whatever comes before the
    // command starts.
    let acquired = Instant::now();
    let started = match start(cli, args, &conn, &guard, &mut stops).await {
        Ok(started) => started,
        Err(e) => {
            let _ = guard.release().await;
            return Err(e);
        }
    };
    let progress = started.progress;
    let (ended, limit_passed) = supervise(args, &guard, started, acquired, &mut stops).await?;
    let path = &args.lock.lockpath;
    // Held to the end of the command: record the success, then keep the minimum hold. (A loss
    // noticed only now, at the command's end, is reported by the release below.)
    let mut kept = Kept::Passed;
    if let Ended::Exited(code) = ended {
        if !policy.is_lost(guard.current_status()) {
            kept = after_the_command(args, &conn, &guard, code, acquired, &mut stops, progress).await;
        }
    }
    if matches!(ended, Ended::Lost | Ended::WindowSpent) && !limit_passed {
        // The lock is lost and the command's group is gone. Release while that is prompt (the
        // next waiter gets the lock now), and not a moment for a server that cannot answer:
        // the node is gone already, or goes with the session's expiry (see `zk::let_go`).
        crate::zk::let_go(&conn, async move {
            let _ = guard.release().await;
        })
        .await;
        return Err(match ended {
            Ended::WindowSpent => window_spent(path),
            _ => {
                Failure::new(exit::LOST, format!("lost the lock on {path} while the command ran; stopped it"))
            }
        });
    }
    let released = guard.release().await;
    outcome(args, ended, released, kept, limit_passed)
}

/// What `start` leaves to the rest of the run: the command's group, and what watches it.
struct Started {
    group: Group,
    contact: Contact,
    margin: Duration,
    progress: Progress,
}

/// Everything between taking the lock and the command running: the `--once-per` check, the
/// session's contacts, the command itself (not when a signal came while we took the lock).
/// On an error, the caller releases the lock.
async fn start(
    cli: &Cli,
    args: &RunArgs,
    conn: &Conn,
    guard: &LockGuard,
    stops: &mut Stops,
) -> Result<Started, Failure> {
    let path = &args.lock.lockpath;
    if let Some(period) = args.once_per {
        check_once_per(conn, guard, path, period).await?;
    }
    let contact = Contact::start(conn).await?;
    let margin = margin(&contact, args.kill_margin);
    let token = guard.fencing_token();
    let progress = Progress::new(cli.verbose);
    progress.note(&format!("zklock: holding {path} (fencing token {token})"));
    let env = [
        ("ZKLOCK_FENCING_TOKEN", token.to_string()),
        ("ZKLOCK_PATH", path.clone()),
        ("ZKLOCK_NODE", guard.node_path().to_string()),
    ];
    if let Some(code) = stops.arrived().await {
        return Err(Failure::silent(code));
    }
    let group = child::start(&command_of(&args.shell, &args.command), &env)?;
    Ok(Started { group, contact, margin, progress })
}

/// `--once-per`: the command is not run when a run succeeded within the period.
async fn check_once_per(conn: &Conn, guard: &LockGuard, path: &str, period: Duration) -> Result<(), Failure> {
    match once::since_last(conn, guard, path).await? {
        Some(age) if age < period => Err(Failure::new(
            exit::DONE,
            format!(
                "{path}: a run succeeded {} ago (by ZooKeeper's clock), within --once-per {}; \
                 not running the command",
                humantime::format_duration(Duration::from_secs(age.as_secs())),
                humantime::format_duration(period)
            ),
        )),
        _ => Ok(()),
    }
}

/// The command under the lock until it ends by itself, or is stopped for a loss, a spent safe
/// window, or `--max-hold`. Returns how it ended, and whether `--max-hold` stopped it.
async fn supervise(
    args: &RunArgs,
    guard: &LockGuard,
    started: Started,
    acquired: Instant,
    stops: &mut Stops,
) -> Result<(Ended, bool), Failure> {
    let limit_at = args.max_hold.map(|limit| acquired + limit);
    let safe_until = || guard.safe_until();
    let mut status = guard.status();
    let revoked = async move {
        let _ = status.wait_for(|s| *s == LockStatus::RevocationRequested).await;
    };
    let safety = Safety {
        grace: args.grace,
        margin: started.margin,
        safe_until: &safe_until,
        contact: started.contact,
    };
    // The limit stops the command as a loss does, while the lock is still ours; the release
    // then admits the next waiter, once the command's group is gone.
    let limit_passed = AtomicBool::new(false);
    let lost = async {
        tokio::select! {
            () = guard.lost() => {}
            () = tokio::time::sleep_until(limit_at.unwrap_or_else(Instant::now)), if limit_at.is_some() => {
                limit_passed.store(true, Ordering::SeqCst);
            }
        }
    };
    let ended = child::supervise(started.group, lost, revoked, safety, stops).await?;
    Ok((ended, limit_passed.load(Ordering::SeqCst)))
}

/// After the command exited (`code`) under the lock: record a success for `--once-per`, then
/// keep the minimum hold.
async fn after_the_command(
    args: &RunArgs,
    conn: &Conn,
    guard: &LockGuard,
    code: u8,
    acquired: Instant,
    stops: &mut Stops,
    progress: Progress,
) -> Kept {
    let path = &args.lock.lockpath;
    if args.once_per.is_some() && code == 0 {
        if let Err(e) = once::record(conn, guard, path).await {
            crate::say::say(
                crate::say::Level::Warn,
                &format!(
                    "could not record the run for --once-per ({}); a later run may repeat it",
                    e.message
                ),
            );
        }
    }
    match args.lock.min_hold {
        Some(min) => minhold::keep(guard, acquired + min, stops, progress, path).await,
        None => Kept::Passed,
    }
}

/// The exit code or failure of a run whose command ended, given the release's answer.
fn outcome(
    args: &RunArgs,
    ended: Ended,
    released: zk_recipes::Result<()>,
    kept: Kept,
    limit_passed: bool,
) -> Result<u8, Failure> {
    let path = &args.lock.lockpath;
    match (ended, released) {
        (Ended::Lost, Ok(())) if limit_passed => Err(Failure::new(
            exit::MAX_HOLD,
            format!(
                "held {path} for --max-hold {}; stopped the command and released the lock",
                humantime::format_duration(args.max_hold.unwrap_or_default())
            ),
        )),
        (Ended::Lost, _) => Err(Failure::new(
            exit::LOST,
            format!("lost the lock on {path} while the command ran; stopped it"),
        )),
        (Ended::WindowSpent, _) => Err(window_spent(path)),
        (Ended::Exited(code), Err(zk_recipes::Error::LockLost { .. })) if kept == Kept::Lost => {
            crate::say::say(
                crate::say::Level::Warn,
                &format!("lost the lock on {path} during --min-hold, after the command ended"),
            );
            Ok(code)
        }
        (Ended::Exited(_), Err(zk_recipes::Error::LockLost { .. })) => Err(Failure::new(
            exit::LOST,
            format!("the lock on {path} was lost before the command ended; it may have run unprotected"),
        )),
        (Ended::Exited(code), Err(e)) => {
            crate::say::say(crate::say::Level::Warn, &format!("releasing {path}: {e}"));
            Ok(code)
        }
        (Ended::Exited(code), Ok(())) => Ok(code),
    }
}
