//! The workers: one `Session` each for the whole phase, three to an OS process, each running
//! one recipe and writing to the fenced resource while it holds or leads.
//!
//! A correct worker (the default) stops each piece of work at the first of: its work is done,
//! the hold is lost (`lost()`, a latch's leadership channel, a selector's `stopped()`), or its
//! safe window (`safe_until`, less [`MARGIN`]) closes; and checks the window again before it
//! commits (`END`). `--broken` makes it misbehave, to show the checker catches it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use zk_recipes::{
    ConnectionState, InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphore, InterProcessSemaphoreMutex, LeaderLatch, LeaderSelector, Leadership, Lock,
    LockGuard, LockOptions, SelectorOptions, Session, TermOutcome,
};

use crate::checker::Kind;
use crate::resource::{instant_ns, mono_ns, ResourceClient, TOLD_WITHIN};
use crate::{Error, Rng, SEM_MAX, SESSION};

/// A worker stops its work this long before its safe window closes.
pub const MARGIN: Duration = Duration::from_millis(SESSION.as_millis() as u64 / 5);

/// Deliberate misbehaviour (`--broken`), to show end to end that the checker catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    None,
    /// Workers ignore loss and their safe window, and hold for three session timeouts.
    IgnoreSafeWindow,
    /// As `IgnoreSafeWindow`, and the resource accepts every write (no fence).
    NoFence,
    /// Semaphore workers build their semaphore with one lease more than the checker allows.
    OverAdmit,
}

impl Broken {
    pub fn parse(s: &str) -> Option<Broken> {
        match s {
            "none" => Some(Broken::None),
            "ignore-safe-window" => Some(Broken::IgnoreSafeWindow),
            "no-fence" => Some(Broken::NoFence),
            "over-admit" => Some(Broken::OverAdmit),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Broken::None => "none",
            Broken::IgnoreSafeWindow => "ignore-safe-window",
            Broken::NoFence => "no-fence",
            Broken::OverAdmit => "over-admit",
        }
    }
}

/// How a hold's work ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Done,
    Refused,
    Lost,
    Safe,
}

impl Stop {
    fn code(self) -> &'static str {
        match self {
            Stop::Done => "done",
            Stop::Refused => "refused",
            Stop::Lost => "lost",
            Stop::Safe => "safe",
        }
    }
}

type SafeFn<'a> = &'a (dyn Fn() -> Option<Instant> + Sync);

/// One worker's state: its resource connection and its seeded randomness.
pub struct Ctx {
    pub(crate) id: String,
    pid: u32,
    pub(crate) addr: String,
    pub(crate) res: ResourceClient,
    pub(crate) rng: Rng,
    broken: Broken,
    pub(crate) stop: watch::Receiver<bool>,
}

impl Ctx {
    pub(crate) fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    fn careless(&self) -> bool {
        matches!(self.broken, Broken::IgnoreSafeWindow | Broken::NoFence)
    }

    async fn abort(&mut self, begun: &[&(String, u64)]) -> Result<(), Error> {
        for (res, t) in begun {
            self.res.ask(format!("ABORT {} {res} {t}", self.id)).await?;
        }
        Ok(())
    }

    /// One write under a hold: `BEGIN` on every target, the work, `END` on every target.
    async fn op<F: Future<Output = ()>>(
        &mut self,
        targets: &[(String, u64)],
        kind: Kind,
        lost: &mut Pin<&mut F>,
        safe: SafeFn<'_>,
        deadline: &mut u64,
    ) -> Result<Stop, Error> {
        let work = Duration::from_millis(5 + self.rng.below(35));
        let careless = self.careless();
        if !careless {
            tokio::select! {
                biased;
                _ = lost.as_mut() => return Ok(Stop::Lost),
                _ = std::future::ready(()) => {}
            }
        }
        let until = safe();
        if let Some(u) = until {
            *deadline = instant_ns(u);
        }
        let stop_at = match until {
            _ if careless => None,
            None => return Ok(Stop::Lost),
            Some(u) if Instant::now() + work + MARGIN > u => return Ok(Stop::Safe),
            Some(u) => Some(u.checked_sub(MARGIN).unwrap_or_else(Instant::now)),
        };
        let mut begun = Vec::new();
        for target in targets {
            let (res, t) = target;
            let line = format!("BEGIN {} {} {res} {} {t} {deadline}", self.id, self.pid, kind.code());
            if self.res.ask(line).await? {
                begun.push(target);
            } else {
                self.abort(&begun).await?;
                return Ok(Stop::Refused);
            }
        }
        let interrupted = match stop_at {
            None => {
                tokio::time::sleep(work).await;
                None
            }
            Some(at) => tokio::select! {
                _ = tokio::time::sleep(work) => None,
                _ = lost.as_mut() => Some(Stop::Lost),
                _ = tokio::time::sleep_until(at.into()) => Some(Stop::Safe),
            },
        };
        // Before committing (a pause may have landed in the work): still inside the window?
        let interrupted = interrupted.or(match safe() {
            _ if careless => None,
            Some(u) if Instant::now() + MARGIN < u => {
                *deadline = instant_ns(u);
                None
            }
            Some(_) => Some(Stop::Safe),
            None => Some(Stop::Lost),
        });
        if let Some(stop) = interrupted {
            self.abort(&begun).await?;
            return Ok(stop);
        }
        let mut stop = Stop::Done;
        for (res, t) in targets {
            if !self.res.ask(format!("END {} {res} {t}", self.id)).await? {
                stop = Stop::Refused;
            }
        }
        Ok(stop)
    }

    /// A hold from `start` (acquire returned): writes until the first stop (or, for a leader,
    /// until its `term` is over), reports the hold interval, and after a refused write reports
    /// whether the worker was told of the loss.
    pub(crate) async fn hold<F: Future<Output = ()>>(
        &mut self,
        targets: Vec<(String, u64)>,
        kind: Kind,
        start: u64,
        lost: F,
        safe: SafeFn<'_>,
        term: Option<Duration>,
    ) -> Result<Stop, Error> {
        tokio::pin!(lost);
        // Announced at once, so that a hold whose task is aborted (a selector's, past its
        // window) or whose process is killed is still in the interval view.
        let mut deadline = safe().map_or(start, instant_ns);
        for (res, t) in &targets {
            let line = format!("ACQ {} {} {res} {} {t} {start} {deadline}", self.id, self.pid, kind.code());
            self.res.ask(line).await?;
        }
        let now = Instant::now();
        let until = if self.careless() { Some(now + SESSION * 3) } else { term.map(|t| now + t) };
        let stop = loop {
            let stop = self.op(&targets, kind, &mut lost, safe, &mut deadline).await?;
            if stop != Stop::Done || until.is_none_or(|u| Instant::now() >= u) || self.stopping() {
                break stop;
            }
        };
        let end = mono_ns();
        let cause = if stop == Stop::Done && self.stopping() { "stop" } else { stop.code() };
        for (res, t) in &targets {
            let line = format!(
                "HOLD {} {} {res} {} {t} {start} {end} {deadline} {cause}",
                self.id,
                self.pid,
                kind.code()
            );
            self.res.ask(line).await?;
        }
        if stop == Stop::Refused && !matches!(kind, Kind::Lease(_)) {
            let token = targets.iter().map(|t| t.1).max().unwrap_or(0);
            let t0 = Instant::now();
            match tokio::time::timeout(TOLD_WITHIN, lost).await {
                Ok(()) => {
                    self.res.ask(format!("LOSTSEEN {} {token} {}", self.id, t0.elapsed().as_millis())).await?
                }
                Err(_) => self.res.ask(format!("LOSTUNSEEN {} {token}", self.id)).await?,
            };
        }
        Ok(stop)
    }

    /// Holds what `acquire` returns, releases, again, until told to stop.
    async fn lock_loop(&mut self, locker: &Locker) -> Result<(), Error> {
        let mut stop = self.stop.clone();
        while !self.stopping() {
            let pick = self.rng.next();
            let (guard, kind) = match acquire_turn(locker.acquire(pick), &mut stop).await {
                Turn::Got(g) => g,
                Turn::Again => continue,
                Turn::Stop => break,
            };
            let start = mono_ns();
            self.hold(guard.fencing_tokens(), kind, start, guard.lost(), &|| guard.safe_until(), None)
                .await?;
            let _ = guard.release().await;
        }
        Ok(())
    }
}

/// The lock a lock phase's workers take.
enum Locker {
    Mutex(InterProcessMutex),
    SemaphoreMutex(InterProcessSemaphoreMutex),
    /// Leases of weight 1 or 2.
    Semaphore(InterProcessSemaphore),
    Multi(InterProcessMultiLock),
}

impl Locker {
    async fn acquire(&self, pick: u64) -> zk_recipes::Result<(LockGuard, Kind)> {
        match self {
            Locker::Mutex(m) => Ok((m.acquire().await?, Kind::Exclusive)),
            Locker::SemaphoreMutex(m) => Ok((m.acquire().await?, Kind::Exclusive)),
            Locker::Semaphore(s) => {
                let weight = 1 + (pick % 2) as u32;
                Ok((s.acquire_many(weight).await?, Kind::Lease(weight)))
            }
            Locker::Multi(m) => Ok((m.acquire().await?, Kind::Exclusive)),
        }
    }

    async fn settled(&self) {
        match self {
            Locker::Mutex(m) => m.settled().await,
            Locker::SemaphoreMutex(m) => m.settled().await,
            Locker::Semaphore(s) => s.settled().await,
            Locker::Multi(m) => m.settled().await,
        }
    }
}

/// One worker: its id and session's connect string, the phase, the resource's address.
pub struct Worker {
    pub id: String,
    pub index: usize,
    pub connect: String,
    pub mode: String,
    pub addr: String,
    pub stop: watch::Receiver<bool>,
    pub seed: u64,
    pub broken: Broken,
    /// The lockset phase's PostgreSQL connect parameters and Redis URL.
    pub lockset: Option<(String, String)>,
}

/// What one turn's acquire came to (see [`acquire_turn`]).
pub enum Turn<T> {
    Got(T),
    /// A transient error (the connection is down, say): try again.
    Again,
    /// The phase is stopping, or the session was closed.
    Stop,
}

/// Awaits `acquire` unless the phase stops first; after a transient error, waits 20 ms before
/// saying `Again`.
pub async fn acquire_turn<T>(
    acquire: impl Future<Output = zk_recipes::Result<T>>,
    stop: &mut watch::Receiver<bool>,
) -> Turn<T> {
    let acquired = tokio::select! {
        r = acquire => r,
        _ = stop.wait_for(|s| *s) => return Turn::Stop,
    };
    match acquired {
        Ok(guard) => Turn::Got(guard),
        Err(zk_recipes::Error::SessionClosed) => Turn::Stop,
        Err(_) => {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Turn::Again
        }
    }
}

/// Connects this worker's one `Session` (retrying while its proxy is cut off); `None` once
/// told to stop.
pub async fn connect_session(connect: &str, stop: &watch::Receiver<bool>) -> Option<Session> {
    while !*stop.borrow() {
        match crate::sasl::connect(connect, SESSION).await {
            Ok(session) => return Some(session),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    None
}

/// Reports every session generation the worker's `Session` reaches (`GEN id pid generation`),
/// on a connection of its own, until the session is closed.
pub fn report_generations(session: &Session, id: String, addr: String) -> tokio::task::JoinHandle<()> {
    let mut states = session.states();
    tokio::spawn(async move {
        let Ok(mut res) = ResourceClient::connect(&addr).await else { return };
        let pid = std::process::id();
        let mut reported = 0;
        loop {
            let status = *states.borrow_and_update();
            let (state, generation) = (status.state, status.generation);
            if state == ConnectionState::Closed {
                return;
            }
            if generation != reported {
                reported = generation;
                if res.ask(format!("GEN {id} {pid} {generation}")).await.is_err() {
                    return;
                }
            }
            if states.changed().await.is_err() {
                return;
            }
        }
    })
}

/// The lock paths of a phase (a multi-lock's two members, one path otherwise).
pub fn paths(mode: &str) -> Vec<String> {
    if mode == "multi" {
        vec!["/chaos/multi/a".into(), "/chaos/multi/b".into()]
    } else if mode == "lockset" {
        crate::lockset::VARIANTS.iter().map(|v| v.lock_path()).collect()
    } else if let Some(paths) = crate::workers_options::paths(mode) {
        paths
    } else {
        vec![format!("/chaos/{mode}")]
    }
}

pub async fn run(w: Worker) -> Result<(), Error> {
    if w.mode == "lockset" {
        return crate::lockset::run(w).await;
    }
    let Worker { id, index, connect, mode, addr, stop, seed, broken, .. } = w;
    let res = ResourceClient::connect(&addr).await?;
    let mut ctx = Ctx {
        id: id.clone(),
        pid: std::process::id(),
        addr: addr.clone(),
        res,
        rng: Rng(seed),
        broken,
        stop: stop.clone(),
    };
    // One session for the whole phase: after an expiry it starts a new one by itself, and the
    // recipe's waiters and elections queue again there.
    let Some(session) = connect_session(&connect, &stop).await else { return Ok(()) };
    let reporter = report_generations(&session, id.clone(), addr.clone());
    if crate::workers_options::MODES.contains(&mode.as_str()) {
        let result = crate::workers_options::run(ctx, &session, &mode, index).await;
        session.close().await;
        let _ = reporter.await;
        return result;
    }
    let path = paths(&mode)[0].clone();
    let opts = crate::sasl::lock(LockOptions::new().participant_id(id.clone()));
    let locker = match mode.as_str() {
        "mutex" => Some(Locker::Mutex(InterProcessMutex::with_options(&session, &path, opts.clone())?)),
        "semmutex" => Some(Locker::SemaphoreMutex(InterProcessSemaphoreMutex::with_options(
            &session,
            &path,
            opts.clone(),
        )?)),
        "semaphore" => {
            let max = SEM_MAX + u32::from(broken == Broken::OverAdmit);
            Some(Locker::Semaphore(InterProcessSemaphore::with_options(&session, &path, max, opts.clone())?))
        }
        "multi" => {
            // Half the workers name the members in one order, half in the other.
            let mut members = paths("multi");
            if index % 2 == 1 {
                members.reverse();
            }
            let locks: Vec<Box<dyn Lock>> = members
                .iter()
                .map(|p| {
                    InterProcessMutex::with_options(&session, p, opts.clone())
                        .map(|m| Box::new(m) as Box<dyn Lock>)
                })
                .collect::<Result<_, _>>()?;
            Some(Locker::Multi(InterProcessMultiLock::from_locks(locks)))
        }
        _ => None,
    };
    let result = match mode.as_str() {
        _ if locker.is_some() => {
            let locker = locker.as_ref().expect("a lock phase");
            let r = ctx.lock_loop(locker).await;
            locker.settled().await;
            r
        }
        "rwlock" => {
            let rw = InterProcessReadWriteLock::with_options(&session, &path, opts)?;
            let r = rwlock_loop(&mut ctx, &rw).await;
            rw.settled().await;
            r
        }
        "latch" => latch_loop(&mut ctx, &session, &path, (300, 1200)).await,
        "selector" => {
            let options = crate::sasl::selector(SelectorOptions::new().participant_id(ctx.id.clone()));
            let length: fn(&mut Rng) -> Duration = |rng| Duration::from_millis(300 + rng.below(1200));
            selector_run(ctx, &session, &path, options, None, length).await
        }
        other => Err(format!("unknown phase {other}").into()),
    };
    session.close().await;
    let _ = reporter.await;
    result
}

/// Readers (two thirds), writers, and writers that downgrade to a reader (half the writers).
async fn rwlock_loop(ctx: &mut Ctx, rw: &InterProcessReadWriteLock) -> Result<(), Error> {
    let mut stop = ctx.stop.clone();
    while !ctx.stopping() {
        let pick = ctx.rng.below(6);
        let writer = pick < 2;
        let acquired = async {
            if writer {
                rw.write().await
            } else {
                rw.read().await
            }
        };
        let guard = match acquire_turn(acquired, &mut stop).await {
            Turn::Got(g) => g,
            Turn::Again => continue,
            Turn::Stop => break,
        };
        let start = mono_ns();
        let kind = if writer { Kind::Write } else { Kind::Read };
        let stop_kind =
            ctx.hold(guard.fencing_tokens(), kind, start, guard.lost(), &|| guard.safe_until(), None).await?;
        if writer && pick == 0 && stop_kind == Stop::Done && !ctx.stopping() {
            // Downgrade: a reader from here on, with no writer let in between.
            if let Ok(read) = rw.downgrade(&guard).await {
                let start = mono_ns();
                // The downgraded reader writes with its writer's token: its read node's is
                // newer than a writer queued before the downgrade, which must still pass the
                // fence after this read.
                let targets = guard.fencing_tokens();
                let _ = guard.release().await;
                ctx.hold(targets, Kind::Read, start, read.lost(), &|| read.safe_until(), None).await?;
                let _ = read.release().await;
                continue;
            }
        }
        let _ = guard.release().await;
    }
    Ok(())
}

/// Leads for a random term of `terms.0` ms and up to `terms.1` ms more (or until the term is
/// lost), then steps down and joins again.
pub(crate) async fn latch_loop(
    ctx: &mut Ctx,
    session: &Session,
    path: &str,
    terms: (u64, u64),
) -> Result<(), Error> {
    let mut stop = ctx.stop.clone();
    while !ctx.stopping() {
        let latch = LeaderLatch::with_options(
            session,
            path,
            crate::sasl::latch(zk_recipes::LatchOptions::new().participant_id(&ctx.id)),
        )?;
        latch.start()?;
        let token = tokio::select! {
            r = latch.await_leadership() => r.ok(),
            _ = stop.wait_for(|s| *s) => None,
        };
        if let Some(token) = token {
            let start = mono_ns();
            let generation = session.generation();
            let mut changes = latch.leadership();
            let lost = async move {
                let _ = changes.wait_for(|l| *l == Leadership::NotLeader).await;
            };
            // The latch has no guard: its window is the session's, while it still leads in
            // the session it was elected in.
            let safe = || {
                (latch.has_leadership() && session.generation() == generation)
                    .then(|| session.safe_until())
                    .flatten()
            };
            let term = Duration::from_millis(terms.0 + ctx.rng.below(terms.1));
            ctx.hold(vec![(path.to_string(), token)], Kind::Exclusive, start, lost, &safe, Some(term))
                .await?;
        }
        latch.close().await;
        if session.is_closed() {
            break;
        }
    }
    Ok(())
}

/// A selector with auto-requeue. Each term's task writes until its length (drawn from the
/// worker's rng by `length`) has passed, its term is lost, or its window closes; with `limit`,
/// each term is first announced as limited (`LIM`, the `maxhold` phase). A term ended by a
/// revocation is reported (`TOLD`), and so is a term whose task the selector aborted
/// (`ABANDONED`: a task aborted once its term is lost never reports its hold whole; it ended
/// with its last write).
pub(crate) async fn selector_run(
    ctx: Ctx,
    session: &Session,
    path: &str,
    options: SelectorOptions,
    limit: Option<Duration>,
    length: fn(&mut Rng) -> Duration,
) -> Result<(), Error> {
    let (id, addr, mut stop) = (ctx.id.clone(), ctx.addr.clone(), ctx.stop.clone());
    let ctx = Arc::new(tokio::sync::Mutex::new(ctx));
    let selector = LeaderSelector::with_options(session, path, options.auto_requeue(true))?;
    let mut terms = selector.terms();
    let (told_path, told_id) = (path.to_string(), id);
    let told = tokio::spawn(async move {
        let Ok(mut res) = ResourceClient::connect(&addr).await else { return };
        while let Ok(term) = terms.recv().await {
            let token = term.fencing_token;
            if term.outcome == TermOutcome::Revoked {
                let pid = std::process::id();
                let line = format!("TOLD {told_id} {pid} {told_path} {token} {}", mono_ns());
                if res.ask(line).await.is_err() {
                    return;
                }
            }
            if term.aborted && res.ask(format!("ABANDONED {told_id} {told_path} {token}")).await.is_err() {
                return;
            }
        }
    });
    let (task_ctx, path) = (ctx.clone(), path.to_string());
    selector.start(move |lc: zk_recipes::LeadershipContext| {
        let (ctx, path) = (task_ctx.clone(), path.clone());
        async move {
            let mut ctx = ctx.lock().await;
            // A connection per term: a task aborted by the selector mid-request must not leave
            // its reply for the next term to read.
            ctx.res = ResourceClient::connect(&ctx.addr).await.map_err(|e| e.to_string())?;
            let start = mono_ns();
            let token = lc.fencing_token();
            if let Some(limit) = limit {
                let line = format!("LIM {} {path} {token} {}", ctx.id, limit.as_millis());
                ctx.res.ask(line).await.map_err(|e| e.to_string())?;
            }
            let term = length(&mut ctx.rng);
            let stopped = lc.clone();
            let lost = async move { stopped.stopped().await };
            ctx.hold(vec![(path, token)], Kind::Exclusive, start, lost, &|| lc.safe_until(), Some(term))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })?;
    let _ = stop.wait_for(|s| *s).await;
    selector.close().await;
    told.abort();
    Ok(())
}
