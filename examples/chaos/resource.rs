//! The fenced "storage server" inside the orchestrator, its client in the workers, and the one
//! clock of the run (`CLOCK_MONOTONIC`, shared by every process of the machine).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::checker::{Hold, Kind, Op};
use crate::lockset::{variant, LsKind, LsOp, Outcome};
use crate::Error;

/// Nanoseconds on the machine's monotonic clock: the same in every process (as `Instant`, which
/// reads the same clock on Linux, but printable and comparable across processes).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An `Instant` on the monotonic clock, in nanoseconds.
pub fn instant_ns(at: Instant) -> u64 {
    let (now, mono) = (Instant::now(), mono_ns());
    if at >= now {
        mono + (at - now).as_nanos() as u64
    } else {
        mono.saturating_sub((now - at).as_nanos() as u64)
    }
}

/// The run's epoch: every recorded time is a `Duration` since it.
#[derive(Clone, Copy)]
pub struct Epoch(pub u64);

impl Epoch {
    pub fn now(self) -> Duration {
        self.at(mono_ns())
    }

    pub fn at(self, ns: u64) -> Duration {
        Duration::from_nanos(ns.saturating_sub(self.0))
    }
}

/// Everything the resource saw in one phase.
#[derive(Default)]
pub struct History {
    pub ops: Vec<Op>,
    /// Open operations: (worker, resource, token) → index into `ops`.
    open: HashMap<(String, String, u64), usize>,
    /// Per resource: the newest token begun by anyone, and by an exclusive holder or writer.
    fences: HashMap<String, (u64, u64)>,
    pub holds: Vec<Hold>,
    /// Holds announced (`ACQ`) but not yet reported whole (`HOLD`): → index into `holds`.
    unfinished: HashMap<(String, String, u64), usize>,
    pub lost_seen: Vec<(String, u64, u64)>,
    pub lost_unseen: Vec<(String, u64)>,
    /// Per worker and worker process (pid), in order of first report: the latest session
    /// generation its one `Session` reached.
    pub generations: Vec<(String, u32, u64)>,
    /// The `lockset` phase's operations, in order of invocation.
    pub ls_ops: Vec<LsOp>,
    /// Each worker process's one pending lock-set operation: (worker, pid) → index.
    ls_pending: HashMap<(String, u32), usize>,
    /// Lock-set holds not yet ended: (worker, pid) → variant.
    ls_holding: HashMap<(String, u32), String>,
    /// Lock-set workers between a read and its write: worker → when the read returned, and
    /// whether the set is fenced.
    ls_work: HashMap<String, (Duration, bool)>,
    /// The clocks of clock-faulted worker processes (`clock_map.rs`).
    pub clocks: crate::clock_map::ClockMap,
    /// The option phases' records (`options_check.rs`).
    pub opts: crate::options_check::OptHistory,
    /// Every line received, with its receive time (on the true clock): the history rebuilt
    /// exactly by `replay::recheck`.
    pub wire: Vec<(Duration, String)>,
    /// The phase's nodes left behind at its end (set by the report).
    pub left: Vec<String>,
}

impl History {
    /// The resource's fence: a `BEGIN` or `END` passes with a token at least the newest
    /// exclusive one, and (exclusive or writer) at least the newest of any; leases always pass
    /// (their total is what the checker watches).
    fn passes(&self, resource: &str, kind: Kind, token: u64) -> bool {
        let (any, exclusive) = self.fences.get(resource).copied().unwrap_or_default();
        match kind {
            Kind::Lease(_) => true,
            Kind::Read => token >= exclusive,
            Kind::Exclusive | Kind::Write => token >= any,
        }
    }

    fn raise(&mut self, resource: &str, kind: Kind, token: u64) {
        let fence = self.fences.entry(resource.to_string()).or_default();
        fence.0 = fence.0.max(token);
        if matches!(kind, Kind::Exclusive | Kind::Write) {
            fence.1 = fence.1.max(token);
        }
    }

    /// The worker that most recently began an operation still open (in the `lockset` phase:
    /// that most recently read a set it has not written back yet).
    pub fn latest_open(&self) -> Option<String> {
        if let Some(w) = self.in_work(None) {
            return Some(w);
        }
        self.open.values().map(|&i| &self.ops[i]).max_by_key(|o| o.begin).map(|o| o.worker.clone())
    }

    /// Ends the holds never reported whole (a selector aborted its task, say) when their last
    /// operation at the resource ended.
    pub fn finish(&mut self) {
        for ((w, res, t), i) in std::mem::take(&mut self.unfinished) {
            self.end_at_last_op(&w, &res, t, i);
        }
    }

    /// A worker holds one thing at a time: when it announces a new hold, a hold of its that was
    /// never reported whole (a selector aborted its task past the window) ended with its last
    /// operation at the resource. (Left open, it would last until the process's kill or the
    /// phase's end, and overlap every later holder.)
    /// (A multi-lock's members are announced one by one with the same `start`: those are the
    /// new hold's, not an earlier one's.)
    fn end_abandoned(&mut self, worker: &str, start: Duration) {
        let abandoned: Vec<_> = self
            .unfinished
            .iter()
            .filter(|((w, _, _), &i)| w == worker && self.holds[i].start != start)
            .map(|(key, _)| key.clone())
            .collect();
        for key in abandoned {
            if let Some(i) = self.unfinished.remove(&key) {
                let (w, res, t) = key;
                self.end_at_last_op(&w, &res, t, i);
            }
        }
    }

    fn end_at_last_op(&mut self, w: &str, res: &str, t: u64, i: usize) {
        let last = self
            .ops
            .iter()
            .filter(|o| o.worker == w && o.resource == res && o.token == t)
            .map(|o| o.end.unwrap_or(o.begin))
            .max();
        let hold = &mut self.holds[i];
        hold.end = last.unwrap_or(hold.start).max(hold.start);
    }

    /// Closes every open operation and hold of `pid` at `at` (its process was killed).
    pub fn close_pid(&mut self, pid: u32, at: Duration) {
        let holds = &mut self.holds;
        self.unfinished.retain(|_, &mut i| {
            if holds[i].pid == pid {
                holds[i].end = at;
                holds[i].cause = "killed".into();
                false
            } else {
                true
            }
        });
        let ops = &mut self.ops;
        self.open.retain(|_, &mut i| {
            if ops[i].pid == pid {
                ops[i].end = Some(at);
                false
            } else {
                true
            }
        });
        self.end_lockset(|p| p == pid, at);
    }

    /// The lock-set worker that most recently read a set (a fenced one, or an unfenced one, if
    /// `fenced` says) and has not written it back yet.
    pub fn in_work(&self, fenced: Option<bool>) -> Option<String> {
        self.ls_work
            .iter()
            .filter(|(_, (_, f))| fenced.is_none_or(|want| *f == want))
            .max_by_key(|(_, (at, _))| *at)
            .map(|(w, _)| w.clone())
    }

    /// Whether this is the lockset phase's history.
    pub fn is_lockset(&self) -> bool {
        !self.ls_ops.is_empty()
    }

    /// Ends the lock-set operations and holds of the processes `of` at `at`: a pending operation
    /// returns there with an unknown outcome, a hold ends there (a release is recorded).
    pub fn end_lockset(&mut self, of: impl Fn(u32) -> bool, at: Duration) {
        let ls = &mut self.ls_ops;
        self.ls_pending.retain(|(_, p), &mut i| {
            if of(*p) {
                ls[i].ret = Some(at.max(ls[i].invoke));
                ls[i].outcome = Outcome::Unknown;
                false
            } else {
                true
            }
        });
        let ended: Vec<((String, u32), String)> = self
            .ls_holding
            .iter()
            .filter(|((_, p), _)| of(*p))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for ((worker, pid), variant) in ended {
            self.ls_holding.remove(&(worker.clone(), pid));
            self.ls_work.remove(&worker);
            let token = self
                .ls_ops
                .iter()
                .rev()
                .find(|o| o.worker == worker && o.pid == pid && o.kind == LsKind::Acquire)
                .map_or(0, |o| o.token);
            self.ls_ops.push(LsOp {
                worker,
                pid,
                variant,
                kind: LsKind::Release,
                token,
                elem: 0,
                invoke: at,
                ret: Some(at),
                outcome: Outcome::Unknown,
            });
        }
    }

    /// Handles one line of the `lockset` phase (see [`History::handle`]).
    fn handle_lockset(&mut self, parts: &[&str], epoch: Epoch) -> Option<&'static str> {
        let num = |s: &str| s.parse::<u64>().unwrap_or(0);
        let lock = |v: &str| variant(v).map(|v| v.lock_path());
        Some(match parts {
            ["LSINV", w, pid, v, kind, t, elem, at] => {
                let Some(kind) = LsKind::parse(kind) else { return Some("ERR") };
                if kind == LsKind::Write {
                    self.ls_work.remove(*w);
                }
                let key = (w.to_string(), num(pid) as u32);
                self.ls_pending.insert(key, self.ls_ops.len());
                self.ls_ops.push(LsOp {
                    worker: w.to_string(),
                    pid: num(pid) as u32,
                    variant: v.to_string(),
                    kind,
                    token: num(t),
                    elem: elem.parse().unwrap_or(0),
                    invoke: epoch.at(num(at)),
                    ret: None,
                    outcome: Outcome::Unknown,
                });
                "OK"
            }
            ["LSRET", w, pid, outcome, at] => {
                let (Some(outcome), Some(i)) =
                    (Outcome::parse(outcome), self.ls_pending.remove(&(w.to_string(), num(pid) as u32)))
                else {
                    return Some("ERR");
                };
                let op = &mut self.ls_ops[i];
                op.ret = Some(epoch.at(num(at)).max(op.invoke));
                op.outcome = outcome;
                if op.kind == LsKind::Read && outcome == Outcome::Ok {
                    let fenced = variant(&op.variant).is_some_and(|v| v.fenced);
                    self.ls_work.insert(w.to_string(), (epoch.at(num(at)), fenced));
                }
                "OK"
            }
            ["LSACQ", w, pid, v, t, call, start, deadline] => {
                let Some(res) = lock(v) else { return Some("ERR") };
                self.ls_holding.insert((w.to_string(), num(pid) as u32), v.to_string());
                self.ls_ops.push(LsOp {
                    worker: w.to_string(),
                    pid: num(pid) as u32,
                    variant: v.to_string(),
                    kind: LsKind::Acquire,
                    token: num(t),
                    elem: 0,
                    invoke: epoch.at(num(call)),
                    ret: Some(epoch.at(num(start))),
                    outcome: Outcome::Ok,
                });
                let acq = ["ACQ", w, pid, res.as_str(), "X", t, start, deadline];
                self.handle(&acq, epoch.at(num(start)), epoch, true)
            }
            ["LSEND", w, pid, v, t, start, end, deadline, cause] => {
                let Some(res) = lock(v) else { return Some("ERR") };
                let key = (w.to_string(), num(pid) as u32);
                self.ls_holding.remove(&key);
                self.ls_work.remove(*w);
                self.ls_pending.insert(key, self.ls_ops.len());
                self.ls_ops.push(LsOp {
                    worker: w.to_string(),
                    pid: num(pid) as u32,
                    variant: v.to_string(),
                    kind: LsKind::Release,
                    token: num(t),
                    elem: 0,
                    invoke: epoch.at(num(end)),
                    ret: None,
                    outcome: Outcome::Unknown,
                });
                let hold = ["HOLD", w, pid, res.as_str(), "X", t, start, end, deadline, cause];
                self.handle(&hold, epoch.at(num(end)), epoch, true)
            }
            _ => return None,
        })
    }

    /// Handles one line from a worker; the reply is `OK`, `REJECT` or `ERR`.
    /// One line received at `now`: kept in the wire log, then handled; returns the reply.
    pub fn receive(&mut self, line: &str, now: Duration, epoch: Epoch, fence_on: bool) -> &'static str {
        self.wire.push((now, line.to_string()));
        let parts: Vec<&str> = line.split_whitespace().collect();
        self.handle(&parts, now, epoch, fence_on)
    }

    fn handle(&mut self, parts: &[&str], now: Duration, epoch: Epoch, fence_on: bool) -> &'static str {
        let num = |s: &str| s.parse::<u64>().unwrap_or(0);
        if let Some(reply) = self.handle_lockset(parts, epoch) {
            return reply;
        }
        if let Some(reply) = self.opts.handle(parts, epoch) {
            return reply;
        }
        match parts {
            ["ACQ", w, pid, res, kind, t, start, deadline] => {
                let Some(kind) = Kind::parse(kind) else { return "ERR" };
                self.end_abandoned(w, epoch.at(num(start)));
                self.unfinished.insert((w.to_string(), res.to_string(), num(t)), self.holds.len());
                self.holds.push(Hold {
                    worker: w.to_string(),
                    pid: num(pid) as u32,
                    resource: res.to_string(),
                    kind,
                    token: num(t),
                    start: epoch.at(num(start)),
                    end: epoch.at(num(start)),
                    deadline: epoch.at(num(deadline)),
                    cause: "unreported".into(),
                });
                "OK"
            }
            ["BEGIN", w, pid, res, kind, t, deadline] => {
                let (Some(kind), t) = (Kind::parse(kind), num(t)) else { return "ERR" };
                if let Some(&i) = self.unfinished.get(&(w.to_string(), res.to_string(), t)) {
                    self.holds[i].deadline = self.holds[i].deadline.max(epoch.at(num(deadline)));
                }
                let ok = !fence_on || self.passes(res, kind, t);
                if ok {
                    self.raise(res, kind, t);
                    self.open.insert((w.to_string(), res.to_string(), t), self.ops.len());
                }
                self.ops.push(Op {
                    worker: w.to_string(),
                    pid: num(pid) as u32,
                    resource: res.to_string(),
                    kind,
                    token: t,
                    begin: now,
                    end: if ok { None } else { Some(now) },
                    begun: ok,
                    accepted: false,
                    refused: !ok,
                });
                if ok {
                    "OK"
                } else {
                    "REJECT"
                }
            }
            ["END" | "ABORT", w, res, t] => {
                let Some(i) = self.open.remove(&(w.to_string(), res.to_string(), num(t))) else {
                    return "ERR";
                };
                let ok = parts[0] == "END" && (!fence_on || self.passes(res, self.ops[i].kind, num(t)));
                let op = &mut self.ops[i];
                op.end = Some(now);
                op.accepted = ok;
                op.refused = parts[0] == "END" && !ok;
                match (parts[0], ok) {
                    ("ABORT", _) | (_, true) => "OK",
                    _ => "REJECT",
                }
            }
            ["HOLD", w, pid, res, kind, t, start, end, deadline, cause] => {
                let Some(kind) = Kind::parse(kind) else { return "ERR" };
                let hold = Hold {
                    worker: w.to_string(),
                    pid: num(pid) as u32,
                    resource: res.to_string(),
                    kind,
                    token: num(t),
                    start: epoch.at(num(start)),
                    end: epoch.at(num(end)),
                    deadline: epoch.at(num(deadline)),
                    cause: cause.to_string(),
                };
                match self.unfinished.remove(&(w.to_string(), res.to_string(), num(t))) {
                    Some(i) => self.holds[i] = hold,
                    None => self.holds.push(hold),
                }
                "OK"
            }
            // A selector aborted the term's task (told to stop after its term was lost): the hold
            // ended with its last write, not at a later kill of its process.
            ["ABANDONED", w, res, t] => {
                if let Some(i) = self.unfinished.remove(&(w.to_string(), res.to_string(), num(t))) {
                    self.end_at_last_op(w, res, num(t), i);
                }
                "OK"
            }
            ["LOSTSEEN", w, t, ms] => {
                self.lost_seen.push((w.to_string(), num(t), num(ms)));
                "OK"
            }
            ["LOSTUNSEEN", w, t] => {
                self.lost_unseen.push((w.to_string(), num(t)));
                "OK"
            }
            ["GEN", w, pid, g] => {
                let (pid, g) = (num(pid) as u32, num(g));
                match self.generations.iter_mut().find(|(id, p, _)| id == w && *p == pid) {
                    Some(entry) => entry.2 = entry.2.max(g),
                    None => self.generations.push((w.to_string(), pid, g)),
                }
                "OK"
            }
            _ => "ERR",
        }
    }
}

/// Serves worker lines (see [`History::handle`]) until the listener fails.
pub async fn serve(listener: TcpListener, state: Arc<Mutex<History>>, epoch: Epoch, fence_on: bool) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { return };
        let state = state.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let reply = {
                    let mut h = state.lock().unwrap_or_else(|e| e.into_inner());
                    // A clock-faulted process's sample, or its times mapped onto the true clock.
                    match h.clocks.translate(line, epoch) {
                        Ok(line) => h.receive(&line, epoch.now(), epoch, fence_on),
                        Err(reply) => reply,
                    }
                };
                if write.write_all(format!("{reply}\n").as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// A worker's connection to the resource: one request, one reply.
pub struct ResourceClient {
    lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

impl ResourceClient {
    pub async fn connect(addr: &str) -> Result<ResourceClient, Error> {
        let (read, write) = TcpStream::connect(addr).await?.into_split();
        Ok(ResourceClient { lines: BufReader::new(read).lines(), write })
    }

    /// Sends a line; `true` on `OK`.
    pub async fn ask(&mut self, line: String) -> Result<bool, Error> {
        self.write.write_all(format!("{line}\n").as_bytes()).await?;
        Ok(self.lines.next_line().await?.as_deref() == Some("OK"))
    }
}

/// How long a refused writer waits to be told it lost its hold.
pub const TOLD_WITHIN: Duration = Duration::from_secs(6);

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(h: &mut History, line: &str, now_s: u64) {
        let parts: Vec<&str> = line.split(' ').collect();
        h.handle(&parts, Duration::from_secs(now_s), Epoch(0), true);
    }

    /// A selector task aborted past its window never reports its hold whole; the worker's next
    /// hold ends it at its last write, not at the process's later kill (the 30-minute soak
    /// counted 49 overlaps with such a hold, left open until the kill).
    #[test]
    fn a_new_hold_ends_the_workers_abandoned_one_at_its_last_write() {
        let s = 1_000_000_000u64;
        let mut h = History::default();
        feed(&mut h, &format!("ACQ p1w1 7 /r X 10 {} {}", s, 2 * s), 1);
        feed(&mut h, "BEGIN p1w1 7 /r X 10 2000000000", 1);
        feed(&mut h, "ABORT p1w1 /r 10", 4);
        // Its task was aborted: no HOLD line. The worker's next term:
        feed(&mut h, &format!("ACQ p1w1 7 /r X 20 {} {}", 50 * s, 52 * s), 50);
        h.close_pid(7, Duration::from_secs(60));
        assert_eq!(h.holds[0].end, Duration::from_secs(4), "ended at its last write");
        assert_eq!(h.holds[1].end, Duration::from_secs(60), "the open one ends at the kill");
        // A multi-lock announces its members one by one with the same start: both stay open.
        let mut m = History::default();
        feed(&mut m, &format!("ACQ p0w0 8 /a X 30 {} {}", 5 * s, 7 * s), 5);
        feed(&mut m, &format!("ACQ p0w0 8 /b X 31 {} {}", 5 * s, 7 * s), 5);
        m.close_pid(8, Duration::from_secs(9));
        assert!(
            m.holds.iter().all(|x| x.end == Duration::from_secs(9)),
            "{:?}",
            m.holds.iter().map(|x| x.end).collect::<Vec<_>>()
        );
    }

    /// A selector's task aborted at once when its term was lost (a hold limit): the worker
    /// says so, and the hold ends with its last write, not at its process's later kill.
    #[test]
    fn an_abandoned_hold_ends_at_its_last_write_not_at_the_kill() {
        let s = 1_000_000_000u64;
        let mut h = History::default();
        feed(&mut h, &format!("ACQ p1w1 7 /r X 10 {} {}", s, 2 * s), 1);
        feed(&mut h, "BEGIN p1w1 7 /r X 10 2000000000", 1);
        feed(&mut h, "ABORT p1w1 /r 10", 2);
        feed(&mut h, "ABANDONED p1w1 /r 10", 3);
        h.close_pid(7, Duration::from_secs(9));
        assert_eq!((h.holds[0].end, h.holds[0].cause.as_str()), (Duration::from_secs(2), "unreported"));
    }
}
