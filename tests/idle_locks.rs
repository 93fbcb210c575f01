//! The idle-lock guess (`src/session/guess.rs`): a session whose recent joins each found their
//! node alone lets the join's listing carry a child watch on the lock's parent, which stands in
//! for the data watch on our node (one request and reply fewer per acquisition). The promises it
//! must keep on an existing lock path: a holder hears its node deleted by someone else, whether
//! or not someone joined behind it; a waiter that guessed wrong never enters without its node;
//! mutual exclusion; and the first join that finds company ends the guess.

mod common;

use common::*;
use zk_recipes::{Error, InterProcessMutex, LockStatus, Session};

/// Teaches `s` that its joins find their node alone: uncontended cycles on `path` (the path then
/// exists, as a long-lived lock's does).
async fn learn_idle(s: &Session, path: &str) {
    let mutex = InterProcessMutex::new(s, path).unwrap();
    for _ in 0..8 {
        mutex.acquire().await.unwrap().release().await.unwrap();
    }
}

/// The guess is really taken: after idle cycles, a holder's session has no data watch on its
/// node, and still hears its deletion by someone else (the child watch fires; the read that
/// follows finds the node gone). Without the guess (a data watch on our node, as before) the
/// first assertion fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_lock_holder_watches_no_data_and_still_hears_its_node_deleted() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let s = session(&zk.connect_string()).await;
    let path = "/idle-a/lock";
    learn_idle(&s, path).await;
    let guard = InterProcessMutex::new(&s, path).unwrap().acquire().await.unwrap();
    let id = raw(&s).session_id().0;
    sync_session(&s).await;
    assert!(!has_data_watch(&zk, guard.node_path(), id).await, "the listing's child watch stands in");
    admin.delete(guard.node_path(), None).await.unwrap();
    within("the holder is told", guard.lost()).await;
    assert_eq!(guard.current_status(), LockStatus::Lost);
    drop(guard);
    s.close().await;
}

/// A contender joining behind an idle-guessing holder fires the holder's child watch: the
/// holder reads its node and watches its data from then on, and hears its deletion by someone
/// else; the contender then holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_lock_holder_with_a_contender_behind_watches_its_data_and_hears_its_deletion() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (s, t) = (session(&zk.connect_string()).await, session(&zk.connect_string()).await);
    let path = "/idle-b/lock";
    learn_idle(&s, path).await;
    let guard = InterProcessMutex::new(&s, path).unwrap().acquire().await.unwrap();
    let mut behind = Waiter::lock(InterProcessMutex::new(&t, path).unwrap(), None);
    behind.queued().await;
    let id = raw(&s).session_id().0;
    eventually("the holder's data watch on its node", || {
        let (zk, node) = (&zk, guard.node_path().to_string());
        async move { has_data_watch(zk, &node, id).await }
    })
    .await;
    assert_eq!(guard.current_status(), LockStatus::Held);
    admin.delete(guard.node_path(), None).await.unwrap();
    within("the holder is told", guard.lost()).await;
    let next = behind.guard().await;
    assert_eq!(next.current_status(), LockStatus::Held);
    next.release().await.unwrap();
    drop(guard);
    assert!(children(&admin, path).await.is_empty());
    for s in [s, t] {
        s.close().await;
    }
}

/// docs/how-it-works.md, "A handoff on the notification alone", for a waiter whose session
/// guessed the lock idle (a wrong guess: its listing set a child watch that the holder's
/// deletion fires too): it enters on that deletion without a request, round after round (each
/// round's idle cycles turn the guess on again; that they do is what
/// `an_idle_lock_holder_watches_no_data_and_still_hears_its_node_deleted` shows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_guessed_idle_enters_on_the_notification_alone() {
    let zk = standalone().await;
    let proxy = zk.proxy().expect("a proxy");
    let holder = session(&zk.connect_string()).await;
    let waiter = session(&proxy.connect_string()).await;
    let path = "/idle-e/lock";
    for round in 0..5 {
        learn_idle(&waiter, path).await;
        enters_on_the_notification_alone(&zk, &proxy, (&holder, &waiter), path, round).await;
    }
    holder.close().await;
    waiter.close().await;
}

/// A wrong guess: a session that learned the lock idle joins behind a holder (its listing set a
/// child watch it does not need). Its node deleted from outside, it is told so and never enters,
/// and its next join, having found company, sets the data watch on its node from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_guessed_idle_never_enters_without_its_node_and_stops_guessing() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (h, w) = (session(&zk.connect_string()).await, session(&zk.connect_string()).await);
    let path = "/idle-c/lock";
    learn_idle(&w, path).await;
    let holder = InterProcessMutex::new(&h, path).unwrap().acquire().await.unwrap();
    let mut waiter = Waiter::lock(InterProcessMutex::new(&w, path).unwrap(), None);
    waiter.queued().await;
    let queue = InterProcessMutex::new(&h, path).unwrap().participants().await.unwrap();
    let waiter_node = format!("{path}/{}", queue[1].node);
    let id = raw(&w).session_id().0;
    assert!(has_data_watch(&zk, &waiter_node, id).await, "a waiter watches its node's data");
    admin.delete(&waiter_node, None).await.unwrap();
    let outcome = waiter.result().await;
    assert!(matches!(outcome, Err(Error::NodeDeleted { .. })), "{outcome:?}");
    assert_eq!(holder.current_status(), LockStatus::Held);
    holder.release().await.unwrap();
    // The guess ended with the join that found the holder: an uncontended acquire now carries
    // the data watch on its node (sent behind the create, never waited for: it may reach the
    // server after the acquire returns; with the guess still on, it never would).
    let guard = InterProcessMutex::new(&w, path).unwrap().acquire().await.unwrap();
    eventually("the guess ended: a data watch on our node", || {
        let (zk, node) = (&zk, guard.node_path().to_string());
        async move { has_data_watch(zk, &node, id).await }
    })
    .await;
    guard.release().await.unwrap();
    assert!(children(&admin, path).await.is_empty());
    for s in [h, w] {
        s.close().await;
    }
}

/// Mutual exclusion on one existing path between sessions that all guess the lock idle, and
/// then contend at once, round after round (each session's guess ends with its first
/// contended join, and comes back after idle cycles between rounds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_all_guess_idle_exclude_each_other() {
    let zk = standalone().await;
    let path = "/idle-d/lock";
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(session(&zk.connect_string()).await);
    }
    let admin = client(&zk.connect_string()).await;
    for round in 0..6 {
        for s in &sessions {
            learn_idle(s, path).await;
        }
        exclusion_round(&sessions, &admin, path, round).await;
    }
    for s in sessions {
        s.close().await;
    }
}
