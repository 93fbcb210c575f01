//! Metrics end to end: the dashboard (`ops/grafana-dashboard.json`) and the
//! alert rules (`ops/alerts.yml`) against a real Prometheus scraping a real workload.
//!
//! Prometheus is Debian's package, unpacked by `scripts/ensure-prometheus` (no service) and run
//! from a temporary directory on a free loopback port. Without it these tests fail, saying so:
//! they never skip. Every process they start is stopped by PID when its guard drops, also
//! while a test panics.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// The bound on the whole wait for every query to return a series.
const DEADLINE: Duration = Duration::from_secs(180);
/// What Grafana's `$__rate_interval` stands for in the queries we run (Grafana makes it at
/// least four scrape intervals).
const RATE_INTERVAL: &str = "1m";

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(REPO).join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// `prometheus` and `promtool`, from `scripts/ensure-prometheus`.
fn tools() -> (PathBuf, PathBuf) {
    let script = Path::new(REPO).join("scripts/ensure-prometheus");
    let out = Command::new(&script)
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut paths = stdout.lines().map(PathBuf::from);
    match (out.status.success(), paths.next(), paths.next()) {
        (true, Some(prometheus), Some(promtool)) => (prometheus, promtool),
        _ => panic!(
            "these tests need a Prometheus server and promtool, and scripts/ensure-prometheus could not \
             provide them (Debian's prometheus package, fetched with apt-get download):\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A process we started: killed by PID and reaped when dropped.
struct Process {
    name: &'static str,
    child: Child,
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has ended.
    fn ended(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap_or_else(|e| panic!("waiting for {}: {e}", self.name))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.ended().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// What the dashboard and the rules contain.

/// Every PromQL expression of the dashboard's panels (rows' nested panels too), and its
/// variables' queries, as written (Grafana variables unexpanded).
fn dashboard() -> (Vec<String>, Vec<String>) {
    let json: serde_json::Value =
        serde_json::from_str(&read("ops/grafana-dashboard.json")).expect("the dashboard is JSON");
    fn panels(list: &serde_json::Value, exprs: &mut Vec<String>) {
        for panel in list.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                exprs.push(target["expr"].as_str().expect("every target has an expr").to_string());
            }
            panels(&panel["panels"], exprs);
        }
    }
    let mut exprs = Vec::new();
    panels(&json["panels"], &mut exprs);
    let variables = json["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            v["query"]["query"].as_str().or(v["query"].as_str()).expect("a variable's query").to_string()
        })
        .collect();
    (exprs, variables)
}

/// The alert rules of `ops/alerts.yml`: (name, expression). The file writes each expression as
/// a plain scalar or a `|` block; `promtool check rules` confirms the count.
fn alerts() -> Vec<(String, String)> {
    let text = read("ops/alerts.yml");
    let lines: Vec<&str> = text.lines().collect();
    let mut rules = Vec::new();
    let mut name = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(alert) = trimmed.strip_prefix("- alert:") {
            name = Some(alert.trim().to_string());
        } else if let Some(rest) = trimmed.strip_prefix("expr:") {
            let indent = line.len() - trimmed.len();
            let rest = rest.trim();
            let expr = if rest.starts_with('|') || rest.starts_with('>') {
                let mut block = Vec::new();
                while i + 1 < lines.len()
                    && (lines[i + 1].trim().is_empty()
                        || lines[i + 1].len() - lines[i + 1].trim_start().len() > indent)
                {
                    i += 1;
                    block.push(lines[i].trim());
                }
                block.join("\n").trim().to_string()
            } else {
                rest.to_string()
            };
            rules.push((name.take().expect("an expr under `- alert:`"), expr));
        }
        i += 1;
    }
    rules
}

/// The `zk_recipes_*` names an expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("zk_recipes_") {
        let name: String =
            rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[at + name.len()..];
        names.insert(name);
    }
    names
}

/// A histogram's series name without its `_bucket` / `_sum` / `_count` suffix.
fn base(name: &str) -> &str {
    ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name)
}

/// The queries to run: Grafana's variables as Grafana expands them with "All" chosen
/// (`allValue` `.*`), and a variable's `label_values(METRIC, LABEL)` as `count by (LABEL) (METRIC)`.
fn runnable(expr: &str) -> String {
    let expr = if let Some(inner) = expr.strip_prefix("label_values(").and_then(|e| e.strip_suffix(')')) {
        let (metric, label) = inner.rsplit_once(',').expect("label_values(METRIC, LABEL)");
        format!("count by ({}) ({})", label.trim(), metric.trim())
    } else {
        expr.to_string()
    };
    let expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$job", ".*").replace("$role", ".*");
    assert!(!expr.contains('$'), "a Grafana variable this test does not expand: {expr}");
    expr
}

/// The bucket bounds docs/metrics.md lists on the line that starts with `prefix`.
fn documented_buckets(prefix: &str) -> Vec<f64> {
    let docs = read("docs/metrics.md");
    let line =
        docs.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} in docs"));
    line[prefix.len()..].split(',').map(|n| n.trim().parse().expect("a bound")).collect()
}

const SECONDS_BUCKETS_LINE: &str = "- buckets of every `_seconds` histogram:";
const QUEUE_BUCKETS_LINE: &str = "- buckets of `zk_recipes_queue_length_at_join`:";

#[test]
fn the_dashboard_and_the_alerts_read_documented_metrics_and_every_library_metric() {
    let (exprs, variables) = dashboard();
    let rules = alerts();
    assert!(exprs.len() >= 15, "{} dashboard queries", exprs.len());
    assert_eq!(rules.len(), read("ops/alerts.yml").matches("- alert:").count());
    let docs = read("docs/metrics.md");
    let mut named = BTreeSet::new();
    for expr in exprs.iter().chain(&variables).chain(rules.iter().map(|(_, e)| e)) {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "reads no zk_recipes_ metric: {expr}");
        named.extend(names);
    }
    for name in &named {
        assert!(
            docs.contains(&format!("`{name}`")) || docs.contains(&format!("`{}`", base(name))),
            "docs/metrics.md does not document {name}, which the dashboard or the alerts read"
        );
    }
    // Every metric the library records has a panel.
    let source = read("src/metrics.rs");
    let recorded: BTreeSet<String> = source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("zk_recipes_") && !s.contains(' '))
        .map(str::to_string)
        .collect();
    assert!(recorded.len() >= 10, "{recorded:?}");
    let on_dashboard: BTreeSet<String> =
        exprs.iter().flat_map(|e| metric_names(e)).map(|n| base(&n).to_string()).collect();
    for metric in &recorded {
        assert!(on_dashboard.contains(metric), "no dashboard panel reads {metric}");
        assert!(docs.contains(&format!("`{metric}`")), "docs/metrics.md does not document {metric}");
    }
}

#[test]
fn promtool_checks_and_unit_tests_the_alert_rules() {
    let (_, promtool) = tools();
    let check =
        Command::new(&promtool).args(["check", "rules"]).arg(Path::new(REPO).join("ops/alerts.yml")).output();
    let check = check.expect("promtool check rules");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{stdout}{}", String::from_utf8_lossy(&check.stderr));
    assert!(stdout.contains(&format!("SUCCESS: {} rules found", alerts().len())), "{stdout}");
    let test = Command::new(&promtool)
        .args(["test", "rules"])
        .arg(Path::new(REPO).join("ops/alerts_test.yml"))
        .output()
        .expect("promtool test rules");
    let stdout = String::from_utf8_lossy(&test.stdout);
    assert!(test.status.success(), "{stdout}{}", String::from_utf8_lossy(&test.stderr));
    assert!(stdout.contains("SUCCESS"), "{stdout}");
}

// ---------------------------------------------------------------------------------------------
// The end-to-end run.

/// The metrics example, serving on the address it printed first, its output kept for failures.
struct Example {
    process: Process,
    addr: String,
    output: Arc<Mutex<Vec<String>>>,
}

fn start_example(connect: &str) -> Example {
    let mut child = Command::new(common::example_binary("metrics"))
        .env("ZK_CONNECT", connect)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the metrics example");
    let (stdout, stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let process = Process { name: "the metrics example", child };
    let output = Arc::new(Mutex::new(Vec::new()));
    let (first, first_line) = std::sync::mpsc::channel();
    let lines = output.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = first.send(line.clone());
            lines.lock().unwrap().push(line);
        }
    });
    let lines = output.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            lines.lock().unwrap().push(format!("stderr: {line}"));
        }
    });
    let line = first_line
        .recv_timeout(common::PATIENCE)
        .unwrap_or_else(|_| panic!("the metrics example printed no address within {:?}", common::PATIENCE));
    let addr = line
        .strip_prefix("metrics at http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("the example's first line is not its address: {line}"))
        .to_string();
    Example { process, addr, output }
}

/// Prometheus on a free loopback port in `dir`, scraping `target` every second and evaluating
/// `ops/alerts.yml` every second. Tried again on another port when the one asked from the
/// kernel was taken before Prometheus bound it.
fn start_prometheus(prometheus: &Path, dir: &Path, target: &str) -> (Process, String) {
    let config = dir.join("prometheus.yml");
    let rules = Path::new(REPO).join("ops/alerts.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: zk-recipes-example\n    static_configs:\n      - targets: \
             [\"{target}\"]\n",
            rules = rules.display()
        ),
    )
    .expect("writing prometheus.yml");
    for attempt in 1..=5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let listen = format!("127.0.0.1:{port}");
        let log = dir.join(format!("prometheus-{attempt}.log"));
        let log_file = std::fs::File::create(&log).expect("the log file");
        let child = Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={listen}"))
            .current_dir(dir)
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("starting prometheus");
        let mut process = Process { name: "prometheus", child };
        // Ready: the log says so, or it ended (a port taken: try another).
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("Server is ready to receive web requests") {
                return (process, format!("http://{listen}"));
            }
            if process.ended().is_some() {
                assert!(text.contains("address already in use"), "prometheus ended:\n{text}");
                break;
            }
            assert!(
                started.elapsed() < common::PATIENCE,
                "prometheus not ready after {:?}:\n{text}",
                started.elapsed()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("prometheus found no free port in 5 attempts");
}

/// `promtool query instant URL EXPR`, as JSON: the samples' labels and values. A query that
/// does not parse or evaluate fails the test at once.
async fn query(promtool: &Path, url: &str, expr: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let out = tokio::process::Command::new(promtool)
        .args(["query", "-o", "json", "instant", url, expr])
        .kill_on_drop(true)
        .output()
        .await
        .expect("running promtool query");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "promtool query failed for {expr}:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("promtool's answer to {expr} is no JSON ({e}): {stdout}"));
    json.as_array()
        .unwrap_or_else(|| panic!("{expr} is no instant vector: {stdout}"))
        .iter()
        .map(|sample| {
            let labels = serde_json::from_value(sample["metric"].clone()).expect("labels");
            let value = sample["value"][1].as_str().expect("a value").parse().expect("a number");
            (labels, value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_and_alert_returns_series_from_a_real_scrape() {
    let (prometheus, promtool) = tools();
    let zk = common::standalone().await;
    let mut example = start_example(&zk.connect_string());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut server, url) = start_prometheus(&prometheus, dir.path(), &example.addr);
    let started = Instant::now();
    let lines = example.output.clone();
    let output = move || lines.lock().unwrap().join("\n");

    // The target is up: Prometheus scraped the example's listener.
    let up = format!(r#"up{{job="zk-recipes-example",instance="{}"}} == 1"#, example.addr);
    while query(&promtool, &url, &up).await.is_empty() {
        assert!(
            started.elapsed() < DEADLINE,
            "the example's target never came up; example output:\n{}",
            output()
        );
        assert!(server.ended().is_none(), "prometheus ended");
        if let Some(status) = example.process.ended() {
            panic!("the metrics example ended ({status}):\n{}", output());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let target_up = started.elapsed();

    // Every query: the dashboard's panels and variables, the alerts' expressions, and each
    // alert in Prometheus's own ALERTS series (pending or firing: the rules evaluate there).
    let (exprs, variables) = dashboard();
    let rules = alerts();
    let mut pending: Vec<(String, String)> = exprs
        .iter()
        .map(|e| ("dashboard".to_string(), runnable(e)))
        .chain(variables.iter().map(|v| ("variable".to_string(), runnable(v))))
        .chain(rules.iter().map(|(name, e)| (format!("alert {name}"), e.clone())))
        .chain(
            rules
                .iter()
                .map(|(name, _)| (format!("ALERTS {name}"), format!(r#"ALERTS{{alertname="{name}"}}"#))),
        )
        .collect();
    let total = pending.len();
    let mut answered = Vec::new();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for (what, expr) in pending {
            let samples = query(&promtool, &url, &expr).await;
            if samples.iter().any(|(_, v)| v.is_finite()) {
                answered.push((what, expr, samples.len(), started.elapsed()));
            } else {
                still.push((what, expr));
            }
        }
        pending = still;
        if !pending.is_empty() {
            assert!(
                started.elapsed() < DEADLINE,
                "after {:?}, {} of {total} queries still return no sample with a number:\n{}\n\
                 example output:\n{}",
                started.elapsed(),
                pending.len(),
                pending.iter().map(|(w, e)| format!("  {w}: {e}")).collect::<Vec<_>>().join("\n"),
                output()
            );
            assert!(server.ended().is_none(), "prometheus ended");
            if let Some(status) = example.process.ended() {
                panic!("the metrics example ended ({status}):\n{}", output());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    // The example serves the documented buckets.
    for (series, line) in [
        ("zk_recipes_acquire_wait_seconds_bucket", SECONDS_BUCKETS_LINE),
        ("zk_recipes_hold_seconds_bucket", SECONDS_BUCKETS_LINE),
        ("zk_recipes_lock_delay_seconds_bucket", SECONDS_BUCKETS_LINE),
        ("zk_recipes_queue_length_at_join_bucket", QUEUE_BUCKETS_LINE),
    ] {
        let mut served: Vec<f64> = query(&promtool, &url, &format!("count by (le) ({series})"))
            .await
            .iter()
            .map(|(labels, _)| labels["le"].parse::<f64>().expect("le"))
            .collect();
        served.sort_by(f64::total_cmp);
        let mut expected = documented_buckets(line);
        expected.push(f64::INFINITY);
        assert_eq!(served, expected, "{series}'s bounds");
    }

    // Figures for the record (cargo test -- --nocapture shows them).
    let series = query(&promtool, &url, r#"count({__name__=~"zk_recipes_.+"})"#).await;
    let scraped = query(&promtool, &url, r#"scrape_samples_scraped{job="zk-recipes-example"}"#).await;
    let scrapes = query(&promtool, &url, r#"count_over_time(up{job="zk-recipes-example"}[10m])"#).await;
    println!(
        "target up after {target_up:?}; {total} queries answered after {:?}; {} zk_recipes series; \
         {} samples a scrape; {} scrapes",
        started.elapsed(),
        series.first().map_or(0.0, |s| s.1),
        scraped.first().map_or(0.0, |s| s.1),
        scrapes.first().map_or(0.0, |s| s.1),
    );
    for (what, expr, n, at) in &answered {
        println!("{at:>8.1?} {n:>3} series  {what}: {expr}");
    }
    println!("example pid {}, prometheus pid {}", example.process.pid(), server.pid());
}
