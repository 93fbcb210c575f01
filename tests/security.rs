//! ACLs and digest auth on lock nodes, chroots, and secrets kept out of logs.

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::zookeeper_client::{Acls, Error as ZkError};
use zk_recipes::{ConnectOptions, Error, InterProcessMutex, LockOptions, LockStatus, Session};

async fn connect_as(connect: &str, credentials: Option<&[u8]>) -> Session {
    let mut options = ConnectOptions::new(Duration::from_secs(10));
    if let Some(c) = credentials {
        options = options.auth("digest", c);
    }
    within("connect", Session::connect_with(connect, &options)).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creator_only_lock_cannot_be_deleted_or_revoked_by_others() {
    let zk = standalone().await;
    let c = zk.connect_string();
    let alice = connect_as(&c, Some(b"alice:secret")).await;
    let mutex =
        InterProcessMutex::with_options(&alice, "/secure/lock", LockOptions::new().acls(Acls::creator_all()))
            .unwrap();
    let held = mutex.acquire().await.unwrap();

    let intruder = connect_as(&c, None).await;
    assert_eq!(
        raw(&intruder).delete(held.node_path(), None).await,
        Err(ZkError::NoAuth),
        "an unauthenticated client deleted the holder's node"
    );
    match zk_recipes::request_revocation(&intruder, held.node_path()).await {
        Err(Error::NoAuth { path, .. }) => assert_eq!(path, held.node_path()),
        other => panic!("an unauthenticated client could ask for revocation: {other:?}"),
    }
    // Nor can it make the holder's tombstone (the name the waiter behind it watches: made only
    // by a release at the head, in the transaction that deletes the node; forged, it would let
    // that waiter in early): the lock's directory refuses its creates.
    let node = held.node_path();
    let tombstone = format!("/secure/lock/{}.released", &node[node.len() - 10..]);
    assert_eq!(
        raw(&intruder)
            .create(
                &tombstone,
                b"",
                &zk_recipes::zookeeper_client::CreateMode::Persistent.with_acls(Acls::anyone_all())
            )
            .await
            .map(drop),
        Err(ZkError::NoAuth),
        "an unauthenticated client made a tombstone in a creator-only lock's directory"
    );
    // Wrong credentials are a different identity: refused just the same, with a clear error.
    let impostor = connect_as(&c, Some(b"alice:wrong")).await;
    assert_eq!(raw(&impostor).delete(held.node_path(), None).await, Err(ZkError::NoAuth));
    let err = zk_recipes::request_revocation(&impostor, held.node_path()).await.unwrap_err();
    assert!(
        err.to_string().contains("not authorized") && err.to_string().contains(held.node_path()),
        "{err}"
    );

    // The holder is unaffected.
    assert_eq!(held.current_status(), LockStatus::Held);
    assert!(raw(&alice).get_data(held.node_path()).await.is_ok());
    // Someone without the credentials can't even queue: NoAuth at once, not a hang or a retry loop.
    let outsider = InterProcessMutex::new(&intruder, "/secure/lock").unwrap();
    match within("refused acquire", outsider.acquire()).await {
        Err(Error::NoAuth { path, .. }) => assert!(path.starts_with("/secure/lock"), "{path}"),
        other => panic!("expected NoAuth, got {other:?}"),
    }
    held.release().await.unwrap();
    // The same credentials on another session are the same identity: allowed.
    let alice2 = connect_as(&c, Some(b"alice:secret")).await;
    let again = InterProcessMutex::with_options(
        &alice2,
        "/secure/lock",
        LockOptions::new().acls(Acls::creator_all()),
    )
    .unwrap();
    again.acquire().await.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chroot_lock_and_the_full_path_lock_are_the_same_lock() {
    let zk = standalone().await;
    let c = zk.connect_string();
    let rooted = format!("{c}/app");
    // A missing chroot is reported clearly, or created on request.
    match Session::connect_with(&rooted, &ConnectOptions::new(Duration::from_secs(5))).await {
        Err(Error::ChrootMissing { chroot }) => assert_eq!(chroot, "/app"),
        other => panic!("expected ChrootMissing, got {other:?}"),
    }
    let in_chroot = within(
        "connect",
        Session::connect_with(&rooted, &ConnectOptions::new(Duration::from_secs(5)).create_chroot(true)),
    )
    .await
    .unwrap();
    let plain = session(&c).await;
    let a = InterProcessMutex::new(&in_chroot, "/locks/x").unwrap();
    let b = InterProcessMutex::new(&plain, "/app/locks/x").unwrap();
    let held = a.acquire().await.unwrap();
    assert!(b.try_acquire().await.unwrap().is_none(), "the full-path lock got in beside the chroot lock");
    assert_eq!(children(&raw(&plain), "/app/locks/x").await.len(), 1);
    assert_eq!(b.participants().await.unwrap()[0].node, a.participants().await.unwrap()[0].node);
    held.release().await.unwrap();
    let held = b.acquire().await.unwrap();
    assert!(a.try_acquire().await.unwrap().is_none(), "the chroot lock got in beside the full-path lock");
    held.release().await.unwrap();
}

/// docs/security.md, "Across sessions": the session a `Session` starts after an expiry keeps its
/// digest credentials and its chroot. The lock's directory is creator-only (made in the first
/// session): the second session can queue in it only as alice, and its node lands under the
/// chroot, where a client without the credentials cannot delete it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_the_chroot_are_kept_across_an_expiry() {
    use zk_recipes::ConnectionState;
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let options =
        ConnectOptions::new(Duration::from_secs(2)).auth("digest", b"alice:secret").create_chroot(true);
    let rooted = format!("{}/app", proxy.connect_string());
    let alice = within("connect", Session::connect_with(&rooted, &options)).await.expect("connect");
    let mutex =
        InterProcessMutex::with_options(&alice, "/lock", LockOptions::new().acls(Acls::creator_all()))
            .unwrap();
    mutex.acquire().await.unwrap().release().await.unwrap();

    // The expiry, for real: the proxy goes silent until the session is lost, then heals.
    proxy.blackhole();
    wait_session_state(&alice, ConnectionState::Lost).await;
    proxy.heal();
    assert_eq!(wait_new_generation(&alice, 1).await, 2);

    let held = within("acquire on the new session", mutex.acquire()).await.expect("acquire as alice");
    assert_eq!(held.session_generation(), 2);
    let full = format!("/app{}", held.node_path());
    let admin = connect_as(&zk.connect_string(), Some(b"alice:secret")).await;
    let (_, stat) = raw(&admin).get_data(&full).await.expect("the node, under the chroot");
    assert_eq!(stat.ephemeral_owner, raw(&alice).session_id().0, "the new session's node");
    let intruder = connect_as(&zk.connect_string(), None).await;
    assert_eq!(raw(&intruder).delete(&full, None).await, Err(ZkError::NoAuth));
    held.release().await.unwrap();
    alice.close().await;
}

#[test]
fn credentials_never_reach_debug_output() {
    let options = ConnectOptions::new(Duration::from_secs(5)).auth("digest", b"alice:secret");
    let shown = format!("{options:?}");
    assert!(shown.contains("digest") && !shown.contains("secret") && !shown.contains("alice"), "{shown}");
}
