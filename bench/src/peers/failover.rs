//! Leader failover after a kill of the leader's process: the candidates, each in its own
//! process, and our own candidate's side (`zk-bench elect-child`).

use std::time::Duration;

use zk_recipes::zookeeper_client::Client;
use zk_testcluster::ZkCluster;

use super::{driver, raw_connect, Peer, Recipe};
use crate::clock::now_ns;
use crate::driver::Driver;
use crate::ours;
use crate::report::Row;

/// The session timeout of the failover scenario's candidates: a kill's handover waits for the
/// killed leader's session to expire (the servers' tick is 200 ms, so 1 s is allowed).
pub const FAILOVER_SESSION: Duration = Duration::from_secs(1);

/// A candidate of the failover scenario in its own process: a driver's `elect` mode, or our
/// `zk-bench elect-child`. It prints `STARTED`, then `LEADER <CLOCK_MONOTONIC ns>` when it leads.
fn candidate(
    (peer, beat_period): (Peer, Option<f64>),
    recipe: Recipe,
    (connect, path): (&str, &str),
    session: Duration,
    i: usize,
) -> Result<Driver, String> {
    let id = format!("candidate-{i}");
    let session_ms = session.as_millis().to_string();
    let what = recipe.driver_arg(peer);
    let mut d = match peer {
        Peer::Curator | Peer::Kazoo => driver(peer, &["elect", connect, path, &id, &session_ms, &what])?,
        _ => {
            let mut cmd = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
            cmd.args(["elect-child", &what, connect, path, &id, &session_ms]);
            if let Some(fraction) = beat_period {
                cmd.args(["--beat-period", &fraction.to_string()]);
            }
            Driver::spawn(peer.short(), cmd)?
        }
    };
    tokio::task::block_in_place(|| d.expect("STARTED"))?;
    Ok(d)
}

/// Waits (bounded) until the election at `path` has `n` participants' nodes.
async fn participants(probe: &Client, path: &str, n: usize) -> Result<(), String> {
    let deadline = now_ns() + 30_000_000_000;
    while probe.list_children(path).await.map(|c| c.len()).unwrap_or(0) != n {
        if now_ns() > deadline {
            return Err(format!("{path}: never {n} participants"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// A duration uniform in [0, `span`) (splitmix64 over `state`): the random delay before each
/// kill (in [0, session timeout)), and each follower's start phase (in [0, tick)).
///
/// Without the first, the kill fell at the same phase of the server's expiry grid every time: the server
/// expires sessions only at multiples of its tick (200 ms), our session's beat and the client
/// crate's idle ping both repeat every fifth of the timeout (one tick at 1 s), and each follower
/// starts a fixed few ms after the previous expiry, so the killed leader had always just been
/// heard and its expiry was rounded up by almost a whole tick. A kill at a random moment, as a
/// crash comes, measures every peer at every phase.
fn uniform_below(state: &mut u64, span: Duration) -> Duration {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    span.mul_f64((z >> 11) as f64 / (1u64 << 53) as f64)
}

/// One kill, and where its handover went. With `quiet` the time from the last reply the server
/// sent the leader's session (`cons`: `lresp`) to the kill, `rounding` what the server's
/// expiry queue added (it expires a session at the first multiple of its tick after the last
/// touch plus the timeout) and `after` the rest (the expiry's transaction, the deletion's
/// event at the follower, its recipe's handover, its `LEADER` line):
/// `handover = timeout - quiet + rounding + after`. The server's clock (Java's `nanoTime`)
/// and ours are the same `CLOCK_MONOTONIC`.
#[derive(Clone, Copy, Debug)]
pub struct Kill {
    pub handover_ns: u64,
    /// `None` when `cons` did not show the leader's session before the kill.
    pub split: Option<Split>,
}

/// See [`Kill`]; nanoseconds (the server's are whole milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    pub quiet_ns: i64,
    pub rounding_ns: i64,
    pub after_ns: i64,
}

impl Split {
    /// The split of a handover, from the kill, the leader's `LEADER` line, the leader's session
    /// as `cons` showed it just before the kill (its last reply `lresp_ms` and its negotiated
    /// timeout `timeout_ms`) and the server's tick.
    pub fn of(killed_ns: u64, leader_ns: u64, lresp_ms: u64, timeout_ms: u64, tick_ms: u64) -> Split {
        let expiry_ms = ((lresp_ms + timeout_ms) / tick_ms + 1) * tick_ms;
        let ms = |x: u64| x as i64 * 1_000_000;
        Split {
            quiet_ns: killed_ns as i64 - ms(lresp_ms),
            rounding_ns: ms(expiry_ms - lresp_ms - timeout_ms),
            after_ns: leader_ns as i64 - ms(expiry_ms),
        }
    }
}

/// From a `cons` answer: the session `sid`'s last reply (`lresp`, ms) and timeout (`to`, ms).
pub fn session_in_cons(cons: &str, sid: i64) -> Option<(u64, u64)> {
    let line = cons.lines().find(|l| l.contains(&format!("sid={sid:#x},")))?;
    let field = |key: &str| -> Option<u64> {
        let rest = line.split(&format!(",{key}=")).nth(1)?;
        rest.split([',', ')']).next()?.parse().ok()
    };
    Some((field("lresp")?, field("to")?))
}

/// The leader's session: the owner of the election's oldest node (every peer's recipe names
/// its nodes with a 10-digit sequence suffix, and the oldest leads).
async fn leader_session(probe: &Client, path: &str) -> Option<i64> {
    let mut children = probe.list_children(path).await.ok()?;
    children.sort_by_key(|c| c[c.len().saturating_sub(10)..].to_string());
    let first = children.first()?;
    let (_, stat) = probe.get_data(&format!("{path}/{first}")).await.ok()?;
    Some(stat.ephemeral_owner)
}

/// The server's tick, from `conf` (`tickTime=`), ms.
async fn tick_ms(zk: &ZkCluster) -> Result<u64, String> {
    let conf = zk.four_letter(0, "conf").await.map_err(|e| e.to_string())?;
    conf.lines()
        .find_map(|l| l.strip_prefix("tickTime=")?.trim().parse().ok())
        .ok_or("no tickTime in conf".into())
}

/// The row of one failover run: the handovers' p50 and p99 (`rate`: handovers per second at
/// the p50), `n` the session timeout in ms, and the medians of the kills' [`Split`].
pub fn failover_row(
    scenario: &'static str,
    peer: Peer,
    session: Duration,
    repeat: usize,
    kills: Vec<Kill>,
) -> Row {
    let mut h: Vec<u64> = kills.iter().map(|k| k.handover_ns).collect();
    let p50 = crate::stats::percentile(&mut h, 50.0);
    let splits: Vec<Split> = kills.iter().filter_map(|k| k.split).collect();
    let median_ms = |f: fn(&Split) -> i64| {
        let mut v: Vec<i64> = splits.iter().map(f).collect();
        v.sort_unstable();
        v.get(v.len() / 2).map_or(f64::NAN, |x| *x as f64 / 1e6)
    };
    Row {
        p50_us: p50 as f64 / 1e3,
        p99_us: crate::stats::percentile(&mut h, 99.0) as f64 / 1e3,
        extra: session.as_millis() as f64,
        quiet_ms: median_ms(|s| s.quiet_ns),
        rounding_ms: median_ms(|s| s.rounding_ns),
        after_expiry_ms: median_ms(|s| s.after_ns),
        ..Row::new(scenario, peer, session.as_millis() as usize, repeat, 1e9 / p50.max(1) as f64)
    }
}

fn leader_at(line: &str) -> Result<u64, String> {
    line.trim_start_matches("LEADER ").trim().parse().map_err(|_| format!("bad line {line}"))
}

/// Leader failover after a kill: two candidates, each in its own process with a `session`
/// timeout; once both are in, after a random delay ([`uniform_below`]), the leader's process is
/// killed (SIGKILL), and the handover is the time from the kill to the follower's task
/// starting, with its [`Split`] (`cons` read just before the kill). A new follower joins before
/// the next kill. `beat_period`: our candidates' (`--beat-period`; the others ignore it).
pub async fn failover(
    zk: &ZkCluster,
    (peer, beat_period): (Peer, Option<f64>),
    recipe: Recipe,
    kills: usize,
    session: Duration,
    path: &str,
) -> Result<Vec<Kill>, String> {
    if let Some(why) = recipe.lacking(peer) {
        return Err(format!("{} has no {}: {why}", peer.name(), recipe.scenario()));
    }
    let connect = zk.connect_string();
    let probe = raw_connect(&connect).await?;
    let tick = tick_ms(zk).await?;
    let mut leader = candidate((peer, beat_period), recipe, (&connect, path), session, 0)?;
    tokio::task::block_in_place(|| leader.expect("LEADER"))?;
    let mut handovers = Vec::with_capacity(kills);
    let mut phase = now_ns() | 1;
    for k in 0..kills {
        // Each follower starts at a random phase of the server's tick: started straight after
        // the previous expiry (which falls on the tick), a client whose beat is a whole number of
        // ticks (ours: a fifth of 1, 4 or 10 s) would touch its session just after a tick every
        // time, and its expiry would always be rounded up by almost a whole tick.
        tokio::time::sleep(uniform_below(&mut phase, Duration::from_millis(tick))).await;
        let follower = candidate((peer, beat_period), recipe, (&connect, path), session, k + 1)?;
        participants(&probe, path, 2).await?;
        let sid = leader_session(&probe, path).await;
        tokio::time::sleep(uniform_below(&mut phase, session)).await;
        // Read as close to the kill as we can (a reply after it and before the kill is missed:
        // `quiet` would read too long by up to one ping period, rarely).
        let cons = zk.four_letter(0, "cons").await.unwrap_or_default();
        let killed = now_ns();
        // SAFETY: kill has no memory preconditions; the pid is our child's, not yet reaped.
        unsafe {
            libc::kill(leader.pid() as libc::pid_t, libc::SIGKILL);
        }
        let mut follower = follower;
        let line = tokio::task::block_in_place(|| follower.expect("LEADER"))?;
        let led = leader_at(&line)?;
        let split = sid
            .and_then(|sid| session_in_cons(&cons, sid))
            .map(|(lresp, timeout)| Split::of(killed, led, lresp, timeout, tick));
        handovers.push(Kill { handover_ns: led.saturating_sub(killed), split });
        drop(std::mem::replace(&mut leader, follower));
    }
    leader.say("quit");
    drop(leader);
    Ok(handovers)
}

/// The child side of [`failover`] for zk-recipes: a latch or a selector that never ends its
/// term, in its own process (the drivers' `elect` protocol), beating every `beat_period` of
/// the timeout (`None`: the library's default).
pub async fn elect_child(
    recipe: &str,
    connect: &str,
    path: &str,
    id: &str,
    session_ms: u64,
    beat_period: Option<f64>,
) -> Result<(), String> {
    let mut options = zk_recipes::ConnectOptions::new(Duration::from_millis(session_ms));
    if let Some(fraction) = beat_period {
        options = options.beat_period(fraction);
    }
    let h = zk_recipes::Session::connect_with(connect, &options)
        .await
        .map_err(|e| format!("zk-recipes connect: {e}"))?;
    let e = |e: zk_recipes::Error| e.to_string();
    let announce = || {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "LEADER {}", now_ns());
        let _ = out.flush();
    };
    let (_latch, _selector);
    if recipe == Recipe::Latch.driver_arg(Peer::ZkRecipes) {
        let latch = ours::latch(&h, path, id)?;
        latch.start().map_err(e)?;
        println!("STARTED");
        latch.await_leadership().await.map_err(e)?;
        announce();
        _latch = Some(latch);
    } else {
        let selector = ours::selector(&h, path, id)?;
        selector
            .start(move |ctx| async move {
                announce();
                ctx.stopped().await;
            })
            .map_err(e)?;
        println!("STARTED");
        _selector = Some(selector);
    }
    tokio::task::spawn_blocking(|| {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if line.trim() == "quit" {
                break;
            }
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_phases_cover_the_session_timeout_and_stay_below_it() {
        let mut state = 12_345;
        let draws: Vec<Duration> = (0..1_000).map(|_| uniform_below(&mut state, FAILOVER_SESSION)).collect();
        assert!(draws.iter().all(|d| *d < FAILOVER_SESSION));
        let tenth = FAILOVER_SESSION / 10;
        assert!(draws.iter().any(|d| *d < tenth), "no draw in the first tenth");
        assert!(draws.iter().any(|d| *d > FAILOVER_SESSION - tenth), "no draw in the last tenth");
        let fifths = (0..5)
            .map(|k| draws.iter().filter(|d| d.as_nanos() * 5 / FAILOVER_SESSION.as_nanos() == k).count());
        assert!(fifths.into_iter().all(|c| (150..=250).contains(&c)), "not uniform over the timeout");
    }

    #[test]
    fn a_handover_splits_into_quiet_rounding_and_after() {
        // Last reply at 10,050 ms, 1,000 ms timeout, 200 ms tick: the server expires the session
        // at 11,200 (the first multiple of 200 after 11,050). Killed at 10,130, leader at 11,204.
        let s = Split::of(10_130_000_000, 11_204_000_000, 10_050, 1_000, 200);
        assert_eq!(s, Split { quiet_ns: 80_000_000, rounding_ns: 150_000_000, after_ns: 4_000_000 });
        // handover = timeout - quiet + rounding + after
        assert_eq!(1_000_000_000 - s.quiet_ns + s.rounding_ns + s.after_ns, 11_204_000_000 - 10_130_000_000);
        // On the grid: a whole tick is added, never zero.
        assert_eq!(Split::of(0, 0, 9_000, 1_000, 200).rounding_ns, 200_000_000);
    }

    #[test]
    fn cons_gives_a_sessions_last_reply_and_timeout() {
        let cons = concat!(
            " /127.0.0.1:41282[0](queued=0,recved=1,sent=0)\n",
            " /127.0.0.1:41276[1](queued=0,recved=4,sent=4,sid=0x10001d45cff0000,lop=PING,",
            "est=1795564852033,to=4000,lcxid=0x2,lzxid=0x100000003,lresp=30694755,llat=1,minlat=0,",
            "avglat=4,maxlat=8)\n",
        );
        assert_eq!(session_in_cons(cons, 0x100_01d4_5cff_0000), Some((30_694_755, 4_000)));
        assert_eq!(session_in_cons(cons, 0x100_01d4_5cff_0001), None);
    }
}
