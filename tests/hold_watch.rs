//! The watch a waiter set on its own node, when its hold does not follow it.

mod common;

use common::*;
use zk_recipes::{InterProcessMutex, LockOptions};

/// A waiter behind the head sets a watch on its own node before the one on the node ahead, to
/// be admitted on that node's deletion alone. With `watch_own_node(false)` its hold does not
/// follow that watch, but keeps it until its own delete fires it: dropped at admission, the
/// client would remove it with a request of its own (a `RemoveWatches` on every such handoff).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfollowed_own_node_watch_is_kept_until_the_delete() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let (a, b) = (session(&connect).await, session(&connect).await);
    let options = LockOptions::new().watch_own_node(false);
    let first = InterProcessMutex::with_options(&a, "/hold-watch/lock", options.clone()).unwrap();
    let second = InterProcessMutex::with_options(&b, "/hold-watch/lock", options).unwrap();
    let held = first.acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = second.acquire().await.unwrap();
        (second, guard)
    });
    until_watched(&zk, "the waiter watches the holder's node", held.node_path()).await;
    held.release().await.unwrap();
    let (_second, guard) = within("the waiter enters", waiting).await.unwrap();
    // Answered after everything the waiter's session sent before (a removal of the watch too).
    let ours = raw(&b);
    ours.check_stat("/").await.unwrap();
    let listing = zk.four_letter(0, "wchp").await.unwrap();
    assert_eq!(
        watchers(&listing, guard.node_path()).collect::<Vec<_>>(),
        vec![ours.session_id().0],
        "the hold keeps the watch on its own node:\n{listing}"
    );
    guard.release().await.unwrap();
    a.close().await;
    b.close().await;
}
