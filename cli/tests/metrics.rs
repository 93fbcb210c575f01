//! `zklock run|elect --metrics-addr`: while zklock holds, the library's
//! metrics are on a Prometheus endpoint, with the buckets docs/metrics.md lists (those of
//! `examples/metrics.rs`); an address that cannot be listened on is refused before the lock is
//! taken.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;
use zk_testcluster::ZkCluster;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The page at `http://ADDR/metrics`, or `None` while nothing answers there.
fn scrape(addr: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    // HTTP/1.0: the body comes whole, up to the close (no chunked encoding to undo).
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    (status.starts_with("HTTP/1.") && status.contains(" 200 ")).then(|| body.to_string())
}

/// Starts zklock with `args(ADDR)` (ADDR on a free loopback port) and returns it once the
/// endpoint shows `line`; on another port when zklock found the one asked from the kernel taken
/// (exit 64, `Address in use`) before it could bind it.
fn serving(connect: &str, args: impl Fn(&str) -> Vec<String>, line: &str) -> (Child, Reaper, String) {
    for _ in 0..5 {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut child = zklock(connect)
            .args(args(&addr))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting zklock");
        let reaper = Reaper(child.id());
        let started = Instant::now();
        loop {
            if scrape(&addr).is_some_and(|page| page.lines().any(|l| l == line)) {
                return (child, reaper, addr);
            }
            if let Some(status) = child.try_wait().unwrap() {
                let mut stderr = String::new();
                child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
                assert!(
                    status.code() == Some(64) && stderr.contains("in use"),
                    "zklock ended ({status}): {stderr}"
                );
                break;
            }
            assert!(started.elapsed() < PATIENCE, "{addr} never showed {line}: {:?}", scrape(&addr));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("no free port in 5 attempts");
}

/// The bounds on the docs/metrics.md line that starts with `prefix`, then +Inf.
fn documented(prefix: &str) -> Vec<f64> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md")).unwrap();
    let line =
        docs.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} in docs"));
    let mut bounds: Vec<f64> = line[prefix.len()..].split(',').map(|n| n.trim().parse().unwrap()).collect();
    bounds.push(f64::INFINITY);
    bounds
}

/// The distinct `le` bounds of `metric`'s `_bucket` series on `page`, in order.
fn served(page: &str, metric: &str) -> Vec<f64> {
    let mut bounds: Vec<f64> = page
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}_bucket{{")))
        .map(|l| {
            // `,le="` (not the end of `role="`).
            let le = l.split(",le=\"").nth(1).and_then(|rest| rest.split('"').next()).expect("an le label");
            le.parse().unwrap_or_else(|e| panic!("{le:?} in {l:?}: {e}"))
        })
        .collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    bounds
}

fn check_buckets(page: &str) {
    let seconds = documented("- buckets of every `_seconds` histogram:");
    assert_eq!(served(page, "zk_recipes_acquire_wait_seconds"), seconds, "{page}");
    assert_eq!(
        served(page, "zk_recipes_queue_length_at_join"),
        documented("- buckets of `zk_recipes_queue_length_at_join`:")
    );
    assert!(page.lines().any(|l| l == "zk_recipes_session_connected 1"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_the_metrics_while_it_holds() {
    let zk = ZkCluster::standalone().await.unwrap();
    let acquired = r#"zk_recipes_acquires_total{recipe="mutex",role="default",outcome="acquired"} 1"#;
    let args = |addr: &str| {
        ["run", "--metrics-addr", addr, "/locks/metrics", "--", "cat"].map(String::from).to_vec()
    };
    let (mut run, _reaper, addr) = serving(&zk.connect_string(), args, acquired);
    check_buckets(&scrape(&addr).expect("the page"));
    // The command ends (its stdin closes): zklock releases and exits with it.
    drop(run.stdin.take());
    let out = finish(run).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(scrape(&addr).is_none(), "the endpoint outlived zklock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_serves_the_metrics_while_it_leads() {
    let zk = ZkCluster::standalone().await.unwrap();
    let leading = r#"zk_recipes_acquires_total{recipe="leader-latch",role="default",outcome="acquired"} 1"#;
    let args = |addr: &str| {
        ["elect", "--metrics-addr", addr, "/election/metrics", "--", "cat"].map(String::from).to_vec()
    };
    let (mut elect, _reaper, addr) = serving(&zk.connect_string(), args, leading);
    check_buckets(&scrape(&addr).expect("the page"));
    drop(elect.stdin.take());
    let out = finish(elect).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_in_use_exits_64_before_taking_the_lock() {
    let zk = ZkCluster::standalone().await.unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let out = zklock(&zk.connect_string())
        .args(["run", "--metrics-addr", &addr, "/locks/metrics-in-use", "--", "touch"])
        .arg(&ran)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--metrics-addr") && stderr.contains(&addr), "{stderr}");
    assert!(!ran.exists(), "the command ran");
    assert_eq!(queue_len(&zk.connect_string(), "/locks/metrics-in-use"), 0);
}
