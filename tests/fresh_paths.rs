//! Locks on fresh paths (one per order id): once a session's joins have met missing parents, a
//! join sends the parent's create, ours and the listing back to back, and the listing's child
//! watch stands in for the data watch on our node. What the docs promise of the own-node watch
//! must hold there too: a holder hears of its node's deletion, before and after a contender
//! joins, and a revocable lock hears revocation requests. A wrong guess (the parent exists, and
//! we may not create beside it) must not fail the acquire.

mod common;

use common::*;
use zk_recipes::{InterProcessMutex, LockOptions, LockStatus};
use zookeeper_client::{Acls, CreateMode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_a_fresh_path_hears_its_node_deleted_by_someone_else() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let admin = client(&zk.connect_string()).await;
    learn_fresh_paths(&s, "/orders-a").await;
    let guard = InterProcessMutex::new(&s, "/orders-a/o1").unwrap().acquire().await.unwrap();
    admin.delete(guard.node_path(), None).await.unwrap();
    within("the holder is told", guard.lost()).await;
    assert_eq!(guard.current_status(), LockStatus::Lost);
    assert!(guard.release().await.is_err(), "a lost hold's release reports the loss");
    s.close().await;
}

/// The child watch fires when a contender joins behind the holder; the holder must then watch
/// its node's data, and still hear of its deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_a_fresh_path_hears_its_deletion_after_a_contender_joined() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let other = session(&zk.connect_string()).await;
    let admin = client(&zk.connect_string()).await;
    learn_fresh_paths(&s, "/orders-b").await;
    let guard = InterProcessMutex::new(&s, "/orders-b/o1").unwrap().acquire().await.unwrap();
    let waiter = InterProcessMutex::new(&other, "/orders-b/o1").unwrap();
    let mut waiting = Waiter::lock(waiter, None);
    waiting.queued().await;
    // The joiner's create fired the holder's child watch; the holder reads its node again and
    // watches its data from then on: wait until that watch is on the server.
    let stat = admin.check_stat(guard.node_path()).await.unwrap().unwrap();
    let node = guard.node_path().to_string();
    eventually("the holder's data watch", || {
        let (zk, node) = (&zk, node.clone());
        async move {
            zk.four_letter(0, "wchp")
                .await
                .is_ok_and(|listing| watchers(&listing, &node).any(|w| w == stat.ephemeral_owner))
        }
    })
    .await;
    admin.delete(guard.node_path(), None).await.unwrap();
    within("the holder is told", guard.lost()).await;
    assert_eq!(guard.current_status(), LockStatus::Lost);
    let next = within("the waiter enters", waiting.result()).await.unwrap().unwrap();
    assert_eq!(next.current_status(), LockStatus::Held);
    next.release().await.unwrap();
    s.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocable_lock_on_a_fresh_path_hears_a_revocation_request() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let asker = session(&zk.connect_string()).await;
    learn_fresh_paths(&s, "/orders-c").await;
    let mutex =
        InterProcessMutex::with_options(&s, "/orders-c/o1", LockOptions::new().revocable(true)).unwrap();
    let guard = mutex.acquire().await.unwrap();
    let mut status = guard.status();
    assert!(zk_recipes::request_revocation(&asker, guard.node_path()).await.unwrap());
    within("revocation delivered", status.wait_for(|s| *s == LockStatus::RevocationRequested)).await.unwrap();
    guard.release().await.unwrap();
    s.close().await;
    asker.close().await;
}

/// The guess creates the parent first. Where the parent exists but its own parent refuses us
/// CREATE, that create fails with NoAuth; ours (which needs CREATE on the parent only) must
/// still go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_guess_refused_by_an_acl_does_not_fail_the_acquire() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let admin = client(&zk.connect_string()).await;
    learn_fresh_paths(&s, "/orders-d").await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    admin.create("/closed", b"", &open).await.unwrap();
    admin.create("/closed/lock", b"", &open).await.unwrap();
    admin.set_acl("/closed", &Acls::anyone_read(), None).await.unwrap();
    let guard = InterProcessMutex::new(&s, "/closed/lock").unwrap().acquire().await.unwrap();
    assert_eq!(guard.current_status(), LockStatus::Held);
    guard.release().await.unwrap();
    assert!(children(&admin, "/closed/lock").await.is_empty());
    s.close().await;
}

/// Where the server allows it, a guessed fresh path's parent's create and ours go in one
/// `multi`. When the parent exists (another session holds the lock), the `multi` fails whole:
/// our create goes again alone, and we queue behind the holder. The holder's and our tokens are
/// each node's czxid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guessed_parent_that_exists_falls_back_to_our_create_and_we_queue_behind_its_holder() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let other = session(&zk.connect_string()).await;
    let admin = client(&zk.connect_string()).await;
    learn_fresh_paths(&s, "/orders-e").await;
    assert_eq!(s.known_server_features().map(|f| f.multi_create_stat), Some(multi_creates_answer_stat()));
    let held = InterProcessMutex::new(&other, "/orders-e/o1").unwrap().acquire().await.unwrap();
    let mutex = InterProcessMutex::new(&s, "/orders-e/o1").unwrap();
    let mut waiting = Waiter::lock(mutex.clone(), None);
    waiting.queued().await;
    // Two rounds where the parent's create went with ours (the second, ours alone); one where
    // the parent's create went plain beside ours.
    let rounds = if multi_creates_answer_stat() { 2 } else { 1 };
    assert_eq!(mutex.stats().creates, rounds, "{:?}", mutex.stats());
    assert_eq!(children(&admin, "/orders-e/o1").await.len(), 2, "one node each");
    let token = held.fencing_token();
    assert_eq!(token, admin.check_stat(held.node_path()).await.unwrap().unwrap().czxid as u64);
    held.release().await.unwrap();
    let next = within("the waiter enters", waiting.result()).await.unwrap().unwrap();
    assert_eq!(next.current_status(), LockStatus::Held);
    let stat = admin.check_stat(next.node_path()).await.unwrap().expect("our node");
    assert_eq!(next.fencing_token(), stat.czxid as u64);
    assert!(next.fencing_token() > token);
    assert_eq!(children(&admin, "/orders-e/o1").await.len(), 1);
    next.release().await.unwrap();
    s.close().await;
    other.close().await;
}

/// A guessed fresh path whose parent's own parent is missing too: the `multi` (or the parent's
/// create) fails with NoNode, the parents are made one by one, and the acquire holds, its token
/// its node's czxid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guessed_fresh_path_whose_grandparent_is_missing_makes_the_parents() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let admin = client(&zk.connect_string()).await;
    learn_fresh_paths(&s, "/orders-f").await;
    for i in 0..3 {
        let path = format!("/orders-f/deep{i}/customer/o1");
        let guard = InterProcessMutex::new(&s, &path).unwrap().acquire().await.unwrap();
        assert_eq!(guard.current_status(), LockStatus::Held);
        let stat = admin.check_stat(guard.node_path()).await.unwrap().expect("our node");
        assert_eq!(guard.fencing_token(), stat.czxid as u64, "{path}");
        assert_eq!(children(&admin, &path).await.len(), 1);
        guard.release().await.unwrap();
    }
    // The session still guesses fresh paths: the next one goes in one round.
    let guard = InterProcessMutex::new(&s, "/orders-f/o9").unwrap().acquire().await.unwrap();
    let stat = admin.check_stat(guard.node_path()).await.unwrap().expect("our node");
    assert_eq!(guard.fencing_token(), stat.czxid as u64);
    guard.release().await.unwrap();
    s.close().await;
}
