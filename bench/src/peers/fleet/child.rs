//! The Rust peers' side of the fleet (`zk-bench fleet-child`): zk-recipes' sessions, `LockClient`'s
//! clients, or raw clients that only connect (the pings), each session a task that follows the
//! phases the bench announces (the protocol in `fleet.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use zk_recipes::zookeeper_client::{Client, LockPrefix};

use super::Phase;
use crate::ours;
use crate::peers::{lock_options, Peer};

/// One session of the fleet.
#[derive(Clone)]
enum Member {
    Ours(ours::Handle),
    /// A `LockClient` session, or (the pings' fleet) one that only connects.
    Raw(Client),
}

/// Takes the lock `path` on the session `m`: its guard, released when dropped.
async fn take(m: &Member, path: &str) -> Result<Box<dyn std::any::Any + Send>, String> {
    match m {
        Member::Ours(h) => Ok(Box::new(ours::mutex(h, path)?.acquire().await.map_err(|e| e.to_string())?)),
        Member::Raw(client) => {
            let prefix = LockPrefix::new_curator(path, "lock-").map_err(|e| e.to_string())?;
            let lock = client.lock(prefix, b"", lock_options()?).await.map_err(|e| e.to_string())?;
            Ok(Box::new(lock.into_owned()))
        }
    }
}

/// The sessions of the fleet's processes from `first`, `count` of them, for `peer` (`zk-recipes`,
/// `lockclient`, or `pings`: raw clients that only connect). See the protocol in `fleet.rs`.
pub async fn fleet_child(
    peer: &str,
    connect: &str,
    prefix: &str,
    first: usize,
    count: usize,
    session_ms: u64,
) -> Result<(), String> {
    let timeout = Duration::from_millis(session_ms);
    let mut members = Vec::with_capacity(count);
    for _ in 0..count {
        members.push(if peer == Peer::ZkRecipes.short() {
            Member::Ours(ours::connect(connect, timeout).await?)
        } else {
            let client = Client::connector().with_session_timeout(timeout).connect(connect).await;
            Member::Raw(client.map_err(|e| format!("connect {connect}: {e}"))?)
        });
    }
    println!("READY");
    let (phase, phase_rx) = watch::channel(Phase::Idle);
    let (ack, mut acks) = mpsc::unbounded_channel();
    let holding = Arc::new(AtomicUsize::new(0));
    for (i, m) in members.iter().enumerate().filter(|_| peer != "pings") {
        let task = session(m.clone(), (prefix.to_string(), first + i), phase_rx.clone(), ack.clone());
        tokio::spawn(task.run(holding.clone()));
    }
    let odd = (first..first + count).filter(|g| g % 2 == 1).count();
    let mut commands = stdin_lines();
    while let Some(word) = commands.recv().await {
        match word.trim() {
            "hold" => {
                phase.send_replace(Phase::Holding);
                wait_acks(&mut acks, count).await?;
                println!("HELD");
            }
            "half" => {
                phase.send_replace(Phase::HalfWaiting);
                wait_acks(&mut acks, odd).await?;
                println!("WAITING");
            }
            "count" => {
                if let Ok(Err(e)) = acks.try_recv() {
                    return Err(e);
                }
                println!("HOLDING {}", holding.load(Ordering::SeqCst));
            }
            "exit" => break,
            _ => {}
        }
    }
    for m in &members {
        if let Member::Ours(h) = m {
            h.close().await;
        }
    }
    Ok(())
}

/// Waits for `n` sessions to say they are through the phase's change; the first error ends it.
async fn wait_acks(acks: &mut mpsc::UnboundedReceiver<Result<(), String>>, n: usize) -> Result<(), String> {
    for _ in 0..n {
        acks.recv().await.ok_or("a fleet session vanished")??;
    }
    Ok(())
}

/// The lines of stdin, read on a thread of their own.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// One session's part in the phases: session `g` takes `l<g>` when the fleet holds; when half
/// waits, an odd `g` lets its lock go and queues for `l<g-1>`, which session `g - 1` holds.
struct Session {
    member: Member,
    prefix: String,
    g: usize,
    phase: watch::Receiver<Phase>,
    ack: mpsc::UnboundedSender<Result<(), String>>,
}

fn session(
    member: Member,
    (prefix, g): (String, usize),
    phase: watch::Receiver<Phase>,
    ack: mpsc::UnboundedSender<Result<(), String>>,
) -> Session {
    Session { member, prefix, g, phase, ack }
}

impl Session {
    async fn run(mut self, holding: Arc<AtomicUsize>) {
        let ack = self.ack.clone();
        if let Err(e) = self.phases(&holding).await {
            let _ = ack.send(Err(format!("fleet session {}: {e}", self.g)));
        }
    }

    async fn phases(&mut self, holding: &AtomicUsize) -> Result<(), String> {
        let gone = |_| "the fleet ended".to_string();
        self.phase.wait_for(|p| *p == Phase::Holding).await.map_err(gone)?;
        let own = take(&self.member, &format!("{}/l{}", self.prefix, self.g)).await?;
        holding.fetch_add(1, Ordering::SeqCst);
        let _ = self.ack.send(Ok(()));
        self.phase.wait_for(|p| *p == Phase::HalfWaiting).await.map_err(gone)?;
        if self.g.is_multiple_of(2) {
            // Holds until the process ends.
            let _kept = own;
            return std::future::pending().await;
        }
        drop(own);
        holding.fetch_sub(1, Ordering::SeqCst);
        let _ = self.ack.send(Ok(()));
        let _next = take(&self.member, &format!("{}/l{}", self.prefix, self.g - 1)).await?;
        // Admitted beside its holder only if the lock is broken: the bench's count says so.
        holding.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }
}
