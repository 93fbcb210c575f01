//! `zklock run`: the command under the lock.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::time::Instant;
use zk_recipes::{LockStatus, LossPolicy};

use crate::acquire::{self, acquire, check_holds, command_of, margin, Taking};
use crate::args::{Cli, RunArgs};
use crate::child::{self, Ended, Safety, Stops};
use crate::exit::{self, window_spent, Failure};
use crate::minhold::{self, Kept};
use crate::once;
use crate::progress::Progress;
use crate::zk::Contact;

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
    let limit_at = args.max_hold.map(|limit| acquired + limit);
    let path = &args.lock.lockpath;
    if let Some(period) = args.once_per {
        match once::since_last(&conn, &guard, path).await {
            Ok(Some(age)) if age < period => {
                let _ = guard.release().await;
                return Err(Failure::new(
                    exit::DONE,
                    format!(
                        "{path}: a run succeeded {} ago (by ZooKeeper's clock), within --once-per {}; \
                         not running the command",
                        humantime::format_duration(std::time::Duration::from_secs(age.as_secs())),
                        humantime::format_duration(period)
                    ),
                ));
            }
            Ok(_) => {}
            Err(e) => {
                let _ = guard.release().await;
                return Err(e);
            }
        }
    }
    let contact = match Contact::start(&conn).await {
        Ok(contact) => contact,
        Err(e) => {
            let _ = guard.release().await;
            return Err(e);
        }
    };
    let margin = margin(&contact, args.kill_margin);
    let token = guard.fencing_token();
    let progress = Progress::new(cli.verbose);
    progress.note(&format!("zklock: holding {path} (fencing token {token})"));
    let env = [
        ("ZKLOCK_FENCING_TOKEN", token.to_string()),
        ("ZKLOCK_PATH", path.clone()),
        ("ZKLOCK_NODE", guard.node_path().to_string()),
    ];
    // A signal that came while we took the lock: release, do not start the command.
    if let Some(code) = stops.arrived().await {
        let _ = guard.release().await;
        return Err(Failure::silent(code));
    }
    let group = match child::start(&command_of(&args.shell, &args.command), &env) {
        Ok(group) => group,
        Err(e) => {
            let _ = guard.release().await;
            return Err(e);
        }
    };
    let safe_until = || guard.safe_until();
    let mut status = guard.status();
    let revoked = async move {
        let _ = status.wait_for(|s| *s == LockStatus::RevocationRequested).await;
    };
    let safety = Safety { grace: args.grace, margin, safe_until: &safe_until, contact: contact.clone() };
    // The limit stops the command as a loss does, while the lock is still ours; the release
    // below then admits the next waiter, once the command's group is gone.
    let limit_passed = AtomicBool::new(false);
    let lost = async {
        tokio::select! {
            () = guard.lost() => {}
            () = tokio::time::sleep_until(limit_at.unwrap_or_else(Instant::now)), if limit_at.is_some() => {
                limit_passed.store(true, Ordering::SeqCst);
            }
        }
    };
    let ended = child::supervise(group, lost, revoked, safety, &mut stops).await?;
    // Held to the end of the command: record the success, then keep the minimum hold. (A loss
    // noticed only now, at the command's end, is reported by the release below.)
    let mut kept = Kept::Passed;
    if matches!(ended, Ended::Exited(_)) && !policy.is_lost(guard.current_status()) {
        if let (Some(_), Ended::Exited(0)) = (args.once_per, &ended) {
            if let Err(e) = once::record(&conn, &guard, path).await {
                crate::say::say(
                    crate::say::Level::Warn,
                    &format!(
                        "could not record the run for --once-per ({}); a later run may repeat it",
                        e.message
                    ),
                );
            }
        }
        if let Some(min) = args.lock.min_hold {
            kept = minhold::keep(&guard, acquired + min, &mut stops, progress, path).await;
        }
    }
    let limit_passed = limit_passed.load(Ordering::SeqCst);
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
