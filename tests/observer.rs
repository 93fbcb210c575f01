//! LeaderObserver against real ZooKeeper: it follows an election's leader
//! without joining, with one watch, across its session's expiry, and reads Curator's latch.

mod common;

use std::time::Duration;

use common::*;
use tokio::sync::watch;
use zk_recipes::{
    ConnectionState, Error, LeaderInfo, LeaderLatch, LeaderObserver, LeaderSelector, LeadershipContext,
    NodeFormat, SelectorOptions, Session,
};

/// Waits until the observer shows a leader that satisfies `want` (or none, for `None`).
async fn until_leader(
    rx: &mut watch::Receiver<Option<LeaderInfo>>,
    what: &str,
    want: impl FnMut(&Option<LeaderInfo>) -> bool,
) -> Option<LeaderInfo> {
    within(what, rx.wait_for(want)).await.expect("observer stopped").clone()
}

async fn leading(session: &Session, path: &str, id: &str) -> (LeaderLatch, u64) {
    let latch =
        LeaderLatch::with_options(session, path, zk_recipes::LatchOptions::new().participant_id(id)).unwrap();
    latch.start().unwrap();
    let token = within("leadership", latch.await_leadership()).await.unwrap();
    (latch, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_follows_the_leader_from_a_to_b_to_nobody() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/observe/basic";
    let observer_session = session(&connect).await;
    // Started on a path that does not exist yet: nobody leads.
    let observer = LeaderObserver::new(&observer_session, path).unwrap();
    let mut rx = observer.leader();
    assert_eq!(*rx.borrow(), None);

    let (a, token_a) = leading(&session(&connect).await, path, "a").await;
    let seen = until_leader(&mut rx, "a leads", |l| l.is_some()).await.unwrap();
    assert_eq!((seen.id.as_str(), seen.fencing_token), ("a", token_a));

    let b = LeaderLatch::with_options(
        &session(&connect).await,
        path,
        zk_recipes::LatchOptions::new().participant_id("b"),
    )
    .unwrap();
    b.start().unwrap();
    eventually("b queued", || async { b.participants().await.unwrap().len() == 2 }).await;
    a.close().await;
    let token_b = within("b leads", b.await_leadership()).await.unwrap();
    let seen = until_leader(&mut rx, "b leads", |l| l.as_ref().is_some_and(|l| l.id == "b")).await.unwrap();
    assert_eq!(seen.fencing_token, token_b);
    assert_ne!(token_a, token_b);

    b.close().await;
    until_leader(&mut rx, "nobody leads", |l| l.is_none()).await;
    // And a new leader after an empty spell (the observer's child watch).
    let (_c, token_c) = leading(&session(&connect).await, path, "c").await;
    let seen = until_leader(&mut rx, "c leads", |l| l.is_some()).await.unwrap();
    assert_eq!((seen.id.as_str(), seen.fencing_token), ("c", token_c));
}

/// No herd: with five participants the observer's session has exactly one data watch on the
/// server, on the leader's node, and no other wake-up: a waiter leaving and a newcomer joining
/// cost it no read; the handover costs one. (ZooKeeper's `wchp` does not list child watches:
/// the read count shows there is none.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_keeps_one_watch_on_the_leader_only() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/observe/herd";
    let contenders = session(&connect).await;
    let (first, _) = leading(&contenders, path, "p0").await;
    let mut others = Vec::new();
    // One at a time: `start` joins on a task of its own, so latches started together join in
    // any order, and p1 must be next after p0.
    for i in 1..5 {
        let latch = LeaderLatch::with_options(
            &contenders,
            path,
            zk_recipes::LatchOptions::new().participant_id(format!("p{i}")),
        )
        .unwrap();
        latch.start().unwrap();
        others.push(latch);
        eventually("queued", || async { first.participants().await.unwrap().len() == i + 1 }).await;
    }

    let observer_session = session(&connect).await;
    let me = observer_session.client().unwrap().session_id().0;
    let observer = LeaderObserver::new(&observer_session, path).unwrap();
    let mut rx = observer.leader();
    let leader = until_leader(&mut rx, "p0 leads", |l| l.is_some()).await.unwrap();
    assert_eq!(leader.id, "p0");
    let node = format!("{path}/{}", leader.node);
    eventually("the observer watches the leader", || async {
        zk.four_letter(0, "wchp").await.is_ok_and(|l| watchers(&l, &node).any(|s| s == me))
    })
    .await;
    let listing = zk.four_letter(0, "wchp").await.unwrap();
    let mine = listing.lines().filter(|line| line.trim() == format!("0x{me:x}")).count();
    assert_eq!(mine, 1, "data watches of the observer's session: {listing}");

    // A waiter leaves, a newcomer joins: nothing for the observer. Then the leader hands over.
    let reads = observer.stats().listings;
    others.remove(2).close().await;
    let late =
        LeaderLatch::with_options(&contenders, path, zk_recipes::LatchOptions::new().participant_id("p5"))
            .unwrap();
    late.start().unwrap();
    eventually("p3 gone, p5 queued", || async {
        let ids: Vec<_> = first.participants().await.unwrap().into_iter().map(|p| p.id).collect();
        ids.len() == 5 && ids.contains(&"p5".to_string()) && !ids.contains(&"p3".to_string())
    })
    .await;
    first.close().await;
    let next = until_leader(&mut rx, "p1 leads", |l| l.as_ref().is_some_and(|l| l.id != "p0")).await.unwrap();
    assert_eq!(next.id, "p1");
    assert_eq!(
        observer.stats().listings,
        reads + 1,
        "the observer read the election for more than the handover"
    );
    for latch in others.into_iter().chain([late]) {
        latch.close().await;
    }
}

/// The observer's own session expires (proxy blackholed until the client declares it lost): it
/// reads the election again on the new session and follows the next handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_survives_its_sessions_expiry() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let proxy = zk.proxy().unwrap();
    let path = "/observe/expiry";
    let observer_session =
        within("connect", Session::connect(&proxy.connect_string(), Duration::from_secs(2))).await.unwrap();
    let observer = LeaderObserver::new(&observer_session, path).unwrap();
    let mut rx = observer.leader();
    let contenders = session(&connect).await;
    let (a, token_a) = leading(&contenders, path, "a").await;
    let seen = until_leader(&mut rx, "a leads", |l| l.is_some()).await.unwrap();
    assert_eq!(seen.fencing_token, token_a);

    let before = observer_session.generation();
    proxy.blackhole();
    wait_session_state(&observer_session, ConnectionState::Lost).await;
    // While the observer is cut off, the leadership moves.
    let b = LeaderLatch::with_options(&contenders, path, zk_recipes::LatchOptions::new().participant_id("b"))
        .unwrap();
    b.start().unwrap();
    eventually("b queued", || async { b.participants().await.unwrap().len() == 2 }).await;
    a.close().await;
    let token_b = within("b leads", b.await_leadership()).await.unwrap();
    proxy.heal();
    wait_new_generation(&observer_session, before).await;
    let seen =
        until_leader(&mut rx, "b seen after the expiry", |l| l.as_ref().is_some_and(|l| l.id == "b")).await;
    assert_eq!(seen.unwrap().fencing_token, token_b);
    // And it keeps following on the new session.
    let c = LeaderLatch::with_options(&contenders, path, zk_recipes::LatchOptions::new().participant_id("c"))
        .unwrap();
    c.start().unwrap();
    eventually("c queued", || async { c.participants().await.unwrap().len() == 2 }).await;
    b.close().await;
    until_leader(&mut rx, "c leads", |l| l.as_ref().is_some_and(|l| l.id == "c")).await;
    c.close().await;
}

/// Interop: the observer reads a real Curator `LeaderLatch`'s leader id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_reads_curators_leader_latch() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/observe/curator";
    let mut java = Peer::spawn(peers::curator(&["latch", &connect, path, "java-1", "2000"]));
    java.expect("LEADER").await;
    let observer = LeaderObserver::new(&session(&connect).await, path).unwrap();
    let mut rx = observer.leader();
    let seen = until_leader(&mut rx, "java-1 leads", |l| l.is_some()).await.unwrap();
    assert_eq!(seen.id, "java-1");
    assert!(seen.node.starts_with("_c_") && seen.node.contains("-latch-"), "{}", seen.node);
    java.say("quit");
    java.wait_success().await;
    until_leader(&mut rx, "nobody leads after Curator quits", |l| l.is_none()).await;
}

/// Proclaim: the leader's value reaches the observer (and `participants()`), with the id kept;
/// a participant that does not lead, or whose term's node is gone, cannot proclaim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaim_reaches_the_observer_and_a_stale_leader_cannot_proclaim() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/observe/proclaim";
    let observer = LeaderObserver::new(&session(&connect).await, path).unwrap();
    let mut rx = observer.leader();
    let (a, token_a) = leading(&session(&connect).await, path, "a").await;
    a.proclaim(b"http://a:8080").await.unwrap();
    let seen = until_leader(&mut rx, "a's value", |l| l.as_ref().is_some_and(|l| !l.value.is_empty()))
        .await
        .unwrap();
    assert_eq!(
        (seen.id.as_str(), seen.fencing_token, &seen.value[..]),
        ("a", token_a, &b"http://a:8080"[..])
    );
    let first = a.leader().await.unwrap().unwrap();
    assert_eq!((first.id.as_str(), &first.value[..]), ("a", &b"http://a:8080"[..]));

    // b waits: it does not lead, so it cannot proclaim.
    let b = LeaderLatch::with_options(
        &session(&connect).await,
        path,
        zk_recipes::LatchOptions::new().participant_id("b"),
    )
    .unwrap();
    b.start().unwrap();
    eventually("b queued", || async { b.participants().await.unwrap().len() == 2 }).await;
    assert!(
        matches!(b.proclaim(b"b").await, Err(Error::LockLost { .. })),
        "a waiting participant proclaimed"
    );

    // a's node is deleted (its term is over): its proclaim is refused, and changes nothing.
    client(&connect).await.delete(&format!("{path}/{}", seen.node), None).await.unwrap();
    assert!(matches!(a.proclaim(b"stale").await, Err(Error::LockLost { .. })), "a stale leader proclaimed");
    within("b leads", b.await_leadership()).await.unwrap();
    let seen = until_leader(&mut rx, "b leads", |l| l.as_ref().is_some_and(|l| l.id == "b")).await.unwrap();
    assert!(seen.value.is_empty(), "{seen:?}");
    b.proclaim(b"http://b:8080").await.unwrap();
    let seen = until_leader(&mut rx, "b's value", |l| l.as_ref().is_some_and(|l| !l.value.is_empty()))
        .await
        .unwrap();
    assert_eq!((seen.id.as_str(), &seen.value[..]), ("b", &b"http://b:8080"[..]));
    a.close().await;
    b.close().await;
}

/// A selector's leader (lock names) is observed too, and its task's proclaim reaches the
/// observer; a context whose term is over cannot proclaim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_follows_a_selector_and_its_proclaim() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/observe/selector";
    let observer = LeaderObserver::new(&session(&connect).await, path).unwrap();
    let mut rx = observer.leader();
    let (tx, mut contexts) = tokio::sync::mpsc::unbounded_channel::<LeadershipContext>();
    let selector = LeaderSelector::with_options(
        &session(&connect).await,
        path,
        SelectorOptions::new().participant_id("s1"),
    )
    .unwrap();
    selector
        .start(move |ctx: LeadershipContext| {
            let tx = tx.clone();
            async move {
                ctx.proclaim(b"term-1").await.unwrap();
                ctx.stopped().await;
                let _ = tx.send(ctx);
            }
        })
        .unwrap();
    let seen = until_leader(&mut rx, "s1 proclaims", |l| l.as_ref().is_some_and(|l| !l.value.is_empty()))
        .await
        .unwrap();
    assert_eq!((seen.id.as_str(), &seen.value[..]), ("s1", &b"term-1"[..]));
    assert!(seen.node.contains("-lock-"), "{}", seen.node);
    selector.close().await;
    let ended = within("the task's context", contexts.recv()).await.unwrap();
    until_leader(&mut rx, "nobody leads", |l| l.is_none()).await;
    assert!(
        matches!(ended.proclaim(b"late").await, Err(Error::LockLost { .. })),
        "a finished term proclaimed"
    );
}

/// Interop: in kazoo format the observer reads kazoo's `Election` nodes (a latch in kazoo
/// format queues with the same names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_in_kazoo_format_reads_kazoo_names() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/observe/kazoo";
    let latch = LeaderLatch::with_options(
        &session(&connect).await,
        path,
        zk_recipes::LatchOptions::new().participant_id("k1").format(NodeFormat::Kazoo),
    )
    .unwrap();
    latch.start().unwrap();
    let token = within("k1 leads", latch.await_leadership()).await.unwrap();
    let observer = LeaderObserver::with_format(&session(&connect).await, path, NodeFormat::Kazoo).unwrap();
    let mut rx = observer.leader();
    let seen = until_leader(&mut rx, "k1 leads", |l| l.is_some()).await.unwrap();
    assert_eq!((seen.id.as_str(), seen.fencing_token), ("k1", token));
    assert!(seen.node.contains("__lock__"), "{}", seen.node);
    latch.close().await;
}
