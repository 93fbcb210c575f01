//! The API where a Curator user reaches first: every handle is a cheap
//! `Clone + Debug + Send + Sync`, a leadership task may fail with `?`, `with_lock` hands over the
//! guard, fenced writes name the path that failed, the semaphore follows tokio's names, and both
//! leader recipes take their participant id through their options. Each test failed (or did not
//! compile) on the code before.

mod common;

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{children, eventually, within, PATIENCE};
use zk_recipes::zookeeper_client::{Acls, CreateMode};
use zk_recipes::{
    default_participant_id, Error, InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock,
    InterProcessSemaphore, InterProcessSemaphoreMutex, LatchOptions, LeaderLatch, LeaderSelector, LockExt,
    LockOptions, ReadLock, SelectorOptions, TermOutcome, WriteLock,
};

/// What every recipe handle is.
fn handle<T: Clone + Debug + Send + Sync + 'static>() {}

/// Claim (item 1): every recipe handle is `Clone`, `Debug`, `Send` and `Sync`. Checked by the
/// compiler: this test does not build if one of them is not.
#[test]
fn every_recipe_handle_is_clone_debug_send_and_sync() {
    handle::<InterProcessMutex>();
    handle::<InterProcessSemaphoreMutex>();
    handle::<InterProcessReadWriteLock>();
    handle::<ReadLock>();
    handle::<WriteLock>();
    handle::<InterProcessSemaphore>();
    handle::<InterProcessMultiLock>();
    handle::<LeaderLatch>();
    handle::<LeaderSelector>();
}

/// Claim (latch docs): a clone of a latch is the same participant: one node, one leadership;
/// dropping a clone leaves it running, `close()` on any clone closes it for all, and dropping the
/// last clone closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_clone_is_the_same_participant() {
    let zk = common::standalone().await;
    let admin = common::client(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let latch = LeaderLatch::with_options(
        &session,
        "/api/latch",
        zk_recipes::LatchOptions::new().participant_id("one"),
    )
    .unwrap();
    let started = latch.clone();
    started.start().unwrap();
    assert!(matches!(latch.start(), Err(Error::AlreadyStarted { .. })), "a clone is the same latch");
    let token = within("leadership through the other clone", latch.await_leadership()).await.unwrap();
    drop(started);
    assert!(latch.has_leadership(), "dropping a clone closed the latch");
    assert_eq!(latch.participants().await.unwrap().len(), 1);
    assert!(format!("{latch:?}").contains("/api/latch"));

    // A clone moved into another task leads with the same token.
    let watcher = latch.clone();
    let seen = tokio::spawn(async move { watcher.await_leadership().await }).await.unwrap().unwrap();
    assert_eq!(seen, token);

    let closer = latch.clone();
    within("close through a clone", closer.close()).await;
    assert!(!latch.has_leadership());
    assert!(children(&admin, "/api/latch").await.is_empty(), "close on a clone left the node");
    assert!(matches!(latch.start(), Err(Error::Closed { .. })));

    // The last clone dropped closes a running latch in the background.
    let last = LeaderLatch::with_options(
        &session,
        "/api/latch-drop",
        zk_recipes::LatchOptions::new().participant_id("two"),
    )
    .unwrap();
    let other = last.clone();
    last.start().unwrap();
    within("leadership", last.await_leadership()).await.unwrap();
    drop(last);
    assert!(other.has_leadership(), "one clone is still alive");
    drop(other);
    eventually("the last clone's drop deletes the node", || async {
        children(&admin, "/api/latch-drop").await.is_empty()
    })
    .await;
}

/// Claim (selector docs): a clone of a selector is the same participant: `interrupt()` through a
/// clone ends its term, `close()` through a clone closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_clone_is_the_same_participant() {
    let zk = common::standalone().await;
    let admin = common::client(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let selector = LeaderSelector::with_options(&session, "/api/selector", SelectorOptions::new()).unwrap();
    let mut terms = selector.terms();
    selector.start(|ctx| async move { ctx.stopped().await }).unwrap();
    let clone = selector.clone();
    assert!(matches!(clone.start(|_| async {}), Err(Error::AlreadyStarted { .. })));
    within("leadership", clone.await_leadership()).await.unwrap();
    tokio::spawn(async move { clone.interrupt() }).await.unwrap();
    let ended = within("the interrupted term", terms.recv()).await.unwrap();
    assert_eq!(ended.outcome, TermOutcome::Interrupted);
    assert!(!selector.has_leadership());
    assert!(selector.requeue());
    within("leadership again", selector.await_leadership()).await.unwrap();
    within("close through a clone", selector.clone().close()).await;
    assert!(children(&admin, "/api/selector").await.is_empty());
    assert!(format!("{selector:?}").contains("/api/selector"));
}

/// Claim (semaphore docs): clones of a semaphore and of a semaphore mutex are handles on the same
/// recipe: a lease taken through one counts for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_clones_share_the_recipe() {
    let zk = common::standalone().await;
    let session = common::session(&zk.connect_string()).await;
    let slots = InterProcessSemaphore::new(&session, "/api/sem-clone", 1).unwrap();
    let clone = slots.clone();
    let held = clone.acquire().await.unwrap();
    assert!(slots.try_acquire().await.unwrap().is_none());
    held.release().await.unwrap();
    let mutex = InterProcessSemaphoreMutex::new(&session, "/api/semmutex-clone").unwrap();
    let held = mutex.clone().acquire().await.unwrap();
    assert!(mutex.try_acquire().await.unwrap().is_none(), "a clone's hold is the handle's");
    held.release().await.unwrap();
}

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Claim (item 2): a leadership task may return `Result<(), E>`, so `?` works in it; an `Err`
/// ends the term, is reported as `TermOutcome::Failed` with its text and as a `tracing` warning,
/// and with auto-requeue the selector leads again. The error here is a fenced create under a
/// missing parent: its text names the create's path.
// One thread: the selector's tasks run where the capturing subscriber is the default.
#[tokio::test(flavor = "current_thread")]
async fn a_failing_leadership_task_ends_its_term_and_leads_again() {
    let zk = common::standalone().await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let admin = common::client(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let options = SelectorOptions::new().participant_id("f").auto_requeue(true);
    let selector = LeaderSelector::with_options(&session, "/api/failing", options).unwrap();
    let mut terms = selector.terms();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    selector
        .start(move |ctx| {
            let first = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            async move {
                if first {
                    let mut write = ctx.fenced_writer()?;
                    write.add_create_persistent("/api/no-parent/child", b"x")?;
                    write.commit().await?;
                }
                ctx.stopped().await;
                Ok::<(), Error>(())
            }
        })
        .unwrap();
    let ended = within("the failed term", terms.recv()).await.unwrap();
    let TermOutcome::Failed(text) = &ended.outcome else {
        panic!("expected Failed, got {:?}", ended.outcome)
    };
    assert!(text.contains("/api/no-parent/child"), "{text}");
    assert!(!ended.aborted);
    let token = within("leadership again", selector.await_leadership()).await.unwrap();
    assert!(token > ended.fencing_token);
    assert_eq!(children(&admin, "/api/failing").await.len(), 1, "the failed term's node is gone");
    let log = captured.text();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("leadership task failed")
            && l.contains("/api/no-parent/child")),
        "no warning for the failed task in:\n{log}"
    );
    selector.close().await;
}

/// Claim (item 3): `with_lock` hands the closure the guard: its fencing token, fenced writes and
/// `lost()` work inside, and the whole call can be spawned (its future is `Send`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_hands_over_the_guard_and_can_be_spawned() {
    let zk = common::standalone().await;
    let admin = common::client(&zk.connect_string()).await;
    common::create_persistent(&admin, "/api/data", b"0").await;
    let session = common::session(&zk.connect_string()).await;
    let mutex =
        InterProcessMutex::with_options(&session, "/api/with", LockOptions::new().revocable(true)).unwrap();

    let handle = mutex.clone();
    let written = tokio::spawn(async move {
        handle
            .with_lock(async |guard| -> zk_recipes::Result<u64> {
                let token = guard.fencing_token();
                let mut write = guard.fenced_writer()?;
                write.add_set_data("/api/data", token.to_string().as_bytes(), None)?;
                tokio::select! {
                    _ = guard.lost() => Err(Error::LockLost { path: "/api/with".into() }),
                    done = write.commit() => done.map(|_| token),
                }
            })
            .await
    });
    let token = within("the spawned critical section", written).await.unwrap().unwrap().unwrap();
    assert_eq!(admin.get_data("/api/data").await.unwrap().0, token.to_string().as_bytes());
    assert!(children(&admin, "/api/with").await.is_empty(), "released after returning");

    // `lost()` inside: our node is deleted while the work waits on it.
    let (node_tx, node_rx) = tokio::sync::oneshot::channel();
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
    let handle = mutex.clone();
    let waiting = tokio::spawn(async move {
        handle
            .with_lock(async |guard| {
                node_tx.send(guard.node_path().to_string()).unwrap();
                guard.lost().await;
                let _ = seen_tx.send(guard.fenced_writer().unwrap().commit().await.map(|_| ()));
            })
            .await
    });
    let node = within("the node", node_rx).await.unwrap();
    admin.delete(&node, None).await.unwrap();
    let outcome = within("lost() inside the work", waiting).await.unwrap();
    // The work saw the loss (its fenced write was refused), and so did the release.
    let seen = seen_rx.await.unwrap();
    assert!(matches!(seen, Err(Error::LockLost { .. })), "{seen:?}");
    assert!(matches!(outcome, Err(Error::LockLost { .. })), "{outcome:?}");
}

/// Claim (item 4): `add_create_persistent` creates a plain persistent node; a fenced write's
/// error names the operation that failed and its own path, not the lock's; a failed check of a
/// multi-lock member's node is `LockLost` for that member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_write_errors_name_the_path_that_failed() {
    let zk = common::standalone().await;
    let admin = common::client(&zk.connect_string()).await;
    common::create_persistent(&admin, "/api/fenced", b"").await;
    let session = common::session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&session, "/api/fenced-lock").unwrap();
    let guard = mutex.acquire().await.unwrap();

    let mut write = guard.fenced_writer().unwrap();
    write.add_create_persistent("/api/fenced/plain", b"made").unwrap();
    write.commit().await.unwrap();
    let (data, stat) = admin.get_data("/api/fenced/plain").await.unwrap();
    assert_eq!(data, b"made");
    assert_eq!(stat.ephemeral_owner, 0, "not persistent");

    // The second operation fails: its parent is missing. The error names it, not the lock.
    let mut write = guard.fenced_writer().unwrap();
    write.add_set_data("/api/fenced/plain", b"changed", None).unwrap();
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    write.add_create("/api/fenced/missing/child", b"x", &options).unwrap();
    let err = write.commit().await.unwrap_err();
    match &err {
        Error::ZooKeeper { op, path, source } => {
            assert_eq!((*op, path.as_str()), ("fenced create", "/api/fenced/missing/child"));
            assert_eq!(source.as_zookeeper_client(), &zk_recipes::zookeeper_client::Error::NoNode);
        }
        other => panic!("expected the create's error, got {other:?}"),
    }
    assert!(!err.to_string().contains("/api/fenced-lock"), "{err}");
    assert_eq!(admin.get_data("/api/fenced/plain").await.unwrap().0, b"made", "nothing was written");

    // A delete of a missing node, after a create that would succeed.
    let mut write = guard.fenced_writer().unwrap();
    write.add_create_persistent("/api/fenced/other", b"").unwrap();
    write.add_delete("/api/fenced/absent", None).unwrap();
    match write.commit().await {
        Err(Error::ZooKeeper { op: "fenced delete", path, .. }) => assert_eq!(path, "/api/fenced/absent"),
        other => panic!("expected the delete's error, got {other:?}"),
    }
    guard.release().await.unwrap();

    // A multi-lock: the check of a member's node fails once someone deleted it: that lock is lost.
    let multi = InterProcessMultiLock::new(&session, &["/api/m1", "/api/m2"]).unwrap();
    let all = multi.acquire().await.unwrap();
    let member = all.members()[1].node_path().to_string();
    admin.delete(&member, None).await.unwrap();
    let mut write = all.fenced_writer().unwrap();
    write.add_set_data("/api/fenced/plain", b"stale", None).unwrap();
    match write.commit().await {
        Err(Error::LockLost { path }) => assert_eq!(path, "/api/m2"),
        other => panic!("expected LockLost for /api/m2, got {other:?}"),
    }
    drop(all);
    // Our own (first) lock node gone: LockLost for it.
    let all = multi.acquire().await.unwrap();
    admin.delete(all.members()[0].node_path(), None).await.unwrap();
    let mut write = all.fenced_writer().unwrap();
    write.add_set_data("/api/fenced/plain", b"stale", None).unwrap();
    match write.commit().await {
        Err(Error::LockLost { path }) => assert_eq!(path, "/api/m1"),
        other => panic!("expected LockLost for /api/m1, got {other:?}"),
    }
    assert_eq!(admin.get_data("/api/fenced/plain").await.unwrap().0, b"made");
}

/// Claim (item 5): the semaphore follows tokio's names: `acquire()`, `try_acquire()` and
/// `acquire_timeout(t)` take one lease; the `_many` forms take n, all or none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphore_takes_one_lease_or_many_with_tokios_names() {
    let zk = common::standalone().await;
    let admin = common::client(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let slots = InterProcessSemaphore::new(&session, "/api/sem", 3).unwrap();
    let one = slots.acquire().await.unwrap();
    let two = slots.acquire_many(2).await.unwrap();
    assert_eq!(children(&admin, "/api/sem").await.len(), 2, "one node per acquire");
    assert!(slots.try_acquire().await.unwrap().is_none(), "3 of 3 held");
    assert!(slots.try_acquire_many(1).await.unwrap().is_none());
    assert!(slots.acquire_timeout(Duration::from_millis(100)).await.unwrap().is_none());
    assert!(slots.acquire_many_timeout(2, Duration::from_millis(100)).await.unwrap().is_none());
    assert_eq!(children(&admin, "/api/sem").await.len(), 2, "refused acquires left nothing");
    one.release().await.unwrap();
    let again = slots.acquire_timeout(PATIENCE).await.unwrap().expect("one lease is free");
    assert!(slots.try_acquire_many(2).await.unwrap().is_none());
    two.release().await.unwrap();
    let pair = slots.try_acquire_many(2).await.unwrap().expect("two leases are free");
    assert!(matches!(slots.acquire_many(4).await, Err(Error::BadLeaseCount { requested: 4, max: 3, .. })));
    pair.release().await.unwrap();
    again.release().await.unwrap();
    let all = slots.acquire_many_timeout(3, PATIENCE).await.unwrap().expect("all three");
    all.release().await.unwrap();
}

/// Claim (item 6): both leader recipes take their participant id through their options
/// (`participant_id`), defaulting to `hostname:pid`; the latch's `new(session, path, id)` is a
/// shorthand for the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_recipes_take_their_participant_id_through_their_options() {
    let zk = common::standalone().await;
    let session = common::session(&zk.connect_string()).await;
    let latch_id = |latch: LeaderLatch| async move {
        latch.start().unwrap();
        within("leadership", latch.await_leadership()).await.unwrap();
        let id = latch.leader().await.unwrap().expect("a leader").id;
        assert_eq!(id, latch.id());
        latch.close().await;
        id
    };
    let chosen =
        LeaderLatch::with_options(&session, "/api/id/l1", LatchOptions::new().participant_id("latch-a"));
    assert_eq!(latch_id(chosen.unwrap()).await, "latch-a");
    let default = LeaderLatch::with_options(&session, "/api/id/l2", LatchOptions::new());
    assert_eq!(latch_id(default.unwrap()).await, default_participant_id());
    // `new` is every recipe's shape: the defaults, the id among them.
    let plain = LeaderLatch::new(&session, "/api/id/l3");
    assert_eq!(latch_id(plain.unwrap()).await, default_participant_id());

    let selector_id = |selector: LeaderSelector| async move {
        selector.start(|ctx| async move { ctx.stopped().await }).unwrap();
        within("leadership", selector.await_leadership()).await.unwrap();
        let id = selector.leader().await.unwrap().expect("a leader").id;
        assert_eq!(id, selector.id());
        selector.close().await;
        id
    };
    let chosen =
        LeaderSelector::with_options(&session, "/api/id/s1", SelectorOptions::new().participant_id("sel-a"));
    assert_eq!(selector_id(chosen.unwrap()).await, "sel-a");
    let default = LeaderSelector::with_options(&session, "/api/id/s2", SelectorOptions::default());
    assert_eq!(selector_id(default.unwrap()).await, default_participant_id());
    let plain = LeaderSelector::new(&session, "/api/id/s3");
    assert_eq!(selector_id(plain.unwrap()).await, default_participant_id());
}
