//! How far `Session::safe_until()` stays ahead of now, per beat period, on an idle session.
//!
//! ```text
//! cargo run --release --example beat_window -- [SECONDS] [SESSION_TIMEOUT_MS] [PERIOD...]
//! ```
//! Defaults: 20 s, a 4,000 ms session, periods 0.05 (the shortest), 0.1 and 0.15 (the longest;
//! 0.14 is the default) of the timeout (`ConnectOptions::beat_period`). It starts a throwaway
//! standalone ZooKeeper, connects one session per period (all at once; holding nothing, but
//! reading its window, which asks for it), waits for each one's first proof, then samples
//! `safe_until() - now` every 10 ms for the given time and prints, per period, the minimum,
//! median and maximum, in ms and as a fraction of the timeout, with the requests the server
//! received from the session meanwhile (`cons`: its beats and the client's own pings). It exits
//! non-zero if a window lapsed (the session was suspended) while connected.

use std::time::{Duration, Instant};

use zk_recipes::{ConnectOptions, ConnectionState, Session};
use zk_testcluster::ZkCluster;

/// The session `sid`'s packets received, from a `cons` answer.
fn received(cons: &str, sid: i64) -> Option<u64> {
    let line = cons.lines().find(|l| l.contains(&format!("sid={sid:#x},")))?;
    line.split("recved=").nth(1)?.split([',', ')']).next()?.parse().ok()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args.first().map_or(Ok(20.0), |s| s.parse())?;
    let timeout = Duration::from_millis(args.get(1).map_or(Ok(4_000), |s| s.parse())?);
    let periods: Vec<f64> = if args.len() > 2 {
        args[2..].iter().map(|s| s.parse()).collect::<Result<_, _>>()?
    } else {
        vec![0.05, 0.1, 0.15]
    };
    let zk = ZkCluster::standalone().await?;
    let mut sessions = Vec::new();
    for &period in &periods {
        let options = ConnectOptions::new(timeout).beat_period(period);
        sessions.push(Session::connect_with(&zk.connect_string(), &options).await?);
    }
    // Until a session's first proof, its window counts from when it was asked for.
    for s in &sessions {
        let mut contacts = s.contacts();
        tokio::time::timeout(timeout, contacts.changed()).await??;
    }
    let sid = |s: &Session| s.client().map(|c| c.session_id().0);
    let cons_before = zk.four_letter(0, "cons").await?;
    let start = Instant::now();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); sessions.len()];
    let mut lapsed = false;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while start.elapsed().as_secs_f64() < secs {
        tick.tick().await;
        let now = Instant::now();
        for (s, samples) in sessions.iter().zip(&mut samples) {
            lapsed |= s.state() == ConnectionState::Suspended;
            let ahead = s.safe_until().map_or(f64::NEG_INFINITY, |u| {
                u.checked_duration_since(now)
                    .map_or_else(|| -(now - u).as_secs_f64() * 1e3, |d| d.as_secs_f64() * 1e3)
            });
            samples.push(ahead);
        }
    }
    let cons_after = zk.four_letter(0, "cons").await?;
    let elapsed = start.elapsed().as_secs_f64();
    let t_ms = timeout.as_secs_f64() * 1e3;
    println!(
        "{} ms sessions (negotiated {:?}), idle, sampled every 10 ms for {elapsed:.1} s:",
        timeout.as_millis(),
        sessions[0].session_timeout()
    );
    println!(
        "| period | ahead min ms | ahead median ms | ahead max ms | min / T | median / T | requests per T |"
    );
    println!("|---|---|---|---|---|---|---|");
    for ((period, s), mut v) in periods.iter().zip(&sessions).zip(samples) {
        v.sort_by(f64::total_cmp);
        let (min, med, max) = (v[0], v[v.len() / 2], v[v.len() - 1]);
        let requests =
            sid(s).ok().and_then(|sid| Some(received(&cons_after, sid)? - received(&cons_before, sid)?));
        let per_t = requests.map_or("?".to_string(), |r| format!("{:.1}", r as f64 * t_ms / 1e3 / elapsed));
        println!(
            "| {period} | {min:.0} | {med:.0} | {max:.0} | {:.2} | {:.2} | {per_t} |",
            min / t_ms,
            med / t_ms
        );
    }
    for s in sessions {
        s.close().await;
    }
    if lapsed {
        eprintln!("a window lapsed while connected");
        std::process::exit(1);
    }
    Ok(())
}
