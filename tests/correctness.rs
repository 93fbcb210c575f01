//! Recipe correctness: each test names the promise it backs, and each failed on the
//! code before the fix.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{children, within, Overlap};
use zk_recipes::zookeeper_client::{Acls, Client, CreateMode};
use zk_recipes::{
    ConnectionState, Error, InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphore, InterProcessSemaphoreMutex, LeaderLatch, LeaderSelector, Leadership, LockStatus,
    SelectorOptions, Session, TermOutcome,
};

async fn admin(connect: &str) -> Client {
    common::client(connect).await
}

/// Runs `tasks` tasks that each take `take()` and sit in the critical section for a moment, and
/// returns the overlap detector.
async fn contend<F, Fut, G>(tasks: usize, rounds: usize, take: F) -> Arc<Overlap>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = G> + Send,
    G: Send + 'static,
{
    let overlap = Arc::new(Overlap::default());
    let mut all = Vec::new();
    for _ in 0..tasks {
        let (take, overlap) = (take.clone(), overlap.clone());
        all.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = take().await;
                overlap.enter();
                tokio::time::sleep(Duration::from_millis(2)).await;
                overlap.exit();
                drop(guard);
            }
        }));
    }
    for task in all {
        within("contenders", task).await.unwrap();
    }
    overlap
}

/// Claim (README, docs/recipes.md, mutex docs): two `acquire` calls on one handle, or its clones, from
/// different tasks exclude each other; many tasks on one handle cost one node at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_one_mutex_handle_exclude_each_other() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&session, "/c/shared-handle").unwrap();
    let most_nodes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watcher = {
        let (admin, most) = (admin.clone(), most_nodes.clone());
        tokio::spawn(async move {
            loop {
                let n = children(&admin, "/c/shared-handle").await.len();
                most.fetch_max(n, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    let shared = mutex.clone();
    let overlap = contend(8, 5, move || {
        let mutex = shared.clone();
        async move { mutex.acquire().await.unwrap() }
    })
    .await;
    watcher.abort();
    // The last guard was dropped: its release runs in the background.
    mutex.settled().await;
    assert_eq!(overlap.violations(), 0, "tasks on one handle entered together");
    assert_eq!(overlap.entries(), 40);
    // One node per handle at a time, plus the previous holder's while its delete is in flight
    // (the local turn passes on as soon as the guard is released): never one per task.
    assert!(most_nodes.load(std::sync::atomic::Ordering::SeqCst) <= 2, "a node per waiting task");
    assert!(children(&admin, "/c/shared-handle").await.is_empty());
}

/// Claim: the same exclusion between tasks holds for the write side of the read/write lock,
/// the semaphore mutex and the multi-lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_other_exclusive_handles_exclude_each_other() {
    let zk = common::standalone().await;
    let session = common::session(&zk.connect_string()).await;
    let rw = InterProcessReadWriteLock::new(&session, "/c/shared-rw").unwrap();
    let overlap = contend(6, 4, move || {
        let rw = rw.clone();
        async move { rw.write().await.unwrap() }
    })
    .await;
    assert_eq!(overlap.violations(), 0, "write side");

    let semaphore_mutex = Arc::new(InterProcessSemaphoreMutex::new(&session, "/c/shared-sm").unwrap());
    let overlap = contend(6, 4, move || {
        let m = semaphore_mutex.clone();
        async move { m.acquire().await.unwrap() }
    })
    .await;
    assert_eq!(overlap.violations(), 0, "semaphore mutex");

    let multi = InterProcessMultiLock::new(&session, &["/c/shared-m1", "/c/shared-m2"]).unwrap();
    let overlap = contend(6, 4, move || {
        let multi = multi.clone();
        async move { multi.acquire().await.unwrap() }
    })
    .await;
    assert_eq!(overlap.violations(), 0, "multi-lock");
}

/// Claim: reentrancy goes through the guard that proves ownership; the node goes with the
/// last nested hold; non-reentrant locks refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_goes_through_the_guard() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&session, "/c/reenter").unwrap();
    let outer = mutex.acquire().await.unwrap();
    let inner = outer.reenter().unwrap();
    assert_eq!(inner.node_path(), outer.node_path());
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    outer.release().await.unwrap();
    assert_eq!(children(&admin, "/c/reenter").await.len(), 1, "the nested hold keeps the node");
    assert!(mutex.try_acquire().await.unwrap().is_none(), "the handle itself does not re-enter");
    inner.release().await.unwrap();
    assert!(children(&admin, "/c/reenter").await.is_empty());

    let sm = InterProcessSemaphoreMutex::new(&session, "/c/reenter-sm").unwrap();
    let guard = sm.acquire().await.unwrap();
    assert!(matches!(guard.reenter(), Err(Error::NotReentrant { .. })));
    guard.release().await.unwrap();
}

/// Claim: the documented downgrade (hold the write lock, take the read lock through the write
/// guard, release the write lock) does not deadlock while another writer and readers are
/// queued, and nobody writes beside our reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_with_a_writer_and_readers_queued_neither_deadlocks_nor_overlaps() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let ours = InterProcessReadWriteLock::new(&session, "/c/downgrade").unwrap();
    let write = ours.write().await.unwrap();

    let other = common::session(&zk.connect_string()).await;
    let writer = InterProcessReadWriteLock::new(&other, "/c/downgrade").unwrap();
    let reader = InterProcessReadWriteLock::new(&other, "/c/downgrade").unwrap();
    let writer_in = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let queued_writer = {
        let flag = writer_in.clone();
        tokio::spawn(async move {
            let guard = writer.write().await.unwrap();
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            guard
        })
    };
    common::eventually("the writer to queue", || async { children(&admin, "/c/downgrade").await.len() == 2 })
        .await;
    let queued_reader = tokio::spawn(async move { reader.read().await.unwrap() });
    common::eventually("the reader to queue", || async { children(&admin, "/c/downgrade").await.len() == 3 })
        .await;

    let read = within("the downgrade", ours.downgrade(&write)).await.unwrap();
    write.release().await.unwrap();
    // Our reader holds: the queued writer must still be out, whatever we wait for.
    let mut probe = ours.participants().await.unwrap();
    probe.retain(|p| p.is_holder);
    assert!(!writer_in.load(std::sync::atomic::Ordering::SeqCst), "a writer got in beside our reader");
    assert!(!queued_writer.is_finished());
    read.release().await.unwrap();
    let w = within("the queued writer", queued_writer).await.unwrap();
    assert!(!queued_reader.is_finished(), "the reader queued behind the writer waits for it");
    w.release().await.unwrap();
    within("the queued reader", queued_reader).await.unwrap().release().await.unwrap();
}

/// Claim: a plain downgrade with nobody queued lets other readers in once the write guard is
/// released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_with_nobody_queued_lets_readers_in() {
    let zk = common::standalone().await;
    let session = common::session(&zk.connect_string()).await;
    let ours = InterProcessReadWriteLock::new(&session, "/c/downgrade-free").unwrap();
    let write = ours.write().await.unwrap();
    let read = ours.downgrade(&write).await.unwrap();
    write.release().await.unwrap();
    let other = InterProcessReadWriteLock::new(&session, "/c/downgrade-free").unwrap();
    let second = within("another reader", other.read()).await.unwrap();
    assert!(other.try_write().await.unwrap().is_none(), "readers hold");
    second.release().await.unwrap();
    read.release().await.unwrap();
}

/// Claim: a downgrade keeps exclusion across a session expiry. Our write hold's session expires
/// while the downgrade's read node is still on its way (requests held back): the read is then
/// made in the next session, after our write node went and another writer took the lock. The
/// downgrade must fail with `LockLost` and keep no read, not hand back a read beside that
/// writer (a downgraded reader whose writes fencing refuses, and who is never told).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_whose_session_expires_first_fails_and_keeps_no_read() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let proxy = zk.proxy().unwrap();
    let session = Session::connect(&proxy.connect_string(), Duration::from_secs(1)).await.unwrap();
    let ours = InterProcessReadWriteLock::new(&session, "/c/downgrade-expiry").unwrap();
    let write = ours.write().await.unwrap();
    let other = common::session(&zk.connect_string()).await;
    let theirs = InterProcessReadWriteLock::new(&other, "/c/downgrade-expiry").unwrap();
    proxy.hold_requests();
    let downgrading = tokio::spawn(async move {
        let outcome = ours.downgrade(&write).await;
        (outcome, write)
    });
    // The server expires our session (our write node goes), and the other writer enters.
    let their_write = within("the other writer", theirs.write()).await.unwrap();
    proxy.heal();
    let (outcome, write) = within("the downgrade", downgrading).await.unwrap();
    assert!(matches!(outcome, Err(Error::LockLost { .. })), "{outcome:?}");
    assert_eq!(write.current_status(), LockStatus::Lost);
    common::eventually("no node of ours beside their write", || async {
        children(&admin, "/c/downgrade-expiry").await.len() == 1
    })
    .await;
    their_write.release().await.unwrap();
    session.close().await;
}

/// Claim: a semaphore waiter wakes on any release that could admit it, not on one particular
/// holder; and only the first waiter watches the holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_wakes_on_any_release() {
    let zk = common::standalone().await;
    let session = common::session(&zk.connect_string()).await;
    let semaphore = Arc::new(InterProcessSemaphore::new(&session, "/c/sem-any", 3).unwrap());
    let a = semaphore.acquire().await.unwrap();
    let b = semaphore.acquire().await.unwrap();
    let c = semaphore.acquire().await.unwrap();
    let admin = admin(&zk.connect_string()).await;
    // D queues first, then E (spawned together, either could be first).
    let d = {
        let s = semaphore.clone();
        tokio::spawn(async move { s.acquire().await.unwrap() })
    };
    common::eventually("the first waiter", || async { children(&admin, "/c/sem-any").await.len() == 4 })
        .await;
    let e = {
        let s = semaphore.clone();
        tokio::spawn(async move { s.acquire().await.unwrap() })
    };
    common::eventually("two waiters", || async { children(&admin, "/c/sem-any").await.len() == 5 }).await;
    // C, the last holder, releases first: D (the first waiter) gets in while A and B hold.
    c.release().await.unwrap();
    let d = within("the first waiter to get C's lease", d).await.unwrap();
    assert!(!e.is_finished());
    b.release().await.unwrap();
    let e = within("the second waiter to get B's lease", e).await.unwrap();
    for guard in [a, d, e] {
        guard.release().await.unwrap();
    }
}

/// Claim: the maximum is checked against the path on every acquire, not once per handle: a
/// path deleted and re-created by a participant with another maximum is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphore_maximum_is_checked_on_every_acquire() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let one = InterProcessSemaphore::new(&session, "/c/sem-max", 1).unwrap();
    one.acquire().await.unwrap().release().await.unwrap();
    admin.delete("/c/sem-max", None).await.unwrap();
    admin.create("/c/sem-max", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.unwrap();
    let five = InterProcessSemaphore::new(&session, "/c/sem-max", 5).unwrap();
    let held = five.acquire().await.unwrap();
    assert!(matches!(one.try_acquire().await, Err(Error::LeaseMaxMismatch { .. })));
    held.release().await.unwrap();
    assert_eq!(
        children(&admin, "/c/sem-max").await,
        Vec::<String>::new(),
        "the refused acquire left no node"
    );
}

/// Claim: `acquire_timeout` and `try_acquire` return by their deadline whatever the
/// connection does; cleanup of a half-created node goes on in the background and is not lost.
/// (No wall-clock assertion: they must return while the session is merely suspended, long
/// before the client could declare it expired; they do not wait for that.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_acquires_return_by_their_deadline_while_the_connection_is_down() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let proxy = zk.proxy().unwrap();
    let session = Session::connect(&proxy.connect_string(), Duration::from_secs(4)).await.unwrap();
    let mutex = InterProcessMutex::new(&session, "/c/timeouts").unwrap();
    proxy.blackhole();
    let timed = within("acquire_timeout", mutex.acquire_timeout(Duration::from_millis(300))).await;
    assert!(matches!(timed, Ok(None)), "{timed:?}");
    assert_eq!(session.generation(), 1);
    assert_ne!(session.state(), ConnectionState::Lost, "returned only after the session was lost");
    let tried = within("try_acquire", mutex.try_acquire()).await;
    assert!(matches!(tried, Err(Error::Timeout(_))), "{tried:?}");
    assert_eq!(session.generation(), 1, "returned only after a new session");
    proxy.heal();
    within("background cleanup", mutex.settled()).await;
    common::eventually("no node left", || async { children(&admin, "/c/timeouts").await.is_empty() }).await;
    let guard = within("acquire after heal", mutex.acquire()).await.unwrap();
    guard.release().await.unwrap();
}

/// Claim: a revocation request written while a contender is still waiting is delivered once
/// it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_request_made_while_waiting_is_delivered_once_holding() {
    let zk = common::standalone().await;
    let session = common::session(&zk.connect_string()).await;
    let holder = InterProcessMutex::new(&session, "/c/revoke-wait").unwrap();
    let held = holder.acquire().await.unwrap();
    let revocable = zk_recipes::LockOptions::new().revocable(true);
    let waiter = InterProcessMutex::with_options(&session, "/c/revoke-wait", revocable).unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire().await.unwrap() });
    let admin = admin(&zk.connect_string()).await;
    common::eventually("the waiter to queue", || async {
        children(&admin, "/c/revoke-wait").await.len() == 2
    })
    .await;
    let queue = holder.participants().await.unwrap();
    let waiter_node = format!("/c/revoke-wait/{}", queue[1].node);
    assert!(zk_recipes::request_revocation(&session, &waiter_node).await.unwrap());
    held.release().await.unwrap();
    let guard = within("the waiter", waiting).await.unwrap();
    let mut status = guard.status();
    within("revocation delivered", status.wait_for(|s| *s == LockStatus::RevocationRequested)).await.unwrap();
    guard.release().await.unwrap();
}

/// Claim: closing a latch from two tasks at once: the second `close()` waits for the first
/// to finish (our node is gone when either returns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_latch_closes_both_wait_for_the_node_to_go() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let latch = Arc::new(
        LeaderLatch::with_options(
            &session,
            "/c/latch-close",
            zk_recipes::LatchOptions::new().participant_id("a"),
        )
        .unwrap(),
    );
    latch.start().unwrap();
    within("leadership", latch.await_leadership()).await.unwrap();
    let first = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.close().await })
    };
    tokio::task::yield_now().await;
    within("the second close", latch.close()).await;
    assert!(children(&admin, "/c/latch-close").await.is_empty(), "the second close returned early");
    within("the first close", first).await.unwrap();
}

/// Claim (selector docs): a panicking leadership task ends the term at once: leadership is
/// relinquished (the node goes), the panic is reported, and with auto-requeue we lead again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_leadership_task_relinquishes_and_requeues() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let selector = LeaderSelector::with_options(
        &session,
        "/c/panic",
        SelectorOptions::new().participant_id("p").auto_requeue(true),
    )
    .unwrap();
    let mut terms = selector.terms();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    selector
        .start(move |ctx| {
            let first = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            async move {
                if first {
                    panic!("boom in the leader");
                }
                ctx.stopped().await
            }
        })
        .unwrap();
    let ended = within("the panicking term", terms.recv()).await.unwrap();
    assert_eq!(ended.outcome, TermOutcome::Panicked("boom in the leader".to_string()));
    let token = within("leadership again", selector.await_leadership()).await.unwrap();
    assert!(token > ended.fencing_token);
    assert_eq!(children(&admin, "/c/panic").await.len(), 1, "the panicked term's node is gone");
    selector.close().await;
}

/// Claim: a task that blocks (never yields) cannot hide a loss: `has_leadership()` and the
/// leadership channel turn false at the moment of loss; with auto-requeue the selector requeues
/// after its node was deleted by someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_blocking_task_cannot_hide_a_lost_term_and_the_selector_requeues() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let options =
        SelectorOptions::new().participant_id("b").auto_requeue(true).grace(Duration::from_millis(100));
    let selector = LeaderSelector::with_options(&session, "/c/blocking", options).unwrap();
    let (unblock, blocked) = std::sync::mpsc::channel::<()>();
    let blocked = Arc::new(std::sync::Mutex::new(blocked));
    let first_term = Arc::new(std::sync::atomic::AtomicBool::new(true));
    selector
        .start(move |ctx| {
            let (blocked, first) = (blocked.clone(), first_term.clone());
            async move {
                if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    // Blocks its thread: never yields to the runtime.
                    let _ = blocked.lock().unwrap().recv();
                } else {
                    ctx.stopped().await
                }
            }
        })
        .unwrap();
    let first = within("leadership", selector.await_leadership()).await.unwrap();
    let mut leadership = selector.leadership();
    let node = children(&admin, "/c/blocking").await.remove(0);
    admin.delete(&format!("/c/blocking/{node}"), None).await.unwrap();
    within("NotLeader while the task blocks", leadership.wait_for(|l| *l == Leadership::NotLeader))
        .await
        .unwrap();
    assert!(!selector.has_leadership());
    unblock.send(()).unwrap();
    let second = common::leadership_after(&selector, first, "leadership after requeue").await;
    assert!(second > first);
    selector.close().await;
}

/// Claim: a leader's writes are fenced by its term (`LeadershipContext::fenced_writer`); and
/// `interrupt()` ends a term, `requeue()` queues again without auto-requeue; `id()`, `leader()`
/// and `participants()` report the election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_fenced_writes_interrupt_and_requeue() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    common::create_persistent(&admin, "/c/fenced-data", b"0").await;
    let session = common::session(&zk.connect_string()).await;
    let selector =
        LeaderSelector::with_options(&session, "/c/fenced-sel", SelectorOptions::new().participant_id("me"))
            .unwrap();
    let mut terms = selector.terms();
    let (ctx_tx, mut ctx_rx) = tokio::sync::mpsc::unbounded_channel();
    selector
        .start(move |ctx| {
            let ctx_tx = ctx_tx.clone();
            async move {
                let _ = ctx_tx.send(ctx.clone());
                ctx.stopped().await
            }
        })
        .unwrap();
    let ctx = within("the term", ctx_rx.recv()).await.unwrap();
    assert_eq!(selector.id(), "me");
    assert_eq!(selector.leader().await.unwrap().unwrap().id, "me");
    assert_eq!(selector.participants().await.unwrap().len(), 1);
    assert!(ctx.safe_until().is_some());
    let mut write = ctx.fenced_writer().unwrap();
    write.add_set_data("/c/fenced-data", b"1", None).unwrap();
    write.commit().await.unwrap();

    selector.interrupt();
    let ended = within("the interrupted term", terms.recv()).await.unwrap();
    assert_eq!(ended.outcome, TermOutcome::Interrupted);
    assert!(!selector.has_leadership());
    let mut stale = ctx.fenced_writer().unwrap();
    stale.add_set_data("/c/fenced-data", b"2", None).unwrap();
    assert!(matches!(stale.commit().await, Err(Error::LockLost { .. })), "a past term's write went through");
    assert_eq!(admin.get_data("/c/fenced-data").await.unwrap().0, b"1");
    assert!(children(&admin, "/c/fenced-sel").await.is_empty(), "idle without auto-requeue");

    assert!(selector.requeue());
    assert!(!selector.requeue(), "already queued");
    within("the requeued term", ctx_rx.recv()).await.unwrap();
    assert!(selector.has_leadership());
    selector.close().await;
}

/// A holder and two waiters queued behind it in that order, each on its own session: the shape
/// of the tests on what a woken waiter may conclude.
struct Queue {
    zk: zk_testcluster::ZkCluster,
    admin: Client,
    holder: zk_recipes::LockGuard,
    first: InterProcessMutex,
    waiting: tokio::task::JoinHandle<zk_recipes::Result<zk_recipes::LockGuard>>,
    last: InterProcessMutex,
    behind: tokio::task::JoinHandle<zk_recipes::LockGuard>,
    _sessions: [Session; 3],
}

impl Queue {
    async fn of_three(path: &'static str) -> Queue {
        let zk = common::standalone().await;
        let admin = admin(&zk.connect_string()).await;
        let mutex = |session: &Session| InterProcessMutex::new(session, path).unwrap();
        let sessions = [
            common::session(&zk.connect_string()).await,
            common::session(&zk.connect_string()).await,
            common::session(&zk.connect_string()).await,
        ];
        let holder = mutex(&sessions[0]).acquire().await.unwrap();
        let first = mutex(&sessions[1]);
        let waiting = tokio::spawn({
            let first = first.clone();
            async move { first.acquire().await }
        });
        common::eventually("the first waiter to queue", || async { children(&admin, path).await.len() == 2 })
            .await;
        let last = mutex(&sessions[2]);
        let behind = tokio::spawn({
            let last = last.clone();
            async move { last.acquire().await.unwrap() }
        });
        common::eventually("the last waiter to queue", || async { children(&admin, path).await.len() == 3 })
            .await;
        Queue { zk, admin, holder, first, waiting, last, behind, _sessions: sessions }
    }
}

/// Claim (docs/how-it-works.md): the watch on a waiter's own node vouches for the node only
/// while the connection it was set on lasts. After a reconnection the client sets its watches
/// again in an order of its own, and the server reports nodes deleted meanwhile in that order,
/// so the waiter reads its node again before it enters: once when nothing was deleted (it holds,
/// having read its node), once when its node was deleted during the outage (`NodeDeleted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reconnection_a_woken_waiter_reads_its_node_again() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let proxy = zk.proxy().unwrap();
    let path = "/c/reconnected-waiter";
    let holder_session = common::session(&zk.connect_string()).await;
    let waiter_session = common::session(&proxy.connect_string()).await;
    let waiter = InterProcessMutex::new(&waiter_session, path).unwrap();
    // Replies reach the waiter late: the server has set a watch well before the waiter knows.
    proxy.set_reply_latency(Duration::from_millis(100));
    for deleted_meanwhile in [false, true] {
        let holder = InterProcessMutex::new(&holder_session, path).unwrap().acquire().await.unwrap();
        // `Queued` comes once the waiter has the replies to its watches. A watch whose reply the
        // outage took was never set as far as the waiter knows: it lists again instead (its node
        // in that listing is the look it takes). The server shows a watch before its reply gets
        // here (`until_watched`): not the moment to cut.
        let mut waiting = common::Waiter::lock(waiter.clone(), None);
        waiting.queued().await;
        let rereads = waiter.stats().own_rereads;
        let mut events = waiter_session.events();
        // Bytes stop, then the connection goes: the client reconnects once the proxy heals.
        proxy.blackhole();
        proxy.cut();
        if deleted_meanwhile {
            let queue = InterProcessMutex::new(&holder_session, path).unwrap().participants().await.unwrap();
            admin.delete(&format!("{path}/{}", queue[1].node), None).await.unwrap();
        }
        holder.release().await.unwrap();
        proxy.heal();
        within("the waiter's reconnection", async {
            while events.recv().await.unwrap().state != ConnectionState::Reconnected {}
        })
        .await;
        let outcome = waiting.result().await;
        if deleted_meanwhile {
            assert!(matches!(outcome, Err(Error::NodeDeleted { .. })), "{outcome:?}");
        } else {
            let guard = outcome.unwrap().expect("no timeout was given");
            assert_eq!(waiter.stats().own_rereads, rereads + 1, "entered without reading its node");
            guard.release().await.unwrap();
        }
        waiter.settled().await;
        assert!(children(&admin, path).await.is_empty());
    }
}

/// Claim (docs/performance.md, "Packets per handoff"): a waiter whose predecessor was not the head when it
/// listed does not take that predecessor's deletion as its turn: the predecessor may have given
/// up while a holder is still ahead. It lists again and waits for the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_predecessor_gives_up_waits_for_the_holder() {
    let path = "/c/gave-up";
    let Queue { zk, admin, holder, first: quitter, waiting: giving_up, last, behind, _sessions } =
        Queue::of_three(path).await;
    let quitter_node = format!("{path}/{}", last.participants().await.unwrap()[1].node);
    common::until_watched(&zk, "the second waiter to watch the first", &quitter_node).await;
    giving_up.abort();
    let _ = giving_up.await;
    quitter.settled().await;
    // Woken by the deletion, the last waiter lists again and now watches the holder.
    common::eventually("the last waiter to list again", || async { last.stats().listings >= 2 }).await;
    let holder_node = holder.node_path().to_string();
    common::until_watched(&zk, "the last waiter to watch the holder", &holder_node).await;
    assert!(!behind.is_finished(), "the last waiter entered while the holder held");
    assert_eq!(holder.current_status(), LockStatus::Held);
    holder.release().await.unwrap();
    let guard = within("the last waiter", behind).await.unwrap();
    guard.release().await.unwrap();
    last.settled().await;
    assert!(children(&admin, path).await.is_empty());
}

/// The same when our node and the node ahead go in one transaction (ours first): both events
/// reach the waiter together, and it must see its own node's deletion, which came first, rather
/// than the deletion that seems to admit it. Ten rounds, so that a waiter that picked between
/// the two at random would be caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_goes_with_the_node_ahead_does_not_enter() {
    let zk = common::standalone().await;
    let admin = admin(&zk.connect_string()).await;
    let path = "/c/deleted-together";
    let (h, w) = (common::session(&zk.connect_string()).await, common::session(&zk.connect_string()).await);
    for round in 0..10 {
        let common::queued::Behind { holder, holder_node, waiter, waiting } =
            common::queued::behind_a_holder(&zk, (&h, &w), path).await;
        let queue = waiter.participants().await.unwrap();
        assert_eq!(queue.len(), 2, "round {round}: {queue:?}");
        common::queued::delete_together(&admin, &format!("{path}/{}", queue[1].node), &holder_node).await;
        let outcome = within("the waiter", waiting).await.unwrap();
        assert!(matches!(outcome, Err(Error::NodeDeleted { .. })), "round {round}: {outcome:?}");
        assert!(!waiter.is_held_by_this_handle(), "round {round}");
        let _ = holder.release().await;
        waiter.settled().await;
        assert!(children(&admin, path).await.is_empty(), "round {round}");
    }
}

/// Claim (docs/how-it-works.md, and why a woken waiter lists once): a waiter whose node was
/// deleted from outside while it queued is told so (`NodeDeleted`) when its turn seems to come,
/// instead of entering beside the waiter that queued behind it. Without a look at its own node
/// (a watch on it set while queued, a listing, or an `exists`), both would hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_was_deleted_from_outside_does_not_enter() {
    let path = "/c/deleted-waiter";
    let Queue { zk: _zk, admin, holder, first: waiter, waiting, last: second, behind, _sessions } =
        Queue::of_three(path).await;
    let queue = second.participants().await.unwrap();
    admin.delete(&format!("{path}/{}", queue[1].node), None).await.unwrap();
    // The second waiter was watching the deleted node: it lists again and now watches the holder.
    common::eventually("the second waiter to re-list", || async { second.stats().listings >= 2 }).await;
    holder.release().await.unwrap();
    let second_guard = within("the second waiter", behind).await.unwrap();
    let outcome = within("the first waiter", waiting).await.unwrap();
    assert!(matches!(outcome, Err(Error::NodeDeleted { .. })), "{outcome:?}");
    assert_eq!(*second_guard.status().borrow(), LockStatus::Held);
    second_guard.release().await.unwrap();
    waiter.settled().await;
    assert!(children(&admin, path).await.is_empty());
}
