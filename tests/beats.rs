//! What a session costs the servers while nobody asks for its safe window, and while it holds:
//! it beats (a `sync` the leader answers, `src/session/proof.rs`) only while a hold, an acquire
//! or a caller of its window asks for it (`src/session/demand.rs`). Counted at the server
//! (`cons`: the requests it received from each session, pings included), against a raw
//! `zookeeper-client` client beside it, which sends only its own pings.

mod common;

use std::time::{Duration, Instant};

use common::*;
use zk_recipes::{ConnectOptions, InterProcessMutex, LockStatus, Session};
use zk_testcluster::ZkCluster;

const TIMEOUT: Duration = Duration::from_secs(4);

/// The requests the server has received from session `sid` (`cons`: `recved`).
async fn received(zk: &ZkCluster, sid: i64) -> u64 {
    let cons = zk.four_letter(0, "cons").await.expect("cons");
    let line = cons.lines().find(|l| l.contains(&format!("sid={sid:#x},"))).expect("the session in cons");
    line.split("recved=").nth(1).and_then(|r| r.split([',', ')']).next()?.parse().ok()).expect("recved")
}

fn sid(session: &Session) -> i64 {
    session.client().expect("client").session_id().0
}

/// What the session and the raw client sent while the raw client sent `pings` more requests
/// (its pings, one every three to four twentieths of the timeout: a few timeouts' worth).
async fn over_pings(zk: &ZkCluster, session: i64, raw: i64, pings: u64) -> (u64, u64) {
    let (ours, theirs) = (received(zk, session).await, received(zk, raw).await);
    eventually("the raw client's pings", || async { received(zk, raw).await >= theirs + pings }).await;
    (received(zk, session).await - ours, received(zk, raw).await - theirs)
}

/// Idle (nothing held, nothing awaited, nobody reading its window), a session sends no more
/// than the client crate's own pings: no beat. (It sent a `sync` every twentieth of the
/// timeout: four times the pings.) Holding a lock, it beats again, at most 1.5 times the pings'
/// requests, and its window keeps moving: the hold stays `Held`, its window open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_costs_the_pings_and_a_holding_one_at_most_half_as_much_again() {
    let zk = standalone().await;
    let session = session_with_timeout(&zk.connect_string(), TIMEOUT).await;
    let raw = client_with_timeout(&zk.connect_string(), TIMEOUT).await;
    let (ours, theirs) = (sid(&session), raw.session_id().0);
    // Past the session's first moments (the connect and its first answers).
    over_pings(&zk, ours, theirs, 2).await;

    let (idle, pings) = over_pings(&zk, ours, theirs, 10).await;
    assert!(
        idle <= pings + 1,
        "idle: the session sent {idle} requests while the client's pings were {pings}"
    );

    let mutex = InterProcessMutex::new(&session, "/beats/holding").expect("mutex");
    let guard = within("acquire", mutex.acquire()).await.expect("acquire");
    let first = guard.safe_until().expect("a window while holding");
    assert!(first > Instant::now(), "the hold was handed out with its window passed");
    // The window moves with the beats' proofs.
    eventually("the window to move", || async {
        guard.safe_until().is_some_and(|u| u > first + TIMEOUT / 4)
    })
    .await;
    let (holding, pings) = over_pings(&zk, ours, theirs, 10).await;
    assert!(
        holding * 2 <= pings * 3 + 2,
        "holding: the session sent {holding} requests while the client's pings were {pings}"
    );
    assert!(holding > pings, "holding: {holding} requests, no more than the {pings} pings: no beats?");
    assert_eq!(guard.current_status(), LockStatus::Held);
    assert!(guard.safe_until().is_some_and(|u| u > Instant::now()));
    guard.release().await.expect("release");
    session.close().await;
}

/// A session that asked for nothing for longer than its timeout (its last proven window long
/// passed) hands out a hold only with a proven window: `Held`, the window open, and it stays
/// so while the session beats again. And asking for the session's window starts the beats: the
/// window opens again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_after_a_quiet_spell_comes_with_a_proven_window() {
    let zk = standalone().await;
    let session = session_with_timeout(&zk.connect_string(), TIMEOUT).await;
    let raw = client_with_timeout(&zk.connect_string(), TIMEOUT).await;
    let (ours, theirs) = (sid(&session), raw.session_id().0);
    // Two timeouts of quiet, counted in the raw client's pings (five or more per timeout).
    over_pings(&zk, ours, theirs, 12).await;
    let mutex = InterProcessMutex::new(&session, "/beats/after-quiet").expect("mutex");
    let guard = within("acquire", mutex.acquire()).await.expect("acquire");
    assert_eq!(guard.current_status(), LockStatus::Held);
    let until = guard.safe_until().expect("a window");
    assert!(until > Instant::now(), "the hold was handed out with its window passed");
    assert!(guard.ensure_safe(Duration::ZERO).is_ok());
    let mut status = guard.status();
    // Two timeouts of holding: never anything but `Held`.
    let held_through = async {
        let (_, _) = over_pings(&zk, ours, theirs, 12).await;
    };
    tokio::select! {
        _ = held_through => {}
        changed = status.wait_for(|s| *s != LockStatus::Held) => {
            panic!("the hold changed: {:?}", changed.map(|s| *s))
        }
    }
    assert_eq!(guard.current_status(), LockStatus::Held);
    guard.release().await.expect("release");
    drop(mutex);

    // Quiet again (the linger, a timeout, then two more), then a caller of the window.
    over_pings(&zk, ours, theirs, 18).await;
    let before = session.last_contact().expect("a contact");
    eventually("the window to open again", || async {
        session.safe_until().is_some_and(|u| u > Instant::now()) && session.last_contact() > Some(before)
    })
    .await;
    session.close().await;
}

/// `ConnectOptions::beat_while_idle`: a session that asked for nothing for two timeouts still
/// beats (more requests than the pings) and its window stays proven: its last contact is less
/// than a timeout old when first asked for, so an acquire has no window to wait for. (By
/// default, the same read returns the contact from before the quiet spell: the test above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_beats_while_idle_keeps_its_window_proven() {
    let zk = standalone().await;
    let options = ConnectOptions::new(TIMEOUT).beat_while_idle(true);
    let session =
        within("connect", Session::connect_with(&zk.connect_string(), &options)).await.expect("connect");
    let raw = client_with_timeout(&zk.connect_string(), TIMEOUT).await;
    let (ours, theirs) = (sid(&session), raw.session_id().0);
    over_pings(&zk, ours, theirs, 2).await;
    // Two timeouts and more of quiet, counted in the raw client's pings.
    let (idle, pings) = over_pings(&zk, ours, theirs, 12).await;
    assert!(idle > pings, "idle: {idle} requests, no more than the {pings} pings: no beats?");
    // Proven contacts lag the latest answer by about 0.45 of the timeout; unproven, the last
    // one would be from before the quiet spell, more than two timeouts old.
    let contact = session.last_contact().expect("a contact");
    assert!(
        contact.elapsed() < TIMEOUT,
        "the last contact is {:?} old after a quiet spell",
        contact.elapsed()
    );
    let mutex = InterProcessMutex::new(&session, "/beats/while-idle").expect("mutex");
    let guard = within("acquire", mutex.acquire()).await.expect("acquire");
    assert_eq!(guard.current_status(), LockStatus::Held);
    assert!(guard.safe_until().is_some_and(|u| u > Instant::now()));
    guard.release().await.expect("release");
    session.close().await;
}
