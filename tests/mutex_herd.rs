//! Herd-freedom: one release wakes one waiter (the next in line, which enters; the one behind
//! it watches its predecessor's tombstone, so that it can enter on its predecessor's deletion
//! alone, and only a release at the head creates a tombstone: it is not woken), and the
//! server's work per handoff does not grow with the number of waiters.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use zk_recipes::InterProcessMutex;

/// Parses `wchp`: each path line is followed by tab-indented session ids.
fn watchers_by_path(wchp: &str) -> BTreeMap<String, Vec<i64>> {
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut current = None;
    for line in wchp.lines() {
        if let Some(session) = line.strip_prefix('\t').and_then(|s| s.trim().strip_prefix("0x")) {
            if let (Some(path), Ok(id)) = (&current, u64::from_str_radix(session, 16)) {
                out.entry(String::clone(path)).or_default().push(id as i64);
            }
        } else if line.starts_with('/') {
            current = Some(line.trim().to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_release_wakes_only_the_next_of_32_waiters() {
    const WAITERS: usize = 32;
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let holder_session = session(&zk.connect_string()).await;
    let holder = InterProcessMutex::new(&holder_session, "/locks/herd").unwrap();
    let held = holder.acquire().await.unwrap();

    let mut waiters = Vec::new();
    let (granted_tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..WAITERS {
        let s = session(&zk.connect_string()).await;
        let m = InterProcessMutex::new(&s, "/locks/herd").unwrap();
        // Each waiter on its own session (its own handle): the herd is between sessions.
        let c = raw(&s);
        let (m2, tx) = (m.clone(), granted_tx.clone());
        let task = tokio::spawn(async move {
            let g = m2.acquire().await.expect("acquire");
            tx.send(i).unwrap();
            g
        });
        waiters.push((c, m, task));
        eventually("queued", || async { children(&admin, "/locks/herd").await.len() == i + 2 }).await;
    }

    // Server side: every queue node is watched only by its owner and its immediate successor;
    // its tombstone's name only by that successor.
    let mut sessions = vec![raw(&holder_session).session_id().0];
    sessions.extend(waiters.iter().map(|(c, _, _)| c.session_id().0));
    let owner_of: BTreeMap<String, usize> = {
        let mut map = BTreeMap::new();
        for name in children(&admin, "/locks/herd").await {
            let (_, stat) = admin.get_data(&format!("/locks/herd/{name}")).await.unwrap();
            let idx = sessions.iter().position(|s| *s == stat.ephemeral_owner).expect("known owner");
            map.insert(format!("/locks/herd/{name}"), idx);
        }
        map
    };
    let watchers = watchers_by_path(&zk.four_letter(0, "wchp").await.unwrap());
    for (path, owner) in &owner_of {
        let watching = watchers.get(path).cloned().unwrap_or_default();
        let allowed: Vec<i64> = sessions[*owner..sessions.len().min(owner + 2)].to_vec();
        assert!(
            watching.iter().all(|s| allowed.contains(s)),
            "{path} watched by {watching:x?}, allowed {allowed:x?}"
        );
        assert!(watching.len() <= 2, "{path} has {} watchers", watching.len());
        // A tombstone is named by its node's sequence suffix, beside it.
        let (parent, name) = path.rsplit_once('/').unwrap();
        let tomb = format!("{parent}/{}.released", &name[name.len() - 10..]);
        let watching = watchers.get(&tomb).cloned().unwrap_or_default();
        let allowed: Vec<i64> =
            sessions[(owner + 1).min(sessions.len())..sessions.len().min(owner + 2)].to_vec();
        assert!(watching.iter().all(|s| allowed.contains(s)), "{tomb} watched by {watching:x?}");
    }
    // Nothing else under the lock path is watched.
    for path in watchers.keys().filter(|p| p.starts_with("/locks/herd/")) {
        let known = match path.strip_suffix(".released") {
            Some(seq) => owner_of.keys().any(|node| node.ends_with(&seq[seq.len() - 10..])),
            None => owner_of.contains_key(path),
        };
        assert!(known, "{path} is watched");
    }

    let before: Vec<_> = waiters.iter().map(|(_, m, _)| m.stats().wakeups).collect();
    assert!(before.iter().all(|w| *w == 0));
    held.release().await.unwrap();
    let next = within("next grant", granted.recv()).await.unwrap();
    assert_eq!(next, 0, "the first waiter in line must be granted");
    // Barrier: a round trip on every waiter's session. ZooKeeper delivers a session's watch events
    // before the replies to its later requests, so any wake-up caused by the release has arrived.
    for (c, _, _) in &waiters {
        c.get_data("/").await.unwrap();
    }
    tokio::task::yield_now().await;
    let woken: Vec<usize> =
        waiters.iter().enumerate().filter(|(_, (_, m, _))| m.stats().wakeups > 0).map(|(i, _)| i).collect();
    // The next in line, no other.
    assert_eq!(woken, vec![0], "one release woke {woken:?}");

    // Drain the queue (each guard released while its handle, and so its session, is open).
    let mut held: Option<(zk_recipes::LockGuard, InterProcessMutex)> = None;
    for (_, m, task) in waiters {
        if let Some((previous, _m)) = held.take() {
            previous.release().await.unwrap();
        }
        held = Some((within("next guard", task).await.unwrap(), m));
    }
    let (last, _m) = held.expect("a last guard");
    last.release().await.unwrap();
}

/// Runs `n` contenders, each on its own session, for `rounds` acquire → 1 ms critical section →
/// release cycles, and returns the server packets (in + out) per handoff from `mntr`, measured
/// after every session connected. The critical section makes every acquisition a handoff (a
/// waiter is queued when the holder releases), also at N=2. `revocable` locks watch their own
/// node (which lets a waiter skip the re-listing when its predecessor was the head).
async fn packets_per_handoff(n: usize, rounds: usize, revocable: bool) -> Cost {
    let zk = standalone().await;
    let path = "/locks/packets";
    let mut mutexes = Vec::new();
    for _ in 0..n {
        let options = zk_recipes::LockOptions::new().revocable(revocable);
        mutexes.push(
            InterProcessMutex::with_options(&session(&zk.connect_string()).await, path, options).unwrap(),
        );
    }
    // Create the parents outside the measurement.
    mutexes[0].acquire().await.unwrap().release().await.unwrap();
    let start = zk.mntr(0).await.unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let handles = mutexes.clone();
    let tasks: Vec<_> = mutexes
        .into_iter()
        .map(|m| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                for _ in 0..rounds {
                    let g = m.acquire().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    g.release().await.unwrap();
                }
                m.settled().await;
            })
        })
        .collect();
    for t in tasks {
        within("contenders", t).await.unwrap();
    }
    let end = zk.mntr(0).await.unwrap();
    let handoffs = (n * rounds) as f64;
    let per = |f: fn(&zk_recipes::QueueStats) -> u64| {
        handles.iter().map(|m| f(&m.stats())).sum::<u64>() as f64 / handoffs
    };
    Cost {
        packets: (end.packets() - start.packets()) as f64 / handoffs,
        wakeups: per(|s| s.wakeups),
        // One listing per acquisition is the join; the rest are re-listings after a wake-up.
        relistings: per(|s| s.listings) - 1.0,
        behind_head: per(|s| s.behind_head),
    }
}

#[derive(Debug)]
struct Cost {
    packets: f64,
    wakeups: f64,
    relistings: f64,
    /// Entries behind a head that left (its tombstone seen), per handoff.
    behind_head: f64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn packets_per_handoff_stay_flat_as_waiters_grow() {
    let at2 = packets_per_handoff(2, 120, false).await;
    let at8 = packets_per_handoff(8, 30, false).await;
    let at32 = packets_per_handoff(32, 8, false).await;
    eprintln!("per handoff: N=2 {at2:?}\n             N=8 {at8:?}\n             N=32 {at32:?}");
    // Herd-free: each handoff wakes one waiter, whatever the queue length.
    for cost in [&at2, &at8, &at32] {
        assert!(cost.wakeups <= 1.05, "more than one wake-up per handoff: {cost:?}");
        // A woken waiter lists again at most once per handoff.
        assert!(cost.relistings <= 1.05, "re-listed more than once per handoff: {cost:?}");
    }
    // At N=2 a waiter's predecessor is always the head: its deletion admits the waiter without
    // a listing (a watch on the waiter's own node, set while it queued, says it is still there).
    assert!(at2.relistings < 0.1, "N=2 re-listed: {at2:?}");
    // At every N, each waiter's predecessor leaves a tombstone (it was admitted at the
    // head), so no waiter lists after its join.
    for cost in [&at8, &at32] {
        assert!(cost.relistings < 0.1, "re-listed: {cost:?}");
    }
    // Flat in N: a herd would add about one packet per waiter.
    assert!(
        at32.packets <= 1.2 * at8.packets,
        "N=32 {:.2} against N=8 {:.2} packets per handoff",
        at32.packets,
        at8.packets
    );
    // Against N=2, where no waiter lists again: beyond N=2 a woken waiter may list once more per
    // handoff (its request and reply: 2 packets; see `relistings` above and
    // `a_waiter_whose_predecessor_gives_up_waits_for_the_holder`); and at N=2 some acquires find
    // the lock free (1 - wakeups of them), skipping the watch on a predecessor and its
    // notification (3 packets); beyond N=2 a waiter also watches its predecessor's tombstone
    // (its request, reply and notification: 3 packets per entry behind a head that left,
    // `behind_head`), which spares it the listing a look-ahead watch on the node two ahead used
    // to cost. Nothing else may grow.
    let expected_gap = 2.0 * at32.relistings + 3.0 * (1.0 - at2.wakeups) + 3.0 * at32.behind_head;
    assert!(
        at32.packets <= at2.packets + expected_gap + 0.5,
        "N=32 {at32:?} against N=2 {at2:?}: more than {expected_gap:.2} + 0.5 apart"
    );
    // Sanity: the measurement is real (at least create, list, delete with replies).
    assert!(at2.packets >= 6.0, "implausibly few packets: {at2:?}");
}

/// A revocable lock watches its own node, so a waiter whose predecessor was the head when it
/// listed is admitted by that predecessor's deletion alone (no listing, no request at all), as a
/// plain lock's waiter is.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revocable_waiter_behind_the_head_does_not_relist() {
    let at2 = packets_per_handoff(2, 120, true).await;
    eprintln!("revocable, per handoff: N=2 {at2:?}");
    assert!(at2.wakeups <= 1.05, "more than one wake-up per handoff: {at2:?}");
    assert!(at2.relistings < 0.1, "N=2 re-listed: {at2:?}");
}

/// A handoff in one hop at every N, with no listing at all: a waiter two
/// places back watches its predecessor's tombstone besides the predecessor, so the holder's
/// release does not wake it. Its predecessor, admitted at the head, listed right behind the
/// holder with nobody after it, so it releases with no tombstone; the waiter, woken by that
/// deletion alone, reads once that the holder is gone, and enters with no listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_two_back_enters_on_its_predecessors_deletion_alone() {
    use zk_recipes::{Lock, QueueEvent};
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/locks/one-hop";
    let holder = InterProcessMutex::new(&session(&connect).await, path).unwrap();
    let held = holder.acquire().await.unwrap();
    let spawn = |mutex: InterProcessMutex| {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut report = move |e: &QueueEvent| {
                let _ = tx.send(e.clone());
            };
            mutex.acquire_with_events(None, &mut report).await.unwrap().unwrap()
        });
        (rx, task)
    };
    let middle = InterProcessMutex::new(&session(&connect).await, path).unwrap();
    let (mut middle_events, middle_task) = spawn(middle.clone());
    let first = within("middle queued", middle_events.recv()).await.unwrap();
    assert!(matches!(first, QueueEvent::Queued { ahead: 1, .. }), "{first:?}");
    let last = InterProcessMutex::new(&session(&connect).await, path).unwrap();
    let (mut last_events, last_task) = spawn(last.clone());
    let first = within("last queued", last_events.recv()).await.unwrap();
    assert!(matches!(first, QueueEvent::Queued { ahead: 2, .. }), "{first:?}");

    held.release().await.unwrap();
    let middle_guard = within("middle acquires", middle_task).await.unwrap();
    // The last one was not woken by the holder's release, and listed nothing.
    assert_eq!(last.stats().listings, 1);
    middle_guard.release().await.unwrap();
    let guard = within("last acquires", last_task).await.unwrap();
    let stats = last.stats();
    assert_eq!(stats.listings, 1, "no listing after its join: {stats:?}");
    assert_eq!(stats.wakeups, 1, "woken by its predecessor's deletion only: {stats:?}");
    assert_eq!((stats.relists_saved, stats.behind_head), (1, 1), "{stats:?}");
    while let Ok(event) = last_events.try_recv() {
        assert!(!matches!(event, QueueEvent::MovedUp { .. }), "it listed and moved up: {event:?}");
    }
    assert_eq!(middle.stats().relists_saved, 1, "the middle one entered in one hop too");
    guard.release().await.unwrap();
}
