//! The report: CSV of every run, a Markdown summary, and PNG plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use crate::peers::Peer;

/// One measured run.
#[derive(Clone, Debug)]
pub struct Row {
    pub scenario: &'static str,
    pub peer: Peer,
    pub n: usize,
    pub repeat: usize,
    /// Operations per second (handoffs, cycles).
    pub rate: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub packets_per_op: f64,
    pub overlaps: usize,
    /// Scenario-specific extra (RSS bytes per waiter for `scale`).
    pub extra: f64,
}

pub fn write_csv(rows: &[Row], path: &Path) -> std::io::Result<()> {
    let mut out =
        String::from("scenario,peer,n,repeat,rate_per_s,p50_us,p99_us,packets_per_op,overlaps,extra\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{:.1},{:.1},{:.1},{:.2},{},{:.1}",
            r.scenario,
            r.peer.short(),
            r.n,
            r.repeat,
            r.rate,
            r.p50_us,
            r.p99_us,
            r.packets_per_op,
            r.overlaps,
            r.extra
        );
    }
    std::fs::write(path, out)
}

/// Means over repeats, keyed by (scenario, n, peer).
pub fn means(rows: &[Row]) -> BTreeMap<(&'static str, usize, Peer), Row> {
    let mut groups: BTreeMap<(&'static str, usize, Peer), Vec<&Row>> = BTreeMap::new();
    for r in rows {
        groups.entry((r.scenario, r.n, r.peer)).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|(k, v)| {
            let mean = |f: fn(&Row) -> f64| v.iter().map(|r| f(r)).sum::<f64>() / v.len() as f64;
            let row = Row {
                scenario: k.0,
                peer: k.2,
                n: k.1,
                repeat: v.len(),
                rate: mean(|r| r.rate),
                p50_us: mean(|r| r.p50_us),
                p99_us: mean(|r| r.p99_us),
                packets_per_op: mean(|r| r.packets_per_op),
                overlaps: v.iter().map(|r| r.overlaps).sum(),
                extra: mean(|r| r.extra),
            };
            (k, row)
        })
        .collect()
}

/// Plots `value` against N for each peer of `scenario`, on a log-2 N axis.
pub fn plot(
    means: &BTreeMap<(&'static str, usize, Peer), Row>,
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
            (
                *p,
                means
                    .values()
                    .filter(|r| r.scenario == scenario && r.peer == *p)
                    .map(|r| ((r.n as f64).log2(), value(r)))
                    .collect(),
            )
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
    let colors = [RED, BLUE, GREEN, MAGENTA, BLACK];
    for (i, (peer, points)) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
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
