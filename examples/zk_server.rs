//! Runs a throwaway standalone ZooKeeper in the foreground for manual demos, until Ctrl-C.
//!
//! ```text
//! cargo run --example zk_server
//! ```
//! It prints the `export ZK_CONNECT=...` line to paste into other terminals.

use zk_testcluster::ZkCluster;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = ZkCluster::standalone().await?;
    println!("ZooKeeper is up (pid {:?}). In other terminals:", cluster.pids());
    println!("  export ZK_CONNECT={}", cluster.connect_string());
    println!("Ctrl-C stops it and removes its data.");
    tokio::signal::ctrl_c().await?;
    Ok(())
}
