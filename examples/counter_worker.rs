//! A worker process: increments a shared counter in ZooKeeper under an `InterProcessMutex`,
//! built from one `Session`.
//!
//! ```text
//! cargo run --example counter_worker -- \
//!     CONNECT LOCK_PATH COUNTER_PATH ROUNDS OCCUPANCY_FILE [EVENTS_FILE [FORMAT [ID]]]
//! ```
//!
//! Each round it takes the lock, checks that no other process is inside (an O_EXCL occupancy
//! file on the local disk; it exits 3 if another process is inside), appends `enter ID SEQ` to
//! EVENTS_FILE, does a read-modify-write of the counter node, and releases. FORMAT is `curator`
//! (default) or `kazoo`. The same protocol as the Curator and kazoo peers in `tests/peers/`, so
//! the cross-process and cross-language tests run them side by side.

use std::io::Write;
use std::time::Duration;

use zk_recipes::{InterProcessMutex, LockOptions, NodeFormat, Session};

fn append(path: Option<&String>, line: &str) -> std::io::Result<()> {
    if let Some(path) = path {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(f, "{line}")?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 5 {
        eprintln!(
            "usage: counter_worker CONNECT LOCK_PATH COUNTER_PATH ROUNDS OCCUPANCY_FILE \
             [EVENTS_FILE [FORMAT [ID]]]"
        );
        std::process::exit(2);
    }
    let (connect, lock_path, counter, rounds, occupancy) =
        (&args[0], &args[1], &args[2], args[3].parse::<usize>()?, &args[4]);
    let events = args.get(5);
    let format: NodeFormat = args.get(6).map_or(Ok(NodeFormat::Curator), |f| f.parse())?;
    let id = args.get(7).cloned().unwrap_or_else(|| format!("worker-{}", std::process::id()));
    let session = Session::connect(connect, Duration::from_secs(10)).await?;
    let options = LockOptions::new().participant_id(id.clone()).format(format);
    let mutex = InterProcessMutex::with_options(&session, lock_path, options)?;
    for _ in 0..rounds {
        let guard = mutex.acquire().await?;
        // The session's current client: the one of the session the lock was taken in.
        let client = session.client()?;
        let seq: i64 = guard.node_path().rsplit(['-', '_']).next().unwrap_or_default().parse()?;
        if std::fs::OpenOptions::new().write(true).create_new(true).open(occupancy).is_err() {
            eprintln!("OVERLAP: another process holds the lock too");
            std::process::exit(3);
        }
        append(events, &format!("enter {id} {seq}"))?;
        let (data, _) = client.get_data(counter).await?;
        let n: u64 = String::from_utf8(data)?.trim().parse()?;
        tokio::task::yield_now().await;
        client.set_data(counter, (n + 1).to_string().as_bytes(), None).await?;
        std::fs::remove_file(occupancy)?;
        append(events, &format!("exit {id} {seq}"))?;
        guard.release().await?;
    }
    session.close().await;
    Ok(())
}
