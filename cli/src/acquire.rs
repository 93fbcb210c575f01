//! Taking the lock for `run` and `hold`, and what `run` and `elect` share around the command.

use std::time::{Duration, Instant};

use zk_recipes::{LockGuard, LockOptions, LossPolicy};

use crate::args::{Cli, LockArgs};
use crate::child::Stops;
use crate::deadline;
use crate::exit::{self, Failure};
use crate::progress::Progress;
use crate::zk::{self, Conn, Contact};

/// How `run` and `hold` take the lock, beyond what [`LockArgs`] says.
pub struct Taking {
    /// When zklock started: `--timeout` counts from it, connecting included.
    pub started: Instant,
    /// When the hold counts as lost (`run --ride-out`: only when the session expires).
    pub policy: LossPolicy,
    /// Whether we hold on our parent's behalf (`hold`), for `zklock deadlocks`.
    pub for_parent: bool,
}

/// Connects within `--timeout` (and `--connect-timeout`): the start of `run` and `hold`.
pub async fn connect(cli: &Cli, args: &LockArgs) -> Result<Conn, Failure> {
    cli.connect_within(args.timeout).await
}

/// Refuses a `--min-hold` longer than `--max-hold` (bad input, exit 64).
pub fn check_holds(min: Option<Duration>, max: Option<Duration>) -> Result<(), Failure> {
    match (min, max) {
        (Some(min), Some(max)) if min > max => Err(Failure::new(
            exit::USAGE,
            format!(
                "--min-hold {} is longer than --max-hold {}: the lock cannot be held at least \
                 the one and at most the other",
                humantime::format_duration(min),
                humantime::format_duration(max)
            ),
        )),
        _ => Ok(()),
    }
}

/// Acquires the lock `args` describe, with progress and with SIGINT/SIGTERM deleting our queue
/// node before exit. `Err` with the exit code for busy, timeout or a signal.
pub async fn acquire(
    cli: &Cli,
    conn: &Conn,
    args: &LockArgs,
    taking: &Taking,
    stops: &mut Stops,
) -> Result<(zk::Lock, LockGuard), Failure> {
    let id = args.id.clone().unwrap_or_else(zk_recipes::default_participant_id);
    let mut options = LockOptions::new()
        .participant_id(id.clone())
        .format(cli.format())
        .loss_policy(taking.policy)
        .party(crate::party::party(taking.for_parent));
    if let Some(delay) = args.lock_delay {
        options = options.lock_delay(delay);
    }
    zk::refuse_other_recipes(conn, &args.lockpath, args.kind(), cli.format()).await?;
    let lock = zk::lock(conn, &args.lockpath, args.kind(), options)?;
    let progress = Progress::new(cli.verbose);
    let mut report = |event: &zk_recipes::QueueEvent| progress.event(&args.lockpath, event);
    let waiting = lock.acquire(args.wait(taking.started.elapsed()), &mut report);
    let got = tokio::select! {
        got = waiting => got?,
        code = stops.next() => {
            progress.done();
            // The acquire future is dropped: our node is deleted in the background. Wait for
            // it, so that nobody waits behind a node of ours until the session times out.
            lock.settled().await;
            return Err(Failure::silent(code));
        }
    };
    let Some(guard) = got else {
        let holder = lock
            .participants()
            .await
            .ok()
            .and_then(|q| q.first().map(|p| p.id.clone()))
            .unwrap_or_else(|| "?".into());
        let why = if args.no_wait { "is busy" } else { "was not acquired in time" };
        return Err(Failure::new(
            args.conflict_exit_code.unwrap_or(exit::BUSY),
            format!("{} {why} (held by {holder})", args.lockpath),
        ));
    };
    let stats = lock.stats();
    progress.note(&format!(
        "zklock: acquired {} after {} listing(s) of the queue and {} wake-up(s)",
        args.lockpath, stats.listings, stats.wakeups
    ));
    Ok((lock, guard))
}

/// The margin and the warning at start when the negotiated timeout leaves no grace.
pub fn margin(contact: &Contact, given: Option<Duration>) -> Duration {
    let timeout = contact.session_timeout();
    let margin = given.unwrap_or_else(|| deadline::default_margin(timeout));
    if deadline::best_grace(timeout, margin).is_zero() {
        crate::say::say(
            crate::say::Level::Warn,
            &format!(
                "warning: the negotiated session timeout ({}) leaves no grace: on a loss the \
                 command will be killed at once (SIGKILL)",
                humantime::format_duration(timeout)
            ),
        );
    }
    margin
}

pub fn command_of(shell: &Option<String>, command: &[String]) -> Vec<String> {
    match shell {
        Some(line) => vec!["sh".into(), "-c".into(), line.clone()],
        None => command.to_vec(),
    }
}
