//! Self-healing sessions: one `Session` outlives expiry, reports every state change,
//! and every recipe built from it carries on without the user rebuilding anything.
//!
//! Expiry is made for real: the session runs through the harness's `FaultProxy`, which goes
//! silent (`blackhole`) until the client declares the session expired (7/5 of the negotiated
//! timeout without a server); then the proxy heals and the `Session` starts a new one. Every
//! wait is on an event (the session's event stream, a status channel, a leadership channel),
//! bounded by `within` against hangs.

mod common;

use std::time::Duration;

use common::{children, within};
use tokio::sync::broadcast;
use zk_recipes::zookeeper_client::Client;
use zk_recipes::{
    ConnectionState, Error, InterProcessMutex, InterProcessSemaphore, LeaderLatch, LeaderSelector,
    Leadership, LockStatus, SelectorOptions, Session, SessionStatus, TermOutcome,
};
use zk_testcluster::{FaultProxy, ZkCluster};

const TIMEOUT: Duration = Duration::from_secs(2);

async fn admin(zk: &ZkCluster) -> Client {
    Client::connector()
        .with_session_timeout(Duration::from_secs(20))
        .connect(&zk.connect_string())
        .await
        .unwrap()
}

async fn through(proxy: &FaultProxy, timeout: Duration) -> Session {
    within("connect", Session::connect(&proxy.connect_string(), timeout)).await.expect("session")
}

/// Waits for the next event with `state` and returns it.
async fn next(events: &mut broadcast::Receiver<SessionStatus>, state: ConnectionState) -> SessionStatus {
    within(&format!("session state {state:?}"), async {
        loop {
            let event = events.recv().await.expect("event stream");
            if event.state == state {
                return event;
            }
        }
    })
    .await
}

/// Blackholes the proxy until the session is lost, then heals it and waits for the new session.
/// Returns every event seen, in order.
async fn expire(proxy: &FaultProxy, session: &Session) -> Vec<SessionStatus> {
    let mut events = session.events();
    let before = session.generation();
    proxy.blackhole();
    let mut seen = Vec::new();
    within("the session to be lost", async {
        loop {
            let event = events.recv().await.expect("event stream");
            seen.push(event);
            if event.state == ConnectionState::Lost {
                break;
            }
        }
    })
    .await;
    proxy.heal();
    let connected = next(&mut events, ConnectionState::Connected).await;
    assert_eq!(connected.generation, before + 1, "{seen:?}");
    seen.push(connected);
    seen
}

fn states(events: &[SessionStatus]) -> Vec<ConnectionState> {
    events.iter().map(|e| e.state).collect()
}

/// An expiry while idle shows Suspended → Lost → Connected (new generation), and a
/// mutex built before it works afterwards, on the new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_and_heals_by_itself() {
    let zk = common::standalone().await;
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, TIMEOUT).await;
    let mutex = InterProcessMutex::new(&session, "/s/idle").unwrap();
    let first = session.client().unwrap().session_id();
    assert_eq!(session.generation(), 1);

    let seen = expire(&proxy, &session).await;
    assert_eq!(
        states(&seen),
        [ConnectionState::Suspended, ConnectionState::Lost, ConnectionState::Connected],
        "{seen:?}"
    );
    assert_eq!(seen[0].generation, 1);
    assert_eq!(seen[1].generation, 1);
    assert_eq!(session.generation(), 2);
    let second = session.client().unwrap().session_id();
    assert_ne!(first, second, "a new session was started");

    let guard = within("acquire after expiry", mutex.acquire()).await.expect("acquire");
    assert_eq!(guard.session_generation(), 2);
    let admin = admin(&zk).await;
    let (_, stat) = admin.get_data(guard.node_path()).await.unwrap();
    assert_eq!(stat.ephemeral_owner, second.0, "the node belongs to the new session");
    guard.release().await.unwrap();
    session.close().await;
    assert!(children(&admin, "/s/idle").await.is_empty());
}

/// A waiter whose session expires while it is queued re-queues by itself, on the new
/// session, at the back of the queue; the user's `acquire().await` simply returns later. The
/// old session's node is gone and never mistaken for ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_requeues_after_expiry_and_acquires() {
    let zk = common::standalone().await;
    let admin = admin(&zk).await;
    let holder_session = common::session(&zk.connect_string()).await;
    let holder = InterProcessMutex::new(&holder_session, "/s/queued").unwrap();
    let held = holder.acquire().await.unwrap();

    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, TIMEOUT).await;
    let waiter = InterProcessMutex::new(&session, "/s/queued").unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    common::eventually("the waiter to queue", || async { children(&admin, "/s/queued").await.len() == 2 })
        .await;
    let old_session = session.client().unwrap().session_id().0;

    expire(&proxy, &session).await;
    let new_session = session.client().unwrap().session_id().0;
    common::eventually("the waiter to queue again on the new session", || async {
        common::nodes_owned_by(&admin, "/s/queued", new_session).await.len() == 1
    })
    .await;
    assert!(common::nodes_owned_by(&admin, "/s/queued", old_session).await.is_empty());
    assert!(!waiting.is_finished(), "the waiter must still wait: the holder holds");

    let token = held.fencing_token();
    held.release().await.unwrap();
    let guard = within("the re-queued waiter to acquire", waiting).await.unwrap().expect("acquire");
    assert_eq!(guard.session_generation(), 2);
    assert!(guard.fencing_token() > token);
    assert_eq!(children(&admin, "/s/queued").await.len(), 1);
    guard.release().await.unwrap();
}

/// A hold belongs to the session in which it was taken. When that session expires
/// the hold is Lost for good, and releasing it afterwards never touches the new session's
/// nodes (here: the same lock, taken again on the new session through another handle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_lost_with_its_session_and_its_release_spares_the_new_one() {
    let zk = common::standalone().await;
    let admin = admin(&zk).await;
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, TIMEOUT).await;
    let mutex = InterProcessMutex::new(&session, "/s/held").unwrap();
    let old = mutex.acquire().await.unwrap();
    assert!(old.safe_until().is_some());
    let mut status = old.status();

    expire(&proxy, &session).await;
    within("the hold to be lost", status.wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    assert_eq!(old.safe_until(), None, "no safe window once lost");

    let again = InterProcessMutex::new(&session, "/s/held").unwrap();
    let new = within("acquire on the new session", again.acquire()).await.unwrap();
    assert_eq!(new.session_generation(), 2);
    assert!(matches!(old.release().await, Err(Error::LockLost { .. })));
    assert_eq!(new.current_status(), LockStatus::Held);
    assert!(admin.check_stat(new.node_path()).await.unwrap().is_some(), "the new hold's node is intact");
    new.release().await.unwrap();
}

/// A latch leading when its session expires reports the loss, rejoins on the new
/// session, and leads again; `await_leadership` keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leading_latch_rejoins_after_expiry() {
    let zk = common::standalone().await;
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, TIMEOUT).await;
    let latch =
        LeaderLatch::with_options(&session, "/s/latch", zk_recipes::LatchOptions::new().participant_id("a"))
            .unwrap();
    latch.start().unwrap();
    let first = within("leadership", latch.await_leadership()).await.unwrap();
    let mut leadership = latch.leadership();

    expire(&proxy, &session).await;
    let mut seen = Vec::new();
    within("leadership regained", async {
        loop {
            leadership.changed().await.unwrap();
            let now = *leadership.borrow_and_update();
            seen.push(now);
            if seen.contains(&Leadership::NotLeader) && now.is_leader() {
                break;
            }
        }
    })
    .await;
    assert_eq!(seen.first(), Some(&Leadership::NotLeader), "{seen:?}");
    let second = within("await_leadership after expiry", latch.await_leadership()).await.unwrap();
    assert!(second > first, "a new term on the new session: {second} > {first}");
    latch.close().await;
}

/// An expiry inside a selector's leadership task ends the term as Lost, and with
/// auto-requeue the selector queues again on the new session and leads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_with_auto_requeue_leads_again_after_expiry() {
    let zk = common::standalone().await;
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, TIMEOUT).await;
    let selector = LeaderSelector::with_options(
        &session,
        "/s/selector",
        SelectorOptions::new().participant_id("a").auto_requeue(true),
    )
    .unwrap();
    let mut terms = selector.terms();
    selector.start(|ctx| async move { ctx.stopped().await }).unwrap();
    let first = within("leadership", selector.await_leadership()).await.unwrap();

    expire(&proxy, &session).await;
    let ended = within("the term to end", terms.recv()).await.unwrap();
    assert_eq!(ended.fencing_token, first);
    assert_eq!(ended.outcome, TermOutcome::Lost);
    let second = common::leadership_after(&selector, first, "leadership again").await;
    assert!(second > first);
    selector.close().await;
}

/// Semaphore leases are lost like locks, and new acquires work on the new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_leases_are_lost_with_the_session_and_new_ones_granted() {
    let zk = common::standalone().await;
    let admin = admin(&zk).await;
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, TIMEOUT).await;
    let semaphore = InterProcessSemaphore::new(&session, "/s/sem", 2).unwrap();
    let a = semaphore.acquire().await.unwrap();
    let b = semaphore.acquire().await.unwrap();
    let (mut sa, mut sb) = (a.status(), b.status());

    expire(&proxy, &session).await;
    within("lease a lost", sa.wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    within("lease b lost", sb.wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    let both = within("two new leases", semaphore.acquire_many(2)).await.unwrap();
    assert_eq!(both.session_generation(), 2);
    assert_eq!(children(&admin, "/s/sem").await.len(), 1, "only the new lease node");
    drop((a, b));
    both.release().await.unwrap();
}

/// A drop shorter than the timeout is Suspended → Reconnected on the same session
/// (same generation), and a hold comes back to Held with its node intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_drop_reconnects_the_same_session_and_holds_survive() {
    let zk = common::standalone().await;
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, Duration::from_secs(10)).await;
    let mutex = InterProcessMutex::new(&session, "/s/short").unwrap();
    let guard = mutex.acquire().await.unwrap();
    let mut status = guard.status();
    let id = session.client().unwrap().session_id();
    let mut events = session.events();

    proxy.cut();
    let suspended = next(&mut events, ConnectionState::Suspended).await;
    let back = next(&mut events, ConnectionState::Reconnected).await;
    assert_eq!((suspended.generation, back.generation), (1, 1));
    assert_eq!(session.client().unwrap().session_id(), id);
    within("held again", status.wait_for(|s| *s == LockStatus::Held)).await.unwrap();
    guard.release().await.unwrap();
}

/// Twenty expiries in a loop leave no growth in live tasks, server watches or open
/// connections (counted with the runtime's task count and the server's `wchs` and `cons`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_expiries_leak_no_tasks_watches_or_connections() {
    let zk = common::standalone().await;
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, Duration::from_millis(1000)).await;
    let latch =
        LeaderLatch::with_options(&session, "/s/loop", zk_recipes::LatchOptions::new().participant_id("a"))
            .unwrap();
    latch.start().unwrap();
    within("leadership", latch.await_leadership()).await.unwrap();
    let watches = |text: String| {
        text.lines().find_map(|l| l.strip_prefix("Total watches:")).map(|n| n.trim().parse::<u64>().unwrap())
    };
    let connections = |text: String| text.lines().filter(|l| l.contains("queued=")).count();
    let runtime = tokio::runtime::Handle::current().metrics();
    let tasks_before = runtime.num_alive_tasks();
    // A leading latch watches its own node; that watch is pipelined, not awaited: wait for it.
    common::eventually("the leader's own-node watch", || async {
        watches(zk.four_letter(0, "wchs").await.unwrap()) == Some(1)
    })
    .await;
    let watches_before = Some(1);
    let cons_before = connections(zk.four_letter(0, "cons").await.unwrap());

    for round in 0..20 {
        expire(&proxy, &session).await;
        let token = within("leadership after expiry", latch.await_leadership()).await.unwrap();
        assert!(token > 0, "round {round}");
    }
    assert_eq!(session.generation(), 21);
    // The old sessions' connections close as the server expires them; wait for that, then count.
    common::eventually("the server to drop the expired sessions", || async {
        connections(zk.four_letter(0, "cons").await.unwrap()) <= cons_before
    })
    .await;
    common::eventually("the same watches as before", || async {
        watches(zk.four_letter(0, "wchs").await.unwrap()) == watches_before
    })
    .await;
    common::eventually("background tasks to settle", || async { runtime.num_alive_tasks() <= tasks_before })
        .await;
    latch.close().await;
}

/// When the ensemble's leader is killed while a client is suspended, it reconnects to
/// another server with the same session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_leader_kill_while_suspended_keeps_the_session() {
    common::init_tracing();
    let mut zk = ZkCluster::ensemble(3).await.expect("ensemble");
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, Duration::from_secs(10)).await;
    let id = session.client().unwrap().session_id();
    let mutex = InterProcessMutex::new(&session, "/s/ensemble").unwrap();
    let guard = mutex.acquire().await.unwrap();
    let mut events = session.events();

    proxy.blackhole();
    next(&mut events, ConnectionState::Suspended).await;
    let leader = zk.leader().await.unwrap();
    zk.kill(leader).await.unwrap();
    proxy.heal();
    let back = next(&mut events, ConnectionState::Reconnected).await;
    assert_eq!(back.generation, 1);
    assert_eq!(session.client().unwrap().session_id(), id);
    let mut status = guard.status();
    within("held again", status.wait_for(|s| *s == LockStatus::Held)).await.unwrap();
    guard.release().await.unwrap();
}

/// Closing while a new session is being started ends promptly, reports Closed, and
/// leaves nothing behind; recipes then fail with `SessionClosed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_while_reconnecting_ends_and_leaves_nothing() {
    let zk = common::standalone().await;
    let admin = admin(&zk).await;
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, TIMEOUT).await;
    let latch = LeaderLatch::with_options(
        &session,
        "/s/closing",
        zk_recipes::LatchOptions::new().participant_id("a"),
    )
    .unwrap();
    latch.start().unwrap();
    within("leadership", latch.await_leadership()).await.unwrap();
    let mut events = session.events();
    proxy.blackhole();
    next(&mut events, ConnectionState::Lost).await;
    // Still blackholed: the session is trying to start a new one.
    within("close", session.close()).await;
    assert_eq!(session.state(), ConnectionState::Closed);
    assert!(matches!(latch.await_leadership().await, Err(Error::SessionClosed)));
    let mutex = InterProcessMutex::new(&session, "/s/closing").unwrap();
    assert!(matches!(mutex.acquire().await, Err(Error::SessionClosed)));
    proxy.heal();
    common::eventually("no node left", || async { children(&admin, "/s/closing").await.is_empty() }).await;
}

/// Issue 14: `close()` deletes our ephemeral nodes at once, even while a guard is still held
/// (not one session timeout later); the hold then reads Lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_deletes_our_nodes_at_once_even_while_a_guard_is_held() {
    let zk = common::standalone().await;
    let admin = admin(&zk).await;
    // A long timeout: if close relied on the server's expiry, the node would stay for a minute.
    let session = Session::connect(&zk.connect_string(), Duration::from_secs(60)).await.unwrap();
    let mutex = InterProcessMutex::new(&session, "/s/close-held").unwrap();
    let guard = mutex.acquire().await.unwrap();
    let mut status = guard.status();
    session.close().await;
    assert!(children(&admin, "/s/close-held").await.is_empty(), "closed, yet our node stays");
    within("the hold to read Lost", status.wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    drop(guard);
}

/// Issue 14: `connected()` waits across the gap between sessions and returns the new
/// generation; `client()` says a new session is being started meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connected_waits_for_the_new_session() {
    let zk = common::standalone().await;
    let proxy = zk.proxy().unwrap();
    let session = through(&proxy, TIMEOUT).await;
    let mut events = session.events();
    proxy.blackhole();
    next(&mut events, ConnectionState::Lost).await;
    assert!(matches!(session.client(), Err(Error::SessionExpired)));
    assert_eq!(session.safe_until(), None);
    let waiting = {
        let session = session.clone();
        tokio::spawn(async move { session.connected().await })
    };
    proxy.heal();
    assert_eq!(within("connected", waiting).await.unwrap().unwrap(), 2);
    within("a fresh contact", async {
        let mut states = session.states();
        while session.safe_until().is_none() {
            // The session's own beat refreshes the last contact every fifth of the timeout.
            let _ = tokio::time::timeout(TIMEOUT / 5, states.changed()).await;
        }
    })
    .await;
    session.close().await;
}

/// Whether Nagle's algorithm is off (`TCP_NODELAY`) on each of this process's TCP sockets whose
/// peer is `port` on loopback (here: the connections through one proxy).
#[cfg(target_os = "linux")]
fn nodelay_to(port: u16) -> Vec<bool> {
    use std::os::unix::ffi::OsStrExt;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Some(fd) = std::str::from_utf8(entry.file_name().as_bytes()).ok().and_then(|n| n.parse().ok())
        else {
            continue;
        };
        // SAFETY: zeroed sockaddr_in / int are valid for the calls to overwrite; they only read
        // the descriptor number and write at most the lengths passed.
        unsafe {
            let mut peer: libc::sockaddr_in = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::getpeername(fd, std::ptr::addr_of_mut!(peer).cast(), &mut len) != 0
                || libc::c_int::from(peer.sin_family) != libc::AF_INET
                || u16::from_be(peer.sin_port) != port
            {
                continue;
            }
            let mut on: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                std::ptr::addr_of_mut!(on).cast(),
                &mut len,
            );
            found.push(on != 0);
        }
    }
    found
}

/// `zookeeper-client` connects with Nagle's algorithm on, which holds a request back
/// until the one before it is answered, so requests sent back to back go a round trip apart.
/// The session turns it off on its first connection, after a reconnection (a new socket) and in
/// a new session after an expiry; `tcp_nodelay(false)` leaves it on.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_of_a_session_has_nagle_off() {
    let zk = common::standalone().await;
    let proxy = zk.proxy().unwrap();
    let port: u16 = proxy.connect_string().rsplit_once(':').unwrap().1.parse().unwrap();
    let session = through(&proxy, TIMEOUT).await;
    assert_eq!(nodelay_to(port), [true], "first connection");

    let mut events = session.events();
    proxy.cut();
    next(&mut events, ConnectionState::Reconnected).await;
    assert_eq!(nodelay_to(port), [true], "after a reconnection");

    let seen = expire(&proxy, &session).await;
    assert_eq!(session.generation(), 2, "{seen:?}");
    assert_eq!(nodelay_to(port), [true], "in the new session");
    session.close().await;

    let other = zk.proxy().unwrap();
    let port: u16 = other.connect_string().rsplit_once(':').unwrap().1.parse().unwrap();
    let options = zk_recipes::ConnectOptions::new(TIMEOUT).tcp_nodelay(false);
    let plain = within("connect", Session::connect_with(&other.connect_string(), &options)).await.unwrap();
    assert_eq!(nodelay_to(port), [false], "with tcp_nodelay(false)");
    plain.close().await;
}
