//! `zklock elect`: the command while leader, or `--observe` the leader.

use zk_recipes::{LatchOptions, LossPolicy};

use crate::acquire::{command_of, margin};
use crate::args::{Cli, ElectArgs};
use crate::child::{self, Ended, Safety, Stops};
use crate::exit::{self, window_spent, Failure};
use crate::ops;
use crate::progress::Progress;
use crate::zk::{self, Contact};

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
    let waiting = progress.while_waiting(
        &args.electpath,
        &id,
        latch.await_leadership(),
        || latch.participants(),
        conn.raw()?,
    );
    let token = tokio::select! {
        token = waiting => token?,
        code = stops.next() => {
            progress.done();
            latch.close().await;
            return Err(Failure::silent(code));
        }
    };
    let contact = match Contact::start(&conn).await {
        Ok(contact) => contact,
        Err(e) => {
            latch.close().await;
            return Err(e);
        }
    };
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
        latch.close().await;
        return Err(Failure::silent(code));
    }
    let group = match child::start(&command_of(&args.shell, &args.command), &env) {
        Ok(group) => group,
        Err(e) => {
            latch.close().await;
            return Err(e);
        }
    };
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
    let ended = child::supervise(group, lost, revoked, safety, &mut stops).await?;
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
