//! The lock delay under faults and at its edges (each test failed before its fix): a waiter
//! that gives up during its delay, a
//! holder that vanishes while the waiter watches another, two clean releases at once, a close
//! or an expiry during the delay (without the own-node watch), ACLs without WRITE, and
//! durations too long to add to an instant.
//!
//! Every wait is on an event (a queue event, a session state, a node's deletion); the only
//! time checks are lower bounds measured in the waiter's own process, as in
//! `tests/lock_delay.rs`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use zk_recipes::zookeeper_client::{Acl, Acls, AuthId, Permission};
use zk_recipes::{
    ConnectionState, Error, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphore, Lock,
    LockOptions, LockStatus, QueueEvent,
};

const DELAY: Duration = Duration::from_secs(3);

fn delayed(id: &str) -> LockOptions {
    LockOptions::new().participant_id(id).lock_delay(DELAY)
}

/// Liveness (a needless delay). A semaphore's first waiter watches every lease holder; two of
/// them release cleanly at once. It wakes on the first one's data change, lists, and takes the
/// second one's absence for an unclean vanishing, though its watch saw that one's marked
/// release too. (It did: `[Queued, LockDelay { vanished: <the second holder> }, Acquired]`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_clean_lease_releases_at_once_impose_no_delay() {
    let zk = standalone().await;
    let holders = session(&zk.connect_string()).await;
    let semaphore =
        InterProcessSemaphore::with_options(&holders, "/faults/leases", 2, delayed("holders")).unwrap();
    let (first, second) = (semaphore.acquire().await.unwrap(), semaphore.acquire().await.unwrap());
    let other = session(&zk.connect_string()).await;
    let waiting = InterProcessSemaphore::with_options(&other, "/faults/leases", 2, delayed("next")).unwrap();
    let mut next = Waiter::leases(waiting, 2);
    next.queued().await;

    let (a, b) = tokio::join!(first.release(), second.release());
    a.unwrap();
    b.unwrap();
    let guard = next.result().await.unwrap().expect("acquired");
    guard.release().await.unwrap();
    assert_eq!(next.delays().len(), 0, "clean releases taken for unclean: {:?}", next.events());
}

/// Safety (the delay's promise). The holder's session expires; the first waiter starts its
/// lock delay at the head; then it gives up (a dropped acquire: Ctrl-C on `zklock run`, a
/// `select!`). Its leaving is marked as clean, so the waiter behind it enters at once, well
/// inside the delay after the expired holder, which may still be at work. (The second waiter
/// entered some milliseconds after the first was told to wait 3 s, with no `LockDelay`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_that_gives_up_during_its_delay_does_not_let_the_next_in_early() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let doomed = session_with_timeout(&proxy.connect_string(), Duration::from_secs(2)).await;
    let holder = InterProcessMutex::with_options(&doomed, "/faults/give-up", delayed("doomed")).unwrap();
    let held = holder.acquire().await.unwrap();
    let one = session(&zk.connect_string()).await;
    let mut first = Waiter::lock(
        InterProcessMutex::with_options(&one, "/faults/give-up", delayed("first")).unwrap(),
        None,
    );
    first.queued().await;
    let two = session(&zk.connect_string()).await;
    let mut second = Waiter::lock(
        InterProcessMutex::with_options(&two, "/faults/give-up", delayed("second")).unwrap(),
        None,
    );
    second.queued().await;

    proxy.blackhole();
    let (told, wait) = first.lock_delay().await;
    first.task.abort();
    let guard = second.result().await.unwrap().expect("acquired");
    let entered = Instant::now();
    guard.release().await.unwrap();
    proxy.heal();
    drop(held);
    assert!(
        entered.duration_since(told) >= wait,
        "entered {:?} after the first waiter was told to wait {wait:?}: {:?}",
        entered.duration_since(told),
        second.events()
    );
}

/// Safety (the delay's promise). Two readers hold; a writer waits, watching only the last of
/// them. The first reader's session expires: the writer is not woken. Then the last reader
/// releases cleanly: the writer lists, finds both gone, counts only the one it watched, and
/// enters at once, beside an expired reader that may still be reading. (It entered some
/// milliseconds after the expired reader's node was deleted, with no `LockDelay`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_waits_the_delay_after_a_reader_it_did_not_watch_expired() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let admin = client(&zk.connect_string()).await;
    let doomed = session_with_timeout(&proxy.connect_string(), Duration::from_secs(2)).await;
    let expiring =
        InterProcessReadWriteLock::with_options(&doomed, "/faults/rw", delayed("expiring")).unwrap();
    let expiring = expiring.read().await.unwrap();
    let reader_session = session(&zk.connect_string()).await;
    let reader =
        InterProcessReadWriteLock::with_options(&reader_session, "/faults/rw", delayed("reader")).unwrap();
    let reading = reader.read().await.unwrap();
    let writer_session = session(&zk.connect_string()).await;
    let writer =
        InterProcessReadWriteLock::with_options(&writer_session, "/faults/rw", delayed("writer")).unwrap();
    let mut writer = Waiter::lock(writer.write_lock(), None);
    writer.queued().await;

    proxy.blackhole();
    let (_, gone) = admin.check_and_watch_stat(expiring.node_path()).await.unwrap();
    within("the expired reader's node deleted", gone.changed()).await;
    let gone_at = Instant::now();
    reading.release().await.unwrap();
    let guard = writer.result().await.unwrap().expect("acquired");
    let entered = gone_at.elapsed();
    guard.release().await.unwrap();
    proxy.heal();
    drop(expiring);
    // A lower bound, as in tests/lock_delay.rs: it waited out most of the delay.
    assert!(entered >= DELAY / 2, "entered {entered:?} after a reader vanished: {:?}", writer.events());
}

/// A lock-delay wait of a semaphore waiter without the own-node watch
/// (`watch_own_node(false)`): the holder's session expires, the waiter starts its delay.
fn without_own_watch(id: &str, delay: Duration) -> LockOptions {
    LockOptions::new().participant_id(id).lock_delay(delay).watch_own_node(false)
}

/// Liveness. Without the own-node watch, nothing follows the waiter's own session during the
/// delay: a `close()` does not end the acquire, which sleeps out the whole delay and then
/// returns `Ok(Some(guard))`, already `Lost`, on the closed session (docs: "its session's end
/// during the wait is an error, as in any wait").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_close_during_the_delay_ends_the_acquire() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let delay = Duration::from_secs(10);
    let doomed = session_with_timeout(&proxy.connect_string(), Duration::from_secs(2)).await;
    let holder =
        InterProcessSemaphore::with_options(&doomed, "/faults/close", 1, without_own_watch("doomed", delay))
            .unwrap();
    let held = holder.acquire().await.unwrap();
    let session = session(&zk.connect_string()).await;
    let waiting =
        InterProcessSemaphore::with_options(&session, "/faults/close", 1, without_own_watch("next", delay))
            .unwrap();
    let mut next = Waiter::leases(waiting, 1);
    next.queued().await;
    proxy.blackhole();
    next.lock_delay().await;

    session.close().await;
    let result = next.result().await;
    proxy.heal();
    drop(held);
    assert!(
        matches!(result, Err(Error::SessionClosed)),
        "{:?}",
        result.map(|g| g.map(|g| g.current_status()))
    );
}

/// Safety. As above, but the waiter's own session expires during the delay: the acquire
/// sleeps the delay out and returns a guard whose node is gone (status `Lost` from the start),
/// where any other wait would queue again on the new session (`QueueEvent::Requeued`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expiry_during_the_delay_queues_again() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let waiter_proxy = zk.proxy().unwrap();
    let delay = Duration::from_secs(8);
    let doomed = session_with_timeout(&proxy.connect_string(), Duration::from_secs(2)).await;
    let holder =
        InterProcessSemaphore::with_options(&doomed, "/faults/expiry", 1, without_own_watch("doomed", delay))
            .unwrap();
    let held = holder.acquire().await.unwrap();
    let session = session_with_timeout(&waiter_proxy.connect_string(), Duration::from_secs(2)).await;
    let waiting =
        InterProcessSemaphore::with_options(&session, "/faults/expiry", 1, without_own_watch("next", delay))
            .unwrap();
    let mut next = Waiter::leases(waiting, 1);
    next.queued().await;
    proxy.blackhole();
    next.lock_delay().await;

    waiter_proxy.blackhole();
    wait_session_state(&session, ConnectionState::Lost).await;
    waiter_proxy.heal();
    let guard = next.result().await.unwrap().expect("acquired");
    let status = guard.current_status();
    drop(guard);
    proxy.heal();
    drop(held);
    assert_ne!(status, LockStatus::Lost, "the acquire returned a lost guard: {:?}", next.events());
    assert!(next.seen.iter().any(|(_, e)| matches!(e, QueueEvent::Requeued { .. })), "{:?}", next.events());
}

/// Liveness (a leaked node). With ACLs that do not grant WRITE on our nodes (READ, CREATE and
/// DELETE: enough for every lock without the delay), the marked release's `setData` is refused,
/// so the whole transaction is: the release fails with `NoAuth { op: "delete" }` and the node
/// stays, holding the lock until the session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_with_the_lock_delay_works_under_acls_without_write() {
    let zk = standalone().await;
    let session = session(&zk.connect_string()).await;
    let admin = client(&zk.connect_string()).await;
    let acl = [Acl::new(Permission::READ | Permission::CREATE | Permission::DELETE, AuthId::anyone())];
    for (path, options) in [
        ("/faults/acl-plain", LockOptions::new().acls(Acls::new(&acl))),
        ("/faults/acl-delay", LockOptions::new().acls(Acls::new(&acl)).lock_delay(DELAY)),
    ] {
        let mutex = InterProcessMutex::with_options(&session, path, options).unwrap();
        let released = mutex.acquire().await.unwrap().release().await;
        let left = children(&admin, path).await;
        assert!(released.is_ok() && left.is_empty(), "{path}: {released:?}, left {left:?}");
    }
}

/// No panic on bad input: a timeout of `Duration::MAX` (`Wait::at_most` adds it to
/// `Instant::now()`: "overflow when adding duration to instant"; `acquire_timeout` has the same
/// addition, from before this commit). It should wait without a bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_huge_timeout_does_not_panic() {
    let zk = standalone().await;
    let session = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&session, "/faults/huge-timeout").unwrap();
    let acquired = tokio::spawn(async move {
        let guard = mutex.acquire_with_events(Some(Duration::MAX), &mut |_| {}).await.unwrap();
        guard.expect("free").release().await.unwrap();
    });
    within("the acquire", acquired).await.expect("no panic");
}

/// No panic on bad input: `lock_delay(Duration::MAX)` panics in the waiter's acquire when the
/// holder ahead vanishes (`Progress::vanished_unclean` adds it to `Instant::now()`). It should
/// hold the waiter back for good (until a close, say), reporting `LockDelay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_huge_lock_delay_does_not_panic() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let forever = || LockOptions::new().lock_delay(Duration::MAX);
    let doomed = session_with_timeout(&proxy.connect_string(), Duration::from_secs(2)).await;
    let held = InterProcessMutex::with_options(&doomed, "/faults/huge-delay", forever()).unwrap();
    let held = held.acquire().await.unwrap();
    let session = session(&zk.connect_string()).await;
    let mut next = Waiter::lock(
        InterProcessMutex::with_options(&session, "/faults/huge-delay", forever()).unwrap(),
        None,
    );
    next.queued().await;
    proxy.blackhole();
    next.lock_delay().await;
    session.close().await;
    let result = next.result().await;
    proxy.heal();
    drop(held);
    assert!(matches!(result, Err(Error::SessionClosed)), "{:?}", result.map(|g| g.is_some()));
}
