//! The safe window (`Session::safe_until`) must never reach past the moment the ZooKeeper
//! leader may expire the session, even when the server we talk to still answers.
//!
//! The case it guards against: a follower whose messages to the leader are held (a
//! one-way partition between servers) keeps answering its clients' reads for `syncLimit`
//! ticks, while the leader, which hears no touch of their sessions, expires them after one
//! session timeout and gives their locks to others. A read's answer from that follower proves
//! nothing about the leader; a `sync`'s does (docs/safety.md, "The safe window").

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use zk_recipes::zookeeper_client::{Acls, CreateMode};
use zk_recipes::{ConnectOptions, ConnectionState, InterProcessMutex, Session};
use zk_testcluster::{ClusterConfig, Mode, ZkCluster};

/// The holder's session: 1 s, well inside the ensemble's `syncLimit` (10 ticks of 200 ms), so
/// the leader expires it while the cut follower still serves it.
const SESSION: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_the_leader_no_longer_hears_does_not_extend_the_safe_window() {
    init_tracing();
    let cluster =
        ZkCluster::start(ClusterConfig { nodes: 3, ..ClusterConfig::default() }.partitionable(true))
            .await
            .expect("ensemble");
    let leader = cluster.wait_for_leader().await.expect("leader");
    let mut follower = None;
    for i in (0..cluster.len()).filter(|&i| i != leader) {
        if cluster.mode(i).await == Some(Mode::Follower) {
            follower = Some(i);
            break;
        }
    }
    let follower = follower.expect("a follower");
    let at = |i: usize| cluster.client_addr(i).expect("client address").to_string();

    // The holder talks to the follower only; the next holder to the leader.
    let holder = session_with_timeout(&at(follower), SESSION).await;
    let next = session(&at(leader)).await;
    let path = "/safe-window/one-way";
    let guard = within("the first hold", InterProcessMutex::new(&holder, path).expect("mutex").acquire())
        .await
        .expect("acquire");
    let waiting = tokio::spawn({
        let mutex = InterProcessMutex::new(&next, path).expect("mutex");
        async move {
            let guard = mutex.acquire().await.expect("the next hold");
            (Instant::now(), guard)
        }
    });
    // The next holder is queued behind (its node is there) before the fault begins.
    let admin = client(&at(leader)).await;
    eventually("the next holder to queue", || async { children(&admin, path).await.len() == 2 }).await;

    // Every safe window the holder's first session reports from now on. The holder learns of
    // the loss from the follower (which still hears the leader's commit of the expiry), or
    // when the follower gives up on the leader and drops it.
    let latest = Arc::new(Mutex::new(holder.safe_until().expect("a safe window while holding")));
    let tracker = tokio::spawn({
        let (holder, latest) = (holder.clone(), latest.clone());
        let mut contacts = holder.contacts();
        async move {
            loop {
                let status = *holder.states().borrow();
                if status.generation != 1 || status.state == ConnectionState::Lost {
                    return;
                }
                if let Some(contact) = *contacts.borrow_and_update() {
                    let mut latest = latest.lock().unwrap();
                    *latest = (*latest).max(contact + holder.session_timeout());
                }
                let mut states = holder.states();
                tokio::select! {
                    _ = contacts.changed() => {}
                    _ = states.changed() => {}
                }
            }
        }
    });
    cluster.partition_one_way(follower, leader).expect("one-way partition");
    let (next_began, next_guard) =
        within("the next holder to take the lock", waiting).await.expect("next holder");
    eventually("the holder to be told, or its follower to drop it", || async {
        holder.state() == ConnectionState::Lost
            || holder.generation() != 1
            || cluster.mode(follower).await != Some(Mode::Follower)
    })
    .await;
    tracker.abort();
    let latest = *latest.lock().unwrap();
    assert!(
        latest <= next_began,
        "the holder's safe window reached {:?} past the moment the next holder took the lock",
        latest - next_began
    );
    cluster.heal_partition().expect("heal");
    drop(next_guard);
    drop(guard);
}

/// A connection down for longer than the window, but not for the session timeout: the same
/// session comes back with its window passed, and the beats' proofs must open it again
/// (`Reconnected`). (The chaos run's observer phase caught the supervisor beating back to back
/// after such a return, each beat too close to the last for any proof: suspended for good, a
/// latch's leader never leading again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_back_after_its_window_passed_opens_it_again() {
    const TIMEOUT: Duration = Duration::from_secs(4);
    let zk = standalone().await;
    let proxy = zk.proxy().expect("proxy");
    let session = session_with_timeout(&proxy.connect_string(), TIMEOUT).await;
    let mut states = session.states();
    // The first proof (until then the window counts from when the session was asked for).
    let mut contacts = session.contacts();
    within("a proof", contacts.changed()).await.expect("contacts");
    proxy.blackhole();
    let cut = Instant::now();
    within("the session to be suspended", states.wait_for(|s| s.state == ConnectionState::Suspended))
        .await
        .expect("states");
    // The fault's duration: past the window (at most 0.65 of the timeout ahead at the cut), short
    // of the timeout, so the server still has the session.
    tokio::time::sleep_until((cut + TIMEOUT * 4 / 5).into()).await;
    assert!(
        session.safe_until().is_none_or(|until| until < Instant::now()),
        "the window is still open: {:?} after the cut, contact {:?}",
        session.safe_until().map(|u| u - cut),
        session.last_contact().map(|c| cut.saturating_duration_since(c))
    );
    proxy.heal();
    let status =
        *within("the window to open again", states.wait_for(|s| s.state != ConnectionState::Suspended))
            .await
            .expect("states");
    assert_eq!(status.state, ConnectionState::Reconnected, "{status:?}");
    assert_eq!(status.generation, 1);
    assert!(session.safe_until().is_some_and(|until| until > Instant::now()));
}

/// What a session's proofs showed: how many came, the latest window of its first session they
/// opened, and whether that session was ever suspended (its window lapsed while connected).
#[derive(Default)]
struct Proofs {
    count: AtomicU64,
    latest_window: Mutex<Option<Instant>>,
    suspended: AtomicBool,
}

/// Follows `session`'s proofs (each moves [`Session::contacts`]) until its first session ends.
fn follow(session: &Session) -> (Arc<Proofs>, tokio::task::JoinHandle<()>) {
    let proofs = Arc::new(Proofs::default());
    let task = tokio::spawn({
        let (session, proofs) = (session.clone(), proofs.clone());
        let mut contacts = session.contacts();
        let mut states = session.states();
        contacts.mark_unchanged();
        async move {
            loop {
                let status = *states.borrow_and_update();
                if status.generation != 1
                    || matches!(status.state, ConnectionState::Lost | ConnectionState::Closed)
                {
                    return;
                }
                if status.state == ConnectionState::Suspended {
                    proofs.suspended.store(true, Ordering::SeqCst);
                }
                tokio::select! {
                    changed = contacts.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        if let Some(contact) = *contacts.borrow_and_update() {
                            proofs.count.fetch_add(1, Ordering::SeqCst);
                            let window = contact + session.session_timeout();
                            let mut latest = proofs.latest_window.lock().unwrap();
                            *latest = Some(latest.map_or(window, |l| l.max(window)));
                        }
                    }
                    _ = states.changed() => {}
                }
            }
        }
    });
    (proofs, task)
}

/// The requests the server has received from session `sid` (`cons`: `recved`).
async fn received(zk: &ZkCluster, sid: i64) -> u64 {
    let cons = zk.four_letter(0, "cons").await.expect("cons");
    let line = cons.lines().find(|l| l.contains(&format!("sid={sid:#x},"))).expect("the session in cons");
    line.split("recved=").nth(1).and_then(|r| r.split([',', ')']).next()?.parse().ok()).expect("recved")
}

/// `ConnectOptions::beat_period(0.15)`, the longest: the session beats (and proves) a third as
/// often as at the shortest, a twentieth (both asked for their windows: `follow` reads their
/// contacts), the server hears from it a third as often (the client
/// crate's own pings, three twentieths after its last request, do not come in between), its
/// window stays open while connected, and it still never reaches past the moment the server
/// expires the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_beat_period_beats_less_and_its_window_stays_short_of_the_expiry() {
    const TIMEOUT: Duration = Duration::from_secs(4);
    init_tracing();
    let zk = standalone().await;
    let proxy = zk.proxy().expect("proxy");
    // A twentieth, the shortest period (the default until the beats came only when asked for).
    let default = within(
        "a session beating every twentieth",
        Session::connect_with(&zk.connect_string(), &ConnectOptions::new(TIMEOUT).beat_period(0.05)),
    )
    .await
    .expect("session");
    let longest = within(
        "a session beating every three twentieths",
        Session::connect_with(&proxy.connect_string(), &ConnectOptions::new(TIMEOUT).beat_period(0.15)),
    )
    .await
    .expect("session");
    let sid = |s: &Session| s.client().expect("client").session_id().0;
    let (default_proofs, default_task) = follow(&default);
    let (longest_proofs, longest_task) = follow(&longest);
    let (default_before, longest_before) =
        (received(&zk, sid(&default)).await, received(&zk, sid(&longest)).await);

    // Two timeouts' worth of the default's proofs (twenty per timeout once the chain is full).
    eventually("40 proofs at a twentieth", || async { default_proofs.count.load(Ordering::SeqCst) >= 40 })
        .await;
    let (default_count, longest_count) =
        (default_proofs.count.load(Ordering::SeqCst), longest_proofs.count.load(Ordering::SeqCst));
    let default_sent = received(&zk, sid(&default)).await - default_before;
    let longest_sent = received(&zk, sid(&longest)).await - longest_before;
    // About a third as many beats, and requests at the server.
    assert!(
        longest_count > 0 && longest_count * 2 < default_count,
        "proofs: {longest_count} at three twentieths, {default_count} at a twentieth"
    );
    assert!(
        longest_sent * 2 < default_sent,
        "requests received: {longest_sent} at three twentieths, {default_sent} at a twentieth"
    );
    assert!(!longest_proofs.suspended.load(Ordering::SeqCst), "the window lapsed while connected");
    assert!(longest.safe_until().is_some_and(|until| until > Instant::now()));

    // The server expires the session once it hears nothing: every window it had opened ends
    // before that.
    let node = "/beat-period-longest";
    longest
        .client()
        .expect("client")
        .create(node, b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all()))
        .await
        .expect("an ephemeral node");
    let admin = client(&zk.connect_string()).await;
    let (found, gone) = admin.check_and_watch_stat(node).await.expect("watch");
    assert!(found.is_some());
    proxy.blackhole();
    within("the session to expire at the server", gone.changed()).await;
    let expired = Instant::now();
    let latest = longest_proofs.latest_window.lock().unwrap().expect("a window");
    assert!(
        latest <= expired,
        "the window reached {:?} past the session's expiry at the server",
        latest - expired
    );
    default_task.abort();
    longest_task.abort();
    proxy.heal();
    default.close().await;
    longest.close().await;
}
