//! Lock delay: with `LockOptions::lock_delay(d)`, a waiter that saw the node
//! ahead of it vanish without a clean release (its session expired, the hold limit passed, a
//! Curator holder's plain delete) waits `d` more before its acquire returns, keeping its place
//! at the head; after a clean release (a marker written in the transaction that deletes the
//! node), or a marked leave of a waiter that gave up, it enters at once.
//!
//! Every wait is on an event: the acquire's own queue events (`acquire_with_events`), a peer's
//! line, a session's state. The one time check is a lower bound measured in the waiter's own
//! process (its `LockDelay` event said `wait`; its `Acquired` came at least `wait` later), which
//! holds on any machine, however slow.

mod common;

use std::time::Duration;

use common::peers;
use common::*;
use zk_recipes::{GiveUpReason, InterProcessMutex, LockGuard, LockOptions, QueueEvent, Session};

const DELAY: Duration = Duration::from_secs(3);

fn delayed(id: &str) -> LockOptions {
    LockOptions::new().participant_id(id).lock_delay(DELAY)
}

fn name_of(guard: &LockGuard) -> String {
    guard.node_path().rsplit('/').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_the_holders_session_expires_the_next_waits_the_delay_and_keeps_its_place() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let doomed = session_with_timeout(&proxy.connect_string(), Duration::from_secs(2)).await;
    let holder = InterProcessMutex::with_options(&doomed, "/delay/expiry", delayed("doomed")).unwrap();
    let held = holder.acquire().await.unwrap();
    let vanished = name_of(&held);

    let session = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::with_options(&session, "/delay/expiry", delayed("next")).unwrap();
    let mut next = Waiter::lock(mutex.clone(), None);
    next.queued().await;

    // The holder's process goes silent: the server expires its session and deletes its node.
    proxy.blackhole();
    let (told, event) = next.until("the lock delay", |e| matches!(e, QueueEvent::LockDelay { .. })).await;
    let QueueEvent::LockDelay { wait, vanished: node, .. } = event else { unreachable!() };
    assert_eq!(node, vanished);
    assert!(wait <= DELAY && wait > DELAY / 2, "{wait:?}");

    // It keeps its place meanwhile: nobody else gets in.
    let other = common::session(&zk.connect_string()).await;
    let third = InterProcessMutex::new(&other, "/delay/expiry").unwrap();
    assert!(third.try_acquire().await.unwrap().is_none());

    let guard = next.guard().await;
    let (acquired, _) = next.seen.iter().find(|(_, e)| matches!(e, QueueEvent::Acquired { .. })).unwrap();
    assert!(acquired.duration_since(told) >= wait, "entered before the delay was over");
    guard.release().await.unwrap();
    proxy.heal();
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_clean_release_the_next_enters_at_once() {
    let zk = standalone().await;
    let session = session(&zk.connect_string()).await;
    let holder = InterProcessMutex::with_options(&session, "/delay/clean", delayed("holder")).unwrap();
    let held = holder.acquire().await.unwrap();

    let other = common::session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::with_options(&other, "/delay/clean", delayed("next")).unwrap();
    let mut next = Waiter::lock(mutex.clone(), None);
    next.queued().await;
    // A marked release is a clean one, and the holder's own watch takes it for its own delete.
    held.release().await.unwrap();
    next.guard().await.release().await.unwrap();
    assert!(next.delays().is_empty(), "{:?}", next.seen);
    assert!(matches!(next.seen.last(), Some((_, QueueEvent::Acquired { .. }))), "{:?}", next.seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_that_gives_up_ahead_of_us_leaves_cleanly() {
    let zk = standalone().await;
    let session = session(&zk.connect_string()).await;
    let holder = InterProcessMutex::with_options(&session, "/delay/leave", delayed("holder")).unwrap();
    let held = holder.acquire().await.unwrap();

    let impatient_session = common::session(&zk.connect_string()).await;
    let impatient =
        InterProcessMutex::with_options(&impatient_session, "/delay/leave", delayed("impatient")).unwrap();
    let mut ahead = Waiter::lock(impatient.clone(), None);
    ahead.queued().await;
    let other = common::session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::with_options(&other, "/delay/leave", delayed("next")).unwrap();
    let mut next = Waiter::lock(mutex.clone(), None);
    next.queued().await;

    // The waiter ahead gives up (its acquire is dropped): its node is deleted in the background.
    ahead.task.abort();
    ahead
        .until("cancelled", |e| matches!(e, QueueEvent::GaveUp { reason: GiveUpReason::Cancelled, .. }))
        .await;
    // Its leaving moved us up, and was marked: no delay pending.
    next.until("moved up", |e| matches!(e, QueueEvent::MovedUp { ahead: 1, .. })).await;
    held.release().await.unwrap();
    next.guard().await.release().await.unwrap();
    assert!(next.delays().is_empty(), "{:?}", next.seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hold_that_ends_at_its_limit_is_not_a_clean_release() {
    let zk = standalone().await;
    let session = session(&zk.connect_string()).await;
    let limited = delayed("limited").max_hold(Duration::from_secs(2));
    let holder = InterProcessMutex::with_options(&session, "/delay/limit", limited).unwrap();
    let held = holder.acquire().await.unwrap();
    let vanished = name_of(&held);

    let other = common::session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::with_options(&other, "/delay/limit", delayed("next")).unwrap();
    let mut next = Waiter::lock(mutex.clone(), None);
    next.queued().await;
    let guard = next.guard().await;
    assert!(
        matches!(next.delays()[..], [QueueEvent::LockDelay { vanished: ref node, .. }] if *node == vanished),
        "{:?}",
        next.seen
    );
    guard.release().await.unwrap();
    assert!(held.release().await.is_err(), "the limit ended the hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn beside_a_curator_holder_every_release_counts_as_unclean() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let mut java = Peer::spawn(peers::curator(&["hold", &connect, "/delay/curator", "java", "10000"]));
    java.expect("HOLDING").await;

    let session = session(&connect).await;
    let mutex = InterProcessMutex::with_options(&session, "/delay/curator", delayed("next")).unwrap();
    let mut next = Waiter::lock(mutex.clone(), None);
    next.queued().await;
    // Curator deletes its node with a plain delete: to a waiter, that looks like an expiry.
    java.say("release");
    java.expect("RELEASED").await;
    let guard = next.guard().await;
    assert_eq!(next.delays().len(), 1, "{:?}", next.seen);
    guard.release().await.unwrap();
    java.wait_success().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_option_nothing_waits_and_releases_are_plain_deletes() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let doomed: Session = session_with_timeout(&proxy.connect_string(), Duration::from_secs(2)).await;
    let holder = InterProcessMutex::new(&doomed, "/delay/off").unwrap();
    let held = holder.acquire().await.unwrap();
    let session = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&session, "/delay/off").unwrap();
    let mut next = Waiter::lock(mutex.clone(), None);
    next.queued().await;
    proxy.blackhole();
    let guard = next.guard().await;
    assert!(next.delays().is_empty(), "{:?}", next.seen);
    // The next one's fast path still holds: it entered on the deletion alone, no listing more.
    assert_eq!(mutex.stats().relists_saved, 1);
    guard.release().await.unwrap();
    proxy.heal();
    drop(held);
}

/// Curator and kazoo waiters behind a holder with the lock delay on are woken by its marked
/// release (a data change, then the deletion in the same transaction) and take the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curator_and_kazoo_waiters_get_the_lock_after_a_marked_release() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let session = session(&connect).await;
    for (format, path) in [
        (zk_recipes::NodeFormat::Curator, "/delay/peer-curator"),
        (zk_recipes::NodeFormat::Kazoo, "/delay/peer-kazoo"),
    ] {
        let mutex = InterProcessMutex::with_options(&session, path, delayed("ours").format(format)).unwrap();
        let held = mutex.acquire().await.unwrap();
        let mut peer = Peer::spawn(match format {
            zk_recipes::NodeFormat::Curator => peers::curator(&["hold", &connect, path, "java", "10000"]),
            _ => peers::kazoo(&["hold", &connect, path, "python", "10000"]),
        });
        // It watches our node: our release must wake it.
        until_watched(&zk, "the peer watching our node", held.node_path()).await;
        held.release().await.unwrap();
        peer.expect("HOLDING").await;
        peer.say("release");
        peer.wait_success().await;
    }
}

/// A `Session::close()` with a guard still held deletes our node with a plain delete: the next
/// waiter with the delay takes it as unclean, as Consul does a destroyed session.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_close_with_a_guard_held_is_not_a_clean_release() {
    let zk = standalone().await;
    let closing = session(&zk.connect_string()).await;
    let holder = InterProcessMutex::with_options(&closing, "/delay/close", delayed("closing")).unwrap();
    let held = holder.acquire().await.unwrap();
    let other = common::session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::with_options(&other, "/delay/close", delayed("next")).unwrap();
    let mut next = Waiter::lock(mutex.clone(), None);
    next.queued().await;
    closing.close().await;
    let guard = next.guard().await;
    assert_eq!(next.delays().len(), 1, "{:?}", next.seen);
    guard.release().await.unwrap();
    drop(held);
}
