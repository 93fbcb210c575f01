//! The checker: pure functions over a recorded history, so that its own tests can feed it
//! deliberately broken histories (`cargo test --example chaos`).
//!
//! Two views of the same run:
//! - **holds**: each worker's hold as an interval on the machine's monotonic clock, from
//!   `acquire` returning to the moment the worker stopped (release, loss notification, or its
//!   safe window closing). Two holds that the recipe must not admit together and that overlap
//!   are a violation, unless the earlier holder's process was paused (SIGSTOP) across the
//!   moment it should have stopped (its last `safe_until`);
//! - **fenced**: the operations the "storage server" saw, `BEGIN` … `END` with tokens. Accepted
//!   operations must never overlap for a lock, tokens must grow from holder to holder, and the
//!   lease total of a semaphore must stay at most its maximum unless a holder was paused.

use std::time::Duration;

/// What a hold (or an operation under it) admits beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A mutex, a semaphore mutex, a multi-lock member, a leader's term: alone.
    Exclusive,
    /// A read lock: beside other readers.
    Read,
    /// A write lock: alone.
    Write,
    /// Leases of a semaphore, with their weight: the total stays at most the maximum.
    Lease(u32),
}

impl Kind {
    pub fn code(self) -> String {
        match self {
            Kind::Exclusive => "X".into(),
            Kind::Read => "R".into(),
            Kind::Write => "W".into(),
            Kind::Lease(w) => format!("L{w}"),
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "X" => Some(Kind::Exclusive),
            "R" => Some(Kind::Read),
            "W" => Some(Kind::Write),
            _ => s.strip_prefix('L').and_then(|w| w.parse().ok()).map(Kind::Lease),
        }
    }

    fn exclusive(self) -> bool {
        matches!(self, Kind::Exclusive | Kind::Write)
    }
}

/// Whether a set of holds (each of another worker) may be inside together: for a semaphore of
/// `cap` leases, their weights add up to at most `cap`; for a lock, readers only, or one holder.
fn admitted(kinds: &[Kind], cap: Option<u32>) -> bool {
    match cap {
        Some(cap) => {
            kinds
                .iter()
                .map(|k| if let Kind::Lease(w) = k { u64::from(*w) } else { u64::from(cap) + 1 })
                .sum::<u64>()
                <= u64::from(cap)
        }
        None => kinds.len() <= 1 || kinds.iter().all(|k| !k.exclusive()),
    }
}

/// One hold, as its worker reported it (times since the run's epoch).
#[derive(Clone, Debug)]
pub struct Hold {
    pub worker: String,
    pub pid: u32,
    pub resource: String,
    pub kind: Kind,
    pub token: u64,
    pub start: Duration,
    pub end: Duration,
    /// The last `safe_until` the worker read: the moment it had to stop by at the latest.
    pub deadline: Duration,
    /// Why it ended: `done`, `lost`, `safe`, `refused`, `stop`.
    pub cause: String,
}

/// A SIGSTOP … SIGCONT of a worker process.
#[derive(Clone, Debug)]
pub struct Pause {
    pub pid: u32,
    pub from: Duration,
    pub to: Duration,
}

/// How long after its SIGCONT a paused holder may take to notice and stop.
pub const WAKE_GRACE: Duration = Duration::from_secs(1);

/// Two or more holds inside together that the recipe must not admit together.
#[derive(Clone, Debug)]
pub struct Overlap {
    pub resource: String,
    pub at: Duration,
    /// The hold that started while the others were inside (an index into the holds).
    pub later: usize,
    pub earlier: Vec<usize>,
    /// Why it is no violation (a paused holder), or `None`: a violation.
    pub explanation: Option<String>,
}

/// The paused earlier holder that explains its overrun into `at`, if any: its process was
/// stopped across its deadline, `at` came after that deadline, and it stopped within
/// [`WAKE_GRACE`] of waking.
fn paused_across(h: &Hold, at: Duration, pauses: &[Pause]) -> Option<String> {
    if at < h.deadline {
        return None; // the successor came inside the safe window: nothing excuses that
    }
    pauses
        .iter()
        .find(|p| p.pid == h.pid && p.from <= h.deadline && h.deadline <= p.to && h.end <= p.to + WAKE_GRACE)
        .map(|p| {
            format!(
                "{} (pid {}) was paused {:.2}-{:.2} s across its deadline {:.2} s, and stopped at {:.2} s",
                h.worker,
                h.pid,
                p.from.as_secs_f64(),
                p.to.as_secs_f64(),
                h.deadline.as_secs_f64(),
                h.end.as_secs_f64()
            )
        })
}

/// A hold that began after its own safe window had ended: its worker read a `safe_until`
/// already past when it stamped its start (a pause between its acquire and that stamp). It was
/// never inside its window, so it was told not to act; whatever it wrote is the fenced view's
/// to judge.
fn outside_window(h: &Hold) -> Option<String> {
    (h.deadline <= h.start).then(|| {
        format!(
            "{} (pid {}) began outside its own safe window (it ended at {:.2} s, before the hold's start at \
             {:.2} s): told not to act",
            h.worker,
            h.pid,
            h.deadline.as_secs_f64(),
            h.start.as_secs_f64()
        )
    })
}

/// Every moment a hold started while the holds already inside (of other workers) made a set
/// the recipe must not admit. `cap(resource)` is a semaphore's maximum, `None` for a lock.
pub fn overlaps(holds: &[Hold], cap: &dyn Fn(&str) -> Option<u32>, pauses: &[Pause]) -> Vec<Overlap> {
    let mut order: Vec<usize> = (0..holds.len()).collect();
    order.sort_by_key(|&i| (holds[i].resource.clone(), holds[i].start));
    let mut found = Vec::new();
    let mut active: Vec<usize> = Vec::new();
    let mut resource = "";
    for &b in &order {
        let later = &holds[b];
        if later.resource != resource {
            resource = &later.resource;
            active.clear();
        }
        active.retain(|&a| holds[a].end.max(holds[a].start) > later.start);
        let inside: Vec<usize> =
            active.iter().copied().filter(|&a| holds[a].worker != later.worker).collect();
        let cap = cap(&later.resource);
        let kinds =
            |set: &[usize]| set.iter().map(|&i| holds[i].kind).chain([later.kind]).collect::<Vec<_>>();
        if !admitted(&kinds(&inside), cap) {
            // A hold that began outside its own safe window was never a holder's; else the
            // holders inside that a pause (or that) excuses.
            let explanation = outside_window(later).or_else(|| {
                let excused: Vec<(usize, String)> = inside
                    .iter()
                    .filter_map(|&a| {
                        paused_across(&holds[a], later.start, pauses)
                            .or_else(|| outside_window(&holds[a]))
                            .map(|why| (a, why))
                    })
                    .collect();
                let rest: Vec<usize> =
                    inside.iter().copied().filter(|a| !excused.iter().any(|(e, _)| e == a)).collect();
                admitted(&kinds(&rest), cap)
                    .then(|| excused.into_iter().map(|(_, why)| why).collect::<Vec<_>>().join("; "))
            });
            found.push(Overlap {
                resource: later.resource.clone(),
                at: later.start,
                later: b,
                earlier: inside,
                explanation,
            });
        }
        active.push(b);
    }
    found
}

/// One operation at the fenced resource.
#[derive(Clone, Debug)]
pub struct Op {
    pub worker: String,
    pub pid: u32,
    pub resource: String,
    pub kind: Kind,
    pub token: u64,
    pub begin: Duration,
    /// `END` or `ABORT` (or the process's kill, or the end of the phase); `None` while open.
    pub end: Option<Duration>,
    /// Passed the fence at `BEGIN` (so the holder went on to do the work).
    pub begun: bool,
    /// Passed the fence at `BEGIN` and at `END`: the storage accepted it.
    pub accepted: bool,
    /// Refused by the fence (at `BEGIN` or at `END`).
    pub refused: bool,
}

/// What the fenced view found.
#[derive(Debug, Default)]
pub struct Fenced {
    /// Violations, each described.
    pub violations: Vec<String>,
    /// Accepted operations overlapping another worker's where the lock forbids it.
    pub overlaps: usize,
    /// Accepted tokens that did not grow from one holder to the next.
    pub token_order: usize,
    /// Moments a semaphore's lease total at the resource went above its maximum while a
    /// holder's process was paused (explained).
    pub over_total_explained: usize,
    /// Without fencing: operations a holder went on to do that overlapped another's.
    pub unfenced_overlaps: usize,
}

/// Checks the fenced view. Open operations end at `fallback` (their process was killed, or
/// the phase ended).
pub fn fenced(ops: &[Op], cap: &dyn Fn(&str) -> Option<u32>, pauses: &[Pause], fallback: Duration) -> Fenced {
    let mut out = Fenced::default();
    let end = |o: &Op| o.end.unwrap_or(fallback).max(o.begin);
    let mut resources: Vec<&str> = ops.iter().map(|o| o.resource.as_str()).collect();
    resources.sort_unstable();
    resources.dedup();
    for resource in resources {
        let cap = cap(resource);
        let mut begun: Vec<&Op> = ops.iter().filter(|o| o.resource == resource && o.begun).collect();
        begun.sort_by_key(|o| o.begin);
        match cap {
            Some(cap) => {
                // The lease total at the resource, at each BEGIN.
                for (j, b) in begun.iter().enumerate() {
                    let inside: Vec<&&Op> =
                        begun[..j].iter().filter(|a| end(a) > b.begin && a.worker != b.worker).collect();
                    let kinds: Vec<Kind> = inside.iter().map(|a| a.kind).chain([b.kind]).collect();
                    if admitted(&kinds, Some(cap)) {
                        continue;
                    }
                    let paused = inside
                        .iter()
                        .any(|a| pauses.iter().any(|p| p.pid == a.pid && p.from < b.begin && p.to > a.begin));
                    if paused {
                        out.over_total_explained += 1;
                    } else {
                        out.violations.push(format!(
                            "{resource}: lease total above {cap} at {:.3} s ({} beside {}), no holder paused",
                            b.begin.as_secs_f64(),
                            b.worker,
                            inside.iter().map(|a| a.worker.as_str()).collect::<Vec<_>>().join(",")
                        ));
                    }
                }
            }
            None => {
                let accepted: Vec<&&Op> = begun.iter().filter(|o| o.accepted).collect();
                for (j, b) in accepted.iter().enumerate() {
                    for a in &accepted[..j] {
                        if end(a) > b.begin && a.worker != b.worker && !admitted(&[a.kind, b.kind], None) {
                            out.overlaps += 1;
                            out.violations.push(format!(
                                "{resource}: accepted {} {} ({}) overlaps {} {} ({}) at {:.3} s",
                                b.worker,
                                b.token,
                                b.kind.code(),
                                a.worker,
                                a.token,
                                a.kind.code(),
                                b.begin.as_secs_f64()
                            ));
                        }
                    }
                }
                // Tokens grow from one exclusive holder to the next (a leader writes many times
                // with one token: the same token from another worker is stale).
                let exclusive: Vec<&&&Op> = accepted.iter().filter(|o| o.kind.exclusive()).collect();
                for w in exclusive.windows(2) {
                    if w[1].token < w[0].token || (w[1].token == w[0].token && w[1].worker != w[0].worker) {
                        out.token_order += 1;
                        out.violations.push(format!(
                            "{resource}: accepted token {} of {} after {} of {}",
                            w[1].token, w[1].worker, w[0].token, w[0].worker
                        ));
                    }
                }
                out.unfenced_overlaps += begun
                    .iter()
                    .enumerate()
                    .filter(|(i, a)| {
                        begun[i + 1..]
                            .iter()
                            .take_while(|x| x.begin < end(a))
                            .any(|x| x.worker != a.worker && !admitted(&[a.kind, x.kind], None))
                    })
                    .count();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn hold(worker: &str, pid: u32, kind: Kind, start: u64, end: u64, deadline: u64) -> Hold {
        Hold {
            worker: worker.into(),
            pid,
            resource: "/r".into(),
            kind,
            token: start,
            start: ms(start),
            end: ms(end),
            deadline: ms(deadline),
            cause: "done".into(),
        }
    }

    fn op(worker: &str, pid: u32, kind: Kind, token: u64, begin: u64, end: u64, accepted: bool) -> Op {
        Op {
            worker: worker.into(),
            pid,
            resource: "/r".into(),
            kind,
            token,
            begin: ms(begin),
            end: Some(ms(end)),
            begun: true,
            accepted,
            refused: !accepted,
        }
    }

    const LOCK: &dyn Fn(&str) -> Option<u32> = &|_| None;
    const SEM2: &dyn Fn(&str) -> Option<u32> = &|_| Some(2);

    /// A correct mutex history: holders one after the other, and one holder paused past its
    /// deadline while its successor came in, then stopping as soon as it woke.
    fn correct() -> (Vec<Hold>, Vec<Pause>, Vec<Op>) {
        let holds = vec![
            hold("a", 1, Kind::Exclusive, 0, 100, 2000),
            hold("b", 2, Kind::Exclusive, 120, 300, 2100),
            // c: paused 400-3400 with its deadline at 2400; d came in at 2600; c stopped at 3410.
            hold("c", 3, Kind::Exclusive, 350, 3410, 2400),
            hold("d", 4, Kind::Exclusive, 2600, 2700, 4600),
        ];
        let pauses = vec![Pause { pid: 3, from: ms(400), to: ms(3400) }];
        let ops = vec![
            op("a", 1, Kind::Exclusive, 10, 10, 90, true),
            op("b", 2, Kind::Exclusive, 20, 130, 290, true),
            op("c", 3, Kind::Exclusive, 30, 360, 3405, false), // its END came late: refused
            op("d", 4, Kind::Exclusive, 40, 2610, 2690, true),
        ];
        (holds, pauses, ops)
    }

    #[test]
    fn a_correct_history_passes_and_the_paused_overlap_is_explained() {
        let (holds, pauses, ops) = correct();
        let found = overlaps(&holds, LOCK, &pauses);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].later, found[0].earlier.clone()), (3, vec![2]));
        let why = found[0].explanation.as_deref().expect("explained");
        assert!(why.contains("c (pid 3) was paused"), "{why}");
        let f = fenced(&ops, LOCK, &pauses, ms(5000));
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!(f.unfenced_overlaps, 1, "c's late write would have overlapped d's without the fence");
    }

    #[test]
    fn fencing_off_is_caught() {
        // The storage accepted the paused holder's late END: two accepted writes overlap, and
        // c's token comes after d's.
        let (_, pauses, mut ops) = correct();
        ops[2].accepted = true;
        ops[2].refused = false;
        let f = fenced(&ops, LOCK, &pauses, ms(5000));
        assert_eq!(f.overlaps, 1, "{:?}", f.violations);
        assert!(!f.violations.is_empty());
    }

    #[test]
    fn a_stale_token_accepted_is_caught() {
        let ops =
            vec![op("a", 1, Kind::Exclusive, 50, 0, 10, true), op("b", 2, Kind::Exclusive, 40, 20, 30, true)];
        let f = fenced(&ops, LOCK, &[], ms(100));
        assert_eq!((f.overlaps, f.token_order), (0, 1), "{:?}", f.violations);
    }

    #[test]
    fn ignoring_the_safe_window_is_caught() {
        // c was not paused: it just went on past its deadline while d came in.
        let (holds, _, _) = correct();
        let found = overlaps(&holds, LOCK, &[]);
        assert_eq!(found.len(), 1);
        assert!(found[0].explanation.is_none(), "{found:?}");
        // Nor does a pause excuse a holder that went on long after waking.
        let mut holds = holds;
        holds[2].end = ms(3400) + WAKE_GRACE + ms(1);
        holds[3].end = ms(5000);
        let found = overlaps(&holds, LOCK, &[Pause { pid: 3, from: ms(400), to: ms(3400) }]);
        assert!(found.iter().all(|o| o.explanation.is_none()) && !found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_hold_that_began_outside_its_own_window_is_explained_and_one_inside_is_not() {
        // The soak's case (2026-11-25): e was admitted, then paused before it stamped its start;
        // on waking it read a window that had ended at 2300 and stopped; f came in meanwhile.
        let holds = vec![
            hold("f", 6, Kind::Exclusive, 3000, 3100, 5000),
            hold("e", 5, Kind::Exclusive, 3010, 3011, 2300),
        ];
        let found = overlaps(&holds, LOCK, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        let why = found[0].explanation.as_deref().expect("explained");
        assert!(why.contains("e (pid 5) began outside its own safe window"), "{why}");
        // The same hold with its window still open when it began is a violation.
        let mut holds = holds;
        holds[1].deadline = ms(3011);
        let found = overlaps(&holds, LOCK, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].explanation.is_none(), "{found:?}");
    }

    #[test]
    fn a_successor_inside_the_safe_window_is_never_excused() {
        let (mut holds, pauses, _) = correct();
        holds[3].start = ms(2300); // before c's deadline of 2400
        let found = overlaps(&holds, LOCK, &pauses);
        assert!(found[0].explanation.is_none(), "{found:?}");
    }

    #[test]
    fn a_semaphore_admitting_one_too_many_is_caught() {
        let holds = vec![
            hold("a", 1, Kind::Lease(1), 0, 100, 2000),
            hold("b", 2, Kind::Lease(1), 10, 100, 2000),
            hold("c", 3, Kind::Lease(1), 20, 100, 2000),
        ];
        let found = overlaps(&holds, SEM2, &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].explanation.is_none());
        // A weight of 2 beside one lease is one too many too; 2 alone is fine.
        let holds =
            vec![hold("a", 1, Kind::Lease(2), 0, 100, 2000), hold("b", 2, Kind::Lease(1), 50, 150, 2000)];
        assert_eq!(overlaps(&holds, SEM2, &[]).len(), 1);
        assert!(overlaps(&holds[..1], SEM2, &[]).is_empty());
        // The same at the resource.
        let ops = vec![
            op("a", 1, Kind::Lease(1), 1, 0, 100, true),
            op("b", 2, Kind::Lease(1), 2, 10, 100, true),
            op("c", 3, Kind::Lease(1), 3, 20, 100, true),
        ];
        assert_eq!(fenced(&ops, SEM2, &[], ms(200)).violations.len(), 1);
        // Two leases at once is what the semaphore is for.
        assert!(fenced(&ops[..2], SEM2, &[], ms(200)).violations.is_empty());
        // A paused holder explains an over-total at the resource.
        let paused = [Pause { pid: 1, from: ms(5), to: ms(50) }];
        let f = fenced(&ops, SEM2, &paused, ms(200));
        assert!(f.violations.is_empty() && f.over_total_explained == 1, "{f:?}");
    }

    #[test]
    fn readers_share_and_writers_do_not() {
        let holds = vec![
            hold("a", 1, Kind::Read, 0, 100, 2000),
            hold("b", 2, Kind::Read, 10, 100, 2000),
            hold("c", 3, Kind::Write, 50, 150, 2000),
        ];
        let found = overlaps(&holds, LOCK, &[]);
        assert_eq!(found.len(), 1, "only the writer beside readers: {found:?}");
        assert_eq!(found[0].later, 2);
        // A downgrade: the writer's own read beside its write is no overlap.
        let holds = vec![hold("a", 1, Kind::Write, 0, 100, 2000), hold("a", 1, Kind::Read, 90, 200, 2000)];
        assert!(overlaps(&holds, LOCK, &[]).is_empty());
    }
}
