//! The common lock trait: object-safe, implemented by every exclusive lock, mixed
//! freely in a multi-lock, and `with_lock` releases on every exit path.

mod common;

use std::sync::Arc;

use common::{children, within};
use zk_recipes::{
    InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreMutex, Lock,
    LockExt,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exclusive_lock_is_a_lock_and_a_multi_lock_takes_any_mix() {
    let zk = common::standalone().await;
    let session = common::session(&zk.connect_string()).await;
    let rw = InterProcessReadWriteLock::new(&session, "/t/rw").unwrap();
    let locks: Vec<Box<dyn Lock>> = vec![
        Box::new(InterProcessMutex::new(&session, "/t/mutex").unwrap()),
        Box::new(InterProcessSemaphoreMutex::new(&session, "/t/semaphore-mutex").unwrap()),
        Box::new(rw.write_lock()),
    ];
    for lock in &locks {
        let guard = lock.acquire().await.unwrap();
        assert!(guard.fencing_token() > 0, "{}", lock.lock_path());
        guard.release().await.unwrap();
    }

    // A multi-lock over a mutex, the read side of one lock and the write side of another.
    let other_rw = InterProcessReadWriteLock::new(&session, "/t/rw2").unwrap();
    let multi = InterProcessMultiLock::from_locks(vec![
        Box::new(InterProcessMutex::new(&session, "/t/mutex").unwrap()),
        Box::new(rw.read_lock()),
        Box::new(other_rw.write_lock()),
    ]);
    assert_eq!(multi.paths(), ["/t/mutex", "/t/rw", "/t/rw2"]);
    let all = multi.acquire().await.unwrap();
    assert_eq!(all.members().len(), 3);
    assert_eq!(all.fencing_tokens().len(), 3);
    // Readers share the read side; the write side and the mutex are taken.
    let reader = InterProcessReadWriteLock::new(&session, "/t/rw").unwrap();
    assert!(reader.try_read().await.unwrap().is_some());
    assert!(InterProcessMutex::new(&session, "/t/mutex").unwrap().try_acquire().await.unwrap().is_none());
    assert!(other_rw.try_read().await.unwrap().is_none());
    // Fenced writes check every member node.
    let admin = common::client(&zk.connect_string()).await;
    common::create_persistent(&admin, "/t/data", b"0").await;
    let mut write = all.fenced_writer().unwrap();
    write.add_set_data("/t/data", b"1", None).unwrap();
    write.commit().await.unwrap();
    let member = all.members()[2].node_path().to_string();
    admin.delete(&member, None).await.unwrap();
    let mut stale = all.fenced_writer().unwrap();
    stale.add_set_data("/t/data", b"2", None).unwrap();
    assert!(stale.commit().await.is_err(), "a write went through with a member lost");
    drop(all);
    multi.settled().await;
    assert!(children(&admin, "/t/mutex").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_hands_over_the_token_and_releases_on_every_exit() {
    let zk = common::standalone().await;
    let admin = common::client(&zk.connect_string()).await;
    let session = common::session(&zk.connect_string()).await;
    let mutex = Arc::new(InterProcessMutex::new(&session, "/t/with").unwrap());

    let token = mutex.with_lock(async |guard| guard.fencing_token()).await.unwrap();
    assert!(token > 0);
    assert!(children(&admin, "/t/with").await.is_empty(), "released after returning");

    // Through a trait object too.
    let dynamic: Box<dyn Lock> = Box::new(InterProcessMutex::new(&session, "/t/with").unwrap());
    let second = dynamic.with_lock(async |guard| guard.fencing_token()).await.unwrap();
    assert!(second > token);

    // A panic inside: the panic propagates, and the lock is released.
    let panicking = {
        let mutex = mutex.clone();
        tokio::spawn(async move {
            mutex
                .with_lock(async |_| {
                    panic!("inside the critical section");
                })
                .await
        })
    };
    assert!(within("the panicking task", panicking).await.unwrap_err().is_panic());
    within("cleanup", mutex.settled()).await;
    assert!(children(&admin, "/t/with").await.is_empty(), "a panic left the lock held");
    let third = within("the lock is free again", mutex.acquire()).await.unwrap();
    assert!(third.fencing_token() > second);
    third.release().await.unwrap();
}
