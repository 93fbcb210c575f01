//! The `lockset` phase's workers: Jepsen's etcd `lock-set` / `lock-etcd-set`, a read-modify-write
//! of a set under an `InterProcessMutex`, against three resources, each fenced and unfenced.
//!
//! Each worker, again and again: picks one of the six [`VARIANTS`] at random, takes its lock,
//! (fenced PostgreSQL and Redis: registers its token first, the patterns' discipline) reads the
//! set, checks its safe window (`ensure_safe`), spends a few ms before the write lands (what a
//! write's way to the resource costs, widened so that a paused process can stop there, as
//! Jepsen's workers sleep between read and write), and writes the set back with one element of
//! its own added. An add counts as acknowledged only when the write returned success. Every
//! operation is reported with its invoke and return times on the machine's monotonic clock
//! (`LSINV`/`LSRET`), and each hold as in the other phases (`LSACQ`/`LSEND`), so that the
//! checkers work on histories alone.

use std::time::Duration;

use zk_recipes::{InterProcessMutex, LockGuard, LockOptions, Session};

use crate::fencing::{self, FenceError};
use crate::resource::{instant_ns, mono_ns, ResourceClient};
use crate::workers::{acquire_turn, connect_session, report_generations, Turn, Worker, MARGIN};
use crate::{Error, Rng, SESSION};

/// Where a variant's set lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// A znode's data: the elements as little-endian `i64`s.
    Zk,
    Postgres,
    Redis,
}

/// One of the six sets: a store, fenced or not.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    pub name: &'static str,
    pub store: Store,
    pub fenced: bool,
}

pub const VARIANTS: [Variant; 6] = [
    Variant { name: "zk-fenced", store: Store::Zk, fenced: true },
    Variant { name: "zk-unfenced", store: Store::Zk, fenced: false },
    Variant { name: "pg-fenced", store: Store::Postgres, fenced: true },
    Variant { name: "pg-unfenced", store: Store::Postgres, fenced: false },
    Variant { name: "redis-fenced", store: Store::Redis, fenced: true },
    Variant { name: "redis-unfenced", store: Store::Redis, fenced: false },
];

impl Variant {
    /// The variant's lock (one fence per lock path at the resource).
    pub fn lock_path(&self) -> String {
        format!("/chaos/lockset/{}", self.name)
    }

    /// The set's key (PostgreSQL, Redis) or znode (ZooKeeper).
    pub fn key(&self) -> String {
        match self.store {
            Store::Zk => format!("/chaos-lockset/{}", self.name),
            _ => format!("chaos-lockset-{}", self.name),
        }
    }
}

/// The variant named `name`.
pub fn variant(name: &str) -> Option<Variant> {
    VARIANTS.iter().copied().find(|v| v.name == name)
}

/// What a worker does to a set, as the history records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LsKind {
    /// `acquire` of the variant's lock (recorded only when it returned a guard).
    Acquire,
    /// The end of a hold: from the moment the worker ended it to `release` returning.
    Release,
    /// Raising the resource's fence to the token (fenced PostgreSQL and Redis).
    Register,
    Read,
    /// The write of the set with the worker's element added.
    Write,
}

impl LsKind {
    pub fn code(self) -> &'static str {
        match self {
            LsKind::Acquire => "acquire",
            LsKind::Release => "release",
            LsKind::Register => "register",
            LsKind::Read => "read",
            LsKind::Write => "write",
        }
    }

    pub fn parse(s: &str) -> Option<LsKind> {
        [LsKind::Acquire, LsKind::Release, LsKind::Register, LsKind::Read, LsKind::Write]
            .into_iter()
            .find(|k| k.code() == s)
    }
}

/// How an operation returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Refused by the fence (a stale token; ZooKeeper: the lock node is gone).
    Refused,
    /// Failed with nothing done.
    Fail,
    /// Unknown: an error after the request may have reached the resource, or the process was
    /// killed with it in flight, or the phase ended first.
    Unknown,
}

impl Outcome {
    pub fn code(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::Fail => "fail",
            Outcome::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        [Outcome::Ok, Outcome::Refused, Outcome::Fail, Outcome::Unknown].into_iter().find(|o| o.code() == s)
    }
}

/// One operation of the lock-set history (times since the run's epoch).
#[derive(Clone, Debug)]
pub struct LsOp {
    pub worker: String,
    pub pid: u32,
    pub variant: String,
    pub kind: LsKind,
    pub token: u64,
    /// A write's added element (0 for other operations).
    pub elem: i64,
    pub invoke: Duration,
    /// `None` while pending.
    pub ret: Option<Duration>,
    pub outcome: Outcome,
}

/// A worker's element: unique in the run (the pid tells processes apart, a respawned one too).
fn element(pid: u32, index: usize, counter: u32) -> i64 {
    (i64::from(pid) << 36) | ((index as i64 & 0xf) << 32) | i64::from(counter)
}

pub fn encode(elems: &[i64]) -> Vec<u8> {
    elems.iter().flat_map(|e| e.to_le_bytes()).collect()
}

pub fn decode(data: &[u8]) -> Vec<i64> {
    data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
}

/// One worker's connections and reporting.
struct LsWorker {
    id: String,
    index: usize,
    pid: u32,
    res: ResourceClient,
    rng: Rng,
    pg: tokio_postgres::Client,
    redis: redis::aio::MultiplexedConnection,
    session: Session,
    counter: u32,
}

/// Why a read-modify-write stopped.
enum Step {
    Done,
    Refused,
    Lost,
    Safe,
    Failed,
}

impl Step {
    fn code(&self) -> &'static str {
        match self {
            Step::Done => "done",
            Step::Refused => "refused",
            Step::Lost => "lost",
            Step::Safe => "safe",
            Step::Failed => "error",
        }
    }
}

/// The step a failed `ensure_safe` stops at.
fn unsafe_step(e: &zk_recipes::Error) -> Step {
    match e {
        zk_recipes::Error::UnsafeWindow { .. } => Step::Safe,
        _ => Step::Lost,
    }
}

/// How a pattern call returned: refused by the fence, or an error whose outcome is unknown.
fn fence_outcome(e: &FenceError) -> Outcome {
    if e.is_stale() {
        Outcome::Refused
    } else {
        Outcome::Unknown
    }
}

impl LsWorker {
    async fn invoke(&mut self, v: &Variant, kind: LsKind, token: u64, elem: i64) -> Result<(), Error> {
        let line =
            format!("LSINV {} {} {} {} {token} {elem} {}", self.id, self.pid, v.name, kind.code(), mono_ns());
        self.res.ask(line).await?;
        Ok(())
    }

    async fn ret(&mut self, outcome: Outcome) -> Result<(), Error> {
        self.res.ask(format!("LSRET {} {} {} {}", self.id, self.pid, outcome.code(), mono_ns())).await?;
        Ok(())
    }

    /// Reads the set (its outcome reported); `None` if the read failed.
    async fn read(&mut self, v: &Variant) -> Result<Option<Vec<i64>>, Error> {
        self.invoke(v, LsKind::Read, 0, 0).await?;
        let read = match v.store {
            Store::Zk => match self.session.client() {
                Ok(c) => c.get_data(&v.key()).await.map(|(d, _)| decode(&d)).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
            Store::Postgres => {
                fencing::postgres::read_set(&self.pg, &v.key()).await.map_err(|e| e.to_string())
            }
            Store::Redis => {
                fencing::redis::read_set(&mut self.redis, &v.key()).await.map_err(|e| e.to_string())
            }
        };
        self.ret(if read.is_ok() { Outcome::Ok } else { Outcome::Fail }).await?;
        Ok(read.ok())
    }

    /// Writes `elems` back: fenced (PostgreSQL, Redis: by token; ZooKeeper: while the lock node
    /// exists) or plainly.
    async fn write(&mut self, v: &Variant, guard: &LockGuard, elems: &[i64]) -> Outcome {
        let (path, token, key) = (v.lock_path(), guard.fencing_token_i64(), v.key());
        let pattern = |r: Result<(), FenceError>| r.map_or_else(|e| fence_outcome(&e), |()| Outcome::Ok);
        match (v.store, v.fenced) {
            (Store::Zk, true) => {
                let commit = match guard.fenced_writer() {
                    Ok(mut w) => match w.add_set_data(&key, &encode(elems), None) {
                        Ok(()) => w.commit().await.map(|_| ()),
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                match commit {
                    Ok(()) => Outcome::Ok,
                    // The lock node is gone (with its session, after an expiry): the fence.
                    Err(zk_recipes::Error::LockLost { .. } | zk_recipes::Error::SessionExpired) => {
                        Outcome::Refused
                    }
                    Err(zk_recipes::Error::ConnectionLoss { .. }) => Outcome::Unknown,
                    // Nothing was written on any other error.
                    Err(_) => Outcome::Fail,
                }
            }
            // A plain write with whatever session there is now: after an expiry, the new one.
            (Store::Zk, false) => {
                let connected = tokio::time::timeout(SESSION / 4, self.session.connected()).await;
                match connected.ok().and_then(Result::ok).and_then(|_| self.session.client().ok()) {
                    Some(c) => {
                        c.set_data(&key, &encode(elems), None).await.map_or(Outcome::Unknown, |_| Outcome::Ok)
                    }
                    None => Outcome::Fail,
                }
            }
            (Store::Postgres, true) => {
                pattern(fencing::postgres::write_set(&self.pg, &path, token, &key, elems).await)
            }
            (Store::Postgres, false) => {
                pattern(fencing::postgres::write_set_unfenced(&self.pg, &key, elems).await)
            }
            (Store::Redis, true) => {
                pattern(fencing::redis::write_set(&mut self.redis, &path, token, &key, elems).await)
            }
            (Store::Redis, false) => {
                pattern(fencing::redis::write_set_unfenced(&mut self.redis, &key, elems).await)
            }
        }
    }

    /// Registers the token at a fenced PostgreSQL or Redis set (nothing to do elsewhere).
    async fn register(&mut self, v: &Variant, guard: &LockGuard) -> Result<Outcome, Error> {
        if !v.fenced || v.store == Store::Zk {
            return Ok(Outcome::Ok);
        }
        let (path, token) = (v.lock_path(), guard.fencing_token_i64());
        self.invoke(v, LsKind::Register, guard.fencing_token(), 0).await?;
        let r = match v.store {
            Store::Postgres => fencing::postgres::register(&self.pg, &path, token).await,
            _ => fencing::redis::register(&mut self.redis, &path, token).await,
        };
        let outcome = r.map_or_else(|e| fence_outcome(&e), |()| Outcome::Ok);
        self.ret(outcome).await?;
        Ok(outcome)
    }

    /// One read-modify-write under the hold; `deadline` is the last safe-window end read.
    async fn rmw(&mut self, v: &Variant, guard: &LockGuard, deadline: &mut u64) -> Result<Step, Error> {
        if let Err(e) = guard.ensure_safe(MARGIN) {
            return Ok(unsafe_step(&e));
        }
        match self.register(v, guard).await? {
            Outcome::Ok => {}
            Outcome::Refused => return Ok(Step::Refused),
            _ => return Ok(Step::Failed),
        }
        let Some(mut set) = self.read(v).await? else { return Ok(Step::Failed) };
        self.counter += 1;
        let elem = element(self.pid, self.index, self.counter);
        set.push(elem);
        // The check just before writing, then the write's way to the resource: a pause here
        // is what only the fence can catch.
        if let Err(e) = guard.ensure_safe(MARGIN) {
            return Ok(unsafe_step(&e));
        }
        if let Some(u) = guard.safe_until() {
            *deadline = instant_ns(u);
        }
        tokio::time::sleep(Duration::from_millis(5 + self.rng.below(20))).await;
        self.invoke(v, LsKind::Write, guard.fencing_token(), elem).await?;
        let outcome = self.write(v, guard, &set).await;
        self.ret(outcome).await?;
        Ok(match outcome {
            Outcome::Ok => Step::Done,
            Outcome::Refused => Step::Refused,
            _ => Step::Failed,
        })
    }
}

/// A `lockset` worker: until told to stop, a read-modify-write on a random variant's set.
pub async fn run(w: Worker) -> Result<(), Error> {
    let Worker { id, index, connect, addr, stop, seed, lockset, .. } = w;
    let (pg_params, redis_url) = lockset.ok_or("the lockset phase needs --pg and --redis")?;
    let res = ResourceClient::connect(&addr).await?;
    let pg = fencing::postgres::connect(&pg_params).await?;
    let redis = fencing::redis::connect(&redis_url).await?;
    let Some(session) = connect_session(&connect, &stop).await else { return Ok(()) };
    let reporter = report_generations(&session, id.clone(), addr.clone());
    let opts = crate::sasl::lock(LockOptions::new().participant_id(id.clone()));
    let locks: Vec<InterProcessMutex> = VARIANTS
        .iter()
        .map(|v| InterProcessMutex::with_options(&session, &v.lock_path(), opts.clone()))
        .collect::<Result<_, _>>()?;
    let pid = std::process::id();
    let mut w = LsWorker { id, index, pid, res, rng: Rng(seed), pg, redis, session, counter: 0 };
    let mut stop_rx = stop.clone();
    let result = async {
        while !*stop.borrow() {
            let k = w.rng.below(VARIANTS.len() as u64) as usize;
            let v = VARIANTS[k];
            let call = mono_ns();
            let guard = match acquire_turn(locks[k].acquire(), &mut stop_rx).await {
                Turn::Got(g) => g,
                Turn::Again => continue,
                Turn::Stop => break,
            };
            let start = mono_ns();
            let token = guard.fencing_token();
            let mut deadline = guard.safe_until().map_or(start, instant_ns);
            let line = format!("LSACQ {} {pid} {} {token} {call} {start} {deadline}", w.id, v.name);
            w.res.ask(line).await?;
            let step = w.rmw(&v, &guard, &mut deadline).await?;
            let end = mono_ns();
            let line =
                format!("LSEND {} {pid} {} {token} {start} {end} {deadline} {}", w.id, v.name, step.code());
            w.res.ask(line).await?;
            let released = guard.release().await;
            w.ret(if released.is_ok() { Outcome::Ok } else { Outcome::Unknown }).await?;
        }
        for lock in &locks {
            lock.settled().await;
        }
        Ok::<(), Error>(())
    }
    .await;
    w.session.close().await;
    let _ = reporter.await;
    result
}
