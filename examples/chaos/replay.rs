//! Replay, two ways.
//!
//! - **The fault schedule** (`--replay HISTORY`): every run records, per phase, the seed its
//!   workers and faults draw from, and per fault the pause before it, its kind, the seed of its
//!   own random choices and the leader when it began (`schedule` in the history, beside
//!   `faults`, which says what each hit: which server, which worker, start and end). A replay
//!   runs the same phases with the same seeds, the same kinds after the same pauses. It is not
//!   deterministic: targets chosen by state (the worker inside, the current leader) are chosen
//!   again by the same rule, and the processes' timing differs; docs/safety.md gives how often a
//!   failure reproduced.
//! - **The checker** (`--recheck HISTORY`, and the fixtures under `fixtures/`): every line the
//!   fenced resource received, with its receive time (`wire` in the history), rebuilds the
//!   phase's history exactly, and the checker gives the same verdict again. A failing history
//!   kept as a fixture replays exactly, whatever the machine.

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::Value;

use crate::checker::Pause;
use crate::faults::{Fault, FaultRec};
use crate::report::{self, json_str, secs};
use crate::resource::{Epoch, History};
use crate::{Error, Rng};

/// One fault as scheduled: enough to schedule it again.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    /// The pause before it, from the previous fault's end (or the phase's start).
    pub gap_ms: u64,
    pub fault: Fault,
    /// The seed of the fault's own choices (`inject`'s random numbers).
    pub seed: u64,
    /// The ZooKeeper leader when it began (recorded, not replayed: the rule picks again).
    pub leader: Option<usize>,
}

/// One phase's schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct PhasePlan {
    pub phase: String,
    /// The phase's seed: its worker processes' seeds and the pauses between faults.
    pub seed: u64,
    pub faults: Vec<Planned>,
}

/// Where a phase's faults come from: drawn (recording what was drawn), or a recorded plan.
pub enum Source {
    Draw,
    Replay(VecDeque<Planned>),
}

impl Source {
    /// The next fault: its pause and the seed of its choices, `None` when a replay has run its
    /// plan out. `draw_kind` gives a drawn fault's kind.
    pub fn next(&mut self, rng: &mut Rng, draw_kind: impl FnOnce() -> Fault) -> Option<(u64, Fault, u64)> {
        match self {
            Source::Draw => {
                let gap = 1500 + rng.below(2000);
                let fault = draw_kind();
                Some((gap, fault, rng.next()))
            }
            Source::Replay(plan) => plan.pop_front().map(|p| (p.gap_ms, p.fault, p.seed)),
        }
    }

    /// Whether a drawn phase goes on until its deadline (a replay goes on until its plan ends).
    pub fn drawn(&self) -> bool {
        matches!(self, Source::Draw)
    }
}

/// A fault kind by its name in the history (`{:?}`).
pub fn fault_named(name: &str) -> Option<Fault> {
    crate::faults::known().find(|f| format!("{f:?}") == name)
}

/// The `schedule` member of the history: every phase's plan.
pub fn schedule_json(plans: &[PhasePlan]) -> String {
    let phases: Vec<String> = plans
        .iter()
        .map(|p| {
            let faults: Vec<String> = p
                .faults
                .iter()
                .map(|f| {
                    format!(
                        "{{\"gap_ms\":{},\"fault\":{},\"seed\":{},\"leader\":{}}}",
                        f.gap_ms,
                        json_str(&format!("{:?}", f.fault)),
                        f.seed,
                        f.leader.map_or("null".into(), |l| l.to_string())
                    )
                })
                .collect();
            format!(
                "{{\"phase\":{},\"seed\":{},\"faults\":[{}]}}",
                json_str(&p.phase),
                p.seed,
                faults.join(",")
            )
        })
        .collect();
    format!("[{}]", phases.join(","))
}

/// The phases' plans of a history written by `--history`.
pub fn load_schedule(text: &str) -> Result<Vec<PhasePlan>, Error> {
    let doc: Value = serde_json::from_str(text)?;
    let phases = doc["schedule"].as_array().ok_or("the history has no schedule (written before replay?)")?;
    phases
        .iter()
        .map(|p| {
            let faults = p["faults"]
                .as_array()
                .ok_or("a schedule phase without faults")?
                .iter()
                .map(|f| {
                    let name = f["fault"].as_str().ok_or("a fault without a kind")?;
                    Ok(Planned {
                        gap_ms: f["gap_ms"].as_u64().ok_or("a fault without gap_ms")?,
                        fault: fault_named(name).ok_or_else(|| format!("unknown fault kind {name}"))?,
                        seed: f["seed"].as_u64().ok_or("a fault without a seed")?,
                        leader: f["leader"].as_u64().map(|l| l as usize),
                    })
                })
                .collect::<Result<Vec<_>, Error>>()?;
            Ok(PhasePlan {
                phase: p["phase"].as_str().ok_or("a schedule phase without a name")?.to_string(),
                seed: p["seed"].as_u64().ok_or("a schedule phase without a seed")?,
                faults,
            })
        })
        .collect()
}

/// A phase's wire log (`wire` in the history): each line the resource received, with its
/// receive time.
pub fn wire_json(h: &History) -> String {
    let lines: Vec<String> =
        h.wire.iter().map(|(at, line)| format!("[{},{}]", secs(*at), json_str(line))).collect();
    format!("[{}]", lines.join(","))
}

fn duration(v: &Value) -> Result<Duration, Error> {
    let s = v.as_f64().ok_or("a time that is not a number")?;
    Ok(Duration::from_secs_f64(s.max(0.0)))
}

/// One phase of a history, checked again from its wire log.
pub struct Rechecked {
    pub phase: String,
    /// What the run reported, and what the checker says now.
    pub recorded: usize,
    pub now: usize,
    pub overlaps: (usize, usize),
    pub lines: Vec<String>,
}

/// Every phase of a history with a wire log, checked again. The lock-set phase's final reads
/// of its sets are not in the history, so its set checks are not redone (its holds and writes
/// are); a phase with a clock fault is skipped.
pub fn recheck(text: &str) -> Result<Vec<Rechecked>, Error> {
    let doc: Value = serde_json::from_str(text)?;
    let epoch =
        Epoch(doc["epoch_ns"].as_u64().ok_or("the history has no epoch_ns (written before replay?)")?);
    let fence_on = doc["fence"].as_bool().unwrap_or(true);
    let secs_per_phase = doc["seconds_per_phase"].as_u64().ok_or("no seconds_per_phase")?;
    let faults: Vec<FaultRec> = doc["faults"]
        .as_array()
        .ok_or("no faults")?
        .iter()
        .map(|f| {
            let name = f["fault"].as_str().ok_or("a fault without a kind")?;
            Ok(FaultRec {
                phase: f["phase"].as_str().ok_or("a fault without a phase")?.to_string(),
                fault: fault_named(name).ok_or_else(|| format!("unknown fault kind {name}"))?,
                start: duration(&f["start"])?,
                end: duration(&f["end"])?,
                detail: f["detail"].as_str().unwrap_or_default().to_string(),
            })
        })
        .collect::<Result<_, Error>>()?;
    let pauses: Vec<Pause> = doc["pauses"]
        .as_array()
        .ok_or("no pauses")?
        .iter()
        .map(|p| {
            Ok(Pause {
                pid: p["pid"].as_u64().ok_or("a pause without a pid")? as u32,
                from: duration(&p["from"])?,
                to: duration(&p["to"])?,
            })
        })
        .collect::<Result<_, Error>>()?;
    let kills: Vec<(u32, Duration)> = doc["kills"]
        .as_array()
        .ok_or("no kills")?
        .iter()
        .map(|k| Ok((k["pid"].as_u64().ok_or("a kill without a pid")? as u32, duration(&k["at"])?)))
        .collect::<Result<_, Error>>()?;
    let mut out = Vec::new();
    for p in doc["phases"].as_array().ok_or("no phases")? {
        let mode = p["phase"].as_str().ok_or("a phase without a name")?;
        let Some(wire) = p["wire"].as_array() else { continue };
        let mut h = History::default();
        for entry in wire {
            let at = duration(&entry[0])?;
            let line = entry[1].as_str().ok_or("a wire line that is not a string")?;
            h.receive(line, at, epoch, fence_on);
        }
        let span = (duration(&p["span"][0])?, duration(&p["span"][1])?);
        let left: Vec<String> = p["left"]
            .as_array()
            .map_or(Vec::new(), |l| l.iter().filter_map(|s| s.as_str().map(String::from)).collect());
        let phase_faults: Vec<&FaultRec> = faults.iter().filter(|f| f.phase == mode).collect();
        // A clock-faulted process's samples of its clock are not in the wire log (its lines
        // are, already mapped onto the true clock): the clock verdicts cannot be redone.
        if phase_faults.iter().any(|f| format!("{:?}", f.fault).starts_with("Clock")) {
            eprintln!("recheck {mode}: skipped (clock faults: their clock samples are not in the wire log)");
            continue;
        }
        let mut r = report::report(mode, secs_per_phase, h, &pauses, &phase_faults, &left, span);
        crate::options_check::attach(&mut r, mode, &pauses, &kills, &phase_faults);
        let recorded_overlaps = p["overlaps"].as_array().map_or(0, Vec::len);
        out.push(Rechecked {
            phase: mode.to_string(),
            recorded: p["violations"].as_u64().unwrap_or_default() as usize,
            now: r.violations,
            overlaps: (recorded_overlaps, r.overlaps.len()),
            lines: r.lines,
        });
    }
    Ok(out)
}

/// `--recheck HISTORY`: prints each phase's verdict again; exits 1 on a violation or when a
/// verdict differs from the recorded one.
pub fn recheck_main(path: &str) -> Result<i32, Error> {
    let text = std::fs::read_to_string(path)?;
    let phases = recheck(&text)?;
    if phases.is_empty() {
        return Err(format!("{path} has no phase with a wire log").into());
    }
    let mut code = 0;
    for p in &phases {
        for line in &p.lines {
            println!("{line}");
        }
        let same = p.recorded == p.now && p.overlaps.0 == p.overlaps.1;
        println!(
            "recheck {}: {} violations (recorded {}), {} overlaps (recorded {}){}",
            p.phase,
            p.now,
            p.recorded,
            p.overlaps.1,
            p.overlaps.0,
            if same { "" } else { ": DIFFERENT from the recorded verdict" }
        );
        if p.now > 0 || !same {
            code = 1;
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FAULTS;

    #[test]
    fn a_schedule_reads_back_as_written() {
        let plans = vec![PhasePlan {
            phase: "mutex".into(),
            seed: 42,
            faults: vec![
                Planned { gap_ms: 1500, fault: FAULTS[0], seed: 7, leader: Some(2) },
                Planned { gap_ms: 3499, fault: FAULTS[FAULTS.len() - 1], seed: u64::MAX, leader: None },
            ],
        }];
        let text = format!("{{\"schedule\":{}}}", schedule_json(&plans));
        assert_eq!(load_schedule(&text).unwrap(), plans);
        for f in FAULTS {
            assert_eq!(fault_named(&format!("{f:?}")), Some(f));
        }
        assert!(load_schedule(
            "{\"schedule\":[{\"phase\":\"x\",\"seed\":1,\"faults\":[{\"gap_ms\":1,\
             \"fault\":\"NoSuchFault\",\"seed\":1}]}]}"
        )
        .is_err());
    }

    #[test]
    fn a_replay_follows_its_plan_and_ends_with_it() {
        let plan = vec![Planned { gap_ms: 10, fault: FAULTS[1], seed: 9, leader: None }];
        let mut source = Source::Replay(plan.into());
        let mut rng = Rng(1);
        assert_eq!(
            source.next(&mut rng, || unreachable!("a replay draws no kind")),
            Some((10, FAULTS[1], 9))
        );
        assert_eq!(source.next(&mut rng, || unreachable!()), None);
        assert!(!source.drawn());
    }

    /// The fixtures are failing histories of real runs (`--broken`): checked again from their
    /// wire logs, each phase gets the very verdict it got when it ran.
    #[test]
    fn every_fixture_rechecks_to_its_recorded_verdict() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/chaos/fixtures");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("examples/chaos/fixtures") {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let phases = recheck(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert!(!phases.is_empty(), "{}: no phase with a wire log", path.display());
            for p in &phases {
                assert_eq!(p.now, p.recorded, "{} {}: {:#?}", path.display(), p.phase, p.lines);
                assert_eq!(p.overlaps.1, p.overlaps.0, "{} {}", path.display(), p.phase);
            }
            assert!(phases.iter().any(|p| p.now > 0), "{}: a fixture is a failing history", path.display());
            seen += 1;
        }
        assert!(seen > 0, "no fixture in {}", dir.display());
    }
}
