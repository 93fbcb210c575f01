//! `zklock top ROOT`: a live view of every lock queue under ROOT (holders, waiters, how long
//! the oldest holder has held, deadlocks), redrawn every --interval with a plain ANSI clear;
//! `--once` prints one frame.

use std::io::Write;
use std::time::{Duration, SystemTime};

use zk_recipes::inspect::{inspect, InspectOptions, Inspection};
use zk_recipes::zookeeper_client::{Acls, CreateMode, Error as ZkError};

use crate::args::TopArgs;
use crate::deadlocks::session;
use crate::exit::Failure;
use crate::status::now_ms;
use crate::zk::Conn;

/// Clears the screen and puts the cursor at the top left.
const CLEAR: &str = "\x1b[H\x1b[2J";

pub async fn top(conn: &Conn, args: &TopArgs) -> Result<u8, Failure> {
    let options = InspectOptions::new().max_nodes(args.max_nodes);
    if args.once {
        let (now, clock) = now(conn, args.clock_node.as_deref()).await?;
        let found = inspect(conn.session(), &args.root, &options).await?;
        show(&frame(&found, now, clock, None))?;
        return Ok(0);
    }
    let mut ticks = tokio::time::interval(args.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
        // A failed read (a disconnect, say) shows in the frame; the next one tries again.
        let text = match now(conn, args.clock_node.as_deref()).await {
            Ok((now, clock)) => match inspect(conn.session(), &args.root, &options).await {
                Ok(found) => frame(&found, now, clock, Some(args.interval)),
                Err(e) => format!("zklock top {}: {e}\n", args.root),
            },
            Err(failure) => format!("zklock top {}: {}\n", args.root, failure.message),
        };
        show(&format!("{CLEAR}{text}"))?;
    }
}

fn show(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // The reader went away (`| head`): done.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure::silent(0)),
        Err(e) => Err(Failure::new(crate::exit::UNAVAILABLE, format!("writing: {e}"))),
    }
}

/// Whose clock ages the holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    Server,
    Host,
}

/// The time to age holds against, in milliseconds since the epoch: the server's (the mtime of
/// a write to `clock_node`) or this host's.
async fn now(conn: &Conn, clock_node: Option<&str>) -> Result<(i64, Clock), Failure> {
    let Some(path) = clock_node else { return Ok((now_ms(), Clock::Host)) };
    zk_recipes::LockPath::new(path)?;
    let client = conn.raw()?;
    let failed = |op, e: ZkError| {
        Failure::from(zk_recipes::Error::ZooKeeper { op, path: path.into(), source: e.into() })
    };
    let stat = match client.set_data(path, b"zklock top", None).await {
        Ok(stat) => stat,
        Err(ZkError::NoNode) => {
            match client
                .create(path, b"zklock top", &CreateMode::Persistent.with_acls(Acls::anyone_all()))
                .await
            {
                Ok((stat, _)) => stat,
                Err(ZkError::NodeExists) => {
                    client.set_data(path, b"zklock top", None).await.map_err(|e| failed("set", e))?
                }
                Err(e) => return Err(failed("create", e)),
            }
        }
        Err(e) => return Err(failed("set", e)),
    };
    Ok((stat.mtime, Clock::Server))
}

fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{:.1}s", ms.max(0) as f64 / 1000.0),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// `text` cut to `width` characters, the cut marked with `…` (at the start for a path, whose
/// end says most).
fn fit(text: &str, width: usize, keep_end: bool) -> String {
    let n = text.chars().count();
    if n <= width {
        return text.to_string();
    }
    if keep_end {
        format!("…{}", text.chars().skip(n - width + 1).collect::<String>())
    } else {
        format!("{}…", text.chars().take(width - 1).collect::<String>())
    }
}

/// One frame: a header, a row per queue, and any deadlock.
pub fn frame(found: &Inspection, now: i64, clock: Clock, interval: Option<Duration>) -> String {
    let mut out = String::new();
    let when = humantime::format_rfc3339_seconds(SystemTime::now());
    let every = interval.map_or(String::new(), |i| format!(", every {}", humantime::format_duration(i)));
    let ages = match clock {
        Clock::Server => "hold ages by the server's clock (--clock-node)",
        Clock::Host => "hold ages by this host's clock against the server's creation times",
    };
    out.push_str(&format!("zklock top {} at {when}{every}; {ages}\n", found.root));
    let (held, waiting): (usize, usize) =
        found.queues.iter().fold((0, 0), |(h, w), q| (h + q.holders().count(), w + q.waiters()));
    out.push_str(&format!(
        "{} queues, {held} holding, {waiting} waiting; {} nodes read{}\n\n",
        found.queues.len(),
        found.nodes_read,
        if found.truncated { " (stopped at --max-nodes: more not shown)" } else { "" }
    ));
    if !found.root_exists {
        out.push_str(&format!("{} does not exist\n", found.root));
    } else if found.queues.is_empty() {
        out.push_str(&format!("no locks under {}\n", found.root));
    } else {
        out.push_str(&format!(
            "{:<36} {:<15} {:>7} {:>7} {:>9}  {}\n",
            "PATH", "KIND", "HOLDERS", "WAITERS", "HELD FOR", "HOLDER (SESSION)"
        ));
    }
    for q in &found.queues {
        let holders: Vec<_> = q.holders().collect();
        let oldest = holders.iter().map(|m| m.ctime_ms).min();
        let who = match holders.as_slice() {
            [] => "-".to_string(),
            [one] => format!("{} ({})", one.id, session(one.session)),
            [first, rest @ ..] => {
                format!("{} ({}) and {} more", first.id, session(first.session), rest.len())
            }
        };
        out.push_str(&format!(
            "{:<36} {:<15} {:>7} {:>7} {:>9}  {}\n",
            fit(&q.path, 36, true),
            q.kind.name(),
            holders.len(),
            q.waiters(),
            oldest.map_or("-".to_string(), |c| age(now - c)),
            fit(&who, 44, false)
        ));
    }
    for cycle in &found.cycles {
        let sessions: Vec<String> = cycle.all_sessions().into_iter().map(session).collect();
        out.push_str(&format!(
            "\nDEADLOCK: sessions {} wait for each other at {} (zklock deadlocks {})\n",
            sessions.join(", "),
            cycle.paths().join(", "),
            found.root
        ));
    }
    for s in &found.skipped {
        out.push_str(&format!("\nnot read as a queue: {}: {}\n", s.path, s.reason));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_cuts_read_well() {
        assert_eq!(age(1234), "1.2s");
        assert_eq!(age(-5), "0.0s");
        assert_eq!(age(125_000), "2m05s");
        assert_eq!(age(3_725_000), "1h02m");
        assert_eq!(fit("/a/very/long/path", 8, true), "…ng/path");
        assert_eq!(fit("holder-with-a-long-id", 8, false), "holder-…");
        assert_eq!(fit("short", 8, true), "short");
    }
}
