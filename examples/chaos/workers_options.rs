//! The workers of the option phases, under the same faults as every phase (their checks are in
//! `options_check.rs`):
//! - `delay`: a mutex with the lock delay ([`DELAY`]) on every contender; a third of the holds
//!   are taken through a handle with a hold limit too and run into it (an unclean end, so that
//!   every run has some without waiting for a fault). Every acquire reports its queue events;
//!   the orchestrator's witness (`options_witness.rs`) sees how each node went.
//! - `maxhold`: a mutex and a selector with a hold limit ([`LIMIT`]); every holder runs until the
//!   limit ends its hold (and stops at `lost()`, as it must).
//! - `revoke`: a revocable mutex, a semaphore of [`REVOKE_LEASES`] leases and a selector; the
//!   first worker of each process asks the holders of one of them to release, now and then;
//!   holders stop and release when told (or at a 4 s cap, which only a holder never told
//!   reaches).
//! - `observer`: latches with long terms, and a `LeaderObserver` on every worker's session.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use zk_recipes::{
    request_revocation, InterProcessMutex, InterProcessSemaphore, LeaderObserver, Lock, LockGuard,
    LockOptions, LockStatus, QueueEvent, SelectorOptions, Session,
};

use crate::checker::Kind;
use crate::options_check::{DELAY, LIMIT};
use crate::resource::{mono_ns, ResourceClient};
use crate::workers::{acquire_turn, selector_run, Ctx, Turn};
use crate::Error;

/// The option phases.
pub const MODES: [&str; 4] = ["delay", "maxhold", "revoke", "observer"];
/// The `revoke` phase's semaphore.
pub const REVOKE_LEASES: u32 = 2;
/// How long a revocable holder holds if nobody asks it to release.
const REVOCABLE_CAP: Duration = Duration::from_secs(4);

/// The lock paths of an option phase (`None`: not one with several).
pub fn paths(mode: &str) -> Option<Vec<String>> {
    match mode {
        "maxhold" => Some(vec!["/chaos/maxhold/mutex".into(), "/chaos/maxhold/selector".into()]),
        "revoke" => {
            Some(["mutex", "lease", "selector"].iter().map(|r| format!("/chaos/revoke/{r}")).collect())
        }
        _ => None,
    }
}

/// The lease maximum of a resource of the option phases, if it is a semaphore's.
pub fn lease_cap(resource: &str) -> Option<u32> {
    (resource == "/chaos/revoke/lease").then_some(REVOKE_LEASES)
}

/// Runs worker `index` of option phase `mode` on `session`.
pub async fn run(mut ctx: Ctx, session: &Session, mode: &str, index: usize) -> Result<(), Error> {
    let states = report_states(session, ctx.id.clone(), ctx.addr.clone());
    let opts = crate::sasl::lock(LockOptions::new().participant_id(ctx.id.clone()));
    let result = match mode {
        "delay" => {
            let path = "/chaos/delay";
            let plain = InterProcessMutex::with_options(session, path, opts.clone().lock_delay(DELAY))?;
            let limited =
                InterProcessMutex::with_options(session, path, opts.lock_delay(DELAY).max_hold(LIMIT))?;
            let r = delay_loop(&mut ctx, &plain, &limited).await;
            plain.settled().await;
            limited.settled().await;
            r
        }
        "maxhold" if index.is_multiple_of(2) => {
            let mutex =
                InterProcessMutex::with_options(session, "/chaos/maxhold/mutex", opts.max_hold(LIMIT))?;
            let r = limited_loop(&mut ctx, &mutex).await;
            mutex.settled().await;
            r
        }
        "maxhold" => {
            let options =
                crate::sasl::selector(SelectorOptions::new().participant_id(ctx.id.clone()).max_hold(LIMIT));
            // Each term holds past its limit unless the limit ends it.
            let length: fn(&mut crate::Rng) -> Duration = |_| LIMIT + Duration::from_secs(3);
            selector_run(ctx, session, "/chaos/maxhold/selector", options, Some(LIMIT), length).await
        }
        "revoke" => {
            let seed = ctx.rng.next();
            let asker = (index == 0).then(|| {
                tokio::spawn(ask_loop(
                    session.clone(),
                    ctx.id.clone(),
                    ctx.addr.clone(),
                    seed,
                    ctx.stop.clone(),
                ))
            });
            let opts = opts.revocable(true);
            let r = match index % 3 {
                0 => {
                    let m = InterProcessMutex::with_options(session, "/chaos/revoke/mutex", opts)?;
                    let r =
                        revocable_loop(&mut ctx, Target::Lock(&m), "/chaos/revoke/mutex", Kind::Exclusive)
                            .await;
                    m.settled().await;
                    r
                }
                1 => {
                    let path = "/chaos/revoke/lease";
                    let s = InterProcessSemaphore::with_options(session, path, REVOKE_LEASES, opts)?;
                    let r = revocable_loop(&mut ctx, Target::Lease(&s), path, Kind::Lease(1)).await;
                    s.settled().await;
                    r
                }
                _ => {
                    let options =
                        crate::sasl::selector(SelectorOptions::new().participant_id(ctx.id.clone()));
                    let length: fn(&mut crate::Rng) -> Duration = |_| REVOCABLE_CAP;
                    selector_run(ctx, session, "/chaos/revoke/selector", options, None, length).await
                }
            };
            if let Some(asker) = asker {
                let _ = asker.await;
            }
            r
        }
        "observer" => {
            let watching = observe(session, ctx.id.clone(), ctx.addr.clone())?;
            let r = crate::workers::latch_loop(&mut ctx, session, "/chaos/observer", (2000, 3000)).await;
            watching.close();
            r
        }
        other => Err(format!("unknown option phase {other}").into()),
    };
    states.abort();
    result
}

/// Reports every change of the session's state (`CONN id pid state at`) on a connection of
/// its own, until the session is closed.
fn report_states(session: &Session, id: String, addr: String) -> tokio::task::JoinHandle<()> {
    let mut states = session.states();
    tokio::spawn(async move {
        let Ok(mut res) = ResourceClient::connect(&addr).await else { return };
        let pid = std::process::id();
        loop {
            let s = *states.borrow_and_update();
            let line = format!("CONN {id} {pid} {:?}-{} {}", s.state, s.generation, mono_ns());
            if res.ask(line).await.is_err() || states.changed().await.is_err() {
                return;
            }
        }
    })
}

/// What an option phase's worker acquires: a lock, or one lease of a semaphore.
#[derive(Clone, Copy)]
enum Target<'a> {
    Lock(&'a dyn Lock),
    Lease(&'a InterProcessSemaphore),
}

impl Target<'_> {
    async fn acquire(
        self,
        sink: &mut (dyn for<'e> FnMut(&'e QueueEvent) + Send),
    ) -> zk_recipes::Result<Option<LockGuard>> {
        match self {
            Target::Lock(lock) => lock.acquire_with_events(None, sink).await,
            Target::Lease(s) => s.acquire_with_events(1, None, sink).await,
        }
    }
}

/// One acquire of `target` with its queue events, each reported (`QEV`) once it ends.
async fn acquire_reporting(
    ctx: &mut Ctx,
    target: Target<'_>,
    attempt: u64,
) -> Result<Turn<LockGuard>, Error> {
    let mut events: Vec<(u64, QueueEvent)> = Vec::new();
    let mut stop = ctx.stop.clone();
    let turn = {
        let mut sink = |e: &QueueEvent| events.push((mono_ns(), e.clone()));
        acquire_turn(target.acquire(&mut sink), &mut stop).await
    };
    let pid = std::process::id();
    for (at, e) in events {
        let (kind, num, node, watching) = match e {
            QueueEvent::Queued { node, ahead, watching, .. } => ("queued", ahead as u64, node, watching),
            QueueEvent::MovedUp { ahead, watching, .. } => ("moved", ahead as u64, "-".into(), watching),
            QueueEvent::Requeued { generation, .. } => ("requeued", generation, "-".into(), "-".into()),
            QueueEvent::LockDelay { wait, vanished, .. } => {
                ("delay", wait.as_millis() as u64, vanished, "-".into())
            }
            QueueEvent::Acquired { node, fencing_token, .. } => ("acquired", fencing_token, node, "-".into()),
            QueueEvent::GaveUp { .. } => ("gaveup", 0, "-".into(), "-".into()),
            _ => ("other", 0, "-".into(), "-".into()),
        };
        let id = &ctx.id;
        ctx.res.ask(format!("QEV {id} {pid} {attempt} {kind} {num} {node} {watching} {at}")).await?;
    }
    Ok(match turn {
        Turn::Got(Some(guard)) => Turn::Got(guard),
        Turn::Got(None) | Turn::Again => Turn::Again,
        Turn::Stop => Turn::Stop,
    })
}

/// The `delay` phase: short holds, and a third run into their limit.
async fn delay_loop(
    ctx: &mut Ctx,
    plain: &InterProcessMutex,
    limited: &InterProcessMutex,
) -> Result<(), Error> {
    let mut attempt = 0;
    while !ctx.stopping() {
        attempt += 1;
        let limit = ctx.rng.below(3) == 0;
        let lock: &dyn Lock = if limit { limited } else { plain };
        let guard = match acquire_reporting(ctx, Target::Lock(lock), attempt).await? {
            Turn::Got(g) => g,
            Turn::Again => continue,
            Turn::Stop => break,
        };
        let term = if limit {
            LIMIT + Duration::from_secs(3)
        } else {
            Duration::from_millis(50 + ctx.rng.below(250))
        };
        hold_limited(ctx, &guard, limit.then_some(LIMIT), term).await?;
        let _ = guard.release().await;
    }
    Ok(())
}

/// The `maxhold` phase's mutex: every hold runs into its limit.
async fn limited_loop(ctx: &mut Ctx, mutex: &InterProcessMutex) -> Result<(), Error> {
    let mut attempt = 0;
    while !ctx.stopping() {
        attempt += 1;
        let guard = match acquire_reporting(ctx, Target::Lock(mutex), attempt).await? {
            Turn::Got(g) => g,
            Turn::Again => continue,
            Turn::Stop => break,
        };
        hold_limited(ctx, &guard, Some(LIMIT), LIMIT + Duration::from_secs(3)).await?;
        let _ = guard.release().await;
    }
    Ok(())
}

/// Holds `guard` for `term` (or until lost), announcing its `limit` (`LIM`) if it has one.
async fn hold_limited(
    ctx: &mut Ctx,
    guard: &LockGuard,
    limit: Option<Duration>,
    term: Duration,
) -> Result<(), Error> {
    let start = mono_ns();
    let targets = guard.fencing_tokens();
    if let Some(limit) = limit {
        for (res, t) in &targets {
            ctx.res.ask(format!("LIM {} {res} {t} {}", ctx.id, limit.as_millis())).await?;
        }
    }
    ctx.hold(targets, Kind::Exclusive, start, guard.lost(), &|| guard.safe_until(), Some(term)).await?;
    Ok(())
}

/// The `revoke` phase's lock holders: hold until told (then `TOLD`), lost, or the cap.
async fn revocable_loop(ctx: &mut Ctx, target: Target<'_>, path: &str, kind: Kind) -> Result<(), Error> {
    let mut attempt = 0;
    while !ctx.stopping() {
        attempt += 1;
        let guard = match acquire_reporting(ctx, target, attempt).await? {
            Turn::Got(g) => g,
            Turn::Again => continue,
            Turn::Stop => break,
        };
        let start = mono_ns();
        let told_at = AtomicU64::new(0);
        let mut status = guard.status();
        let ended = async {
            tokio::select! {
                _ = guard.lost() => {}
                Ok(_) = status.wait_for(|s| *s == LockStatus::RevocationRequested) => {
                    told_at.store(mono_ns(), Ordering::Relaxed)
                }
            }
        };
        let targets = guard.fencing_tokens();
        ctx.hold(targets.clone(), kind, start, ended, &|| guard.safe_until(), Some(REVOCABLE_CAP)).await?;
        let told = told_at.load(Ordering::Relaxed);
        if told > 0 {
            for (_, t) in &targets {
                ctx.res.ask(format!("TOLD {} {} {path} {t} {told}", ctx.id, std::process::id())).await?;
            }
        }
        let _ = guard.release().await;
    }
    Ok(())
}

/// The `revoke` phase's asker: now and then, the holders of one of the three recipes are each
/// asked to release (`ASKED asker path token sent answered` for each request that reached a node).
async fn ask_loop(
    session: Session,
    id: String,
    addr: String,
    seed: u64,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Ok(mut res) = ResourceClient::connect(&addr).await else { return };
    let mut rng = crate::Rng(seed ^ 0xa5a5);
    let paths = paths("revoke").unwrap_or_default();
    while !*stop.borrow() {
        let pause = Duration::from_millis(300 + rng.below(600));
        if tokio::time::timeout(pause, stop.wait_for(|s| *s)).await.is_ok() {
            return;
        }
        let path = &paths[rng.below(paths.len() as u64) as usize];
        let listed = match lease_cap(path) {
            Some(max) => match InterProcessSemaphore::new(&session, path, max) {
                Ok(s) => s.participants().await,
                Err(_) => continue,
            },
            None => match InterProcessMutex::new(&session, path) {
                Ok(m) => m.participants().await,
                Err(_) => continue,
            },
        };
        for p in listed.unwrap_or_default().into_iter().filter(|p| p.is_holder) {
            let sent = mono_ns();
            if let Ok(true) = request_revocation(&session, &format!("{path}/{}", p.node)).await {
                let line =
                    format!("ASKED {id} {} {path} {} {sent} {}", std::process::id(), p.czxid, mono_ns());
                if res.ask(line).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A `LeaderObserver` on the election, each change of its leader reported (`OBS id pid token
/// at`, token 0 for nobody) on a connection of its own.
fn observe(session: &Session, id: String, addr: String) -> Result<LeaderObserver, Error> {
    let observer = LeaderObserver::new(session, "/chaos/observer")?;
    let mut leader = observer.leader();
    tokio::spawn(async move {
        let Ok(mut res) = ResourceClient::connect(&addr).await else { return };
        let pid = std::process::id();
        loop {
            let token = leader.borrow_and_update().as_ref().map_or(0, |l| l.fencing_token);
            if res.ask(format!("OBS {id} {pid} {token} {}", mono_ns())).await.is_err()
                || leader.changed().await.is_err()
            {
                return;
            }
        }
    });
    Ok(observer)
}
