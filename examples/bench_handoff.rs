//! Contended handoff throughput: zk-recipes' `InterProcessMutex` against the `zookeeper-client`
//! crate's own `LockClient`, side by side in one run on one fresh local ZooKeeper.
//!
//! ```text
//! cargo run --release --example bench_handoff -- [SECONDS_PER_RUN] [ROUNDS]
//! ```
//!
//! For N in {2, 8, 32}, N contenders (each with its own `Session`; the `LockClient` peer uses
//! that session's raw client) loop acquire → release on one lock for a fixed time. Peers
//! alternate, and the whole order repeats ROUNDS times. It prints handoffs/s and server packets
//! per handoff (from `mntr`) for each run, then the means.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk_recipes::zookeeper_client::{Acls, Client, LockOptions, LockPrefix};
use zk_recipes::{InterProcessMutex, Session};
use zk_testcluster::ZkCluster;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    ZkRecipes,
    LockClient,
}

struct Run {
    handoffs_per_s: f64,
    packets_per_handoff: f64,
}

async fn connect_all(zk: &ZkCluster, n: usize) -> Vec<Session> {
    let mut sessions = Vec::with_capacity(n);
    for _ in 0..n {
        sessions
            .push(Session::connect(&zk.connect_string(), Duration::from_secs(20)).await.expect("connect"));
    }
    sessions
}

async fn run(zk: &ZkCluster, peer: Peer, n: usize, secs: f64, path: &str) -> Run {
    let sessions = connect_all(zk, n).await;
    let count = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(n + 1));
    let deadline = Arc::new(std::sync::OnceLock::<Instant>::new());
    let mut tasks = Vec::new();
    for session in sessions {
        let (count, barrier, deadline, path) =
            (count.clone(), barrier.clone(), deadline.clone(), path.to_string());
        tasks.push(tokio::spawn(async move {
            let mutex = InterProcessMutex::new(&session, &path).expect("path");
            let client: Client = session.client().expect("a connected session");
            barrier.wait().await;
            let end = *deadline.get().expect("deadline");
            while Instant::now() < end {
                match peer {
                    Peer::ZkRecipes => {
                        let g = mutex.acquire().await.expect("acquire");
                        count.fetch_add(1, Ordering::Relaxed);
                        g.release().await.expect("release");
                    }
                    Peer::LockClient => {
                        let prefix = LockPrefix::new_curator(&path, "lock-").expect("prefix");
                        let options = LockOptions::new(Acls::anyone_all())
                            .with_ancestor_options(
                                zk_recipes::zookeeper_client::CreateMode::Container
                                    .with_acls(Acls::anyone_all()),
                            )
                            .expect("options");
                        let lock = client.lock(prefix, b"", options).await.expect("lock");
                        count.fetch_add(1, Ordering::Relaxed);
                        drop(lock);
                    }
                }
            }
            mutex.settled().await;
            session
        }));
    }
    let start_packets = zk.mntr(0).await.expect("mntr").packets();
    let started = Instant::now();
    deadline.set(started + Duration::from_secs_f64(secs)).expect("set once");
    barrier.wait().await;
    let mut sessions = Vec::new();
    for t in tasks {
        sessions.push(t.await.expect("contender"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    // LockClient deletes in the background: let the queue drain before reading the counters.
    let admin = sessions[0].client().expect("a connected session");
    while admin.list_children(path).await.map(|c| !c.is_empty()).unwrap_or(false) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let packets = zk.mntr(0).await.expect("mntr").packets() - start_packets;
    let handoffs = count.load(Ordering::Relaxed) as f64;
    for session in &sessions {
        session.close().await;
    }
    Run { handoffs_per_s: handoffs / elapsed, packets_per_handoff: packets as f64 / handoffs }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let zk =
        ZkCluster::standalone().await.expect("start ZooKeeper (see README: install the zookeeper package)");
    println!(
        "zookeeper {} (standalone, forceSync=no), {secs} s per run, {rounds} rounds",
        zk.connect_string()
    );
    // Warm the server's JIT so that the first measured run is not penalised.
    for peer in [Peer::ZkRecipes, Peer::LockClient] {
        run(&zk, peer, 8, secs.min(2.0), &format!("/bench/warmup-{peer:?}").to_lowercase()).await;
    }
    println!("{:<12} {:>4} {:>6} {:>12} {:>16}", "peer", "N", "round", "handoffs/s", "packets/handoff");
    let mut means = Vec::new();
    for n in [2usize, 8, 32] {
        let mut totals = [(0.0, 0.0); 2];
        for round in 0..rounds {
            for (i, peer) in [Peer::ZkRecipes, Peer::LockClient].into_iter().enumerate() {
                let path = format!("/bench/{peer:?}-{n}-{round}").to_lowercase();
                let r = run(&zk, peer, n, secs, &path).await;
                println!(
                    "{:<12} {n:>4} {round:>6} {:>12.0} {:>16.2}",
                    format!("{peer:?}"),
                    r.handoffs_per_s,
                    r.packets_per_handoff
                );
                totals[i].0 += r.handoffs_per_s / rounds as f64;
                totals[i].1 += r.packets_per_handoff / rounds as f64;
            }
        }
        means.push((n, totals));
    }
    println!("\nmeans over {rounds} rounds");
    println!(
        "{:>4} {:>20} {:>20} {:>8} {:>14} {:>14}",
        "N", "zk-recipes /s", "LockClient /s", "ratio", "zk-r pkts", "LockCl pkts"
    );
    for (n, [ours, theirs]) in means {
        println!(
            "{n:>4} {:>20.0} {:>20.0} {:>8.2} {:>14.2} {:>14.2}",
            ours.0,
            theirs.0,
            ours.0 / theirs.0,
            ours.1,
            theirs.1
        );
    }
}
