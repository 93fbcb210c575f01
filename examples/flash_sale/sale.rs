//! The orchestrator's script: the sale in three acts around the paused holder.
//!
//! 1. The first half of the users buy (each user tries `ATTEMPTS` times at once, from
//!    different processes: the per-user lock lets one through).
//! 2. The paused holder: worker 0 takes the next user's lock, registers its token, reads that
//!    the user has no order, passes its window check, and stops itself (SIGSTOP). Once its
//!    process is seen stopped, another worker buys for that user: it gets the lock when the
//!    paused session expires. After `PAUSE` the paused worker is resumed and its writes go out
//!    late, with its old token.
//! 3. The other users buy, and the paused user once more, through worker 0 (its session renewed
//!    itself): the stock sells out.

use std::time::{Duration, Instant};

use crate::pool::Pool;
use crate::protocol::{Reply, Request};
use crate::report::{Late, Tally};
use crate::{Error, Settings};

/// Worker processes.
pub const WORKERS: usize = 4;
/// Users; each tries `ATTEMPTS` times.
pub const USERS: usize = 30;
pub const ATTEMPTS: usize = 3;
/// How long the paused holder stays stopped, in session timeouts.
pub const PAUSE_TIMEOUTS: u32 = 3;
/// The paused holder: this worker, buying for this user.
const PAUSED_WORKER: usize = 0;
const PAUSED_USER: usize = USERS / 2;

pub fn user(u: usize) -> String {
    format!("user-{u:02}")
}

/// Every attempt of each user, a user's attempts side by side (so that round-robin dispatch
/// sends them to different processes at once).
fn attempts(users: impl Iterator<Item = usize>, next_id: &mut usize) -> Vec<(Request, Option<usize>)> {
    let mut out = Vec::new();
    for u in users {
        for _ in 0..ATTEMPTS {
            out.push((Request { id: *next_id, user: user(u), pause: false }, None));
            *next_id += 1;
        }
    }
    out
}

/// The workers other than `but`.
fn others(but: usize) -> Vec<usize> {
    (0..WORKERS).filter(|w| *w != but).collect()
}

/// Runs the sale on `pool`; fills `tally` with every answer.
pub async fn run(pool: &mut Pool, settings: &Settings, tally: &mut Tally) -> Result<(), Error> {
    let all: Vec<usize> = (0..pool.len()).collect();
    let mut next_id = 0;
    let x = user(PAUSED_USER);

    let first = attempts(0..PAUSED_USER, &mut next_id);
    println!(
        "\nAct 1: users 00-{:02} buy ({} requests over {WORKERS} processes).",
        PAUSED_USER - 1,
        first.len()
    );
    tally.add_all(pool.run(first, &all).await?);
    println!("  {}", tally.summary());

    println!("\nAct 2: the paused holder.");
    let request = Request { id: next_id, user: x.clone(), pause: true };
    next_id += 1;
    pool.send(PAUSED_WORKER, &request)?;
    let (worker, pausing) = pool.next().await?;
    if worker != PAUSED_WORKER || pausing.kind != "PAUSING" {
        return Err(format!("expected worker {PAUSED_WORKER} to pause, got {}", pausing.encode()).into());
    }
    let old_token = pausing.num("token").unwrap_or_default();
    println!(
        "  [worker {PAUSED_WORKER}] holds {x}'s lock (fencing token {old_token}), \
         {}read that {x} has no order,\n  \
         ensure_safe passed ({} ms of the window left); now raises SIGSTOP before its writes.",
        if settings.fenced { "registered the token at both stores, " } else { "" },
        pausing.get("window_left_ms")
    );
    let stopped_at = pool.await_stopped(PAUSED_WORKER, Duration::from_secs(10)).await?;
    tally.pause_seen = true;
    println!(
        "  [orchestrator] worker {PAUSED_WORKER} (pid {}) is stopped (state T in /proc); it stays \
         stopped {:?} ({PAUSE_TIMEOUTS}x the session timeout).",
        pool.pid(PAUSED_WORKER),
        settings.session_timeout * PAUSE_TIMEOUTS
    );

    let takeover = vec![(Request { id: next_id, user: x.clone(), pause: false }, None)];
    next_id += 1;
    let answers = pool.run(takeover, &others(PAUSED_WORKER)).await?;
    let (by, bought) = answers.first().cloned().ok_or("no answer for the takeover")?;
    let new_token = bought.num("token").unwrap_or_default();
    println!(
        "  [worker {by}] took {x}'s lock {:.2} s into the pause (fencing token {new_token} > \
         {old_token}) and {}.",
        stopped_at.elapsed().as_secs_f64(),
        describe(&bought)
    );
    tally.takeover = Some(bought.clone());
    tally.add_all(answers);

    // The fault itself: the paused process stays stopped for the rest of its pause.
    let pause = settings.session_timeout * PAUSE_TIMEOUTS;
    tokio::time::sleep_until((stopped_at + pause).into()).await;
    pool.signal(PAUSED_WORKER, libc::SIGCONT)?;
    let resumed = Instant::now();
    println!(
        "  [orchestrator] SIGCONT to worker {PAUSED_WORKER} after {:.2} s stopped.",
        (resumed - stopped_at).as_secs_f64()
    );
    let (worker, late) = pool.next().await?;
    if worker != PAUSED_WORKER || late.kind != "LATE" {
        return Err(format!("expected worker {PAUSED_WORKER}'s late writes, got {}", late.encode()).into());
    }
    let late = Late::from_reply(&late);
    late.print(PAUSED_WORKER, &x, new_token, settings.fenced);
    tally.late = Some(late);

    let mut second = attempts(PAUSED_USER + 1..USERS, &mut next_id);
    second.push((Request { id: next_id, user: x.clone(), pause: false }, Some(PAUSED_WORKER)));
    println!(
        "\nAct 3: users {:02}-{:02} buy, and {x} once more through worker {PAUSED_WORKER} ({} requests).",
        PAUSED_USER + 1,
        USERS - 1,
        second.len()
    );
    let answers = pool.run(second, &all).await?;
    if let Some((_, again)) = answers.iter().find(|(w, r)| *w == PAUSED_WORKER && r.get("user") == x) {
        println!("  [worker {PAUSED_WORKER}] {x} again, in its renewed session: {}.", describe(again));
    }
    tally.add_all(answers);
    println!("  {}", tally.summary());
    Ok(())
}

/// A purchase's answer in words.
pub fn describe(reply: &Reply) -> String {
    match reply.get("outcome") {
        "bought" => format!("bought (stock left {})", reply.get("left")),
        "already-ordered" => "found an order already: nothing bought".into(),
        "sold-out" => "found the stock sold out".into(),
        other => format!("{other}: {}", reply.get("detail")),
    }
}
