//! Leader election demo: run it in two (or more) terminals against the same ZooKeeper.
//!
//! ```text
//! cargo run --example zk_server                      # terminal 0: prints export ZK_CONNECT=...
//! ZK_CONNECT=127.0.0.1:PORT cargo run --example leader -- --id alpha    # terminal 1
//! ZK_CONNECT=127.0.0.1:PORT cargo run --example leader -- --id beta     # terminal 2
//! ```
//!
//! One leads, the others wait. Ctrl-C in the leader (a graceful close) or `kill -9` of its
//! process (its session then times out) hands leadership over; each line says who leads and
//! with which fencing token. The latch is built from a self-healing `Session`: if this process's
//! session expires (a long pause, a partition), leadership is lost and the latch rejoins on a
//! new session by itself, at the back of the queue. Options: `--id NAME`,
//! `--session-timeout-ms N` (default 4000), `--path PATH` (default `/zk-recipes-demo/leader`).

use std::time::Duration;

use zk_recipes::{LeaderLatch, Session};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(connect) = arg("--connect").or_else(zk_testcluster::external_connect_string) else {
        eprintln!("set ZK_CONNECT (or --connect); for a throwaway server run: cargo run --example zk_server");
        std::process::exit(2);
    };
    let id = arg("--id").unwrap_or_else(zk_recipes::default_participant_id);
    let timeout =
        Duration::from_millis(arg("--session-timeout-ms").and_then(|s| s.parse().ok()).unwrap_or(4000));
    let path = arg("--path").unwrap_or_else(|| "/zk-recipes-demo/leader".into());
    let session = Session::connect(&connect, timeout).await?;
    let latch =
        LeaderLatch::with_options(&session, &path, zk_recipes::LatchOptions::new().participant_id(&id))?;
    latch.start()?;
    println!("[{id}] joined {path} (session timeout {} ms)", timeout.as_millis());
    let mut changes = latch.leadership();
    loop {
        let now = *changes.borrow_and_update();
        match now.fencing_token() {
            Some(fencing_token) => println!("[{id}] LEADER fencing_token={fencing_token}"),
            None => match latch.leader().await {
                Ok(Some(leader)) => {
                    println!("[{id}] waiting; leader is {} (fencing_token={})", leader.id, leader.czxid)
                }
                Ok(None) => println!("[{id}] waiting"),
                Err(e) => println!("[{id}] waiting ({e})"),
            },
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { break },
            _ = tokio::signal::ctrl_c() => {
                latch.close().await;
                session.close().await;
                println!("[{id}] closed: left the election");
                return Ok(());
            }
        }
    }
    Ok(())
}
