//! `zk_recipes::inspect` against real ZooKeeper: deadlocks between real
//! sessions (and between two kazoo processes) are found, with their paths, nodes, sessions and
//! participant ids; queues that only wait (a long queue, a chain, a semaphore holder free to
//! leave) report none; and inspecting never changes the tree.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use common::{children, client, eventually, session, standalone, within};
use zk_recipes::inspect::{inspect, InspectOptions, Inspection, QueueKind};
use zk_recipes::zookeeper_client::Client;
use zk_recipes::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphore, Lock, LockOptions, NodeFormat,
    Session,
};

fn id(session: &Session) -> i64 {
    common::raw(session).session_id().0
}

fn as_id(name: &str) -> LockOptions {
    LockOptions::new().participant_id(name)
}

/// Waits until `path` has `n` queue nodes: every waiter is in its queue.
async fn queued(admin: &Client, path: &str, n: usize) {
    eventually(&format!("{n} nodes queued at {path}"), || async { children(admin, path).await.len() == n })
        .await;
}

/// Every node under `root` with its `mzxid` and `cversion`: what any write would change.
async fn tree(admin: &Client, root: &str) -> BTreeMap<String, (i64, i32)> {
    let mut found = BTreeMap::new();
    let mut stack = vec![root.to_string()];
    while let Some(path) = stack.pop() {
        let Ok(Some(stat)) = admin.check_stat(&path).await else { continue };
        found.insert(path.clone(), (stat.mzxid, stat.cversion));
        stack.extend(children(admin, &path).await.into_iter().map(|c| format!("{path}/{c}")));
    }
    found
}

async fn look(inspector: &Session, root: &str) -> Inspection {
    within("inspect", inspect(inspector, root, &InspectOptions::new())).await.expect("inspect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_session_deadlock_is_found_and_reading_it_changes_nothing() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let (a, b, inspector) = (session(&connect).await, session(&connect).await, session(&connect).await);
    let mutex =
        |s: &Session, path: &str, who: &str| InterProcessMutex::with_options(s, path, as_id(who)).unwrap();
    let (a1, a2) = (mutex(&a, "/dl/two/l1", "A"), mutex(&a, "/dl/two/l2", "A"));
    let (b1, b2) = (mutex(&b, "/dl/two/l1", "B"), mutex(&b, "/dl/two/l2", "B"));
    let _held_a = a1.acquire().await.unwrap();
    let _held_b = b2.acquire().await.unwrap();
    // Nothing waits yet: no cycle.
    let before = look(&inspector, "/dl/two").await;
    assert!(before.cycles.is_empty(), "{before:?}");
    assert_eq!(before.queues.len(), 2);

    let wait_a = tokio::spawn(async move { a2.acquire().await });
    let wait_b = tokio::spawn(async move { b1.acquire().await });
    queued(&admin, "/dl/two/l1", 2).await;
    queued(&admin, "/dl/two/l2", 2).await;

    let tree_before = tree(&admin, "/dl").await;
    let found = look(&inspector, "/dl/two").await;
    assert_eq!(tree(&admin, "/dl").await, tree_before, "inspecting wrote to the tree");
    assert!(found.root_exists && !found.truncated);
    // The root, the two lock paths, four queue nodes.
    assert_eq!(found.nodes_read, 7, "{found:?}");
    assert_eq!(found.cycles.len(), 1, "{found:#?}");
    let cycle = &found.cycles[0];
    let mut sessions = cycle.sessions();
    sessions.sort();
    let mut want = vec![id(&a), id(&b)];
    want.sort();
    assert_eq!(sessions, want);
    assert_eq!(found.stuck_sessions, want);
    let mut paths = cycle.paths();
    paths.sort();
    assert_eq!(paths, ["/dl/two/l1", "/dl/two/l2"]);
    for step in &cycle.steps {
        let (me, other) = if step.session == id(&a) { ("A", "B") } else { ("B", "A") };
        assert_eq!(step.edges.len(), 1, "{step:?}");
        let edge = &step.edges[0];
        assert_eq!(
            (edge.waiter_id.as_str(), edge.blocker_id.as_str(), edge.blocker_holds),
            (me, other, true)
        );
        let lock = found.queues.iter().find(|q| q.path == edge.path).unwrap();
        assert_eq!(lock.kind, QueueKind::Lock);
        assert_eq!(lock.members[1].node, edge.waiter_node);
        assert_eq!(lock.members[0].node, edge.blocker_node);
    }

    // B gives up waiting: the cycle is gone.
    wait_b.abort();
    queued(&admin, "/dl/two/l1", 1).await;
    let after = look(&inspector, "/dl/two").await;
    assert!(after.cycles.is_empty() && after.stuck_sessions.is_empty(), "{after:#?}");
    wait_a.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_session_deadlock_through_a_read_write_lock_and_a_semaphore_is_found() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let (a, b, c) = (session(&connect).await, session(&connect).await, session(&connect).await);
    // A writes /dl/three/rw, B has the one lease of /dl/three/sem, C holds /dl/three/m.
    let rw_a = InterProcessReadWriteLock::with_options(&a, "/dl/three/rw", as_id("A")).unwrap();
    let _write = rw_a.write_lock().acquire().await.unwrap();
    let sem_b = InterProcessSemaphore::with_options(&b, "/dl/three/sem", 1, as_id("B")).unwrap();
    let _lease = sem_b.acquire().await.unwrap();
    let m_c = InterProcessMutex::with_options(&c, "/dl/three/m", as_id("C")).unwrap();
    let _held = m_c.acquire().await.unwrap();
    // Then A waits for a lease, B for the mutex, C to read.
    let sem_a = InterProcessSemaphore::with_options(&a, "/dl/three/sem", 1, as_id("A")).unwrap();
    let m_b = InterProcessMutex::with_options(&b, "/dl/three/m", as_id("B")).unwrap();
    let rw_c = InterProcessReadWriteLock::with_options(&c, "/dl/three/rw", as_id("C")).unwrap();
    let waits = [
        tokio::spawn(async move { sem_a.acquire().await }),
        tokio::spawn(async move { m_b.acquire().await }),
        tokio::spawn(async move { rw_c.read_lock().acquire().await }),
    ];
    for path in ["/dl/three/rw", "/dl/three/sem", "/dl/three/m"] {
        queued(&admin, path, 2).await;
    }

    let found = look(&session(&connect).await, "/").await;
    assert_eq!(found.cycles.len(), 1, "{found:#?}");
    let cycle = &found.cycles[0];
    let step = |s: &Session| cycle.steps.iter().find(|st| st.session == id(s)).expect("in the cycle");
    // Each waits for the next, where the rules say.
    assert_eq!(step(&a).waits_for, id(&b));
    assert_eq!(step(&b).waits_for, id(&c));
    assert_eq!(step(&c).waits_for, id(&a));
    assert_eq!(step(&a).edges[0].path, "/dl/three/sem");
    assert_eq!(step(&b).edges[0].path, "/dl/three/m");
    assert_eq!(step(&c).edges[0].path, "/dl/three/rw");
    assert_eq!(step(&c).edges[0].waiter_id, "C");
    assert!(step(&c).edges[0].waiter_node.contains("__READ__"));
    assert!(step(&c).edges[0].blocker_node.contains("__WRIT__"));
    let kinds: Vec<QueueKind> = found.queues.iter().map(|q| q.kind).collect();
    assert_eq!(kinds, [QueueKind::Lock, QueueKind::ReadWrite, QueueKind::Semaphore { max_leases: Some(1) }]);
    for wait in waits {
        wait.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_queues_chains_and_a_free_semaphore_holder_are_no_deadlock() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let inspector = session(&connect).await;
    // A long queue: one holder and 24 waiters, each in its own session.
    let mut sessions = Vec::new();
    for _ in 0..25 + 5 + 3 {
        sessions.push(session(&connect).await);
    }
    let locks: Vec<InterProcessMutex> =
        sessions[..25].iter().map(|s| InterProcessMutex::new(s, "/nodl/long").unwrap()).collect();
    let mut held = vec![locks[0].acquire().await.unwrap()];
    let mut waits = Vec::new();
    for lock in &locks[1..] {
        let lock = lock.clone();
        waits.push(tokio::spawn(async move { lock.acquire().await }));
    }
    // A chain: session k holds /nodl/chain/k and waits for k+1; the last waits for nothing.
    let chain = &sessions[25..30];
    for (k, s) in chain.iter().enumerate() {
        held.push(InterProcessMutex::new(s, &format!("/nodl/chain/{k}")).unwrap().acquire().await.unwrap());
    }
    for (k, s) in chain[..4].iter().enumerate() {
        let next = InterProcessMutex::new(s, &format!("/nodl/chain/{}", k + 1)).unwrap();
        waits.push(tokio::spawn(async move { next.acquire().await }));
    }
    // A semaphore of two leases, A's and B's; C waits for one and holds /nodl/m, for which A
    // waits: A and C wait for each other, but B is free to leave.
    let (a, b, c) = (&sessions[30], &sessions[31], &sessions[32]);
    let semaphore = |s: &Session| InterProcessSemaphore::new(s, "/nodl/sem", 2).unwrap();
    held.push(semaphore(a).acquire().await.unwrap());
    held.push(semaphore(b).acquire().await.unwrap());
    held.push(InterProcessMutex::new(c, "/nodl/m").unwrap().acquire().await.unwrap());
    let (sem_c, m_a) = (semaphore(c), InterProcessMutex::new(a, "/nodl/m").unwrap());
    waits.push(tokio::spawn(async move { sem_c.acquire().await }));
    waits.push(tokio::spawn(async move { m_a.acquire().await }));
    queued(&admin, "/nodl/long", 25).await;
    for k in 1..5 {
        queued(&admin, &format!("/nodl/chain/{k}"), 2).await;
    }
    queued(&admin, "/nodl/sem", 3).await;
    queued(&admin, "/nodl/m", 2).await;

    let tree_before = tree(&admin, "/nodl").await;
    let found = look(&inspector, "/nodl").await;
    assert_eq!(tree(&admin, "/nodl").await, tree_before, "inspecting wrote to the tree");
    assert!(found.cycles.is_empty() && found.stuck_sessions.is_empty(), "{found:#?}");
    let long = found.queues.iter().find(|q| q.path == "/nodl/long").unwrap();
    assert_eq!((long.holders().count(), long.waiters()), (1, 24));
    assert_eq!(found.queues.len(), 1 + 5 + 2);

    // Once B waits too (for /nodl/m, behind A), nobody can leave: now it is a deadlock.
    let m_b = InterProcessMutex::new(b, "/nodl/m").unwrap();
    waits.push(tokio::spawn(async move { m_b.acquire().await }));
    queued(&admin, "/nodl/m", 3).await;
    let found = look(&inspector, "/nodl").await;
    let mut stuck = vec![id(a), id(b), id(c)];
    stuck.sort();
    assert_eq!(found.stuck_sessions, stuck, "{found:#?}");
    assert_eq!(found.cycles.len(), 2, "A-C and A-C-B: {found:#?}");

    // Bounded: a walk of at most 10 nodes says it stopped.
    let cut = inspect(&inspector, "/nodl", &InspectOptions::new().max_nodes(10)).await.unwrap();
    assert!(cut.truncated && cut.nodes_read <= 10, "{cut:?}");
    for wait in waits {
        wait.abort();
    }
    drop(held);
}

/// A kazoo process that takes `first`, says HOLDING, and on "go" waits for `second`.
fn kazoo_process(connect: &str, first: &str, second: &str, id: &str) -> Child {
    const SCRIPT: &str = r#"
import sys
from kazoo.client import KazooClient
hosts, first, second, ident = sys.argv[1:5]
zk = KazooClient(hosts=hosts, timeout=20)
zk.start(timeout=30)
zk.Lock(first, ident).acquire()
print("HOLDING", flush=True)
sys.stdin.readline()
zk.Lock(second, ident).acquire()
"#;
    Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT, connect, first, second, id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with kazoo (scripts/ensure-peers installs it)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_between_two_kazoo_processes_is_found() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let mut p = [
        kazoo_process(&connect, "/kz/l1", "/kz/l2", "kazoo-A"),
        kazoo_process(&connect, "/kz/l2", "/kz/l1", "kazoo-B"),
    ];
    for child in &mut p {
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        tokio::task::block_in_place(|| out.read_line(&mut line)).unwrap();
        assert_eq!(line.trim(), "HOLDING");
    }
    for child in &mut p {
        writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    }
    queued(&admin, "/kz/l1", 2).await;
    queued(&admin, "/kz/l2", 2).await;
    let found = look(&session(&connect).await, "/kz").await;
    for child in &mut p {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(found.queues.iter().all(|q| q.format == NodeFormat::Kazoo && q.kind == QueueKind::Lock));
    assert_eq!(found.cycles.len(), 1, "{found:#?}");
    let mut ids: Vec<&str> = found.cycles[0].steps.iter().map(|s| s.edges[0].waiter_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["kazoo-A", "kazoo-B"]);
}

/// Issue 51: `LockOptions::owner` makes several sessions one party. Job A holds l1 in one
/// session and waits for l2 in another; job B the other way round. Without labels each session
/// is a party alone and nobody both holds and waits: no cycle. With them, a cycle of two
/// parties, each with both its sessions and the label as evidence; `participants()` reads the
/// label back, and the id stays the id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_with_one_owner_label_are_one_party() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let inspector = session(&connect).await;
    for labelled in [false, true] {
        let root = if labelled { "/dl/owner/on" } else { "/dl/owner/off" };
        let sessions = [
            session(&connect).await,
            session(&connect).await,
            session(&connect).await,
            session(&connect).await,
        ];
        let mutex = |s: &Session, lock: &str, job: &str| {
            let options = as_id(job);
            let options = if labelled { options.owner(format!("job {job}")) } else { options };
            InterProcessMutex::with_options(s, &format!("{root}/{lock}"), options).unwrap()
        };
        let _a = mutex(&sessions[0], "l1", "A").acquire().await.unwrap();
        let _b = mutex(&sessions[2], "l2", "B").acquire().await.unwrap();
        let (a_waits, b_waits) = (mutex(&sessions[1], "l2", "A"), mutex(&sessions[3], "l1", "B"));
        let wait_a = tokio::spawn(async move { a_waits.acquire().await });
        let wait_b = tokio::spawn(async move { b_waits.acquire().await });
        queued(&admin, &format!("{root}/l1"), 2).await;
        queued(&admin, &format!("{root}/l2"), 2).await;
        let found = look(&inspector, root).await;
        if !labelled {
            assert!(found.cycles.is_empty(), "{found:#?}");
        } else {
            assert_eq!(found.cycles.len(), 1, "{found:#?}");
            let mut all: Vec<i64> = sessions.iter().map(id).collect();
            all.sort();
            assert_eq!(found.stuck_sessions, all);
            for step in &found.cycles[0].steps {
                assert_eq!(step.party.len(), 2, "{step:?}");
                assert!(step.evidence.iter().any(|e| e.contains("owner label \"job ")), "{step:?}");
            }
            let holder = &found.queues.iter().find(|q| q.path.ends_with("/l1")).unwrap().members[0];
            assert_eq!((holder.id.as_str(), holder.party.owner.as_deref()), ("A", Some("job A")));
            let read = mutex(&sessions[0], "l1", "A").participants().await.unwrap();
            assert_eq!(read[0].party.owner.as_deref(), Some("job A"));
        }
        wait_a.abort();
        wait_b.abort();
    }
}

/// A node with a party line stays readable by kazoo: `Lock.contenders()` decodes
/// our node's data as text whose first line is our id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_reads_a_node_with_a_party_line() {
    const SCRIPT: &str = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=20)
zk.start(timeout=30)
for data in zk.Lock(sys.argv[2]).contenders():
    print("CONTENDER " + repr(data), flush=True)
zk.stop()
"#;
    let zk = standalone().await;
    let connect = zk.connect_string();
    let ours = session(&connect).await;
    let options = as_id("ours").format(NodeFormat::Kazoo).owner("nightly job");
    let mutex = InterProcessMutex::with_options(&ours, "/dl/kazoo-read", options).unwrap();
    let _held = mutex.acquire().await.unwrap();
    let out = Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT, &connect, "/dl/kazoo-read"])
        .output()
        .expect("python3 with kazoo (scripts/ensure-peers installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    let contenders: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("CONTENDER ")).collect();
    assert_eq!(contenders, ["'ours\\nzk-recipes.party owner=nightly%20job'"], "{text}");
    // And we read it back as id, and party.
    let read = mutex.participants().await.unwrap();
    assert_eq!((read[0].id.as_str(), read[0].party.owner.as_deref()), ("ours", Some("nightly job")));
}
