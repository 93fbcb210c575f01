//! A session that heals itself: a leader latch and a mutex waiter ride out a partition longer
//! than the session timeout, without the program rebuilding anything.
//!
//! ```text
//! cargo run --example session_recovery
//! ```
//!
//! It starts a throwaway ZooKeeper (through `zk-testcluster`) and connects through a fault proxy
//! with a 2 s session timeout. It starts a latch (which leads) and a mutex waiter (queued behind
//! a holder on another, direct session), then makes the proxy silent for 3× the session
//! timeout, and heals it. It prints every session state change, and shows leadership regained
//! and the mutex acquired on the new session. It exits non-zero if any of that fails.

use std::time::{Duration, Instant};

use zk_recipes::{ConnectionState, InterProcessMutex, LeaderLatch, Leadership, Session};
use zk_testcluster::ZkCluster;

type Error = Box<dyn std::error::Error + Send + Sync>;

const SESSION_TIMEOUT: Duration = Duration::from_secs(2);
const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => {
            println!("OK: leadership regained and the mutex acquired on the new session, nothing rebuilt");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("FAILED: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> Result<T, Error> {
    tokio::time::timeout(PATIENCE, fut).await.map_err(|_| format!("timed out waiting for {what}").into())
}

async fn run() -> Result<(), Error> {
    let started = Instant::now();
    let at = move || format!("{:6.2}s", started.elapsed().as_secs_f64());
    let zk = ZkCluster::standalone().await?;
    let proxy = zk.proxy()?;
    println!("{} ZooKeeper at {}, our session goes through a fault proxy", at(), zk.connect_string());

    let session = Session::connect(&proxy.connect_string(), SESSION_TIMEOUT).await?;
    println!(
        "{} session generation {} connected ({:?} negotiated)",
        at(),
        session.generation(),
        session.session_timeout()
    );
    let mut events = session.events();
    let printer = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Ok(event) = events.recv().await {
            println!("{} session state: {:?} (generation {})", at(), event.state, event.generation);
            seen.push(event.state);
            if event.state == ConnectionState::Closed {
                break;
            }
        }
        seen
    });

    let latch = LeaderLatch::with_options(
        &session,
        "/demo/recovery/leader",
        zk_recipes::LatchOptions::new().participant_id("worker-1"),
    )?;
    latch.start()?;
    let first = within("leadership", latch.await_leadership()).await??;
    println!("{} latch leads with fencing token {first}", at());

    let other = Session::connect(&zk.connect_string(), Duration::from_secs(20)).await?;
    let holder = InterProcessMutex::new(&other, "/demo/recovery/lock")?.acquire().await?;
    let waiter = InterProcessMutex::new(&session, "/demo/recovery/lock")?;
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    println!("{} a mutex waiter queues behind a holder on another session", at());

    let silence = SESSION_TIMEOUT * 3;
    println!("{} the proxy goes silent for {silence:?} (3x the session timeout)", at());
    proxy.blackhole();
    tokio::time::sleep(silence).await;
    proxy.heal();
    println!("{} the proxy heals", at());

    let mut leadership = latch.leadership();
    within(
        "leadership regained",
        leadership.wait_for(|l| matches!(l, Leadership::Leader { fencing_token } if *fencing_token != first)),
    )
    .await??;
    let second = latch.await_leadership().await?;
    println!("{} latch leads again with fencing token {second} (generation {})", at(), session.generation());
    if second <= first || session.generation() < 2 {
        return Err(format!("expected a new term on a new session: token {second} after {first}").into());
    }

    holder.release().await?;
    let guard = within("the mutex", waiting).await???;
    println!(
        "{} the waiter acquired the mutex on generation {} with fencing token {}",
        at(),
        guard.session_generation(),
        guard.fencing_token()
    );
    if guard.session_generation() < 2 {
        return Err("the waiter should hold on the new session".into());
    }
    guard.release().await?;
    latch.close().await;
    session.close().await;
    other.close().await;
    let seen = within("the state stream to end", printer).await??;
    for want in [
        ConnectionState::Suspended,
        ConnectionState::Lost,
        ConnectionState::Connected,
        ConnectionState::Closed,
    ] {
        if !seen.contains(&want) {
            return Err(format!("the state stream never showed {want:?}: {seen:?}").into());
        }
    }
    Ok(())
}
