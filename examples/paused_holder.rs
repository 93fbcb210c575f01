//! A lock holder that reports what it knows of its hold right after a pause: the process that
//! `tests/pause.rs` stops with SIGSTOP past its session timeout and then resumes.
//!
//! ```text
//! cargo run --example paused_holder -- CONNECT LOCK_PATH SESSION_MS standard|session blocked|free
//! ```
//!
//! It takes the lock (loss policy `standard`: `Suspended` counts as lost, the default; or
//! `session`: only `Lost` does) and prints `HELD <token>`. A plain thread then waits for a
//! `CHECK` line on stdin and, the moment it has one, prints what the guard says, without awaiting
//! anything: `CHECK current=<current_status> ensure=<ensure_safe(100 ms)> status=<status()>`.
//! With `blocked`, the runtime's one thread is kept busy from `HELD` until that line is printed,
//! so nothing the event loop could have seen of the pause (a dropped connection, a timer) has
//! been processed when the guard is asked: only the clock can tell. With `free` the runtime runs
//! as usual. Then it awaits `lost()` and the `Lost` status, prints `LOST <status>` and
//! `FINAL <status>`, and exits 0.

use std::io::BufRead;
use std::sync::mpsc;
use std::time::Duration;

use zk_recipes::{InterProcessMutex, LockOptions, LockStatus, LossPolicy, Session};

type Error = Box<dyn std::error::Error>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [connect, path, session_ms, policy, runtime] = args.as_slice() else {
        eprintln!("usage: paused_holder CONNECT LOCK_PATH SESSION_MS standard|session blocked|free");
        std::process::exit(2);
    };
    let policy = match policy.as_str() {
        "session" => LossPolicy::SessionOnly,
        _ => LossPolicy::SuspendedIsLost,
    };
    let session = Session::connect(connect, Duration::from_millis(session_ms.parse()?)).await?;
    let mutex = InterProcessMutex::with_options(&session, path, LockOptions::new().loss_policy(policy))?;
    let guard = std::sync::Arc::new(mutex.acquire().await?);
    println!("HELD {}", guard.fencing_token());

    let (checked_tx, checked_rx) = mpsc::channel::<()>();
    let checker = guard.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.trim() == "CHECK" {
                let current = checker.current_status();
                let ensure = match checker.ensure_safe(Duration::from_millis(100)) {
                    Ok(left) => format!("Ok({left:?})"),
                    Err(zk_recipes::Error::LockLost { .. }) => "LockLost".to_string(),
                    Err(zk_recipes::Error::UnsafeWindow { .. }) => "UnsafeWindow".to_string(),
                    Err(e) => format!("Other({e})"),
                };
                let status = *checker.status().borrow();
                println!("CHECK current={current:?} ensure={ensure} status={status:?}");
                let _ = checked_tx.send(());
                return;
            }
            line.clear();
        }
    });
    if runtime == "blocked" {
        // Keeps the runtime's only thread from running anything until the check is printed.
        checked_rx.recv()?;
    } else {
        tokio::task::spawn_blocking(move || checked_rx.recv()).await??;
    }

    let patience = Duration::from_secs(30);
    let _ = tokio::time::timeout(patience, guard.lost()).await;
    println!("LOST {:?}", guard.current_status());
    let mut status = guard.status();
    let _ = tokio::time::timeout(patience, status.wait_for(|s| *s == LockStatus::Lost)).await;
    println!("FINAL {:?}", guard.current_status());
    Ok(())
}
