//! The `lockset` phase's checks: Jepsen's set-full check per variant (the final read holds every
//! acknowledged add), the independent linearizability checker (`linearizable.rs`) on the
//! histories, and its agreement with `checker.rs` on the holds; the report lines and the JSON.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::checker::Pause;
use crate::linearizable::{self, Agreement, Verdicts};
use crate::lockset::{LsKind, LsOp, Outcome, Variant, VARIANTS};
use crate::report::{json_str, secs, PhaseReport};

/// One variant's set-full result.
#[derive(Clone, Debug, Default)]
pub struct SetFull {
    pub variant: String,
    pub fenced: bool,
    /// Writes invoked (each adds one element).
    pub attempted: usize,
    pub acked: usize,
    /// Acknowledged adds missing from the final read.
    pub lost: Vec<i64>,
    /// Writes refused by the fence.
    pub refused: usize,
    /// Registers refused by the fence (a newer holder had registered: the worker stopped
    /// before reading).
    pub refused_registers: usize,
    /// Writes whose outcome is unknown, and how many of their elements the final read holds.
    pub unknown: usize,
    pub unknown_present: usize,
    pub final_len: usize,
    /// Pauses of a worker's process between its read of this set and its write.
    pub exposures: usize,
}

/// The set-full check of variant `v`: every acknowledged add must be in `final_read`.
pub fn set_full(ops: &[LsOp], v: &Variant, final_read: &[i64], pauses: &[Pause]) -> SetFull {
    let present: BTreeSet<i64> = final_read.iter().copied().collect();
    let mut s =
        SetFull { variant: v.name.into(), fenced: v.fenced, final_len: present.len(), ..SetFull::default() };
    let mut last_read: HashMap<(&str, u32), Duration> = HashMap::new();
    for o in ops.iter().filter(|o| o.variant == v.name) {
        match (o.kind, o.outcome) {
            (LsKind::Read, Outcome::Ok) => {
                last_read.insert((&o.worker, o.pid), o.ret.unwrap_or(o.invoke));
            }
            (LsKind::Register, Outcome::Refused) => s.refused_registers += 1,
            (LsKind::Write, outcome) => {
                s.attempted += 1;
                match outcome {
                    Outcome::Ok if !present.contains(&o.elem) => s.lost.push(o.elem),
                    Outcome::Refused => s.refused += 1,
                    Outcome::Unknown => {
                        s.unknown += 1;
                        s.unknown_present += usize::from(present.contains(&o.elem));
                    }
                    _ => {}
                }
                s.acked += usize::from(outcome == Outcome::Ok);
                if let Some(read) = last_read.get(&(o.worker.as_str(), o.pid)) {
                    s.exposures += pauses
                        .iter()
                        .filter(|p| p.pid == o.pid && *read <= p.from && p.from <= o.invoke)
                        .count();
                }
            }
            _ => {}
        }
    }
    s
}

/// Everything the lockset phase's checks found.
#[derive(Clone, Debug, Default)]
pub struct LocksetReport {
    pub sets: Vec<SetFull>,
    pub fences: Verdicts,
    pub mutexes: Verdicts,
    pub agreement: Agreement,
    pub violations: usize,
}

/// Runs the checks on the phase's history and final reads; adds the lines and violations to
/// the phase's report.
pub fn attach(r: &mut PhaseReport, finals: &BTreeMap<String, Vec<i64>>, pauses: &[Pause]) {
    let ended = r.span.1;
    r.history.end_lockset(|_| true, ended);
    let ops = &r.history.ls_ops;
    let sets: Vec<SetFull> = VARIANTS
        .iter()
        .map(|v| set_full(ops, v, finals.get(v.name).map_or(&[][..], |s| s.as_slice()), pauses))
        .collect();
    let fenced: Vec<&str> = VARIANTS.iter().filter(|v| v.fenced).map(|v| v.name).collect();
    let all: Vec<&str> = VARIANTS.iter().map(|v| v.name).collect();
    let fences = linearizable::check_fences(ops, &fenced);
    let mutexes = linearizable::check_mutexes(ops, &all);
    let ours: Vec<(String, Duration)> = r
        .overlaps
        .iter()
        .filter_map(|o| Some((o.resource.strip_prefix("/chaos/lockset/")?.to_string(), o.at)))
        .collect();
    let agreement = linearizable::compare(&mutexes, &ours);
    let lost_fenced: usize = sets.iter().filter(|s| s.fenced).map(|s| s.lost.len()).sum();
    let violations = lost_fenced + fences.flagged.len() + agreement.disagreements.len();
    let mut lines =
        vec!["  lock-set (Jepsen's etcd lock-set; set-full: the final read holds every acknowledged add):"
            .to_string()];
    for s in &sets {
        let verdict = match (s.fenced, s.lost.len()) {
            (true, 0) => "0 lost".to_string(),
            (true, n) => format!("{n} LOST (a violation: fenced)"),
            (false, 0) => format!(
                "0 lost: the run did not exercise the pauses for it ({} pause(s) between a read and its \
                 write)",
                s.exposures
            ),
            (false, n) => format!("{n} lost (unfenced: what a pause does without a fence)"),
        };
        lines.push(format!(
            "    {:<14} {:>5} adds, {:>5} acknowledged, {verdict}; refused by the fence: {} writes, {} \
             registers; unknown outcome {} ({} present); final set {}; pauses between read and write {}",
            s.variant,
            s.attempted,
            s.acked,
            s.refused,
            s.refused_registers,
            s.unknown,
            s.unknown_present,
            s.final_len,
            s.exposures
        ));
        for e in s.lost.iter().take(if s.fenced { 10 } else { 0 }) {
            lines.push(format!(
                "      VIOLATION {}: acknowledged add {e:#x} missing from the final read",
                s.variant
            ));
        }
    }
    lines.push(format!(
        "  independent checker (WGL, todc-utils), fenced registers: {} histories, {} windows, largest {} \
         ops: {}",
        fences.histories,
        fences.windows,
        fences.largest,
        if fences.flagged.is_empty() {
            "all linearizable".to_string()
        } else {
            format!("{} NOT LINEARIZABLE", fences.flagged.len())
        }
    ));
    for f in fences.flagged.iter().take(10) {
        lines.push(format!(
            "    VIOLATION {} register {:.3}-{:.3} s ({} ops) not linearizable",
            f.variant,
            f.from.as_secs_f64(),
            f.to.as_secs_f64(),
            f.ops
        ));
    }
    lines.push(format!(
        "  independent checker, mutex model: {} locks, {} windows ({} searches; {} window(s) split further \
         for the search; largest search {} ops), {} not linearizable; our checker's {} overlap(s) fall in {} \
         window(s); agreement: {} in both, {} disagreement(s)",
        mutexes.histories,
        mutexes.windows,
        mutexes.searched,
        mutexes.split,
        mutexes.largest,
        mutexes.flagged.len(),
        ours.len(),
        agreement.ours,
        agreement.both,
        agreement.disagreements.len()
    ));
    for d in agreement.disagreements.iter().take(10) {
        lines.push(format!("    VIOLATION checkers disagree: {d}"));
    }
    r.lines.extend(lines);
    r.violations += violations;
    r.lockset = Some(LocksetReport { sets, fences, mutexes, agreement, violations });
}

/// The phase's lock-set history and verdicts, as a JSON object.
pub fn json(r: &LocksetReport, ops: &[LsOp]) -> String {
    let ops: Vec<String> = ops
        .iter()
        .map(|o| {
            format!(
                "{{\"worker\":{},\"pid\":{},\"variant\":{},\"op\":\"{}\",\"token\":{},\"elem\":{},\"invoke\":\
                 {},\"return\":{},\"outcome\":\"{}\"}}",
                json_str(&o.worker),
                o.pid,
                json_str(&o.variant),
                o.kind.code(),
                o.token,
                o.elem,
                secs(o.invoke),
                o.ret.map_or("null".into(), secs),
                o.outcome.code()
            )
        })
        .collect();
    let sets: Vec<String> = r
        .sets
        .iter()
        .map(|s| {
            format!(
                "{{\"variant\":{},\"fenced\":{},\"attempted\":{},\"acknowledged\":{},\"lost\":{},\
                 \"lost_elements\":{:?},\"refused_writes\":{},\"refused_registers\":{},\"unknown\":{},\
                 \"unknown_present\":{},\"final_size\":{},\"pauses_between_read_and_write\":{}}}",
                json_str(&s.variant),
                s.fenced,
                s.attempted,
                s.acked,
                s.lost.len(),
                s.lost,
                s.refused,
                s.refused_registers,
                s.unknown,
                s.unknown_present,
                s.final_len,
                s.exposures
            )
        })
        .collect();
    let verdicts = |v: &Verdicts| {
        let flagged: Vec<String> = v
            .flagged
            .iter()
            .map(|f| {
                format!(
                    "{{\"variant\":{},\"from\":{},\"to\":{},\"ops\":{}}}",
                    json_str(&f.variant),
                    secs(f.from),
                    secs(f.to),
                    f.ops
                )
            })
            .collect();
        format!(
            "{{\"histories\":{},\"windows\":{},\"searches\":{},\"split\":{},\"largest\":{},\
             \"not_linearizable\":[{}]}}",
            v.histories,
            v.windows,
            v.searched,
            v.split,
            v.largest,
            flagged.join(",")
        )
    };
    let disagreements: Vec<String> = r.agreement.disagreements.iter().map(|d| json_str(d)).collect();
    format!(
        "{{\"sets\":[{}],\"fenced_registers\":{},\"mutex\":{},\"agreement\":{{\"ours\":{},\"both\":{},\
         \"disagreements\":[{}]}},\"violations\":{},\"ops\":[{}]}}",
        sets.join(","),
        verdicts(&r.fences),
        verdicts(&r.mutexes),
        r.agreement.ours,
        r.agreement.both,
        disagreements.join(","),
        r.violations,
        ops.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lockset::variant;

    fn write(w: &str, pid: u32, elem: i64, at: u64, outcome: Outcome) -> [LsOp; 2] {
        let op = |kind, invoke, ret, outcome| LsOp {
            worker: w.into(),
            pid,
            variant: "redis-fenced".into(),
            kind,
            token: 1,
            elem: if kind == LsKind::Write { elem } else { 0 },
            invoke: Duration::from_millis(invoke),
            ret: Some(Duration::from_millis(ret)),
            outcome,
        };
        [op(LsKind::Read, at, at + 1, Outcome::Ok), op(LsKind::Write, at + 10, at + 11, outcome)]
    }

    #[test]
    fn a_lost_acknowledged_add_is_caught() {
        let v = variant("redis-fenced").expect("a variant");
        let ops: Vec<LsOp> = [
            write("a", 1, 11, 0, Outcome::Ok),
            write("b", 2, 22, 100, Outcome::Ok),
            write("a", 1, 12, 200, Outcome::Refused),
            write("a", 1, 13, 300, Outcome::Unknown),
        ]
        .into_iter()
        .flatten()
        .collect();
        let good = set_full(&ops, &v, &[11, 22, 13], &[]);
        assert!(good.lost.is_empty(), "{good:?}");
        assert_eq!(
            (good.attempted, good.acked, good.refused, good.unknown, good.unknown_present),
            (4, 2, 1, 1, 1)
        );
        // b's write clobbered a's add (a stale read-modify-write): 11 is lost.
        let bad = set_full(&ops, &v, &[22], &[]);
        assert_eq!(bad.lost, vec![11]);
        // A pause of a's process between its read (ret 201) and its write (invoke 210).
        let paused = [Pause { pid: 1, from: Duration::from_millis(205), to: Duration::from_millis(3205) }];
        assert_eq!(set_full(&ops, &v, &[22], &paused).exposures, 1);
    }
}
