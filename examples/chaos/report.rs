//! The report: per phase, what the checker found, each overlap with its explanation, the faults
//! and the longest gap; and the JSON history of every event.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::checker::{self, Hold, Kind, Overlap, Pause};
use crate::faults::{Fault, FaultRec, Run};
use crate::lockset::{LsKind, Outcome};
use crate::resource::History;
use crate::{cap, SESSION};
pub struct PhaseReport {
    pub lines: Vec<String>,
    pub violations: usize,
    pub history: History,
    pub overlaps: Vec<Overlap>,
    /// Runs of explained overlaps with the same paused holder.
    pub episodes: usize,
    /// When the phase began and ended (since the run's epoch).
    pub span: (Duration, Duration),
    /// The lockset phase's checks.
    pub lockset: Option<crate::lockset_check::LocksetReport>,
}

pub fn report(
    mode: &str,
    secs: u64,
    mut h: History,
    pauses: &[Pause],
    faults: &[&FaultRec],
    left: &[String],
    (started, ended): (Duration, Duration),
) -> PhaseReport {
    let cap_of = |r: &str| cap(mode).or(crate::workers_options::lease_cap(r));
    h.finish();
    h.left = left.to_vec();
    // Operations still open when the phase ended (a task aborted mid-write): zero length.
    for op in &mut h.ops {
        if op.end.is_none() {
            op.end = Some(op.begin);
        }
    }
    let fenced = checker::fenced(&h.ops, &cap_of, pauses, ended);
    let mut overlaps = checker::overlaps(&h.holds, &cap_of, pauses);
    crate::clock_check::explain(&mut overlaps, &h.holds, &crate::clock_check::spans(&h.clocks, faults));
    crate::limit_check::explain(&mut overlaps, &h.holds, &h.ops, &h.opts.limited, &h.clocks.rates());
    let unexplained = overlaps.iter().filter(|o| o.explanation.is_none()).count();
    let unseen = h.lost_unseen.len();
    // A clock fault that did not take effect (`clock_map.rs`) fails the run.
    let clock_verdicts = h.clocks.verdicts();
    let clock_noops = clock_verdicts.iter().filter(|(_, ok)| !ok).count();
    let violations = fenced.violations.len() + unexplained + unseen + left.len() + clock_noops;
    // The lockset phase writes to its own resources (`lockset_check.rs` reports them).
    let ls_writes = h.ls_ops.iter().filter(|o| o.kind == LsKind::Write);
    let accepted = h.ops.iter().filter(|o| o.accepted).count()
        + ls_writes.clone().filter(|o| o.outcome == Outcome::Ok).count();
    let refused = h.ops.iter().filter(|o| o.refused).count()
        + h.ls_ops.iter().filter(|o| o.outcome == Outcome::Refused).count();
    let mut causes: BTreeMap<&str, usize> = BTreeMap::new();
    for hold in &h.holds {
        *causes.entry(hold.cause.as_str()).or_default() += 1;
    }
    let causes: Vec<String> = causes.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let mut lines = vec![format!(
        "phase {mode}: {secs} s, {} faults, {} holds (ended by: {}), {} writes attempted, {accepted} \
         accepted, {refused} refused by fencing",
        faults.len(),
        h.holds.len(),
        causes.join(", "),
        h.ops.len() + ls_writes.count()
    )];
    // One line per run of overlaps with the same earlier holders and the same verdict (a
    // paused holder overlaps every successor that came in while it slept).
    let mut groups: Vec<(&[usize], Option<&str>, Vec<&Overlap>)> = Vec::new();
    for o in &overlaps {
        match groups.last_mut() {
            // Explained: the same paused holder(s); unexplained: the same holders inside.
            Some((earlier, why, list))
                if *why == o.explanation.as_deref()
                    && (why.is_some() || *earlier == o.earlier.as_slice()) =>
            {
                list.push(o)
            }
            _ => groups.push((&o.earlier, o.explanation.as_deref(), vec![o])),
        }
    }
    let episodes = groups.iter().filter(|g| g.1.is_some()).count();
    lines.push(format!(
        "  holds that began beside a holder the recipe must not admit with them: {} explained, in {episodes} \
         episode(s) of a paused holder or a clock fault; {unexplained} unexplained",
        overlaps.len() - unexplained
    ));
    for (earlier, why, list) in &groups {
        let earlier: Vec<String> = earlier.iter().map(|&i| describe(&h.holds[i])).collect();
        let (first, last) = (list[0], list[list.len() - 1]);
        lines.push(format!(
            "    {:.2}-{:.2} s {}: {} hold(s) began beside {}, the first {}: {}",
            first.at.as_secs_f64(),
            last.at.as_secs_f64(),
            first.resource,
            list.len(),
            earlier.join(", "),
            describe(&h.holds[first.later]),
            why.unwrap_or("UNEXPLAINED")
        ));
    }
    if let Some(cap) = cap(mode) {
        lines.push(format!(
            "  lease total: at most {} of {cap} held at once within the holders' safe windows ({} counting \
             paused holders to their wake); above {cap} at the resource: {} explained (a paused holder), {} \
             unexplained",
            max_total(&h.holds, true),
            max_total(&h.holds, false),
            fenced.over_total_explained,
            fenced.violations.len()
        ));
    } else if !h.is_lockset() {
        lines.push(format!(
            "  fenced view: accepted writes overlapping: {}; accepted tokens not increasing: {}",
            fenced.overlaps, fenced.token_order
        ));
        lines.push(format!(
            "  without fencing (every write a holder went on to do): {} overlapped another holder's",
            fenced.unfenced_overlaps
        ));
    }
    for v in fenced.violations.iter().take(10) {
        lines.push(format!("    VIOLATION {v}"));
    }
    if !h.is_lockset() {
        lines.push(format!(
            "  refused writers told their hold was lost: {} (at most {} ms after the refusal); not told: \
             {unseen}",
            h.lost_seen.len(),
            h.lost_seen.iter().map(|x| x.2).max().unwrap_or(0)
        ));
    }
    lines.push(format!(
        "  nodes left after the workers stopped: {}{}",
        left.len(),
        if left.is_empty() { String::new() } else { format!(" {left:?}") }
    ));
    lines.push(generations_line(&h.generations));
    for (line, _) in &clock_verdicts {
        lines.push(format!("  clock-faulted worker process: {line}"));
    }
    // Per fault kind: how many, and the longest wait from its start to the next accepted write.
    let mut accepted_at: Vec<Duration> = h
        .ops
        .iter()
        .filter(|o| o.accepted || (o.begun && o.kind != Kind::Exclusive && cap(mode).is_some()))
        .map(|o| o.begin)
        .chain(
            h.ls_ops.iter().filter(|o| o.kind == LsKind::Write && o.outcome == Outcome::Ok).map(|o| o.invoke),
        )
        .collect();
    accepted_at.sort();
    let mut by_kind: BTreeMap<Fault, (usize, Duration)> = BTreeMap::new();
    for f in faults {
        let next = accepted_at.iter().find(|t| **t >= f.start).map_or(ended - f.start, |t| *t - f.start);
        let e = by_kind.entry(f.fault).or_default();
        e.0 += 1;
        e.1 = e.1.max(next);
    }
    let kinds: Vec<String> = by_kind
        .iter()
        .map(|(f, (n, gap))| format!("{f:?} {n} (next write within {} ms)", gap.as_millis()))
        .collect();
    lines.push(format!("  faults: {}", kinds.join(", ")));
    let mut gaps: Vec<(Duration, Duration)> = accepted_at.windows(2).map(|w| (w[1] - w[0], w[0])).collect();
    gaps.push((accepted_at.first().map_or(ended - started, |t| t.saturating_sub(started)), started));
    if let Some((len, from)) = gaps.into_iter().max() {
        let around: Vec<String> = faults
            .iter()
            .filter(|f| f.end + SESSION * 2 >= from && f.start <= from + len)
            .map(|f| format!("{:?}@{:.1}s", f.fault, f.start.as_secs_f64()))
            .collect();
        lines.push(format!(
            "  longest gap with no write: {} ms from {:.1} s; faults around it: {}",
            len.as_millis(),
            from.as_secs_f64(),
            if around.is_empty() { "none".into() } else { around.join(", ") }
        ));
    }
    PhaseReport { lines, violations, history: h, overlaps, episodes, span: (started, ended), lockset: None }
}

pub fn describe(h: &Hold) -> String {
    format!(
        "{} ({} token {} {:.2}-{:.2} s, {})",
        h.worker,
        h.kind.code(),
        h.token,
        h.start.as_secs_f64(),
        h.end.as_secs_f64(),
        h.cause
    )
}

/// The largest lease total the holds' intervals show at once; `windowed`: each hold counted
/// only up to its safe window's end (a paused holder past it is counted by the overlaps).
pub fn max_total(holds: &[Hold], windowed: bool) -> u32 {
    let mut events: Vec<(Duration, i64)> = Vec::new();
    for h in holds {
        if let Kind::Lease(w) = h.kind {
            events.push((h.start, i64::from(w)));
            let end = if windowed { h.end.min(h.deadline) } else { h.end };
            events.push((end.max(h.start), -i64::from(w)));
        }
    }
    events.sort(); // ends (negative) before starts at the same instant
    let (mut now, mut max) = (0i64, 0i64);
    for (_, d) in events {
        now += d;
        max = max.max(now);
    }
    max as u32
}

/// `session generations per worker: p0w0 3, p0w1 1+2, ...`: each worker's one `Session` and the
/// generations it lived through (1 = never expired); a worker whose process was killed and
/// respawned has one figure per process, joined by `+`.
pub fn generations_line(generations: &[(String, u32, u64)]) -> String {
    let mut by_worker: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (id, _, generation) in generations {
        by_worker.entry(id.as_str()).or_default().push(*generation);
    }
    let renewed: u64 = generations.iter().map(|(_, _, g)| g.saturating_sub(1)).sum();
    let per: Vec<String> = by_worker
        .iter()
        .map(|(id, gens)| format!("{id} {}", gens.iter().map(u64::to_string).collect::<Vec<_>>().join("+")))
        .collect();
    format!(
        "  session generations per worker (one Session each, never rebuilt; + = a respawned process): {}; \
         {renewed} expired sessions renewed in place",
        per.join(", ")
    )
}

// ------------------------------------------------------------------ the JSON history

pub fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn secs(d: Duration) -> String {
    format!("{:.6}", d.as_secs_f64())
}

/// Every event of the run, one JSON document (times in seconds since the run's epoch on the
/// machine's monotonic clock).
pub fn history_json(
    seed: u64,
    secs_per_phase: u64,
    phases: &[(String, PhaseReport)],
    run: &Run,
    (epoch, broken): (crate::resource::Epoch, crate::workers::Broken),
) -> String {
    let fence = broken != crate::workers::Broken::NoFence;
    let mut out = format!(
        "{{\"seed\":{seed},\"seconds_per_phase\":{secs_per_phase},\"session_timeout_ms\":{},\"epoch_ns\":{},\
         \"broken\":{},\"fence\":{fence},\"schedule\":{},\"stalls\":[{}],\"phases\":[",
        SESSION.as_millis(),
        epoch.0,
        json_str(broken.name()),
        crate::replay::schedule_json(&run.plans),
        run.stalls
            .iter()
            .map(|s| format!(
                "{{\"phase\":{},\"at\":{},\"since\":{},\"lines\":[{}]}}",
                json_str(&s.phase),
                secs(s.at),
                secs(s.since),
                s.lines.iter().map(|l| json_str(l)).collect::<Vec<_>>().join(",")
            ))
            .collect::<Vec<_>>()
            .join(",")
    );
    for (i, (mode, r)) in phases.iter().enumerate() {
        let h = &r.history;
        if i > 0 {
            out.push(',');
        }
        let left: Vec<String> = h.left.iter().map(|l| json_str(l)).collect();
        out.push_str(&format!(
            "{{\"phase\":{},\"violations\":{},\"span\":[{},{}],\"left\":[{}],\"wire\":{},\"holds\":[",
            json_str(mode),
            r.violations,
            secs(r.span.0),
            secs(r.span.1),
            left.join(","),
            crate::replay::wire_json(h)
        ));
        let holds: Vec<String> = h
            .holds
            .iter()
            .map(|x| {
                format!(
                    "{{\"worker\":{},\"pid\":{},\"resource\":{},\"kind\":{},\"token\":{},\"start\":{},\
                     \"end\":{},\"deadline\":{},\"cause\":{}}}",
                    json_str(&x.worker),
                    x.pid,
                    json_str(&x.resource),
                    json_str(&x.kind.code()),
                    x.token,
                    secs(x.start),
                    secs(x.end),
                    secs(x.deadline),
                    json_str(&x.cause)
                )
            })
            .collect();
        out.push_str(&holds.join(","));
        out.push_str("],\"writes\":[");
        let ops: Vec<String> = h
            .ops
            .iter()
            .map(|o| {
                format!(
                    "{{\"worker\":{},\"pid\":{},\"resource\":{},\"kind\":{},\"token\":{},\"begin\":{},\
                     \"end\":{},\"begun\":{},\"accepted\":{},\"refused\":{}}}",
                    json_str(&o.worker),
                    o.pid,
                    json_str(&o.resource),
                    json_str(&o.kind.code()),
                    o.token,
                    secs(o.begin),
                    o.end.map_or("null".into(), secs),
                    o.begun,
                    o.accepted,
                    o.refused
                )
            })
            .collect();
        out.push_str(&ops.join(","));
        out.push_str("],\"overlaps\":[");
        let overlaps: Vec<String> = r
            .overlaps
            .iter()
            .map(|o| {
                format!(
                    "{{\"at\":{},\"resource\":{},\"later\":{},\"earlier\":{:?},\"explanation\":{}}}",
                    secs(o.at),
                    json_str(&o.resource),
                    o.later,
                    o.earlier,
                    o.explanation.as_deref().map_or("null".into(), json_str)
                )
            })
            .collect();
        out.push_str(&overlaps.join(","));
        out.push_str("],\"told\":[");
        let told: Vec<String> = h
            .lost_seen
            .iter()
            .map(|(w, t, ms)| format!("{{\"worker\":{},\"token\":{t},\"after_ms\":{ms}}}", json_str(w)))
            .chain(
                h.lost_unseen
                    .iter()
                    .map(|(w, t)| format!("{{\"worker\":{},\"token\":{t},\"after_ms\":null}}", json_str(w))),
            )
            .collect();
        out.push_str(&told.join(","));
        out.push(']');
        if let Some(ls) = &r.lockset {
            out.push_str(",\"lockset\":");
            out.push_str(&crate::lockset_check::json(ls, &h.ls_ops));
        }
        if !h.opts.is_empty() {
            out.push_str(",\"options\":");
            out.push_str(&crate::options_json::json(&h.opts));
        }
        out.push('}');
    }
    out.push_str("],\"faults\":[");
    let faults: Vec<String> = run
        .faults
        .iter()
        .map(|f| {
            format!(
                "{{\"phase\":{},\"fault\":{},\"start\":{},\"end\":{},\"detail\":{}}}",
                json_str(&f.phase),
                json_str(&format!("{:?}", f.fault)),
                secs(f.start),
                secs(f.end),
                json_str(&f.detail)
            )
        })
        .collect();
    out.push_str(&faults.join(","));
    out.push_str("],\"pauses\":[");
    let pauses: Vec<String> = run
        .pauses
        .iter()
        .map(|p| format!("{{\"pid\":{},\"from\":{},\"to\":{}}}", p.pid, secs(p.from), secs(p.to)))
        .collect();
    out.push_str(&pauses.join(","));
    out.push_str("],\"kills\":[");
    let kills: Vec<String> =
        run.kills.iter().map(|(pid, at)| format!("{{\"pid\":{pid},\"at\":{}}}", secs(*at))).collect();
    out.push_str(&kills.join(","));
    out.push_str("]}\n");
    out
}
