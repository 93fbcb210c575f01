//! Quick start: connects two `Session`s, takes a distributed lock, shows the queue, writes
//! under a fence, releases.
//!
//! A `Session` is what every recipe is built from: cheap to clone, and self-healing (it starts a
//! new ZooKeeper session by itself after an expiry). `session.client()` is the escape hatch to
//! the raw client, for reads and writes of your own.
//!
//! ```text
//! scripts/demo                       # starts a throwaway ZooKeeper through zk-testcluster
//! ZK_CONNECT=host:port scripts/demo  # or uses a server you run
//! ```

use std::time::Duration;

use zk_recipes::zookeeper_client::{Acls, CreateMode};
use zk_recipes::{InterProcessMutex, LockOptions, Session};
use zk_testcluster::ZkCluster;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A throwaway server unless ZK_CONNECT names one.
    let (connect, _cluster) = match zk_testcluster::external_connect_string() {
        Some(connect) => (connect, None),
        None => {
            let cluster = ZkCluster::standalone().await?;
            println!(
                "started a throwaway ZooKeeper at {} (pid {:?})",
                cluster.connect_string(),
                cluster.pids()
            );
            (cluster.connect_string(), Some(cluster))
        }
    };
    let alice = Session::connect(&connect, Duration::from_secs(10)).await?;
    let bob = Session::connect(&connect, Duration::from_secs(10)).await?;
    println!(
        "connected two sessions: alice {:#x}, bob {:#x}",
        alice.client()?.session_id().0,
        bob.client()?.session_id().0
    );

    let path = "/zk-recipes-quickstart/orders";
    let alice_lock =
        InterProcessMutex::with_options(&alice, path, LockOptions::new().participant_id("alice"))?;
    let bob_lock = InterProcessMutex::with_options(&bob, path, LockOptions::new().participant_id("bob"))?;

    let held = alice_lock.acquire().await?;
    println!("alice holds {path} with fencing token {}", held.fencing_token());
    println!(
        "bob's try_acquire while alice holds: {}",
        if bob_lock.try_acquire().await?.is_some() { "got it (wrong!)" } else { "busy" }
    );

    let bob_waits = tokio::spawn(async move {
        let g = bob_lock.acquire().await?;
        let token = g.fencing_token();
        g.release().await?;
        Ok::<u64, zk_recipes::Error>(token)
    });
    // Let bob queue up, then show the queue.
    while alice_lock.participants().await?.len() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for p in alice_lock.participants().await? {
        println!(
            "  queue #{}: {:<6} holder={:<5} session={:#x} node={}",
            p.position, p.id, p.is_holder, p.session, p.node
        );
    }

    // A fenced write commits only while alice's lock node exists.
    let stock = "/zk-recipes-quickstart/stock";
    let admin = alice.client()?;
    if admin.check_stat(stock).await?.is_none() {
        admin.create(stock, b"100", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await?;
    }
    let mut fenced = held.fenced_writer()?;
    fenced.add_set_data(stock, b"99", None)?;
    fenced.commit().await?;
    println!(
        "alice sold one item under the lock: stock is now {}",
        String::from_utf8_lossy(&admin.get_data(stock).await?.0)
    );

    held.release().await?;
    let bob_token = bob_waits.await??;
    println!("alice released; bob acquired with fencing token {bob_token} (greater: later holder)");
    admin.delete(stock, None).await?;
    alice.close().await;
    bob.close().await;
    println!("done");
    Ok(())
}
