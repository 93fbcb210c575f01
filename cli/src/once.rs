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

use crate::exit::Failure;
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
