//! `zklock top ROOT`: a live view of every lock queue under ROOT (holders, waiters, how long
//! the oldest holder has held, deadlocks), redrawn every --interval with a plain ANSI clear;
//! `--once` prints one frame.

use std::io::Write;
use std::time::{Duration, SystemTime};

use zk_recipes::inspect::{inspect, InspectOptions, Inspection};
use zk_recipes::zookeeper_client::{Acls, CreateMode, Error as ZkError};

use crate::args::{Cli, TopArgs};
use crate::deadlocks::session;
use crate::exit::Failure;
use crate::output::now_ms;
use crate::zk::Conn;

/// Clears the screen and puts the cursor at the top left.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// The width a frame is laid out for when stdout is no terminal.
const PLAIN_WIDTH: usize = 120;

pub async fn top(cli: &Cli, args: &TopArgs) -> Result<u8, Failure> {
    let conn = &cli.connect().await?;
    let options = InspectOptions::new().max_nodes(args.max_nodes);
    if args.once {
        let (now, clock) = now(conn, args.clock_node.as_deref()).await?;
        let found = inspect(conn.session(), &args.root, &options).await?;
        show(&frame(&found, now, clock, None, crate::term::width().unwrap_or(PLAIN_WIDTH)))?;
        return Ok(0);
    }
    // On a terminal: the view owns it (a clear before each frame, `q` quits, no log lines on
    // it). Otherwise plain frames one after another, a blank line between them.
    let live = crate::term::width().is_some();
    let owned = live.then(crate::term::Owned::take);
    let quit = async {
        match &owned {
            Some(o) if o.keys() => crate::term::quit_key().await,
            _ => std::future::pending().await,
        }
    };
    tokio::pin!(quit);
    let mut ticks = tokio::time::interval(args.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last frame read, and when: shown under an outage, with the time since.
    let mut last: Option<(String, std::time::Instant, SystemTime)> = None;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(0),
            () = &mut quit => return Ok(0),
        }
        let width = crate::term::width().unwrap_or(PLAIN_WIDTH);
        let read = match now(conn, args.clock_node.as_deref()).await {
            Ok((now, clock)) => inspect(conn.session(), &args.root, &options)
                .await
                .map(|found| frame(&found, now, clock, Some(args.interval), width))
                .map_err(|_| ()),
            Err(_) => Err(()),
        };
        let text = match read {
            Ok(text) => {
                last = Some((text.clone(), std::time::Instant::now(), SystemTime::now()));
                text
            }
            Err(()) => outage(&args.root, conn, last.as_ref(), args.interval, width),
        };
        show(&if live { format!("{CLEAR}{text}") } else { format!("{text}\n") })?;
    }
}

/// What the view says while ZooKeeper does not answer: in words, with the time since the last
/// frame read, then that frame (stale) for reference.
fn outage(
    root: &str,
    conn: &Conn,
    last: Option<&(String, std::time::Instant, SystemTime)>,
    interval: Duration,
    width: usize,
) -> String {
    let state = match conn.session().state() {
        zk_recipes::ConnectionState::Lost => "the session expired; starting a new one",
        _ => "not connected; reconnecting",
    };
    let every = humantime::format_duration(interval);
    let mut out =
        format!("zklock top {root}: ZooKeeper is unreachable ({state}), trying again every {every}\n");
    match last {
        Some((frame, at, wall)) => {
            let since = humantime::format_duration(Duration::from_secs(at.elapsed().as_secs()));
            let when = humantime::format_rfc3339_seconds(*wall);
            out.push_str(&format!("no contact for {since} (last frame read at {when}); as it was then:\n\n"));
            out.push_str(frame);
        }
        None => out.push_str("no frame read yet\n"),
    }
    out.lines().map(|l| fit(l, width)).collect::<Vec<_>>().join("\n") + "\n"
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

/// `text` cut to `width` characters, the cut marked with `…` (at the end).
fn fit(text: &str, width: usize) -> String {
    let n = text.chars().count();
    if n <= width || width == 0 {
        return text.to_string();
    }
    format!("{}…", text.chars().take(width - 1).collect::<String>())
}

/// A path cut to `width` characters in its middle, the cut marked with `…`: its start says
/// where, its end which lock.
fn elide(path: &str, width: usize) -> String {
    let n = path.chars().count();
    if n <= width || width < 3 {
        return path.to_string();
    }
    let tail = (width - 1) * 3 / 5;
    let head = width - 1 - tail;
    let start: String = path.chars().take(head).collect();
    let end: String = path.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

/// A kind's name in one word, for the table.
fn kind(q: &zk_recipes::inspect::QueueInfo) -> &'static str {
    match q.kind {
        zk_recipes::inspect::QueueKind::ReadWrite => "rw-lock",
        _ => q.kind.name(),
    }
}

/// At most this many waiters are listed under a queue's row.
const WAITERS_SHOWN: usize = 5;

/// One frame, laid out for `width` columns: a header, a row per queue with its waiters under
/// it, and any deadlock.
pub fn frame(found: &Inspection, now: i64, clock: Clock, interval: Option<Duration>, width: usize) -> String {
    let mut out = Vec::new();
    let when = humantime::format_rfc3339_seconds(SystemTime::now());
    let every = interval.map_or(String::new(), |i| format!(", every {}", humantime::format_duration(i)));
    let ages = match clock {
        Clock::Server => "ages by the server's clock (--clock-node)",
        Clock::Host => "ages by this host's clock",
    };
    let quit = if interval.is_some() && crate::term::width().is_some() { "; q quits" } else { "" };
    out.push(format!("zklock top {} at {when}{every}{quit}", found.root));
    let (held, waiting): (usize, usize) =
        found.queues.iter().fold((0, 0), |(h, w), q| (h + q.holders().count(), w + q.waiters()));
    out.push(format!(
        "{} queues, {held} holding, {waiting} waiting; {} nodes read{}; {ages}",
        found.queues.len(),
        found.nodes_read,
        if found.truncated { " (stopped at --max-nodes: more not shown)" } else { "" }
    ));
    out.push(String::new());
    out.extend(table(found, now, width));
    for cycle in &found.cycles {
        let sessions: Vec<String> = cycle.all_sessions().into_iter().map(session).collect();
        out.push(String::new());
        out.push(format!(
            "DEADLOCK: sessions {} wait for each other at {} (zklock deadlocks {})",
            sessions.join(", "),
            cycle.paths().join(", "),
            found.root
        ));
    }
    for s in &found.skipped {
        out.push(String::new());
        out.push(format!("not read as a queue: {}: {}", s.path, s.reason));
    }
    // Long lines (a deadlock's sessions, a skipped path's reason) wrap onto whole lines.
    let mut text = String::new();
    for line in out {
        text.push_str(&wrap(&line, width));
        text.push('\n');
    }
    text
}

/// The table of a frame: a row per queue, its waiters under it.
fn table(found: &Inspection, now: i64, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    // PATH KIND HOLDERS WAITERS HELD-FOR HOLDER: the fixed columns take 38, the path and the
    // holder share the rest: the path up to its longest, within a bit more than half of it
    // or all but 32 for the holder (whichever is more), and at least 12.
    let longest = found.queues.iter().map(|q| q.path.chars().count()).max().unwrap_or(4);
    let room = width.saturating_sub(38);
    let path_w = longest.min((room * 11 / 20).max(room.saturating_sub(32))).max(12);
    let holder_w = width.saturating_sub(path_w + 38).max(8);
    if !found.root_exists {
        out.push(format!("{} does not exist", found.root));
    } else if found.queues.is_empty() {
        out.push(format!("no locks under {}", found.root));
    } else {
        out.push(format!(
            "{:<path_w$} {:<9} {:>7} {:>7} {:>9}  {}",
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
        out.push(format!(
            "{:<path_w$} {:<9} {:>7} {:>7} {:>9}  {}",
            elide(&q.path, path_w),
            kind(q),
            holders.len(),
            q.waiters(),
            oldest.map_or("-".to_string(), |c| age(now - c)),
            fit(&who, holder_w)
        ));
        let waiters: Vec<_> = q.members.iter().filter(|m| !m.is_holder).collect();
        for w in waiters.iter().take(WAITERS_SHOWN) {
            let line = format!("  waiting {:>9}  {} ({})", age(now - w.ctime_ms), w.id, session(w.session));
            out.push(fit(&line, width));
        }
        if waiters.len() > WAITERS_SHOWN {
            out.push(format!("  and {} more waiting", waiters.len() - WAITERS_SHOWN));
        }
    }
    out
}

/// `line` broken into lines of at most `width` characters.
fn wrap(line: &str, width: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= width || width == 0 {
        return line.to_string();
    }
    chars.chunks(width).map(|c| c.iter().collect::<String>()).collect::<Vec<_>>().join("\n")
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
        assert_eq!(elide("/a/very/long/path", 11), "/a/v…g/path");
        assert_eq!(elide("/a/very/long/path", 40), "/a/very/long/path");
        assert_eq!(fit("holder-with-a-long-id", 8), "holder-…");
        assert_eq!(fit("short", 8), "short");
        assert_eq!(wrap("abcdefg", 3), "abc\ndef\ng");
    }
}
