//! The timeline picture of a run (`--timeline PATH`, PNG): one panel per phase, stacked in one
//! file. In each panel x is the time in seconds since the run's epoch (the clock of the holds,
//! the writes and the faults, as in the JSON history), and each worker (`p0w1`: process 0,
//! worker 1) has a row:
//! - its holds as bars, coloured by kind (exclusive: a lock or a leader's term; read; write;
//!   semaphore lease of weight 1 or 2); the part of a hold past its last safe window (a paused
//!   holder that overran) pale with an outline;
//! - the spans its process was paused (SIGSTOP … SIGCONT) dark grey, a kill of its process a
//!   black bar;
//! - a red cross at each write the fenced resource refused; an orange triangle where a hold
//!   began beside a paused holder (an explained overlap); a red line across the panel at an
//!   unexplained one (a violation).
//!
//! Each fault is a translucent span across the panel with a short label above the rows
//! (orange: a ZooKeeper server; blue: one worker's client path; violet: a worker process), and a
//! stronger shade on the rows of the worker(s) it hit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::checker::Kind;
use crate::faults::{FaultRec, Run};
use crate::lockset::Outcome;
use crate::report::PhaseReport;

const WIDTH: u32 = 1600;
const LEFT: i32 = 60;
const RIGHT: i32 = 20;
const HEADER_H: i32 = 30;
const LEGEND_H: i32 = 56;
const TITLE_H: i32 = 22;
const LANE_H: i32 = 14;
const LANES: usize = 3;
const ROW_H: i32 = 20;
const AXIS_H: i32 = 20;
const GAP: i32 = 12;
const FONT: &str = "sans-serif";

/// What a fault hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// A ZooKeeper server (or all of them).
    Servers,
    /// One worker's path to the ensemble.
    Client,
    /// A worker process (its three workers).
    Process,
}

impl Scope {
    fn color(self) -> RGBColor {
        match self {
            Scope::Servers => RGBColor(255, 140, 0),
            Scope::Client => RGBColor(30, 110, 220),
            Scope::Process => RGBColor(150, 60, 190),
        }
    }
}

/// A fault's span and label, and the rows of the workers it hit (none for a server fault).
#[derive(Debug)]
struct FaultSpan {
    from: f64,
    to: f64,
    label: String,
    scope: Scope,
    rows: Vec<usize>,
}

/// A hold on its worker's row: solid to `safe_to` (its end, or its last safe window's end if it
/// overran that), pale from there to `to`.
#[derive(Debug)]
struct Bar {
    row: usize,
    from: f64,
    safe_to: f64,
    to: f64,
    kind: Kind,
}

/// One phase as the picture shows it (times in seconds since the run's epoch).
#[derive(Debug)]
pub struct Panel {
    title: String,
    from: f64,
    to: f64,
    rows: Vec<String>,
    bars: Vec<Bar>,
    faults: Vec<FaultSpan>,
    /// (row, from, to): the row's process was stopped.
    pauses: Vec<(usize, f64, f64)>,
    /// (row, at): the row's process was killed.
    kills: Vec<(usize, f64)>,
    /// (row, at): a write refused by fencing.
    refused: Vec<(usize, f64)>,
    /// (row, at): a hold that began beside a paused holder.
    explained: Vec<(usize, f64)>,
    /// An overlap nothing explains.
    unexplained: Vec<f64>,
}

/// A fault kind's short label and scope. By name, so that a kind added later still draws (with
/// its full name, as a server fault).
fn fault_label(f: &FaultRec) -> (&'static str, Scope) {
    match format!("{:?}", f.fault).as_str() {
        "KillZkLeader" => ("kill leader", Scope::Servers),
        "FreezeZkFollower" => ("freeze follower", Scope::Servers),
        "RollingRestart" => ("rolling restart", Scope::Servers),
        "RollingUpgrade" => ("rolling upgrade", Scope::Servers),
        "PartitionClient" => ("partition", Scope::Client),
        "SlowPath" => ("slow", Scope::Client),
        "ShortCut" => ("cut", Scope::Client),
        "ResetConnection" => ("reset", Scope::Client),
        "SessionMove" => ("session move", Scope::Client),
        "PauseWorkerProcess" => ("SIGSTOP", Scope::Process),
        "KillWorkerProcess" => ("SIGKILL", Scope::Process),
        "PartitionServer" => ("isolate leader", Scope::Servers),
        "SlowServer" => ("slow server", Scope::Servers),
        "DiskStall" => ("disk stall", Scope::Servers),
        "FullLogDisk" => ("log disk full", Scope::Servers),
        "PauseZkLeader" => ("SIGSTOP leader", Scope::Servers),
        "OneWayRequests" => ("requests held", Scope::Client),
        "OneWayReplies" => ("replies held", Scope::Client),
        "OneWayServers" => ("one-way servers", Scope::Servers),
        "LaggingFollower" => ("lagging follower", Scope::Client),
        "ClockSlowWorker" => ("clock x0.5", Scope::Process),
        "ClockFastWorker" => ("clock x2", Scope::Process),
        "ClockStepWorker" => ("wall clock steps", Scope::Process),
        "ClockFastServer" => ("fast server clock", Scope::Servers),
        _ => ("", Scope::Servers),
    }
}

impl Panel {
    /// The panel of phase `mode`: its report, and the run's faults, pauses and kills.
    pub fn of(mode: &str, r: &PhaseReport, run: &Run) -> Panel {
        let h = &r.history;
        let mut workers: BTreeSet<&str> = BTreeSet::new();
        let mut pids: BTreeMap<u32, BTreeSet<&str>> = BTreeMap::new();
        let seen = h
            .holds
            .iter()
            .map(|x| (x.worker.as_str(), x.pid))
            .chain(h.ops.iter().map(|o| (o.worker.as_str(), o.pid)))
            .chain(h.generations.iter().map(|(w, pid, _)| (w.as_str(), *pid)));
        for (w, pid) in seen {
            workers.insert(w);
            pids.entry(pid).or_default().insert(w);
        }
        let rows: Vec<String> = workers.iter().map(|w| w.to_string()).collect();
        let row = |w: &str| rows.iter().position(|r| r == w);
        let of_pid = |pid: u32| -> Vec<usize> {
            pids.get(&pid).map(|ws| ws.iter().filter_map(|w| row(w)).collect()).unwrap_or_default()
        };
        let bars = h
            .holds
            .iter()
            .filter_map(|x| {
                let (from, to) = (x.start.as_secs_f64(), x.end.max(x.start).as_secs_f64());
                let safe_to = to.min(x.deadline.as_secs_f64().max(from));
                Some(Bar { row: row(&x.worker)?, from, safe_to, to, kind: x.kind })
            })
            .collect();
        let faults = run
            .faults
            .iter()
            .filter(|f| f.phase == mode)
            .map(|f| {
                let (short, scope) = fault_label(f);
                let mut label = if short.is_empty() { format!("{:?}", f.fault) } else { short.to_string() };
                // The detail begins with what was hit: `p0w1 …` (a worker) or `p1 (pid …` (a
                // process).
                let target = f.detail.split_whitespace().next().unwrap_or("");
                let hit: Vec<usize> = match scope {
                    Scope::Servers => Vec::new(),
                    _ if target.contains('w') => row(target).into_iter().collect(),
                    _ => (0..rows.len()).filter(|&i| rows[i].starts_with(&format!("{target}w"))).collect(),
                };
                if !hit.is_empty() {
                    label = format!("{label} {target}");
                }
                FaultSpan { from: f.start.as_secs_f64(), to: f.end.as_secs_f64(), label, scope, rows: hit }
            })
            .collect();
        let pauses = run
            .pauses
            .iter()
            .flat_map(|p| of_pid(p.pid).into_iter().map(|i| (i, p.from.as_secs_f64(), p.to.as_secs_f64())))
            .collect();
        let kills = run
            .kills
            .iter()
            .flat_map(|(pid, at)| of_pid(*pid).into_iter().map(|i| (i, at.as_secs_f64())))
            .collect();
        // The lockset phase's writes and registers refused by a resource's fence, too.
        let ls_refused = h.ls_ops.iter().filter(|o| o.outcome == Outcome::Refused);
        let refused = h
            .ops
            .iter()
            .filter(|o| o.refused)
            .filter_map(|o| Some((row(&o.worker)?, o.end.unwrap_or(o.begin).as_secs_f64())))
            .chain(
                ls_refused
                    .clone()
                    .filter_map(|o| Some((row(&o.worker)?, o.ret.unwrap_or(o.invoke).as_secs_f64()))),
            )
            .collect();
        let explained = r
            .overlaps
            .iter()
            .filter(|o| o.explanation.is_some())
            .filter_map(|o| Some((row(&h.holds.get(o.later)?.worker)?, o.at.as_secs_f64())))
            .collect();
        let unexplained: Vec<f64> =
            r.overlaps.iter().filter(|o| o.explanation.is_none()).map(|o| o.at.as_secs_f64()).collect();
        let refused_n = h.ops.iter().filter(|o| o.refused).count() + ls_refused.count();
        let title = format!(
            "{mode}: holds {}, faults {}, writes refused by fencing {refused_n}, holds begun beside a paused \
             holder {}, violations {}",
            h.holds.len(),
            run.faults.iter().filter(|f| f.phase == mode).count(),
            r.overlaps.len() - unexplained.len(),
            r.violations
        );
        let (from, to) = (r.span.0.as_secs_f64(), r.span.1.as_secs_f64().max(r.span.0.as_secs_f64() + 1.0));
        Panel { title, from, to, rows, bars, faults, pauses, kills, refused, explained, unexplained }
    }

    fn height(&self) -> i32 {
        TITLE_H + LANE_H * LANES as i32 + ROW_H * self.rows.len().max(1) as i32 + AXIS_H + GAP
    }
}

fn hold_color(kind: Kind) -> RGBColor {
    match kind {
        Kind::Exclusive => RGBColor(31, 119, 180),
        Kind::Read => RGBColor(44, 160, 44),
        Kind::Write => RGBColor(140, 86, 75),
        Kind::Lease(1) => RGBColor(23, 190, 207),
        Kind::Lease(_) => RGBColor(0, 110, 120),
    }
}

/// A tick step in seconds giving at most ~16 ticks over `span` seconds.
fn tick_step(span: f64) -> f64 {
    [1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0]
        .into_iter()
        .find(|s| span / s <= 16.0)
        .unwrap_or(7200.0)
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn text<'a>(size: u32, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'a> {
    TextStyle { font: (FONT, size).into_font(), color: color.to_backend_color(), pos: Pos::new(h, v) }
}

fn e<E: std::fmt::Display>(err: E) -> String {
    err.to_string()
}

fn draw_panel(root: &Area, p: &Panel, y0: i32) -> Result<(), String> {
    let plot_w = WIDTH as i32 - LEFT - RIGHT;
    let x =
        |t: f64| LEFT + (((t - p.from) / (p.to - p.from)).clamp(0.0, 1.0) * f64::from(plot_w)).round() as i32;
    let lanes_y = y0 + TITLE_H;
    let rows_y = lanes_y + LANE_H * LANES as i32;
    let n = p.rows.len().max(1) as i32;
    let rows_end = rows_y + ROW_H * n;
    let row_y = |i: usize| rows_y + ROW_H * i as i32;
    let black = RGBColor(0, 0, 0);
    root.draw(&Text::new(p.title.clone(), (LEFT, y0 + 4), text(14, black, HPos::Left, VPos::Top)))
        .map_err(e)?;
    // Rows: alternating stripes and the worker's name.
    for (i, name) in p.rows.iter().enumerate() {
        if i % 2 == 1 {
            let stripe = RGBColor(244, 244, 244).filled();
            root.draw(&Rectangle::new([(LEFT, row_y(i)), (LEFT + plot_w, row_y(i) + ROW_H)], stripe))
                .map_err(e)?;
        }
        let label = text(12, black, HPos::Right, VPos::Center);
        root.draw(&Text::new(name.clone(), (LEFT - 6, row_y(i) + ROW_H / 2), label)).map_err(e)?;
    }
    // Time axis: grid lines and ticks.
    let step = tick_step(p.to - p.from);
    let mut t = (p.from / step).ceil() * step;
    while t <= p.to + 1e-9 {
        let grid = RGBColor(215, 215, 215);
        root.draw(&PathElement::new(vec![(x(t), rows_y), (x(t), rows_end + 3)], grid)).map_err(e)?;
        let label = text(11, black, HPos::Center, VPos::Top);
        root.draw(&Text::new(format!("{t:.0}"), (x(t), rows_end + 5), label)).map_err(e)?;
        t += step;
    }
    // Faults: a translucent span over every row, stronger on the rows hit.
    for f in &p.faults {
        let (x0, x1) = (x(f.from), x(f.to).max(x(f.from) + 2));
        let c = f.scope.color();
        root.draw(&Rectangle::new([(x0, rows_y), (x1, rows_end)], c.mix(0.13).filled())).map_err(e)?;
        for &i in &f.rows {
            root.draw(&Rectangle::new([(x0, row_y(i)), (x1, row_y(i) + ROW_H)], c.mix(0.3).filled()))
                .map_err(e)?;
        }
    }
    // Paused processes.
    for &(i, from, to) in &p.pauses {
        let (x0, x1) = (x(from), x(to).max(x(from) + 2));
        let grey = RGBColor(60, 60, 60).mix(0.45).filled();
        root.draw(&Rectangle::new([(x0, row_y(i) + 1), (x1, row_y(i) + ROW_H - 1)], grey)).map_err(e)?;
    }
    // Holds.
    for b in &p.bars {
        let (top, bottom) = (row_y(b.row) + 5, row_y(b.row) + ROW_H - 5);
        let c = hold_color(b.kind);
        let (x0, xs, x1) = (x(b.from), x(b.safe_to), x(b.to));
        root.draw(&Rectangle::new([(x0, top), (xs.max(x0 + 1), bottom)], c.filled())).map_err(e)?;
        if x1 > xs {
            root.draw(&Rectangle::new([(xs, top), (x1, bottom)], c.mix(0.3).filled())).map_err(e)?;
            root.draw(&Rectangle::new([(xs, top), (x1, bottom)], c.stroke_width(1))).map_err(e)?;
        }
    }
    // Kills, refused writes, overlaps.
    for &(i, at) in &p.kills {
        let bar = black.filled();
        root.draw(&Rectangle::new([(x(at) - 1, row_y(i)), (x(at) + 2, row_y(i) + ROW_H)], bar)).map_err(e)?;
    }
    let red = RGBColor(220, 0, 0);
    for &(i, at) in &p.explained {
        let mark = TriangleMarker::new((x(at), row_y(i) + 4), 4, RGBColor(255, 120, 0).filled());
        root.draw(&mark).map_err(e)?;
    }
    for &(i, at) in &p.refused {
        root.draw(&Cross::new((x(at), row_y(i) + ROW_H / 2), 5, red.stroke_width(2))).map_err(e)?;
    }
    for &at in &p.unexplained {
        root.draw(&Rectangle::new([(x(at) - 1, lanes_y), (x(at) + 1, rows_end)], red.filled())).map_err(e)?;
    }
    // Fault labels above the rows, each in the first lane free at its start.
    let mut lane_end = [i32::MIN; LANES];
    for f in &p.faults {
        let style = text(11, f.scope.color(), HPos::Left, VPos::Top);
        let (w, _) = root.estimate_text_size(&f.label, &style).map_err(e)?;
        let x0 = x(f.from);
        let lane = (0..LANES).find(|&l| lane_end[l] < x0).unwrap_or_else(|| {
            (0..LANES).min_by_key(|&l| lane_end[l]).unwrap_or(0) // all taken: the least crowded
        });
        lane_end[lane] = x0 + w as i32 + 6;
        let ly = lanes_y + LANE_H * lane as i32;
        root.draw(&PathElement::new(vec![(x0, ly + 1), (x0, rows_y)], f.scope.color())).map_err(e)?;
        root.draw(&Text::new(f.label.clone(), (x0 + 2, ly + 1), style)).map_err(e)?;
    }
    // The frame.
    let frame = RGBColor(120, 120, 120);
    root.draw(&Rectangle::new([(LEFT, rows_y), (LEFT + plot_w, rows_end)], frame.stroke_width(1)))
        .map_err(e)?;
    Ok(())
}

fn draw_legend(root: &Area, y: i32) -> Result<(), String> {
    let black = RGBColor(0, 0, 0);
    let label = text(12, black, HPos::Left, VPos::Center);
    let x = std::cell::Cell::new(LEFT);
    let next = |root: &Area, name: &str, y: i32, swatch: &dyn Fn(&Area, i32, i32) -> Result<(), String>| {
        swatch(root, x.get(), y)?;
        root.draw(&Text::new(name.to_string(), (x.get() + 22, y), label.clone())).map_err(e)?;
        let (w, _) = root.estimate_text_size(name, &label).map_err(e)?;
        x.set(x.get() + 22 + w as i32 + 18);
        Ok::<(), String>(())
    };
    let bar = |c: RGBColor| {
        move |root: &Area, x: i32, y: i32| {
            root.draw(&Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.filled())).map_err(e)
        }
    };
    let span = |c: RGBColor| {
        move |root: &Area, x: i32, y: i32| {
            root.draw(&Rectangle::new([(x, y - 8), (x + 16, y + 8)], c.mix(0.3).filled())).map_err(e)
        }
    };
    next(root, "hold: exclusive / leader", y, &bar(hold_color(Kind::Exclusive)))?;
    next(root, "read", y, &bar(hold_color(Kind::Read)))?;
    next(root, "write", y, &bar(hold_color(Kind::Write)))?;
    next(root, "lease 1", y, &bar(hold_color(Kind::Lease(1))))?;
    next(root, "lease 2", y, &bar(hold_color(Kind::Lease(2))))?;
    next(root, "past its safe window", y, &|root: &Area, x: i32, y: i32| {
        let c = hold_color(Kind::Exclusive);
        root.draw(&Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.mix(0.3).filled())).map_err(e)?;
        root.draw(&Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.stroke_width(1))).map_err(e)
    })?;
    next(root, "process paused", y, &bar(RGBColor(150, 150, 150)))?;
    next(root, "process killed", y, &|root: &Area, x: i32, y: i32| {
        root.draw(&Rectangle::new([(x + 7, y - 9), (x + 10, y + 9)], black.filled())).map_err(e)
    })?;
    x.set(LEFT);
    let y = y + 24;
    next(root, "write refused by fencing", y, &|root: &Area, x: i32, y: i32| {
        root.draw(&Cross::new((x + 8, y), 5, RGBColor(220, 0, 0).stroke_width(2))).map_err(e)
    })?;
    next(root, "hold began beside a paused holder", y, &|root: &Area, x: i32, y: i32| {
        root.draw(&TriangleMarker::new((x + 8, y), 5, RGBColor(255, 120, 0).filled())).map_err(e)
    })?;
    next(root, "unexplained overlap", y, &|root: &Area, x: i32, y: i32| {
        root.draw(&Rectangle::new([(x + 7, y - 9), (x + 9, y + 9)], RGBColor(220, 0, 0).filled())).map_err(e)
    })?;
    next(root, "fault: ZooKeeper server", y, &span(Scope::Servers.color()))?;
    next(root, "client path", y, &span(Scope::Client.color()))?;
    next(root, "worker process", y, &span(Scope::Process.color()))?;
    Ok(())
}

/// Draws `panels` stacked, under `title`, into a PNG at `path` (its directory created).
pub fn draw(path: &Path, title: &str, panels: &[Panel]) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(e)?;
    }
    let height = HEADER_H + LEGEND_H + panels.iter().map(Panel::height).sum::<i32>() + GAP;
    let root = BitMapBackend::new(path, (WIDTH, height as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let black = RGBColor(0, 0, 0);
    root.draw(&Text::new(title.to_string(), (LEFT, 8), text(16, black, HPos::Left, VPos::Top))).map_err(e)?;
    draw_legend(&root, HEADER_H + 10)?;
    let mut y = HEADER_H + LEGEND_H;
    for p in panels {
        draw_panel(&root, p, y)?;
        y += p.height();
    }
    root.present().map_err(e)
}

/// The run's picture at `path`: every phase of `reports`, with the run's faults.
pub fn write(
    path: &Path,
    seed: u64,
    secs: u64,
    reports: &[(String, PhaseReport)],
    run: &Run,
) -> Result<(), String> {
    let panels: Vec<Panel> = reports.iter().map(|(mode, r)| Panel::of(mode, r, run)).collect();
    let violations: usize = reports.iter().map(|(_, r)| r.violations).sum();
    let title = format!(
        "chaos run, seed {seed}, {secs} s per phase: {violations} violations (x: seconds since the run \
         began; one row per worker, pN = worker process N)"
    );
    draw(path, &title, &panels)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::checker::{Hold, Op, Overlap, Pause};
    use crate::faults::Fault;
    use crate::resource::History;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    fn hold(worker: &str, pid: u32, kind: Kind, (start, end, deadline): (f64, f64, f64)) -> Hold {
        Hold {
            worker: worker.into(),
            pid,
            resource: "/chaos/rwlock".into(),
            kind,
            token: 1,
            start: s(start),
            end: s(end),
            deadline: s(deadline),
            cause: "done".into(),
        }
    }

    /// A small phase: a writer paused past its safe window, a reader beside it, a refused
    /// write, a fault on p1w0's path and a kill of process 0.
    fn sample() -> (Vec<(String, PhaseReport)>, Run) {
        let mut h = History::default();
        h.holds = vec![
            hold("p0w0", 100, Kind::Write, (10.5, 14.0, 12.0)),
            hold("p1w0", 200, Kind::Read, (13.0, 13.5, 20.0)),
            hold("p1w1", 200, Kind::Read, (13.2, 15.0, 20.0)),
        ];
        h.ops = vec![Op {
            worker: "p0w0".into(),
            pid: 100,
            resource: "/chaos/rwlock".into(),
            kind: Kind::Write,
            token: 1,
            begin: s(13.9),
            end: Some(s(14.0)),
            begun: true,
            accepted: false,
            refused: true,
        }];
        let overlaps = vec![Overlap {
            resource: "/chaos/rwlock".into(),
            at: s(13.0),
            later: 1,
            earlier: vec![0],
            explanation: Some("paused".into()),
        }];
        let report = PhaseReport {
            lines: Vec::new(),
            violations: 0,
            history: h,
            overlaps,
            episodes: 1,
            span: (s(10.0), s(20.0)),
            lockset: None,
        };
        let fault = |fault, start, end, detail: &str| FaultRec {
            phase: "rwlock".into(),
            fault,
            start: s(start),
            end: s(end),
            detail: detail.into(),
        };
        let run = Run {
            pauses: vec![Pause { pid: 100, from: s(11.0), to: s(14.0) }],
            kills: vec![(100, s(16.0))],
            faults: vec![
                fault(Fault::PauseWorkerProcess, 11.0, 14.0, "p0 (pid 100; holding: p0w0)"),
                fault(Fault::SlowPath, 15.0, 18.0, "p1w0 300 ms"),
                fault(Fault::KillZkLeader, 18.0, 19.0, "server 1"),
                fault(Fault::KillWorkerProcess, 16.0, 16.1, "p0 (pid 100; holding: -)"),
            ],
            ..Run::default()
        };
        (vec![("rwlock".into(), report)], run)
    }

    #[test]
    fn a_phase_maps_to_rows_bars_spans_and_marks() {
        let (reports, run) = sample();
        let p = Panel::of("rwlock", &reports[0].1, &run);
        assert_eq!(p.rows, ["p0w0", "p1w0", "p1w1"]);
        assert_eq!((p.from, p.to), (10.0, 20.0));
        // The writer's hold: solid to its safe window's end, pale after.
        let w = &p.bars[0];
        assert_eq!((w.row, w.from, w.safe_to, w.to, w.kind), (0, 10.5, 12.0, 14.0, Kind::Write));
        assert_eq!(p.bars[2].row, 2);
        assert_eq!(p.pauses, [(0, 11.0, 14.0)]);
        assert_eq!(p.kills, [(0, 16.0)]);
        assert_eq!(p.refused, [(0, 14.0)]);
        assert_eq!(p.explained, [(1, 13.0)]);
        assert!(p.unexplained.is_empty());
        let spans: Vec<(&str, Scope, &[usize])> =
            p.faults.iter().map(|f| (f.label.as_str(), f.scope, f.rows.as_slice())).collect();
        assert_eq!(
            spans,
            [
                ("SIGSTOP p0", Scope::Process, &[0][..]),
                ("slow p1w0", Scope::Client, &[1][..]),
                ("kill leader", Scope::Servers, &[][..]),
                ("SIGKILL p0", Scope::Process, &[0][..]),
            ]
        );
    }

    #[test]
    fn a_run_draws_a_png() {
        let (reports, run) = sample();
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sub/timeline.png");
        write(&path, 5, 10, &reports, &run).expect("drawn");
        let bytes = std::fs::read(&path).expect("written");
        assert!(bytes.len() > 1000, "{} bytes", bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }
}
