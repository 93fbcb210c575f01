//! What waiting costs in memory, counted by a global allocator that tracks live heap bytes:
//! bytes, never timings. One test in this binary, so that nothing else allocates meanwhile.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use common::*;
use zk_recipes::{InterProcessMutex, Session};
use zk_testcluster::ZkCluster;

/// The system allocator, counting the bytes it has handed out and not had back.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only a counter is updated beside.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator with `layout`, as GlobalAlloc::realloc requires.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The server's count of watches (`wchs`: "Total watches:N").
async fn total_watches(zk: &ZkCluster) -> usize {
    let text = zk.four_letter(0, "wchs").await.expect("wchs");
    text.split("Total watches:")
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("a watch count in {text:?}"))
}

/// Live heap bytes per waiter while `n` waiters, each with a handle of its own, are queued on
/// one lock behind a holder, on one session; every waiter then acquires and releases in turn.
async fn bytes_per_waiter(zk: &ZkCluster, s: &Session, path: &str, n: usize) -> isize {
    let holder = InterProcessMutex::new(s, path).unwrap().acquire().await.unwrap();
    let watches = total_watches(zk).await;
    let before = LIVE.load(Ordering::Relaxed);
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let mutex = InterProcessMutex::new(s, path).unwrap();
            tokio::spawn(async move { mutex.acquire().await?.release().await })
        })
        .collect();
    // Once it has listed the queue and parsed it, each waiter watches the node ahead of it and
    // that node's tombstone's name (the waiter behind a node moves up on its tombstone without
    // listing): two watches a waiter, less the one path already watched when we counted (one
    // session: a path's watch counts once).
    eventually("every waiter watching", || async { total_watches(zk).await >= watches + 2 * n - 1 }).await;
    let queued = LIVE.load(Ordering::Relaxed);
    holder.release().await.unwrap();
    for w in waiters {
        within("a waiter's turn", w).await.unwrap().unwrap();
    }
    (queued - before) / n as isize
}

/// A waiter keeps only what it watches, not the listing it queued from (nor the queue parsed
/// from it): kept for as long as it waits, those would make `n` waiters in one process hold
/// memory in n² (100 KB per waiter with 1,024 waiters in the bench's scale scenario). So a
/// waiter's cost does not depend on how long the queue is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_costs_the_same_memory_however_long_the_queue() {
    const SHORT: usize = 100;
    // 1,024 as the bench's scale scenario; not 4,096: the join's listings of 4,096 waiters on
    // one connection (4,096 names each, answered back to back) exhaust the test server's heap.
    const LONG: usize = 1024;
    // Not `common::standalone()`: it installs a tracing subscriber, whose captured output
    // would allocate during the count when RUST_LOG is set.
    let zk = ZkCluster::standalone().await.expect("standalone");
    let s = session(&zk.connect_string()).await;
    // First a long queue, so that the session's buffers and maps have grown to the size a
    // long queue needs before anything is counted.
    bytes_per_waiter(&zk, &s, "/locks/memory", LONG).await;
    let short = bytes_per_waiter(&zk, &s, "/locks/memory", SHORT).await;
    let long = bytes_per_waiter(&zk, &s, "/locks/memory", LONG).await;
    assert!(
        long < short + short / 4,
        "{short} bytes per waiter with {SHORT} waiters, {long} with {LONG}: a waiter's memory grows \
         with the queue"
    );
    // An acquire's future keeps room for its largest state for as long as its waiter
    // waits. Its states that are not the wait (the local turn, the connection, verifying the
    // root, a try's admission, the window's proof, leaving after a timeout or an error; in the
    // wait, the requests that arm the watches, the listing, entering behind the head, the
    // admission) are boxed while they run, the deadline's wrapper keeps the future it wraps
    // once, not twice, the watch on our own node keeps only the watch (not its request, nor our
    // node's data), and the watches on the nodes ahead are kept in a list, not a map: 5.4 KB a
    // waiter here (its task 2 KB, its boxed wait 1.1 KB, its handle, its watches), was 7.2 KB
    // (the boxed wait 1.9 KB, the own-node watch 0.6 KB, two maps 0.4 KB), 8.1 KB before.
    assert!(long <= 5 * 1024 + 512, "{long} bytes per queued waiter (at most 5.5 KB)");
    s.close().await;
}
