//! Revocation (`__REVOKE__` on a holder's node, Curator's wire format) for every recipe: a
//! semaphore's lease holders, a selector's leader, a latch's leader. Against real ZooKeeper.

mod common;

use common::*;
use zk_recipes::{
    InterProcessSemaphore, LatchOptions, LeaderLatch, LeaderSelector, LockOptions, LockStatus,
    SelectorOptions, TermOutcome,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_lease_holder_sees_a_revocation_request() {
    let zk = standalone().await;
    let c = zk.connect_string();
    let revocable = LockOptions::new().revocable(true);
    let first =
        InterProcessSemaphore::with_options(&session(&c).await, "/rev/sem", 2, revocable.clone()).unwrap();
    let second = InterProcessSemaphore::with_options(&session(&c).await, "/rev/sem", 2, revocable).unwrap();
    let a = first.acquire().await.unwrap();
    let b = second.acquire().await.unwrap();

    // One lease, by its node: only its holder is asked.
    let admin = session(&c).await;
    assert!(zk_recipes::request_revocation(&admin, a.node_path()).await.unwrap());
    let mut status = a.status();
    within("the lease holder hears the request", status.wait_for(|s| *s == LockStatus::RevocationRequested))
        .await
        .unwrap();
    a.release().await.unwrap();
    assert_eq!(b.current_status(), LockStatus::Held);

    // Every lease holder, through any handle.
    let a = first.acquire().await.unwrap();
    let other = InterProcessSemaphore::new(&admin, "/rev/sem", 2).unwrap();
    assert_eq!(other.revoke_holders().await.unwrap(), 2);
    for guard in [&a, &b] {
        let mut status = guard.status();
        within("every lease holder hears it", status.wait_for(|s| *s == LockStatus::RevocationRequested))
            .await
            .unwrap();
    }
    a.release().await.unwrap();
    b.release().await.unwrap();
    assert_eq!(other.revoke_holders().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_selector_leader_steps_down_when_asked_and_requeues() {
    let zk = standalone().await;
    let c = zk.connect_string();
    let options = |id: &str| SelectorOptions::new().participant_id(id).auto_requeue(true);
    let one = LeaderSelector::with_options(&session(&c).await, "/rev/sel", options("one")).unwrap();
    let two = LeaderSelector::with_options(&session(&c).await, "/rev/sel", options("two")).unwrap();
    // Each task waits to be told to stop, then reports its term's token.
    let (stopped_tx, mut stopped) = tokio::sync::mpsc::unbounded_channel::<(&'static str, u64)>();
    let start = |selector: &LeaderSelector, id: &'static str| {
        let tx = stopped_tx.clone();
        selector
            .start(move |ctx| {
                let tx = tx.clone();
                async move {
                    ctx.stopped().await;
                    let _ = tx.send((id, ctx.fencing_token()));
                }
            })
            .unwrap();
    };
    let mut terms = one.terms();
    start(&one, "one");
    let token = within("one leads", one.await_leadership()).await.unwrap();
    start(&two, "two");
    eventually("two queued", || async { one.participants().await.unwrap().len() == 2 }).await;

    // Asked through the other participant: one's task is told to stop, its term ends Revoked.
    assert_eq!(two.revoke_leader().await.unwrap(), 1);
    assert_eq!(within("one's task is told to stop", stopped.recv()).await, Some(("one", token)));
    let ended = within("one's term ends", terms.recv()).await.unwrap();
    assert_eq!((ended.fencing_token, ended.outcome, ended.aborted), (token, TermOutcome::Revoked, false));

    // Two leads meanwhile; one queued again behind it (auto-requeue).
    within("two leads", two.await_leadership()).await.unwrap();
    assert!(!one.has_leadership());
    eventually("one requeued", || async {
        let queue = one.participants().await.unwrap();
        queue.len() == 2 && queue[0].id == "two" && queue[1].id == "one"
    })
    .await;
    two.close().await;
    let again = within("one leads again", one.await_leadership()).await.unwrap();
    assert!(again > token);
    one.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_latch_reports_a_revocation_request_and_keeps_leading() {
    let zk = standalone().await;
    let c = zk.connect_string();
    let leader =
        LeaderLatch::with_options(&session(&c).await, "/rev/latch", LatchOptions::new().participant_id("a"))
            .unwrap();
    let other = LeaderLatch::with_options(
        &session(&c).await,
        "/rev/latch",
        zk_recipes::LatchOptions::new().participant_id("b"),
    )
    .unwrap();
    let mut asked = leader.revocation();
    assert!(!*asked.borrow_and_update());
    leader.start().unwrap();
    let token = within("a leads", leader.await_leadership()).await.unwrap();
    assert_eq!(other.revoke_leader().await.unwrap(), 1);
    within("the request is reported", asked.wait_for(|a| *a)).await.unwrap();
    // Reported only: the latch leads until its user closes it.
    assert!(leader.has_leadership());
    // The request replaced the node's data (Curator's format): the id reads `__REVOKE__` now.
    let first = other.leader().await.unwrap().unwrap();
    assert_eq!((first.czxid as u64, first.id.as_str()), (token, "__REVOKE__"));
    leader.close().await;
    within("the report ends with the term", asked.wait_for(|a| !*a)).await.unwrap();
}
