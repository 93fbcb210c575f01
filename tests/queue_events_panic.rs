//! A panicking queue-event callback panics its task only. Alone in its
//! binary: before its fix it aborted the process (a second panic, reporting `Cancelled` from
//! the acquire's drop while the first unwound), which would take every other test with it.

mod common;

use common::*;
use tokio::sync::mpsc;
use zk_recipes::{InterProcessMutex, Lock, QueueEvent};

/// A panic in the event callback while queued (here the usual `tx.send(..).unwrap()` on a
/// channel whose receiver is gone) unwinds through the acquire's future; dropping it reported
/// `GaveUp { Cancelled }` to the same callback (`Progress`'s `Drop`), which panicked again while
/// unwinding: "panic in a destructor during cleanup", and the process aborted (SIGABRT). It
/// is an ordinary panic of the task, with our node deleted in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panicking_event_callback_panics_the_task_only() {
    let zk = standalone().await;
    let holder = session(&zk.connect_string()).await;
    let held = InterProcessMutex::new(&holder, "/faults/panic").unwrap().acquire().await.unwrap();
    let waiter = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&waiter, "/faults/panic").unwrap();
    let (tx, rx) = mpsc::unbounded_channel::<QueueEvent>();
    drop(rx);
    let task = tokio::spawn(async move {
        let mut report = move |event: &QueueEvent| tx.send(event.clone()).unwrap();
        mutex.acquire_with_events(None, &mut report).await
    });
    let ended = within("the acquire's task", task).await;
    assert!(ended.is_err_and(|e| e.is_panic()));
    held.release().await.unwrap();
    let admin = client(&zk.connect_string()).await;
    eventually("no node left", || async { children(&admin, "/faults/panic").await.is_empty() }).await;
}
