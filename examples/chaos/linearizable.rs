//! The independent checker of the `lockset` phase: Wing–Gong–Lowe linearizability search
//! (`todc-utils`' `WGLChecker`) over the recorded histories, never over `checker.rs`'s
//! conclusions.
//!
//! Two models, each object checked on its own (linearizability is local):
//! - **fenced register**, per fenced variant: the resource's fence as a register of the highest
//!   token seen. A register (PostgreSQL, Redis; ZooKeeper: the acquisition, whose node is then
//!   the lowest) and a fenced write each succeed only with a token at least the highest, and
//!   raise it to theirs; PostgreSQL and Redis refuse them only below it. ZooKeeper refuses a
//!   write when the holder's lock node is gone, which an expiry alone does, so its refusals are
//!   always allowed.
//!   An operation of unknown outcome may or may not have taken effect: the state is the set of
//!   highest tokens possible. Every run must be linearizable here.
//! - **mutex** (Knossos' `mutex`), per lock: `acquire` is valid only while free and takes it;
//!   `release` only while held and frees it. An acquire runs from the call to the return of
//!   `acquire`; a release from the moment the worker ended its hold (a paused holder ends it
//!   only after it wakes: it believed it held all along) to `release` returning; a killed
//!   worker's hold ends at its kill. Paused holders make this non-linearizable, as they should.
//!
//! WGL answers yes or no for a whole history, so each is cut into windows at quiescent points:
//! no operation pending (and, for the mutex, at most one worker believing it holds); a window
//! starts from the state at its cut (a first `Init` operation). A mutex window of more than
//! [`MAX_SEARCH`] operations is split further at its quiescent points for the search (the
//! report says how many were), and is flagged when any part is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use todc_utils::{Action, History, Specification, WGLChecker};

use crate::lockset::{variant, LsKind, LsOp, Outcome, Store};

/// The most operations one search is given; a bigger mutex window is split further.
pub const MAX_SEARCH: usize = 200;

// ------------------------------------------------------------------ the models

/// The fenced register's operations, with their outcomes.
#[derive(Clone, Debug)]
pub enum FenceOp {
    /// The state at the window's cut: the highest tokens possible.
    Init(BTreeSet<u64>),
    Register(u64, Outcome),
    Write(u64, Outcome),
    /// ZooKeeper's refusal (the lock node gone): allowed whatever the token.
    NodeGone,
}

pub struct FenceSpec;

impl Specification for FenceSpec {
    type State = BTreeSet<u64>;
    type Operation = FenceOp;

    fn init() -> Self::State {
        BTreeSet::from([0])
    }

    fn apply(op: &FenceOp, state: &Self::State) -> (bool, Self::State) {
        let keep =
            |f: &dyn Fn(u64) -> bool| state.iter().copied().filter(|&s| f(s)).collect::<BTreeSet<u64>>();
        let next = match op {
            FenceOp::Init(s) => s.clone(),
            FenceOp::Register(t, Outcome::Ok) | FenceOp::Write(t, Outcome::Ok)
                if state.iter().any(|s| s <= t) =>
            {
                BTreeSet::from([*t])
            }
            FenceOp::Register(t, Outcome::Refused) | FenceOp::Write(t, Outcome::Refused) => keep(&|s| s > *t),
            FenceOp::Register(t, Outcome::Unknown) | FenceOp::Write(t, Outcome::Unknown) => {
                let mut next = state.clone();
                if state.iter().any(|s| s <= t) {
                    next.insert(*t);
                }
                next
            }
            FenceOp::NodeGone => state.clone(),
            FenceOp::Register(_, _) | FenceOp::Write(_, _) => BTreeSet::new(),
        };
        if next.is_empty() {
            (false, state.clone())
        } else {
            (true, next)
        }
    }
}

#[derive(Clone, Debug)]
pub enum MutexOp {
    /// The state at the window's cut: held or free.
    Init(bool),
    Acquire,
    Release,
}

pub struct MutexSpec;

impl Specification for MutexSpec {
    type State = bool;
    type Operation = MutexOp;

    fn init() -> bool {
        false
    }

    fn apply(op: &MutexOp, held: &bool) -> (bool, bool) {
        match op {
            MutexOp::Init(h) => (true, *h),
            MutexOp::Acquire => (!held, true),
            MutexOp::Release => (*held, false),
        }
    }
}

// ------------------------------------------------------------------ histories and windows

/// One operation of a model's history: its process (worker and pid), interval and operation.
#[derive(Clone, Debug)]
pub struct Timed<O> {
    pub process: (String, u32),
    pub invoke: Duration,
    pub ret: Duration,
    pub op: O,
}

/// Whether `ops` (from the state `init`) are linearizable under `S`.
pub fn linearizable<S: Specification>(init: S::Operation, ops: &[Timed<S::Operation>]) -> bool {
    let mut ids: HashMap<&(String, u32), usize> = HashMap::new();
    for o in ops {
        let n = ids.len();
        ids.entry(&o.process).or_insert(n);
    }
    // Calls before returns at the same instant: operations that touch may go either way.
    let mut events: Vec<(Duration, bool, usize)> = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        events.push((o.invoke, false, i));
        events.push((o.ret.max(o.invoke), true, i));
    }
    events.sort();
    let init_process = ids.len();
    let mut actions =
        vec![(init_process, Action::Call(init.clone())), (init_process, Action::Response(init))];
    for (_, is_return, i) in events {
        let (p, op) = (ids[&ops[i].process], ops[i].op.clone());
        actions.push((p, if is_return { Action::Response(op) } else { Action::Call(op) }));
    }
    WGLChecker::<S>::is_linearizable(History::from_actions(actions))
}

/// A window of a history: the state at its cut, and its operations.
#[derive(Clone, Debug)]
pub struct Window<O> {
    pub init: O,
    pub ops: Vec<Timed<O>>,
}

impl<O> Window<O> {
    /// From its first invocation to its last return.
    pub fn span(&self) -> (Duration, Duration) {
        let from = self.ops.iter().map(|o| o.invoke).min().unwrap_or_default();
        (from, self.ops.iter().map(|o| o.ret).max().unwrap_or(from))
    }
}

/// Cuts `ops` at each quiescent point (no operation pending) where `state` (folded over the
/// operations before it, all returned) allows a cut, once a window has `min` operations:
/// `cut(&state)` gives the next window's `Init`.
fn windows<O: Clone, St>(
    mut ops: Vec<Timed<O>>,
    mut state: St,
    fold: impl Fn(&mut St, &Timed<O>),
    cut: impl Fn(&St) -> Option<O>,
    (first, min): (O, usize),
) -> Vec<Window<O>> {
    ops.sort_by_key(|o| (o.invoke, o.ret));
    let mut out: Vec<Window<O>> = Vec::new();
    let mut current = Window { init: first, ops: Vec::new() };
    let mut last_ret = Duration::ZERO;
    for o in ops {
        if current.ops.len() >= min.max(1) && last_ret < o.invoke {
            if let Some(init) = cut(&state) {
                out.push(std::mem::replace(&mut current, Window { init, ops: Vec::new() }));
            }
        }
        last_ret = last_ret.max(o.ret);
        fold(&mut state, &o);
        current.ops.push(o);
    }
    if !current.ops.is_empty() {
        out.push(current);
    }
    out
}

/// The fenced register's history of one fenced variant.
pub fn fence_history(ops: &[LsOp], name: &str) -> Vec<Timed<FenceOp>> {
    let zk = variant(name).is_some_and(|v| v.store == Store::Zk);
    ops.iter()
        .filter(|o| o.variant == name && o.outcome != Outcome::Fail)
        .filter_map(|o| {
            let op = match (o.kind, o.outcome) {
                (LsKind::Acquire, _) if zk => FenceOp::Register(o.token, Outcome::Ok),
                (LsKind::Register, outcome) if !zk => FenceOp::Register(o.token, outcome),
                (LsKind::Write, Outcome::Refused) if zk => FenceOp::NodeGone,
                (LsKind::Write, outcome) => FenceOp::Write(o.token, outcome),
                _ => return None,
            };
            Some(Timed { process: (o.worker.clone(), o.pid), invoke: o.invoke, ret: o.ret?, op })
        })
        .collect()
}

/// The mutex's history of one lock: acquires that returned a guard, and every release.
pub fn mutex_history(ops: &[LsOp], name: &str) -> Vec<Timed<MutexOp>> {
    ops.iter()
        .filter(|o| o.variant == name)
        .filter_map(|o| {
            let op = match (o.kind, o.outcome) {
                (LsKind::Acquire, Outcome::Ok) => MutexOp::Acquire,
                (LsKind::Release, _) => MutexOp::Release,
                _ => return None,
            };
            Some(Timed { process: (o.worker.clone(), o.pid), invoke: o.invoke, ret: o.ret?, op })
        })
        .collect()
}

/// The fenced register's windows: a cut at every quiescent point, from the highest tokens
/// possible there (the highest that surely took effect, or an unknown operation's above it).
pub fn fence_windows(history: Vec<Timed<FenceOp>>) -> Vec<Window<FenceOp>> {
    let fold = |st: &mut (u64, Vec<u64>), o: &Timed<FenceOp>| match o.op {
        FenceOp::Register(t, Outcome::Ok) | FenceOp::Write(t, Outcome::Ok) => st.0 = st.0.max(t),
        FenceOp::Register(t, Outcome::Unknown) | FenceOp::Write(t, Outcome::Unknown) => st.1.push(t),
        _ => {}
    };
    let cut = |st: &(u64, Vec<u64>)| {
        let mut s: BTreeSet<u64> = st.1.iter().copied().filter(|&u| u > st.0).collect();
        s.insert(st.0);
        Some(FenceOp::Init(s))
    };
    windows(history, (0, Vec::new()), fold, cut, (FenceOp::Init(BTreeSet::from([0])), 1))
}

/// Who believes they hold, after the operations folded so far.
type Believers = BTreeMap<(String, u32), bool>;

fn fold_believers(st: &mut Believers, o: &Timed<MutexOp>) {
    st.insert(o.process.clone(), matches!(o.op, MutexOp::Acquire));
}

fn held(st: &Believers) -> usize {
    st.values().filter(|&&h| h).count()
}

/// The mutex's windows: a cut where no operation is pending and at most one worker believes
/// it holds.
pub fn mutex_windows(history: Vec<Timed<MutexOp>>) -> Vec<Window<MutexOp>> {
    let cut = |st: &Believers| (held(st) <= 1).then(|| MutexOp::Init(held(st) == 1));
    windows(history, Believers::new(), fold_believers, cut, (MutexOp::Init(false), 1))
}

/// A mutex window of more than [`MAX_SEARCH`] operations, split at quiescent points inside it
/// into parts of at least half that (each part from "held" when anyone believes they hold at
/// its cut). A window with no quiescent point inside stays whole.
pub fn split_mutex(w: &Window<MutexOp>) -> Vec<Window<MutexOp>> {
    if w.ops.len() <= MAX_SEARCH {
        return vec![w.clone()];
    }
    let mut start = Believers::new();
    if let MutexOp::Init(true) = w.init {
        // The one believer at the cut is whoever releases first without acquiring.
        if let Some(o) = w.ops.iter().find(|o| matches!(o.op, MutexOp::Release)) {
            start.insert(o.process.clone(), true);
        }
    }
    let cut = |st: &Believers| Some(MutexOp::Init(held(st) >= 1));
    windows(w.ops.clone(), start, fold_believers, cut, (w.init.clone(), MAX_SEARCH / 2))
}

// ------------------------------------------------------------------ verdicts

/// A window the search found not linearizable.
#[derive(Clone, Debug)]
pub struct Flag {
    pub variant: String,
    pub from: Duration,
    pub to: Duration,
    pub ops: usize,
}

/// One model's verdicts over the histories of a run.
#[derive(Clone, Debug, Default)]
pub struct Verdicts {
    pub histories: usize,
    pub windows: usize,
    /// Searches run (more than the windows when some were split).
    pub searched: usize,
    /// Windows split further for the search.
    pub split: usize,
    /// The most operations in one search.
    pub largest: usize,
    pub flagged: Vec<Flag>,
    /// Every window's span, per variant (for matching the other checker's overlaps).
    pub spans: Vec<(String, Duration, Duration)>,
}

/// Checks every fenced variant's register.
pub fn check_fences(ops: &[LsOp], names: &[&str]) -> Verdicts {
    let mut v = Verdicts::default();
    for name in names {
        v.histories += 1;
        for w in fence_windows(fence_history(ops, name)) {
            record(&mut v, name, &w, vec![linearizable::<FenceSpec>(w.init.clone(), &w.ops)], 1);
        }
    }
    v
}

/// Checks every lock's mutex history.
pub fn check_mutexes(ops: &[LsOp], names: &[&str]) -> Verdicts {
    let mut v = Verdicts::default();
    for name in names {
        v.histories += 1;
        for w in mutex_windows(mutex_history(ops, name)) {
            let parts = split_mutex(&w);
            v.largest = v.largest.max(parts.iter().map(|p| p.ops.len()).max().unwrap_or(0));
            let answers = parts.iter().map(|p| linearizable::<MutexSpec>(p.init.clone(), &p.ops)).collect();
            record(&mut v, name, &w, answers, parts.len());
        }
    }
    v
}

fn record<O>(v: &mut Verdicts, name: &str, w: &Window<O>, answers: Vec<bool>, parts: usize) {
    let (from, to) = w.span();
    v.windows += 1;
    v.searched += parts;
    v.split += usize::from(parts > 1);
    v.largest = v.largest.max(if parts == 1 { w.ops.len() } else { 0 });
    v.spans.push((name.to_string(), from, to));
    if answers.iter().any(|ok| !ok) {
        v.flagged.push(Flag { variant: name.to_string(), from, to, ops: w.ops.len() });
    }
}

/// How the two checkers' verdicts on the holds compare, window by window.
#[derive(Clone, Debug, Default)]
pub struct Agreement {
    /// Windows our checker found an overlap in.
    pub ours: usize,
    /// Windows both found an overlap in.
    pub both: usize,
    /// Disagreements, each described: a window the search flagged with no overlap of ours in
    /// it, or one with an overlap of ours that the search found linearizable.
    pub disagreements: Vec<String>,
}

/// Compares the mutex verdicts with our checker's overlaps, each as (variant, the moment the
/// later hold began).
pub fn compare(v: &Verdicts, overlaps: &[(String, Duration)]) -> Agreement {
    let mut ours: BTreeMap<usize, usize> = BTreeMap::new();
    let mut out = Agreement::default();
    for (name, at) in overlaps {
        match v.spans.iter().position(|(n, from, to)| n == name && from <= at && at <= to) {
            Some(i) => *ours.entry(i).or_default() += 1,
            None => out.disagreements.push(format!(
                "{name}: our checker's overlap at {:.3} s is in no window of the mutex history",
                at.as_secs_f64()
            )),
        }
    }
    out.ours = ours.len();
    let flagged: BTreeSet<usize> = v
        .flagged
        .iter()
        .filter_map(|f| {
            v.spans.iter().position(|(n, from, to)| *n == f.variant && *from == f.from && *to == f.to)
        })
        .collect();
    for (i, (name, from, to)) in v.spans.iter().enumerate() {
        let span = format!("{name} {:.3}-{:.3} s", from.as_secs_f64(), to.as_secs_f64());
        match (flagged.contains(&i), ours.get(&i)) {
            (true, Some(_)) => out.both += 1,
            (true, None) => {
                out.disagreements.push(format!("{span}: not linearizable, and our checker saw no overlap"))
            }
            (false, Some(n)) => {
                out.disagreements.push(format!("{span}: linearizable, but our checker saw {n} overlap(s)"))
            }
            (false, None) => {}
        }
    }
    out
}

#[cfg(test)]
#[path = "linearizable_tests.rs"]
mod tests;
