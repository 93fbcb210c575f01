//! A worker process: one `Session`, requests from stdin, one task per purchase.
//!
//! A purchase: take the user's `InterProcessMutex`, register its fencing token at both stores,
//! read whether the user has ordered, check the safe window (`ensure_safe`) right before the
//! writes, then decrement the Redis stock and insert the order in PostgreSQL, both fenced with
//! the lock's path and token. The designated purchase stops its own process (SIGSTOP) between
//! that window check and the writes, and reports what its late writes met.

use std::io::BufRead;
use std::sync::Arc;

use zk_recipes::{InterProcessMutex, LockGuard, LockOptions, LockStatus, Session};

use crate::fencing::{postgres::OrderOutcome, FenceError, StockOutcome};
use crate::protocol::{Reply, Request};
use crate::store::Stores;
use crate::{Error, Settings};

/// Tries per purchase when the window check refuses (a slow machine) before giving up.
const TRIES: usize = 5;

/// The lock that makes each user's purchases exclusive.
pub fn user_lock_path(user: &str) -> String {
    format!("/flash-sale/users/{user}")
}

fn say(reply: Reply) {
    // One println! per line: each line reaches the pipe whole.
    println!("{}", reply.encode());
}

/// Runs the worker: reads requests until stdin closes, then waits for the purchases under way,
/// closes the session and returns.
pub async fn run(index: usize, settings: Settings) -> Result<(), Error> {
    let session = Session::connect(&settings.zk, settings.session_timeout).await?;
    let stores = Arc::new(Stores::connect(&settings).await?);
    let (tx, mut requests) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            match Request::decode(&line) {
                Some(r) => {
                    let _ = tx.send(r);
                }
                None => eprintln!("worker {index}: bad request {line:?}"),
            }
        }
    });
    let name = format!("worker-{index}");
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(request) = requests.recv().await {
        let (session, stores, settings, name) =
            (session.clone(), stores.clone(), settings.clone(), name.clone());
        tasks.spawn(async move {
            let reply = if request.pause {
                paused_purchase(&session, &stores, &settings, &name, &request).await
            } else {
                purchase(&session, &stores, &settings, &name, &request).await
            };
            say(reply.unwrap_or_else(|e| {
                Reply::new("DONE")
                    .with("id", request.id)
                    .with("user", &request.user)
                    .with("outcome", "failed")
                    .with("detail", e)
            }));
        });
    }
    while tasks.join_next().await.is_some() {}
    session.close().await;
    Ok(())
}

/// Acquires the user's lock and registers its token at both stores (the newest holder's
/// token is raised before it reads anything, so no stale holder can write after that read).
async fn lock_and_register(
    session: &Session,
    stores: &Stores,
    settings: &Settings,
    name: &str,
    user: &str,
) -> Result<(LockGuard, String), Error> {
    let path = user_lock_path(user);
    let mutex = InterProcessMutex::with_options(session, &path, LockOptions::new().participant_id(name))?;
    let guard = mutex.acquire().await?;
    guard.ensure_safe(settings.margin)?;
    stores.register(&path, guard.fencing_token_i64()).await?;
    Ok((guard, path))
}

/// What one purchase came to.
enum Sale {
    Bought { left: i64 },
    AlreadyOrdered,
    SoldOut,
}

fn done(request: &Request, sale: &Sale, token: i64) -> Reply {
    let reply = Reply::new("DONE").with("id", request.id).with("user", &request.user).with("token", token);
    match sale {
        Sale::Bought { left } => reply.with("outcome", "bought").with("left", left),
        Sale::AlreadyOrdered => reply.with("outcome", "already-ordered"),
        Sale::SoldOut => reply.with("outcome", "sold-out"),
    }
}

/// One ordinary purchase; tried again (`TRIES` in all) when the hold turned out unsafe: the
/// window check refused, or a store's fence did (a newer holder registered: ours was lost).
async fn purchase(
    session: &Session,
    stores: &Stores,
    settings: &Settings,
    name: &str,
    request: &Request,
) -> Result<Reply, Error> {
    let mut last = String::new();
    for _ in 0..TRIES {
        let attempt = async {
            let (guard, path) = lock_and_register(session, stores, settings, name, &request.user).await?;
            let token = guard.fencing_token_i64();
            let sale = buy(stores, settings, &guard, &path, token, &request.user).await?;
            guard.release().await?;
            Ok::<_, Error>(done(request, &sale, token))
        };
        match attempt.await {
            Ok(reply) => return Ok(reply),
            Err(e) if is_unsafe(&e) => last = e.to_string(),
            Err(e) => return Err(e),
        }
    }
    Err(format!("gave up after {TRIES} tries, last: {last}").into())
}

/// Whether a purchase stopped because its hold was not safe (it may be tried again).
fn is_unsafe(e: &Error) -> bool {
    matches!(
        e.downcast_ref::<zk_recipes::Error>(),
        Some(zk_recipes::Error::UnsafeWindow { .. } | zk_recipes::Error::LockLost { .. })
    ) || e.downcast_ref::<FenceError>().is_some_and(FenceError::is_stale)
}

/// Under the lock, after registering: reads, checks the window right before each write, writes.
async fn buy(
    stores: &Stores,
    settings: &Settings,
    guard: &LockGuard,
    path: &str,
    token: i64,
    user: &str,
) -> Result<Sale, Error> {
    if stores.has_order(user).await? {
        return Ok(Sale::AlreadyOrdered);
    }
    guard.ensure_safe(settings.margin)?;
    let left = match stores.decrement(path, token).await? {
        StockOutcome::SoldOut => return Ok(Sale::SoldOut),
        StockOutcome::Sold { left } => left,
    };
    guard.ensure_safe(settings.margin)?;
    match stores.place_order(path, token, user).await? {
        OrderOutcome::Placed => Ok(Sale::Bought { left }),
        // Cannot happen under the lock: we read that the user had no order after registering.
        OrderOutcome::AlreadyOrdered => {
            Err(format!("{user} had an order after all; one item decremented for nothing").into())
        }
    }
}

/// How a late write came out: refused by the store's fence, landed, or failed otherwise.
fn write_outcome<T: std::fmt::Debug>(result: &Result<T, FenceError>) -> (&'static str, String) {
    match result {
        Err(FenceError::Stale(stale)) => ("refused", format!("StaleToken: {stale}")),
        Err(other) => ("error", other.to_string()),
        Ok(value) => ("landed", format!("{value:?}")),
    }
}

/// The designated purchase: as `purchase`, but between the window check and the writes the
/// process stops itself with SIGSTOP, the pause no lock can prevent. The orchestrator keeps it
/// stopped past the session timeout while another worker buys for the same user, then resumes
/// it; its writes then go out with its old token.
async fn paused_purchase(
    session: &Session,
    stores: &Stores,
    settings: &Settings,
    name: &str,
    request: &Request,
) -> Result<Reply, Error> {
    let mut tries = 0;
    let (guard, path, left) = loop {
        tries += 1;
        let attempt = async {
            let (guard, path) = lock_and_register(session, stores, settings, name, &request.user).await?;
            if stores.has_order(&request.user).await? {
                return Err(format!(
                    "{} already has an order: the designated purchase must be their first",
                    request.user
                )
                .into());
            }
            let left = guard.ensure_safe(settings.margin)?;
            Ok::<_, Error>((guard, path, left))
        };
        match attempt.await {
            Ok(held) => break held,
            Err(e) if is_unsafe(&e) && tries < TRIES => continue,
            Err(e) => return Err(e),
        }
    };
    let token = guard.fencing_token_i64();
    say(Reply::new("PAUSING")
        .with("id", request.id)
        .with("user", &request.user)
        .with("token", token)
        .with("window_left_ms", left.as_millis())
        .with("pid", std::process::id()));
    // SAFETY: raise(3) with SIGSTOP: the whole process stops here until SIGCONT.
    unsafe { libc::raise(libc::SIGSTOP) };
    // Resumed. The writes it was about to make go out now, with the old token: both are
    // attempted, to show each store's fence on its own (a real holder would stop at the first
    // refusal).
    let redis = stores.decrement(&path, token).await;
    let postgres = stores.place_order(&path, token, &request.user).await;
    let ensure_safe = match guard.ensure_safe(settings.margin) {
        Ok(left) => format!("Ok({left:?})"),
        Err(e) => format!("Err({e})"),
    };
    let status: LockStatus = guard.current_status();
    drop(guard);
    let (redis_kind, redis_detail) = write_outcome(&redis);
    let (pg_kind, pg_detail) = write_outcome(&postgres);
    let redis_left = match redis {
        Ok(StockOutcome::Sold { left }) => left.to_string(),
        _ => String::new(),
    };
    Ok(Reply::new("LATE")
        .with("id", request.id)
        .with("user", &request.user)
        .with("token", token)
        .with("redis", redis_kind)
        .with("redis_detail", redis_detail)
        .with("redis_left", redis_left)
        .with("postgres", pg_kind)
        .with("postgres_detail", pg_detail)
        .with("ensure_safe", ensure_safe)
        .with("status", format!("{status:?}")))
}
