//! The two-process demo: a flash sale from one stock counter in ZooKeeper, sold by two OS
//! processes, without a lock, with the mutex, and across a crash.
//!
//! ```text
//! scripts/demo          # or: cargo run --example two_process
//! ```
//!
//! * Phase 1, no lock: each process reads the stock, pauses (the interleaving window every real
//!   system has), and writes it back one lower. Both sell the same items: oversell.
//! * Phase 2, with `InterProcessMutex`: the same loop, each sale under the lock with a fenced
//!   write. Exactly the stock is sold.
//! * Phase 3, crash: one process is `kill -9`ed while it holds the lock; the other acquires once
//!   the dead session times out, with a greater fencing token.
//!
//! Each worker process connects one `Session` and builds its mutex from it; unlocked reads and
//! writes go through the session's raw client (`session.client()`).
//!
//! It starts a throwaway ZooKeeper unless `ZK_CONNECT` is set, and exits non-zero if phase 2 or 3
//! did not come out right.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use zk_recipes::zookeeper_client::{Acls, Client, CreateMode};
use zk_recipes::{InterProcessMutex, LockOptions, Session};
use zk_testcluster::ZkCluster;

type Error = Box<dyn std::error::Error + Send + Sync>;

const STOCK: i64 = 40;
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);
const WINDOW: Duration = Duration::from_millis(3);
const STOCK_PATH: &str = "/flash-sale/stock";
const LOCK_PATH: &str = "/flash-sale/lock";

// ---------------------------------------------------------------- worker (a child process)

async fn read_stock(client: &Client) -> Result<i64, Error> {
    Ok(String::from_utf8(client.get_data(STOCK_PATH).await?.0)?.parse()?)
}

/// Sells until the stock reads 0; prints one line per sale. With `locked`, each sale is made
/// under the mutex and written with a fenced write.
async fn worker_sell(connect: &str, name: &str, locked: bool) -> Result<(), Error> {
    let session = Session::connect(connect, SESSION_TIMEOUT).await?;
    let mutex =
        InterProcessMutex::with_options(&session, LOCK_PATH, LockOptions::new().participant_id(name))?;
    let mut sold = 0;
    loop {
        if locked {
            let guard = mutex.acquire().await?;
            let stock = read_stock(&session.client()?).await?;
            if stock <= 0 {
                guard.release().await?;
                break;
            }
            tokio::time::sleep(WINDOW).await;
            let mut write = guard.fenced_writer()?;
            write.add_set_data(STOCK_PATH, (stock - 1).to_string().as_bytes(), None)?;
            write.commit().await?;
            sold += 1;
            println!("sold item #{stock} holding the lock (fencing token {})", guard.fencing_token());
            guard.release().await?;
        } else {
            let client = session.client()?;
            let stock = read_stock(&client).await?;
            if stock <= 0 {
                break;
            }
            tokio::time::sleep(WINDOW).await;
            client.set_data(STOCK_PATH, (stock - 1).to_string().as_bytes(), None).await?;
            sold += 1;
            println!("sold item #{stock} (read {stock}, wrote {})", stock - 1);
        }
    }
    session.close().await;
    println!("SOLD {sold}");
    Ok(())
}

/// Takes the lock and holds it until killed.
async fn worker_hold(connect: &str, name: &str) -> Result<(), Error> {
    let session = Session::connect(connect, SESSION_TIMEOUT).await?;
    let mutex =
        InterProcessMutex::with_options(&session, LOCK_PATH, LockOptions::new().participant_id(name))?;
    let guard = mutex.acquire().await?;
    println!("HOLDING fencing_token={}", guard.fencing_token());
    std::future::pending::<()>().await;
    Ok(())
}

/// Queues for the lock, says so, and reports when it gets it.
async fn worker_wait(connect: &str, name: &str) -> Result<(), Error> {
    let session = Session::connect(connect, SESSION_TIMEOUT).await?;
    let mutex =
        InterProcessMutex::with_options(&session, LOCK_PATH, LockOptions::new().participant_id(name))?;
    let acquiring = mutex.acquire();
    tokio::pin!(acquiring);
    let mut announced = false;
    let guard = loop {
        tokio::select! {
            guard = &mut acquiring => break guard?,
            _ = tokio::time::sleep(Duration::from_millis(50)), if !announced => {
                let queue = mutex.participants().await?;
                if let Some(me) = queue.iter().find(|p| p.id == name) {
                    println!("QUEUED position={} behind {}", me.position, queue[0].id);
                    announced = true;
                }
            }
        }
    };
    println!("ACQUIRED fencing_token={}", guard.fencing_token());
    guard.release().await?;
    session.close().await;
    Ok(())
}

// ---------------------------------------------------------------- the narrator (parent)

struct Worker {
    child: std::process::Child,
    name: &'static str,
}

fn spawn(
    connect: &str,
    role: &str,
    name: &'static str,
    tx: &mpsc::Sender<(&'static str, String, Instant)>,
) -> Result<Worker, Error> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--worker", role, "--connect", connect, "--name", name])
        .stdout(Stdio::piped())
        .spawn()?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((name, line, Instant::now()));
        }
    });
    Ok(Worker { child, name })
}

/// Relays workers' lines until `until` matches one; returns that line. `quiet` shows only the
/// first few sales of each worker.
fn relay(
    rx: &mpsc::Receiver<(&'static str, String, Instant)>,
    shown: &mut std::collections::HashMap<&'static str, usize>,
    quiet: bool,
    until: impl Fn(&str, &str) -> bool,
) -> Result<(&'static str, String, Instant), Error> {
    loop {
        let (who, line, at) = rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "a worker went silent")?;
        let seen = shown.entry(who).or_default();
        *seen += 1;
        if !quiet || *seen <= 3 || !line.starts_with("sold") {
            println!("    [{who}] {line}");
        } else if *seen == 4 {
            println!("    [{who}] ...");
        }
        if until(who, &line) {
            return Ok((who, line, at));
        }
    }
}

fn token(line: &str) -> u64 {
    line.rsplit("fencing_token=").next().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

async fn set_stock(admin: &Client, value: i64) -> Result<(), Error> {
    admin.mkdir("/flash-sale", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await?;
    match admin
        .create(
            STOCK_PATH,
            value.to_string().as_bytes(),
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(zk_recipes::zookeeper_client::Error::NodeExists) => {
            admin.set_data(STOCK_PATH, value.to_string().as_bytes(), None).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs a selling phase with both workers; returns the total they report sold.
fn sell_phase(
    connect: &str,
    role: &str,
    rx: &mpsc::Receiver<(&'static str, String, Instant)>,
    tx: &mpsc::Sender<(&'static str, String, Instant)>,
) -> Result<i64, Error> {
    let mut workers = vec![spawn(connect, role, "A", tx)?, spawn(connect, role, "B", tx)?];
    let mut shown = std::collections::HashMap::new();
    let mut totals = Vec::new();
    while totals.len() < 2 {
        let (_, line, _) = relay(rx, &mut shown, true, |_, l| l.starts_with("SOLD"))?;
        totals.push(line.trim_start_matches("SOLD ").parse::<i64>()?);
    }
    for w in &mut workers {
        if !w.child.wait()?.success() {
            return Err(format!("worker {} failed", w.name).into());
        }
    }
    Ok(totals.iter().sum())
}

async fn narrate() -> Result<bool, Error> {
    let (connect, _cluster) = match zk_testcluster::external_connect_string() {
        Some(c) => (c, None),
        None => {
            let cluster = ZkCluster::standalone().await?;
            println!(
                "Started a throwaway ZooKeeper at {} (set ZK_CONNECT to use yours).",
                cluster.connect_string()
            );
            (cluster.connect_string(), Some(cluster))
        }
    };
    let admin_session = Session::connect(&connect, Duration::from_secs(10)).await?;
    let admin = admin_session.client()?;
    let (tx, rx) = mpsc::channel();
    let mut ok = true;

    println!(
        "\nPhase 1: no lock. Two processes sell from a stock of {STOCK}, read-modify-write with a \
         {WINDOW:?} window."
    );
    set_stock(&admin, STOCK).await?;
    let sold = sell_phase(&connect, "sell-unlocked", &rx, &tx)?;
    let left = read_stock(&admin).await?;
    println!("  sold {sold} orders from a stock of {STOCK}; the counter says {left} left.");
    if sold > STOCK {
        println!(
            "  OVERSOLD by {}: both processes sold the same items (lost updates: {}).",
            sold - STOCK,
            sold - (STOCK - left)
        );
    } else {
        println!("  (no oversell this time; the race is timing-dependent)");
    }

    println!("\nPhase 2: the same load, each sale under InterProcessMutex with a fenced write.");
    set_stock(&admin, STOCK).await?;
    let sold = sell_phase(&connect, "sell-locked", &rx, &tx)?;
    let left = read_stock(&admin).await?;
    println!("  sold {sold} orders from a stock of {STOCK}; the counter says {left} left.");
    if sold == STOCK && left == 0 {
        println!("  EXACT: no oversell, no lost update.");
    } else {
        println!("  WRONG: phase 2 must sell exactly {STOCK}.");
        ok = false;
    }

    println!("\nPhase 3: crash. A takes the lock and holds it; B queues; A is killed with kill -9.");
    let mut shown = std::collections::HashMap::new();
    let mut a = spawn(&connect, "hold", "A", &tx)?;
    let (_, held, _) = relay(&rx, &mut shown, false, |who, l| who == "A" && l.starts_with("HOLDING"))?;
    let mut b = spawn(&connect, "wait", "B", &tx)?;
    relay(&rx, &mut shown, false, |who, l| who == "B" && l.starts_with("QUEUED"))?;
    let killed = Instant::now();
    Command::new("kill").args(["-9", &a.child.id().to_string()]).status()?;
    let _ = a.child.wait();
    println!("    [narrator] kill -9 {} (A, holding with fencing token {})", a.child.id(), token(&held));
    let (_, acquired, at) = relay(&rx, &mut shown, false, |who, l| who == "B" && l.starts_with("ACQUIRED"))?;
    let _ = b.child.wait();
    let (old, new) = (token(&held), token(&acquired));
    println!(
        "  B acquired {:.2} s after the kill (session timeout {:?}), fencing token {new} > {old}: {}",
        (at - killed).as_secs_f64(),
        SESSION_TIMEOUT,
        if new > old { "a write fenced with A's token would be refused" } else { "WRONG" }
    );
    if new <= old {
        ok = false;
    }
    admin_session.close().await;
    println!("\n{}", if ok { "Demo passed." } else { "Demo FAILED." });
    Ok(ok)
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() {
    let outcome = match (arg("--worker"), arg("--connect"), arg("--name")) {
        (Some(role), Some(connect), Some(name)) => {
            let run = match role.as_str() {
                "sell-unlocked" => worker_sell(&connect, &name, false).await,
                "sell-locked" => worker_sell(&connect, &name, true).await,
                "hold" => worker_hold(&connect, &name).await,
                "wait" => worker_wait(&connect, &name).await,
                other => Err(format!("unknown role {other}").into()),
            };
            run.map(|()| true)
        }
        _ => narrate().await,
    };
    match outcome {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
