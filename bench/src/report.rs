//! The report: CSV of every run, a Markdown summary (every cell the median and the min–max over
//! the repeats), and PNG plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use zk_testcluster::ZkVersion;

use crate::peers::Peer;
use crate::stats::Spread;

/// One measured run. Metrics a scenario does not measure are NaN (empty in the CSV).
#[derive(Clone, Debug)]
pub struct Row {
    pub scenario: &'static str,
    pub peer: Peer,
    /// Contenders or waiters; the failover rows' session timeout, ms.
    pub n: usize,
    pub repeat: usize,
    /// Operations per second (handoffs, cycles, releases).
    pub rate: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub packets_per_op: f64,
    /// The requests' bytes per operation, as the servers counted them (`mntr`).
    pub bytes_in_per_op: f64,
    /// The replies' bytes per operation, as the servers counted them (`mntr`: watch events not
    /// included).
    pub bytes_out_per_op: f64,
    pub overlaps: usize,
    /// Scenario-specific extra: RSS bytes per waiter (`scale`), lock paths (`many-locks`), most
    /// holders at once (`semaphore`).
    pub extra: f64,
    /// User + system CPU time of the client process per operation, µs.
    pub cpu_us_per_op: f64,
    /// User + system CPU time of the servers (every node's JVM) per operation, µs.
    pub server_cpu_us_per_op: f64,
    /// `per-order`: nodes under the run's parent when the run ended.
    pub left_at_end: f64,
    /// `per-order`: nodes under the run's parent once the container reaper is done (or gave up).
    pub left_after_reaper: f64,
    /// `per-order`: seconds from the run's end until the count stopped changing.
    pub reaper_secs: f64,
    /// Failover, medians over the kills (`peers::failover`'s `Split`): from the last reply the
    /// server sent the killed leader to the kill; what the server's tick added to its expiry;
    /// from the expiry to the new leader's task. ms.
    pub quiet_ms: f64,
    pub rounding_ms: f64,
    pub after_expiry_ms: f64,
}

impl Row {
    /// A row with every optional metric unmeasured.
    pub fn new(scenario: &'static str, peer: Peer, n: usize, repeat: usize, rate: f64) -> Row {
        Row {
            scenario,
            peer,
            n,
            repeat,
            rate,
            p50_us: f64::NAN,
            p99_us: f64::NAN,
            packets_per_op: f64::NAN,
            bytes_in_per_op: f64::NAN,
            bytes_out_per_op: f64::NAN,
            overlaps: 0,
            extra: f64::NAN,
            cpu_us_per_op: f64::NAN,
            server_cpu_us_per_op: f64::NAN,
            left_at_end: f64::NAN,
            left_after_reaper: f64::NAN,
            reaper_secs: f64::NAN,
            quiet_ms: f64::NAN,
            rounding_ms: f64::NAN,
            after_expiry_ms: f64::NAN,
        }
    }

    /// Bytes per operation both ways (requests and replies, `mntr`).
    pub fn bytes_per_op(&self) -> f64 {
        self.bytes_in_per_op + self.bytes_out_per_op
    }
}

fn csv_num(x: f64, decimals: usize) -> String {
    if x.is_nan() {
        String::new()
    } else {
        format!("{x:.decimals$}")
    }
}

/// Writes `results.csv`: one line per row, the first column the server it ran on.
pub fn write_csv(rows: &[Row], server: ZkVersion, path: &Path) -> std::io::Result<()> {
    let mut out = String::from(
        "server,scenario,peer,n,repeat,rate_per_s,p50_us,p99_us,packets_per_op,overlaps,extra,\
         cpu_us_per_op,server_cpu_us_per_op,nodes_left_at_end,nodes_left_after_reaper,reaper_secs,\
         bytes_in_per_op,bytes_out_per_op,quiet_ms,rounding_ms,after_expiry_ms\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{server},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.scenario,
            r.peer.short(),
            r.n,
            r.repeat,
            csv_num(r.rate, 1),
            csv_num(r.p50_us, 1),
            csv_num(r.p99_us, 1),
            csv_num(r.packets_per_op, 2),
            r.overlaps,
            csv_num(r.extra, 1),
            csv_num(r.cpu_us_per_op, 2),
            csv_num(r.server_cpu_us_per_op, 2),
            csv_num(r.left_at_end, 0),
            csv_num(r.left_after_reaper, 0),
            csv_num(r.reaper_secs, 2),
            csv_num(r.bytes_in_per_op, 1),
            csv_num(r.bytes_out_per_op, 1),
            csv_num(r.quiet_ms, 1),
            csv_num(r.rounding_ms, 1),
            csv_num(r.after_expiry_ms, 1),
        );
    }
    std::fs::write(path, out)
}

pub type Key = (&'static str, usize, Peer);

/// Runs grouped by (scenario, n, peer).
pub struct Groups(pub BTreeMap<Key, Vec<Row>>);

impl Groups {
    pub fn of(rows: &[Row]) -> Groups {
        let mut groups: BTreeMap<Key, Vec<Row>> = BTreeMap::new();
        for r in rows {
            groups.entry((r.scenario, r.n, r.peer)).or_default().push(r.clone());
        }
        Groups(groups)
    }

    /// The spread of `metric` over the repeats of (scenario, n, peer).
    pub fn spread(&self, scenario: &str, n: usize, peer: Peer, metric: fn(&Row) -> f64) -> Option<Spread> {
        let rows = self.0.iter().find(|((s, k, p), _)| *s == scenario && *k == n && *p == peer)?.1;
        Spread::of(rows.iter().map(metric))
    }

    pub fn median(&self, scenario: &str, n: usize, peer: Peer, metric: fn(&Row) -> f64) -> Option<f64> {
        self.spread(scenario, n, peer, metric).map(|s| s.median)
    }

    /// The peers with runs of `scenario`, in the report's order.
    pub fn peers_of(&self, scenario: &str) -> Vec<Peer> {
        let mut peers: Vec<Peer> = self.0.keys().filter(|k| k.0 == scenario).map(|k| k.2).collect();
        peers.sort();
        peers.dedup();
        peers
    }

    /// The Ns of `scenario`, ascending.
    pub fn ns_of(&self, scenario: &str) -> Vec<usize> {
        let mut ns: Vec<usize> = self.0.keys().filter(|k| k.0 == scenario).map(|k| k.1).collect();
        ns.sort_unstable();
        ns.dedup();
        ns
    }
}

/// `1234.5` → `"1,235"` (decimals 0) or `"1234.5"` (decimals 1).
pub fn num(x: f64, decimals: usize) -> String {
    if decimals > 0 {
        return format!("{x:.decimals$}");
    }
    let s = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 && s != "0" {
        out.insert(0, '-');
    }
    out
}

/// A table cell: the median, and the min–max when there was more than one repeat.
pub fn cell(spread: Option<Spread>, decimals: usize) -> String {
    match spread {
        None => "–".into(),
        Some(s) => {
            let (median, min, max) = (num(s.median, decimals), num(s.min, decimals), num(s.max, decimals));
            if s.count == 1 || min == max {
                median
            } else {
                format!("{median} ({min}–{max})")
            }
        }
    }
}

/// The legend of [`headline_cell`]'s mark.
pub const UNSTEADY_LEGEND: &str = "† the spread over the repeats, (max − min) ÷ median, is above 10 %: \
     the figure did not repeat; read it, and ratios made with it, with care.";

/// A cell of a row's headline figure (operations per second, or a handover): the median, and
/// with more than one repeat the min–max and the spread, (max − min) ÷ median, marked "†" when
/// it is above [`crate::stats::UNSTEADY`].
pub fn headline_cell(spread: Option<Spread>, decimals: usize) -> String {
    let Some(s) = spread else { return cell(None, decimals) };
    match s.relative() {
        None => cell(spread, decimals),
        Some(rel) => format!(
            "{} ({}–{}; {:.0} %){}",
            num(s.median, decimals),
            num(s.min, decimals),
            num(s.max, decimals),
            rel * 100.0,
            mark(s.unsteady())
        ),
    }
}

/// " †" when `unsteady`.
pub fn mark(unsteady: bool) -> &'static str {
    if unsteady {
        " †"
    } else {
        ""
    }
}

/// Plots the median of `value` against N for each peer of `scenario`, on a log-2 N axis.
pub fn plot(
    groups: &Groups,
    scenario: &str,
    peers: &[Peer],
    value: fn(&Row) -> f64,
    title: &str,
    y_label: &str,
    path: &Path,
) -> Result<(), String> {
    let series: Vec<(Peer, Vec<(f64, f64)>)> = peers
        .iter()
        .map(|p| {
            let pts = groups
                .ns_of(scenario)
                .into_iter()
                .filter_map(|n| Some(((n as f64).log2(), groups.median(scenario, n, *p, value)?)))
                .collect();
            (*p, pts)
        })
        .filter(|(_, pts): &(Peer, Vec<(f64, f64)>)| !pts.is_empty())
        .collect();
    let x_max = series.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x)).fold(1.0, f64::max);
    let y_max = series.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y)).fold(1.0, f64::max) * 1.1;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.8f64..x_max + 0.2, 0f64..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("contenders N (log2 scale)")
        .y_desc(y_label)
        .x_label_formatter(&|x| format!("{}", 2f64.powf(*x).round()))
        .draw()
        .map_err(|e| e.to_string())?;
    for (peer, points) in &series {
        let color = color_of(*peer);
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))
            .map_err(|e| e.to_string())?
            .label(peer.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 5, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

fn color_of(peer: Peer) -> RGBColor {
    match peer {
        Peer::ZkRecipes => RGBColor(214, 39, 40),
        Peer::ZkRecipesDrop => RGBColor(255, 127, 14),
        Peer::LockClient => RGBColor(31, 119, 180),
        Peer::Curator => RGBColor(44, 160, 44),
        Peer::Kazoo => RGBColor(148, 103, 189),
        Peer::Naive => RGBColor(90, 90, 90),
    }
}

/// A grouped bar chart: one group per label, one bar per peer (missing values leave a gap),
/// with optional horizontal reference lines (e.g. 1.0 for ratios).
pub fn bars(
    groups: &[(String, Vec<(Peer, f64)>)],
    title: &str,
    y_label: &str,
    references: &[f64],
    legend: SeriesLabelPosition,
    path: &Path,
) -> Result<(), String> {
    let mut peers: Vec<Peer> = groups.iter().flat_map(|(_, v)| v.iter().map(|(p, _)| *p)).collect();
    peers.sort();
    peers.dedup();
    let y_max = groups
        .iter()
        .flat_map(|(_, v)| v.iter().map(|(_, y)| *y))
        .chain(references.iter().copied())
        .filter(|y| y.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.15;
    let width = (140 * groups.len().max(1) as u32 + 160).max(700);
    let root = BitMapBackend::new(path, (width, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..groups.len().max(1) as f64, 0f64..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|_| String::new())
        .y_desc(y_label)
        .draw()
        .map_err(|e| e.to_string())?;
    let slot = 0.8 / peers.len().max(1) as f64;
    for (k, peer) in peers.iter().enumerate() {
        let color = color_of(*peer);
        let rects: Vec<_> = groups
            .iter()
            .enumerate()
            .filter_map(|(i, (_, v))| {
                let y = v.iter().find(|(p, _)| p == peer)?.1;
                let x0 = i as f64 + 0.1 + k as f64 * slot;
                y.is_finite().then(|| Rectangle::new([(x0, 0.0), (x0 + slot * 0.9, y)], color.filled()))
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(|e| e.to_string())?
            .label(peer.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    for &r in references {
        chart
            .draw_series(LineSeries::new([(0.0, r), (groups.len() as f64, r)], BLACK.stroke_width(1)))
            .map_err(|e| e.to_string())?;
    }
    let style = TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, (label, _)) in groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        root.draw(&Text::new(label.clone(), (x, y + 8), style.clone())).map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(legend)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_cells() {
        assert_eq!(num(1234567.4, 0), "1,234,567");
        assert_eq!(num(999.0, 0), "999");
        assert_eq!(num(9.25, 1), "9.2");
        let s = Spread::of([2900.0, 3010.0, 2801.0]);
        assert_eq!(cell(s, 0), "2,900 (2,801–3,010)");
        assert_eq!(cell(Spread::of([5.0]), 1), "5.0");
        assert_eq!(cell(None, 0), "–");
        assert_eq!(cell(Spread::of([9.01, 8.99]), 1), "9.0");
    }

    #[test]
    fn headline_cells_show_the_spread_and_mark_it_above_ten_percent() {
        assert_eq!(headline_cell(Spread::of([2900.0, 3010.0, 2801.0]), 0), "2,900 (2,801–3,010; 7 %)");
        assert_eq!(headline_cell(Spread::of([1000.0, 1200.0, 1100.0]), 0), "1,100 (1,000–1,200; 18 %) †");
        assert_eq!(headline_cell(Spread::of([5.0]), 0), "5");
        assert_eq!(headline_cell(None, 0), "–");
    }
}
