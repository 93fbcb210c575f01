//! The fencing scenario's results: one [`Sample`] per run, `fencing.csv`, the summary's section
//! and the checks of the counts.

use std::fmt::Write as _;
use std::path::Path;

use super::{Resource, Variant, SLICES, WORKERS};
use crate::report::{cell, mark, num};
use crate::stats::Spread;

/// One measured run: `workers` workers writing, fenced or not, for `secs`.
#[derive(Clone, Debug)]
pub struct Sample {
    pub resource: Resource,
    pub workers: usize,
    pub variant: Variant,
    pub repeat: usize,
    pub writes: u64,
    pub secs: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// What the server counted per write: requests (ZooKeeper), statements (PostgreSQL),
    /// commands (Redis); NaN when not counted.
    pub requests_per_write: f64,
    /// Round trips per write, as the server counted them; NaN when it does not.
    pub round_trips_per_write: f64,
}

impl Sample {
    /// Writes per second, over every worker.
    pub fn rate(&self) -> f64 {
        self.writes as f64 / self.secs
    }
}

/// The most round trips (statements, for PostgreSQL) per fenced write that count as one: a
/// session's ping or a reconnect may fall in a run.
const ONE: f64 = 1.05;

/// What is wrong with the samples: a run without writes, or a fenced write that took more than
/// one round trip (where the round trips are counted), or at PostgreSQL more than one statement.
pub fn problems(samples: &[Sample]) -> Vec<String> {
    let mut out = Vec::new();
    for s in samples {
        let what = format!("fencing {} {:?} N={}", s.resource.name(), s.variant, s.workers);
        if s.writes == 0 {
            out.push(format!("{what}: no writes"));
        }
        if s.variant != Variant::Fenced {
            continue;
        }
        if s.round_trips_per_write > ONE {
            out.push(format!(
                "{what}: {:.2} round trips per fenced write, more than one",
                s.round_trips_per_write
            ));
        }
        if s.resource == Resource::Postgres && s.requests_per_write > ONE {
            out.push(format!(
                "{what}: {:.2} statements per fenced write, more than one",
                s.requests_per_write
            ));
        }
    }
    out
}

/// Every sample, one line each.
pub fn write_csv(samples: &[Sample], path: &Path) -> std::io::Result<()> {
    let mut out = String::from(
        "resource,workers,variant,repeat,writes,secs,rate_per_s,p50_us,p99_us,requests_per_write,\
         round_trips_per_write\n",
    );
    let n = |x: f64, d: usize| if x.is_nan() { String::new() } else { format!("{x:.d$}") };
    for s in samples {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{}",
            s.resource.short(),
            s.workers,
            s.variant.short(),
            s.repeat,
            s.writes,
            n(s.secs, 3),
            n(s.rate(), 1),
            n(s.p50_us, 1),
            n(s.p99_us, 1),
            n(s.requests_per_write, 3),
            n(s.round_trips_per_write, 3),
        );
    }
    std::fs::write(path, out)
}

fn of(samples: &[Sample], r: Resource, w: usize, v: Variant) -> Vec<&Sample> {
    samples.iter().filter(|s| s.resource == r && s.workers == w && s.variant == v).collect()
}

/// fenced ÷ unfenced of `metric`, one per repeat that has both.
fn ratios(samples: &[Sample], r: Resource, w: usize, metric: fn(&Sample) -> f64) -> Option<Spread> {
    let fenced = of(samples, r, w, Variant::Fenced);
    let unfenced = of(samples, r, w, Variant::Unfenced);
    Spread::of(fenced.iter().filter_map(|f| {
        let u = unfenced.iter().find(|u| u.repeat == f.repeat)?;
        Some(metric(f) / metric(u))
    }))
}

fn median(
    samples: &[Sample],
    r: Resource,
    w: usize,
    v: Variant,
    metric: fn(&Sample) -> f64,
) -> Option<Spread> {
    Spread::of(of(samples, r, w, v).into_iter().map(metric))
}

/// "unfenced / fenced" medians of a per-write count, or "–".
fn counts(samples: &[Sample], r: Resource, w: usize, metric: fn(&Sample) -> f64) -> String {
    let m = |v| median(samples, r, w, v, metric).map(|s| num(s.median, 2));
    match (m(Variant::Unfenced), m(Variant::Fenced)) {
        (Some(u), Some(f)) => format!("{u} / {f}"),
        _ => "–".into(),
    }
}

/// The summary's section: a row per resource and worker count.
pub fn summary(samples: &[Sample], missing: &[(Resource, String)], secs: f64, repeats: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n### What fencing costs: a fenced write against an unfenced one\n");
    let _ = writeln!(
        s,
        "Each worker holds its own zk-recipes lock (its own session) and writes a set of 4 numbers to a \
         key of its own over its own connection, back to back, {secs} s per run, fenced and unfenced \
         runs in {SLICES} slices each, taken in turn, {repeats} repeat{}. ZooKeeper: `FencedWriter` \
         (a check of the lock node and the `set_data` in one multi) against a plain `set_data`; \
         PostgreSQL and Redis: \
         examples/fencing's `write_set` (the fence checked in the same statement / Lua script) \
         against `write_set_unfenced`. Ratios are fenced ÷ unfenced per repeat (median, min–max, and \
         the spread, (max − min) ÷ median, † above 10 %). \
         Per write, as the server counted (unfenced / fenced): ZooKeeper requests (`mntr` packets \
         received, which are round trips), PostgreSQL statements (`pg_stat_statements` calls) and \
         round trips (segments with data received by the server's sockets, from the kernel: \
         `ss -ti`), Redis round trips (`INFO` total_writes_processed: replies written) and \
         commands (total_commands_processed, a script's own calls included).\n",
        if repeats == 1 { "" } else { "s" }
    );
    for (r, why) in missing {
        let _ = writeln!(s, "- **skipped: {}** ({why})", r.name());
    }
    if !missing.is_empty() {
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "| resource | workers | p50 unfenced | p50 fenced | p50 ÷ | writes/s unfenced | writes/s fenced | \
         writes/s ÷ | round trips per write | requests / statements / commands per write |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for r in Resource::ALL {
        for w in WORKERS {
            if of(samples, r, w, Variant::Fenced).is_empty() {
                continue;
            }
            let us = |v| cell(median(samples, r, w, v, |x| x.p50_us), 0);
            let rate = |v| cell(median(samples, r, w, v, Sample::rate), 0);
            let _ = writeln!(
                s,
                "| {} | {w} | {} µs | {} µs | {} | {} | {} | {} | {} | {} |",
                r.name(),
                us(Variant::Unfenced),
                us(Variant::Fenced),
                ratio_cell(ratios(samples, r, w, |x| x.p50_us)),
                rate(Variant::Unfenced),
                rate(Variant::Fenced),
                ratio_cell(ratios(samples, r, w, Sample::rate)),
                counts(samples, r, w, |x| x.round_trips_per_write),
                counts(samples, r, w, |x| x.requests_per_write),
            );
        }
    }
    s
}

/// A ratio's median, and its range and spread when the repeats differ, "†" when the spread is
/// above 10 %: "1.12× (1.05–1.20×; 13 %) †".
fn ratio_cell(sp: Option<Spread>) -> String {
    let Some(s) = sp else { return "–".into() };
    let (median, min, max) = (num(s.median, 2), num(s.min, 2), num(s.max, 2));
    match s.relative() {
        Some(rel) if min != max => {
            format!("{median}× ({min}–{max}×; {:.0} %){}", rel * 100.0, mark(s.unsteady()))
        }
        _ => format!("{median}×"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(resource: Resource, variant: Variant, round_trips: f64, statements: f64) -> Sample {
        Sample {
            resource,
            workers: 1,
            variant,
            repeat: 0,
            writes: 100,
            secs: 1.0,
            p50_us: 10.0,
            p99_us: 20.0,
            requests_per_write: statements,
            round_trips_per_write: round_trips,
        }
    }

    #[test]
    fn a_fenced_write_of_more_than_one_round_trip_or_statement_is_a_problem() {
        let fine = [
            sample(Resource::ZooKeeper, Variant::Fenced, 1.0, 1.0),
            sample(Resource::Postgres, Variant::Fenced, 1.0, 1.0),
            sample(Resource::Redis, Variant::Fenced, 1.0, 3.0),
            sample(Resource::Postgres, Variant::Fenced, f64::NAN, f64::NAN),
            sample(Resource::Postgres, Variant::Unfenced, 2.0, 2.0),
        ];
        assert!(problems(&fine).is_empty(), "{:?}", problems(&fine));
        let prepared = sample(Resource::Postgres, Variant::Fenced, 2.0, 1.0);
        let read_first = sample(Resource::Postgres, Variant::Fenced, 2.0, 2.0);
        let zk = sample(Resource::ZooKeeper, Variant::Fenced, 2.0, 2.0);
        assert_eq!(problems(&[prepared]).len(), 1);
        assert_eq!(problems(&[read_first]).len(), 2);
        assert_eq!(problems(&[zk]).len(), 1);
        let idle = Sample { writes: 0, ..sample(Resource::Redis, Variant::Unfenced, 0.0, 0.0) };
        assert_eq!(problems(&[idle]), vec!["fencing Redis Unfenced N=1: no writes".to_string()]);
    }
}
