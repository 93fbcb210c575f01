//! Leader failover time, measured with real processes of the `leader` example.
//!
//! ```text
//! cargo run --release --example bench_failover -- [ROUNDS] [SESSION_TIMEOUT_MS]
//! ```
//! Each round: two `leader` processes join; (1) SIGINT to the leader, a graceful close, and time
//! until the other prints LEADER; (2) a third joins, then SIGKILL to the leader, and time until
//! the waiter prints LEADER (about the session timeout, which the server must let pass). It
//! exits non-zero if leadership was not handed over or fencing tokens did not grow.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use zk_testcluster::ZkCluster;

struct Proc {
    child: Child,
    name: String,
}

type Lines = mpsc::Receiver<(String, String, Instant)>;

fn leader_binary() -> PathBuf {
    let me = std::env::current_exe().expect("own path");
    me.with_file_name("leader")
}

fn spawn(connect: &str, name: &str, timeout_ms: u64, tx: &mpsc::Sender<(String, String, Instant)>) -> Proc {
    let mut child = Command::new(leader_binary())
        .args([
            "--connect",
            connect,
            "--id",
            name,
            "--session-timeout-ms",
            &timeout_ms.to_string(),
            "--path",
            "/bench/failover",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the leader example (build it with `cargo build --examples`)");
    let out = child.stdout.take().expect("stdout");
    let (tx, who) = (tx.clone(), name.to_string());
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((who.clone(), line, Instant::now()));
        }
    });
    Proc { child, name: name.to_string() }
}

/// Waits for a line from `who` containing `what`; returns the line and when it was read.
fn wait_for(lines: &Lines, who: &str, what: &str) -> (String, Instant) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let (name, line, at) = lines.recv_timeout(left).unwrap_or_else(|_| {
            eprintln!("FAIL: no '{what}' from {who} within 60 s");
            std::process::exit(1)
        });
        if name == who && line.contains(what) {
            return (line, at);
        }
    }
}

fn token(line: &str) -> u64 {
    line.rsplit("fencing_token=").next().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

fn signal(p: &Proc, sig: i32) {
    Command::new("kill").args([format!("-{sig}"), p.child.id().to_string()]).status().expect("kill");
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(3);
    let timeout_ms: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let zk = ZkCluster::standalone().await.expect("ZooKeeper");
    let connect = zk.connect_string();
    let (tx, lines) = mpsc::channel();
    let (mut graceful, mut crash) = (Vec::new(), Vec::new());
    let mut last_token = 0;
    for round in 0..rounds {
        let a = spawn(&connect, &format!("a{round}"), timeout_ms, &tx);
        let (line, _) = wait_for(&lines, &a.name, "LEADER");
        assert_token(&mut last_token, token(&line));
        let b = spawn(&connect, &format!("b{round}"), timeout_ms, &tx);
        wait_for(&lines, &b.name, "waiting; leader is");

        // (1) graceful: Ctrl-C in the leader.
        let t0 = Instant::now();
        signal(&a, 2);
        let (line, at) = wait_for(&lines, &b.name, "LEADER");
        graceful.push(at - t0);
        assert_token(&mut last_token, token(&line));

        // (2) crash: kill -9 the leader; the waiter takes over once the session expires.
        let c = spawn(&connect, &format!("c{round}"), timeout_ms, &tx);
        wait_for(&lines, &c.name, "waiting; leader is");
        let t0 = Instant::now();
        signal(&b, 9);
        let (line, at) = wait_for(&lines, &c.name, "LEADER");
        crash.push(at - t0);
        assert_token(&mut last_token, token(&line));
        signal(&c, 2);
        wait_for(&lines, &c.name, "closed");
        for mut p in [a, b, c] {
            let _ = p.child.wait();
        }
        println!("round {round}: graceful close {:?}, kill -9 {:?}", graceful[round], crash[round]);
    }
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
    println!("session timeout {timeout_ms} ms; {rounds} rounds");
    println!(
        "failover after a graceful close: mean {:?} (min {:?}, max {:?})",
        mean(&graceful),
        graceful.iter().min().unwrap(),
        graceful.iter().max().unwrap()
    );
    println!(
        "failover after kill -9:          mean {:?} (min {:?}, max {:?})",
        mean(&crash),
        crash.iter().min().unwrap(),
        crash.iter().max().unwrap()
    );
}

fn assert_token(last: &mut u64, now: u64) {
    if now <= *last {
        eprintln!("FAIL: fencing token {now} is not above the previous leader's {last}");
        std::process::exit(1);
    }
    *last = now;
}
