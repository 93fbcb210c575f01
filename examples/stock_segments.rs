//! Segmented stock: N workers sell a stock split into K segments, each behind its own lock,
//! against the same stock behind a single lock. Prints the throughput of each.
//!
//! ```text
//! cargo run --release --example stock_segments -- [WORKERS] [STOCK] [SEGMENTS]   # defaults 8 400 4
//! ```
//! Each sale takes the lock, reads the stock node, and writes it one lower with a fenced write
//! (it commits only while the lock is held). It checks that exactly STOCK items were sold and
//! that no stock went below zero. Each worker builds its locks from one `Session`. Uses a
//! throwaway ZooKeeper unless ZK_CONNECT is set.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk_recipes::zookeeper_client::{Acls, CreateMode};
use zk_recipes::{InterProcessMutex, LockOptions, Session};
use zk_testcluster::ZkCluster;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Sells one item from `segment` if it has stock: `Ok(false)` when it is empty.
async fn sell_one(
    session: &Session,
    lock: &InterProcessMutex,
    stock: &str,
    wait: bool,
) -> Result<Option<bool>, Error> {
    let guard = if wait {
        lock.acquire().await?
    } else {
        match lock.try_acquire().await? {
            Some(g) => g,
            None => return Ok(None),
        }
    };
    let (data, _) = session.client()?.get_data(stock).await?;
    let left: i64 = String::from_utf8(data)?.parse()?;
    if left <= 0 {
        guard.release().await?;
        return Ok(Some(false));
    }
    let mut write = guard.fenced_writer()?;
    write.add_set_data(stock, (left - 1).to_string().as_bytes(), None)?;
    write.commit().await?;
    guard.release().await?;
    Ok(Some(true))
}

/// Runs `workers` sellers over `segments` stock nodes; returns (sold, seconds).
async fn run(
    connect: &str,
    tag: &str,
    workers: usize,
    stock: u64,
    segments: usize,
) -> Result<(u64, f64), Error> {
    let admin_session = Session::connect(connect, Duration::from_secs(10)).await?;
    let admin = admin_session.client()?;
    let per = stock / segments as u64;
    let mut paths = Vec::new();
    for i in 0..segments {
        let path = format!("/stock-{tag}/segment-{i}");
        let amount = if i + 1 == segments { stock - per * (segments as u64 - 1) } else { per };
        admin.mkdir(&format!("/stock-{tag}"), &CreateMode::Persistent.with_acls(Acls::anyone_all())).await?;
        admin
            .create(
                &path,
                amount.to_string().as_bytes(),
                &CreateMode::Persistent.with_acls(Acls::anyone_all()),
            )
            .await?;
        paths.push(path);
    }
    let sold = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (connect, paths, sold, tag) = (connect.to_string(), paths.clone(), sold.clone(), tag.to_string());
        tasks.push(tokio::spawn(async move {
            let session = Session::connect(&connect, Duration::from_secs(10)).await?;
            let locks: Vec<InterProcessMutex> = (0..paths.len())
                .map(|i| {
                    InterProcessMutex::with_options(
                        &session,
                        &format!("/locks/stock-{tag}/segment-{i}"),
                        LockOptions::new().participant_id(format!("worker-{w}")),
                    )
                })
                .collect::<Result<_, _>>()?;
            let mut empty = vec![false; paths.len()];
            let home = w % paths.len();
            while empty.iter().any(|e| !e) {
                // Try every non-empty segment without waiting, starting at home; if all are
                // busy, wait for the home segment (or the next non-empty one).
                let mut progressed = false;
                for k in 0..paths.len() {
                    let i = (home + k) % paths.len();
                    if empty[i] {
                        continue;
                    }
                    match sell_one(&session, &locks[i], &paths[i], false).await? {
                        Some(true) => {
                            sold.fetch_add(1, Ordering::Relaxed);
                            progressed = true;
                        }
                        Some(false) => empty[i] = true,
                        None => {}
                    }
                }
                if !progressed {
                    if let Some(i) = (0..paths.len()).map(|k| (home + k) % paths.len()).find(|&i| !empty[i]) {
                        match sell_one(&session, &locks[i], &paths[i], true).await? {
                            Some(true) => {
                                sold.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => empty[i] = true,
                        }
                    }
                }
            }
            session.close().await;
            Ok::<(), Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    for path in &paths {
        let (data, _) = admin.get_data(path).await?;
        let left: i64 = String::from_utf8(data)?.parse()?;
        if left != 0 {
            return Err(format!("{path} ended at {left}, not 0").into());
        }
    }
    let sold = sold.load(Ordering::Relaxed);
    if sold != stock {
        return Err(format!("sold {sold} of {stock}: oversold or lost updates").into());
    }
    admin_session.close().await;
    Ok((sold, secs))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let workers: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(8);
    let stock: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(400);
    let segments: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4).max(1);
    let (connect, _cluster) = match zk_testcluster::external_connect_string() {
        Some(c) => (c, None),
        None => {
            let cluster = ZkCluster::standalone().await?;
            (cluster.connect_string(), Some(cluster))
        }
    };
    let run_id = std::process::id();
    // Warm the server's JIT, so that the first measured run is not penalised.
    run(&connect, &format!("{run_id}-warmup"), workers, 100, segments).await?;
    println!("{workers} workers sell {stock} items, one per order");
    let (sold1, t1) = run(&connect, &format!("{run_id}-single"), workers, stock, 1).await?;
    println!(
        "  one lock on the whole stock:    {sold1} sold in {t1:.2} s = {:>7.0} orders/s",
        sold1 as f64 / t1
    );
    let (soldk, tk) = run(&connect, &format!("{run_id}-seg"), workers, stock, segments).await?;
    println!(
        "  {segments} segments, a lock each:      {soldk} sold in {tk:.2} s = {:>7.0} orders/s",
        soldk as f64 / tk
    );
    println!(
        "  segmented / single = {:.2}x; no oversell, every segment ended at 0",
        (soldk as f64 / tk) / (sold1 as f64 / t1)
    );
    Ok(())
}
