//! `run --once-per PERIOD`: a successful run leaves a persistent marker under the lock path,
//! and a later run within PERIOD of it (on any host) is skipped. Ages are read off the server's
//! clock only: the marker's mtime against the mtime of a scratch node we touch just before, both
//! written by the ensemble's leader, never compared with a host's clock.
//!
//! Both nodes are written with the guard's fenced writer: only the lock's holder writes them.
//! Their names are no recipe's queue node names (Curator's, kazoo's and ours ignore them).

use std::time::Duration;

use zk_recipes::zookeeper_client::Error as ZkError;
use zk_recipes::LockGuard;

use crate::args::{Cli, OncePerArgs};
use crate::exit::{self, Failure};
use crate::output::{now_ms, print_json};
use crate::zk::Conn;

/// The marker of the latest successful run; its mtime is the server's time of that success.
pub const MARKER: &str = "zklock.once-per";
/// Touched before each check: its fresh mtime is the server's "now".
pub const CLOCK: &str = "zklock.clock";

/// A node's mtime (ms since the epoch, by the server's clock), if it exists.
async fn mtime(conn: &Conn, path: &str) -> Result<Option<i64>, Failure> {
    match conn.raw()?.check_stat(path).await {
        Ok(stat) => Ok(stat.map(|s| s.mtime)),
        Err(ZkError::NoNode) => Ok(None),
        Err(e) => {
            Err(zk_recipes::Error::ZooKeeper { op: "stat", path: path.into(), source: e.into() }.into())
        }
    }
}

/// Writes `data` to `path` under the lock: a fenced create if it does not exist, else a fenced
/// set. Only the holder writes these nodes, so nothing else creates it in between.
async fn put(conn: &Conn, guard: &LockGuard, path: &str, data: &[u8]) -> Result<(), Failure> {
    let exists = mtime(conn, path).await?.is_some();
    let mut write = guard.fenced_writer()?;
    if exists {
        write.add_set_data(path, data, None)?;
    } else {
        write.add_create_persistent(path, data)?;
    }
    write.commit().await?;
    Ok(())
}

/// How long ago, by the server's clock, the latest successful run ended; `None` if there was
/// none. Touches the clock node (a fenced write) and reads its mtime as "now".
pub async fn since_last(conn: &Conn, guard: &LockGuard, lockpath: &str) -> Result<Option<Duration>, Failure> {
    let Some(last) = mtime(conn, &format!("{lockpath}/{MARKER}")).await? else {
        return Ok(None);
    };
    let clock = format!("{lockpath}/{CLOCK}");
    put(conn, guard, &clock, guard.node_path().as_bytes()).await?;
    let now = mtime(conn, &clock).await?.unwrap_or(last);
    // A leader change may bring a clock behind the old leader's: count that as no time.
    Ok(Some(Duration::from_millis(now.saturating_sub(last).max(0) as u64)))
}

/// Records a successful run: the marker's mtime becomes the server's time now.
pub async fn record(conn: &Conn, guard: &LockGuard, lockpath: &str) -> Result<(), Failure> {
    let data = format!("{} {}", guard.node_path(), guard.fencing_token());
    put(conn, guard, &format!("{lockpath}/{MARKER}"), data.as_bytes()).await
}

/// A marker as `status`, `ls` and `once-per` show it.
#[derive(serde::Serialize)]
pub struct Marker {
    /// The marker's path.
    pub marker: String,
    /// How long ago the last success was recorded: the server's mtime of the marker against
    /// this host's clock (zero if the host is behind).
    pub age_ms: i64,
}

/// The `--once-per` marker under `lockpath`, if any.
pub async fn marker(conn: &Conn, lockpath: &str) -> Result<Option<Marker>, Failure> {
    let marker = format!("{}/{MARKER}", lockpath.trim_end_matches('/'));
    Ok(mtime(conn, &marker).await?.map(|at| Marker { age_ms: (now_ms() - at).max(0), marker }))
}

/// A marker's age in words, as `status` and `ls` show it.
pub fn age(marker: &Marker) -> String {
    humantime::format_duration(Duration::from_secs((marker.age_ms / 1000) as u64)).to_string()
}

/// `zklock once-per LOCKPATH`: the marker's age, or `--clear` deletes it (and the clock node).
pub async fn once_per(cli: &Cli, args: &OncePerArgs) -> Result<u8, Failure> {
    let conn = &cli.connect().await?;
    zk_recipes::LockPath::new(&args.lockpath)?;
    let path = &args.lockpath;
    let Some(found) = marker(conn, path).await? else {
        let message = format!("no --once-per marker at {path}: no success recorded");
        if args.clear {
            return Err(Failure::new(exit::NOTHING, message));
        }
        if args.json {
            print_json(&serde_json::json!({ "path": path, "marker": null }))?;
        } else {
            println!("{message}");
        }
        return Ok(0);
    };
    if args.clear {
        let client = conn.raw()?;
        for node in [found.marker.clone(), format!("{path}/{CLOCK}")] {
            match client.delete(&node, None).await {
                Ok(()) | Err(ZkError::NoNode) => {}
                Err(e) => {
                    return Err(
                        zk_recipes::Error::ZooKeeper { op: "delete", path: node, source: e.into() }.into()
                    )
                }
            }
        }
    }
    if args.json {
        print_json(&serde_json::json!({
            "path": path, "marker": found.marker, "age_ms": found.age_ms, "cleared": args.clear,
        }))?;
    } else if args.clear {
        println!("{path}: cleared the --once-per marker of a success {} ago; the next run runs", age(&found));
    } else {
        println!("{path}: last --once-per success {} ago (marker {})", age(&found), found.marker);
    }
    Ok(0)
}
