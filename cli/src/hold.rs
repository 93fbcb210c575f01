//! `zklock hold`: take the lock, print the fencing token, hold until stdin closes or a signal.

use zk_recipes::LockStatus;

use tokio::time::Instant;

use crate::acquire::{self, acquire, check_holds, Taking};
use crate::args::{Cli, HoldArgs};
use crate::child::Stops;
use crate::exit::{self, Failure};
use crate::minhold::{self, Kept};
use crate::output;
use crate::progress::Progress;

#[derive(serde::Serialize)]
struct Held<'a> {
    path: &'a str,
    node: &'a str,
    fencing_token: u64,
}

pub async fn hold(cli: &Cli, args: &HoldArgs) -> Result<u8, Failure> {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    check_holds(args.lock.min_hold, None)?;
    let taking = Taking { started: std::time::Instant::now(), policy: Default::default(), for_parent: true };
    let mut stops = Stops::new()?;
    let conn = acquire::connect(cli, &args.lock).await?;
    let (_lock, guard) = acquire(cli, &conn, &args.lock, &taking, &mut stops).await?;
    let acquired = Instant::now();
    let path = &args.lock.lockpath;
    let held = Held { path, node: guard.node_path(), fencing_token: guard.fencing_token() };
    if args.json {
        output::print_json(&held)?;
    } else {
        println!("{}", held.fencing_token);
    }
    let _ = std::io::stdout().flush();
    let stdin_closed = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 4096];
        while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    let mut status = guard.status();
    let revoked = status.wait_for(|s| *s == LockStatus::RevocationRequested);
    let (lost, done) = tokio::select! {
        _ = stdin_closed => (false, true),
        _ = stops.next() => (false, true),
        _ = revoked => {
            crate::say::say(crate::say::Level::Info, &format!("revocation requested; releasing {path}"));
            (false, false)
        }
        _ = guard.lost() => (true, false),
    };
    if lost {
        drop(guard);
        return Err(Failure::new(exit::LOST, format!("lost the lock on {path}")));
    }
    // Done (stdin closed, or a signal): the lock stays ours until --min-hold has passed.
    let mut kept = Kept::Passed;
    if let (true, Some(min)) = (done, args.lock.min_hold) {
        kept = minhold::keep(&guard, acquired + min, &mut stops, Progress::new(cli.verbose), path).await;
    }
    match guard.release().await {
        Ok(()) => Ok(0),
        Err(zk_recipes::Error::LockLost { .. }) if kept == Kept::Lost => {
            crate::say::say(
                crate::say::Level::Warn,
                &format!("lost the lock on {path} during --min-hold, after stdin closed"),
            );
            Ok(0)
        }
        Err(zk_recipes::Error::LockLost { .. }) => {
            Err(Failure::new(exit::LOST, format!("the lock on {path} was lost before release")))
        }
        Err(e) => Err(e.into()),
    }
}
