//! Queue events: an acquire reports its progress to a callback, in order:
//! queued (how many ahead, the node it watches, the holder's participant id), moved up, queued
//! again after an expiry, then acquired (with the fencing token) or gave up (why), and a dropped
//! acquire reports that it was cancelled. Every wait is on an event.

mod common;

use std::time::Duration;

use common::*;
use tokio::sync::mpsc;
use zk_recipes::{
    GiveUpReason, InterProcessMultiLock, InterProcessMutex, InterProcessSemaphore, Lock, LockGuard,
    LockOptions, QueueEvent,
};

/// Events, as they come, from an acquire run on another task.
struct Events(mpsc::UnboundedReceiver<QueueEvent>);

impl Events {
    async fn next(&mut self) -> QueueEvent {
        within("the next queue event", self.0.recv()).await.expect("the acquire ended")
    }
}

fn start(
    lock: impl Lock + Clone + 'static,
    timeout: Option<Duration>,
) -> (Events, tokio::task::JoinHandle<zk_recipes::Result<Option<LockGuard>>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut report = move |event: &QueueEvent| {
            let _ = tx.send(event.clone());
        };
        lock.acquire_with_events(timeout, &mut report).await
    });
    (Events(rx), task)
}

/// The node and fencing token of an `Acquired` event.
fn acquired(event: QueueEvent) -> (String, u64) {
    match event {
        QueueEvent::Acquired { node, fencing_token, .. } => (node, fencing_token),
        other => panic!("not acquired: {other:?}"),
    }
}

fn name_of(guard: &LockGuard) -> String {
    guard.node_path().rsplit('/').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_hears_queued_moved_up_and_acquired_in_order() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let with_id = |id: &str| LockOptions::new().participant_id(id);
    let holder =
        InterProcessMutex::with_options(&session(&connect).await, "/events/mutex", with_id("h")).unwrap();
    let held = holder.acquire().await.unwrap();
    let middle =
        InterProcessMutex::with_options(&session(&connect).await, "/events/mutex", with_id("m")).unwrap();
    let (mut middle_events, middle_task) = start(middle, None);
    let QueueEvent::Queued { node: middle_node, ahead: 1, .. } = middle_events.next().await else {
        panic!("the middle waiter was not queued first")
    };

    let last =
        InterProcessMutex::with_options(&session(&connect).await, "/events/mutex", with_id("l")).unwrap();
    let (mut events, task) = start(last, None);
    match events.next().await {
        QueueEvent::Queued { ahead: 2, watching, holder: Some(holder), .. } => {
            assert_eq!(watching, middle_node, "it watches its predecessor");
            assert_eq!(holder, "h");
        }
        other => panic!("{other:?}"),
    }
    // The middle one gives up: we move up, watching the holder now.
    middle_task.abort();
    let cancelled = middle_events.next().await;
    assert!(matches!(cancelled, QueueEvent::GaveUp { reason: GiveUpReason::Cancelled, .. }), "{cancelled:?}");
    match events.next().await {
        QueueEvent::MovedUp { ahead: 1, watching, holder: Some(holder), .. } => {
            assert_eq!(watching, name_of(&held));
            assert_eq!(holder, "h");
        }
        other => panic!("{other:?}"),
    }
    held.release().await.unwrap();
    let guard = within("acquire", task).await.unwrap().unwrap().unwrap();
    assert_eq!(acquired(events.next().await), (name_of(&guard), guard.fencing_token()));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_uncontended_acquire_reports_only_acquired_and_a_timeout_reports_why() {
    let zk = standalone().await;
    let session = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&session, "/events/free").unwrap();
    let (mut events, task) = start(mutex.clone(), None);
    let guard = within("acquire", task).await.unwrap().unwrap().unwrap();
    assert!(matches!(events.next().await, QueueEvent::Acquired { .. }));

    let other = common::session(&zk.connect_string()).await;
    let (mut events, task) =
        start(InterProcessMutex::new(&other, "/events/free").unwrap(), Some(Duration::from_millis(300)));
    assert!(matches!(events.next().await, QueueEvent::Queued { ahead: 1, .. }));
    assert!(within("timeout", task).await.unwrap().unwrap().is_none());
    let gave_up = events.next().await;
    assert!(matches!(gave_up, QueueEvent::GaveUp { reason: GiveUpReason::TimedOut, .. }), "{gave_up:?}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_whose_session_expires_hears_requeued_then_queued_again() {
    let zk = standalone().await;
    let holder_session = session(&zk.connect_string()).await;
    let holder = InterProcessMutex::new(&holder_session, "/events/expiry").unwrap();
    let held = holder.acquire().await.unwrap();

    let proxy = zk.proxy().unwrap();
    let waiter_session = session_with_timeout(&proxy.connect_string(), Duration::from_secs(2)).await;
    let generation = waiter_session.generation();
    let (mut events, task) = start(InterProcessMutex::new(&waiter_session, "/events/expiry").unwrap(), None);
    assert!(matches!(events.next().await, QueueEvent::Queued { ahead: 1, .. }));
    proxy.blackhole();
    wait_session_state(&waiter_session, zk_recipes::ConnectionState::Lost).await;
    proxy.heal();
    let requeued = events.next().await;
    assert!(
        matches!(requeued, QueueEvent::Requeued { generation: g, .. } if g == generation + 1),
        "{requeued:?}"
    );
    assert!(matches!(events.next().await, QueueEvent::Queued { ahead: 1, .. }));
    held.release().await.unwrap();
    let guard = within("acquire", task).await.unwrap().unwrap().unwrap();
    assert!(matches!(events.next().await, QueueEvent::Acquired { .. }));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_and_a_multi_lock_report_too() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let session = session(&connect).await;
    let semaphore = InterProcessSemaphore::new(&session, "/events/semaphore", 2).unwrap();
    let first = semaphore.acquire_many(2).await.unwrap();
    let other = InterProcessSemaphore::new(&common::session(&connect).await, "/events/semaphore", 2).unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut report = move |event: &QueueEvent| {
            let _ = tx.send(event.clone());
        };
        other.acquire_with_events(1, None, &mut report).await
    });
    let mut events = Events(rx);
    assert!(matches!(events.next().await, QueueEvent::Queued { ahead: 1, .. }));
    first.release().await.unwrap();
    let lease = within("lease", task).await.unwrap().unwrap().unwrap();
    assert!(matches!(events.next().await, QueueEvent::Acquired { .. }));
    lease.release().await.unwrap();

    // A multi-lock reports each member's events in turn.
    let multi = InterProcessMultiLock::new(&session, &["/events/a", "/events/b"]).unwrap();
    let (mut events, task) = start(multi, None);
    let guard = within("multi", task).await.unwrap().unwrap().unwrap();
    let [a, b] = [events.next().await, events.next().await];
    for (event, member) in [(a, &guard.members()[0]), (b, &guard.members()[1])] {
        assert_eq!(acquired(event), (name_of(member), member.fencing_token()));
    }
    guard.release().await.unwrap();
}
