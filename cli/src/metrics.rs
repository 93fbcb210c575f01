//! `--metrics-addr` (`run`, `elect`): the library's metrics (docs/metrics.md) on a Prometheus
//! endpoint, served by `metrics-exporter-prometheus`'s own HTTP listener at
//! `http://ADDR/metrics` while zklock runs, with the buckets of `examples/metrics.rs`, so that
//! the dashboard and alert rules in `ops/` read zklock as they read any application.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

use crate::exit::{self, Failure};

/// Bucket bounds (seconds) of every `_seconds` histogram: a millisecond to half an hour.
/// docs/metrics.md lists them; `cli/tests/metrics.rs` checks what zklock serves against it.
const SECONDS_BUCKETS: [f64; 19] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0,
];

/// Bucket bounds of `zk_recipes_queue_length_at_join`.
const QUEUE_BUCKETS: [f64; 12] = [0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

/// Starts the endpoint on `addr` and makes it the process's recorder, before anything connects
/// (so the first session's state changes are counted). Nothing without `addr`. An address that
/// cannot be listened on is a usage error (exit 64), reported before the lock is taken.
pub fn serve(addr: Option<SocketAddr>) -> Result<(), Failure> {
    let Some(addr) = addr else { return Ok(()) };
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full("zk_recipes_queue_length_at_join".into()), &QUEUE_BUCKETS)
        })
        .and_then(|b| b.with_http_listener(addr).install())
        .map_err(|e| Failure::new(exit::USAGE, format!("--metrics-addr {addr}: {e}")))
}
