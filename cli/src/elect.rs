//! `zklock elect`: the command while leader, or `--observe` the leader.

use std::time::Duration;

use zk_recipes::{LatchOptions, LeaderLatch, LossPolicy};

use crate::acquire::{command_of, margin};
use crate::args::{Cli, ElectArgs};
use crate::child::{self, Ended, Group, Safety, Stops};
use crate::exit::{self, window_spent, Failure};
use crate::ops;
use crate::progress::Progress;
use crate::zk::{self, Conn, Contact};

pub async fn elect(cli: &Cli, args: &ElectArgs) -> Result<u8, Failure> {
    crate::metrics::serve(args.metrics_addr)?;
    let conn = cli.connect().await?;
    if args.observe {
        return ops::observe(&conn, &args.electpath, cli.format(), args.json).await;
    }
    let mut stops = Stops::new()?;
    let id = args.id.clone().unwrap_or_else(zk_recipes::default_participant_id);
    let policy = if args.ride_out { LossPolicy::SessionOnly } else { LossPolicy::SuspendedIsLost };
    let options = LatchOptions::new().participant_id(&id).format(cli.format()).loss_policy(policy);
    let latch = zk::latch_with(&conn, &args.electpath, options)?;
    latch.start()?;
    let progress = Progress::new(cli.verbose);
    let token = lead(args, &conn, &latch, &id, progress, &mut stops).await?;
    let (group, contact, margin) = match start(args, &conn, &latch, &id, token, progress, &mut stops).await {
        Ok(started) => started,
        Err(e) => {
            latch.close().await;
            return Err(e);
        }
    };
    let ended = supervise(args, &latch, group, contact, margin, &mut stops).await?;
    // After a loss, as `run`: close while that is prompt, not a moment for a server that
    // cannot answer (see `zk::let_go`).
    match ended {
        Ended::Exited(_) => latch.close().await,
        Ended::Lost | Ended::WindowSpent => zk::let_go(&conn, latch.close()).await,
    }
    match ended {
        Ended::Lost => Err(Failure::new(
            exit::LOST,
            format!("lost leadership of {} while the command ran; stopped it", args.electpath),
        )),
        Ended::WindowSpent => Err(window_spent(&args.electpath)),
        Ended::Exited(code) => Ok(code),
    }
}

/// Waits to lead (showing the wait); returns the fencing token. A signal meanwhile closes the
/// latch and ends the run.
async fn lead(
    args: &ElectArgs,
    conn: &Conn,
    latch: &LeaderLatch,
    id: &str,
    progress: Progress,
    stops: &mut Stops,
) -> Result<u64, Failure> {
    let waiting = progress.while_waiting(
        &args.electpath,
        id,
        latch.await_leadership(),
        || latch.participants(),
        conn.raw()?,
    );
    tokio::select! {
        token = waiting => Ok(token?),
        code = stops.next() => {
            progress.done();
            latch.close().await;
            Err(Failure::silent(code))
        }
    }
}

/// Everything between winning and the command running: the session's contacts, our node for
/// `ZKLOCK_NODE`, the command itself (not when a signal came meanwhile). Returns the group,
/// the contacts and the kill margin; on an error, the caller closes the latch.
async fn start(
    args: &ElectArgs,
    conn: &Conn,
    latch: &LeaderLatch,
    id: &str,
    token: u64,
    progress: Progress,
    stops: &mut Stops,
) -> Result<(Group, Contact, Duration), Failure> {
    let contact = Contact::start(conn).await?;
    let margin = margin(&contact, args.kill_margin);
    progress.note(&format!("zklock: leading {} as {id} (fencing token {token})", args.electpath));
    // Our node, as `run` gives it: the leader's, read back (the latch leads with it).
    let node = match latch.leader().await {
        Ok(Some(leader)) if u64::try_from(leader.czxid) == Ok(token) => {
            format!("{}/{}", args.electpath, leader.node)
        }
        _ => String::new(),
    };
    let env = [
        ("ZKLOCK_FENCING_TOKEN", token.to_string()),
        ("ZKLOCK_PATH", args.electpath.clone()),
        ("ZKLOCK_NODE", node),
    ];
    if let Some(code) = stops.arrived().await {
        return Err(Failure::silent(code));
    }
    let group = child::start(&command_of(&args.shell, &args.command), &env)?;
    Ok((group, contact, margin))
}

/// The command while we lead, until it ends by itself or is stopped for a loss or a spent safe
/// window.
async fn supervise(
    args: &ElectArgs,
    latch: &LeaderLatch,
    group: Group,
    contact: Contact,
    margin: Duration,
    stops: &mut Stops,
) -> Result<Ended, Failure> {
    let mut changes = latch.leadership();
    let lost = async move {
        let _ = changes.wait_for(|l| *l == zk_recipes::Leadership::NotLeader).await;
    };
    // A revocation request (`zklock revoke`) is passed on to the command as SIGTERM, as `run`
    // does; the latch leads until the command exits.
    let mut revocation = latch.revocation();
    let revoked = async move {
        let _ = revocation.wait_for(|asked| *asked).await;
    };
    let safe_until = || if latch.has_leadership() { contact.session_safe_until() } else { None };
    let safety = Safety { grace: args.grace, margin, safe_until: &safe_until, contact: contact.clone() };
    child::supervise(group, lost, revoked, safety, stops).await
}
