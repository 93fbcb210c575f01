//! A worker process: increments a shared counter in ZooKeeper under an `InterProcessMutex`.
//!
//! ```text
//! cargo run --example counter_worker -- CONNECT LOCK_PATH COUNTER_PATH ROUNDS OCCUPANCY_FILE
//! ```
//!
//! Each round it takes the lock, checks that no other process is inside (an O_EXCL occupancy
//! file on the local disk), does a read-modify-write of the counter node, and releases. It exits
//! 3 if it ever finds another process inside. The cross-process test runs several of these.

use std::time::Duration;

use zk_recipes::{InterProcessMutex, LockOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [connect, lock_path, counter, rounds, occupancy] = args.as_slice() else {
        eprintln!("usage: counter_worker CONNECT LOCK_PATH COUNTER_PATH ROUNDS OCCUPANCY_FILE");
        std::process::exit(2);
    };
    let rounds: usize = rounds.parse()?;
    let client = zk_recipes::connect(connect, Duration::from_secs(10)).await?;
    let id = format!("worker-{}", std::process::id());
    let mutex =
        InterProcessMutex::with_options(client.clone(), lock_path, LockOptions::new().participant_id(id))?;
    for _ in 0..rounds {
        let guard = mutex.acquire().await?;
        if std::fs::OpenOptions::new().write(true).create_new(true).open(occupancy).is_err() {
            eprintln!("OVERLAP: another process holds the lock too");
            std::process::exit(3);
        }
        let (data, _) = client.get_data(counter).await?;
        let n: u64 = String::from_utf8(data)?.trim().parse()?;
        tokio::task::yield_now().await;
        client.set_data(counter, (n + 1).to_string().as_bytes(), None).await?;
        std::fs::remove_file(occupancy)?;
        guard.release().await?;
    }
    Ok(())
}
