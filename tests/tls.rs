//! TLS to ZooKeeper's secure client port: locks over TLS, clean failures for the wrong
//! protocol or the wrong CA, mutual TLS with certificate-named ACLs, and keys kept out of logs.

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::zookeeper_client::{Acls, Error as ZkError};
use zk_recipes::{ConnectOptions, Error, InterProcessMutex, LockOptions, LockStatus, Session, TlsConfig};
use zk_testcluster::{ClusterConfig, TlsFiles, TlsMode, ZkCluster, CLIENT_SUBJECT, OTHER_CLIENT_SUBJECT};

async fn tls_cluster(mode: TlsMode) -> ZkCluster {
    init_tracing();
    ZkCluster::start(ClusterConfig { tls: mode, ..ClusterConfig::default() }).await.expect("a TLS cluster")
}

fn files(zk: &ZkCluster) -> &TlsFiles {
    zk.tls_files().expect("a TLS cluster has TLS files")
}

fn secure(zk: &ZkCluster) -> String {
    zk.secure_connect_string().expect("a TLS cluster has secure ports")
}

fn trust(f: &TlsFiles) -> TlsConfig {
    TlsConfig::from_ca_file(&f.ca).expect("the cluster's CA")
}

/// A client of the CA presenting the first (or the other) client certificate.
fn identified(f: &TlsFiles, other: bool) -> TlsConfig {
    let (cert, key) =
        if other { (&f.other_client_cert, &f.other_client_key) } else { (&f.client_cert, &f.client_key) };
    trust(f).with_identity_files(cert, key).expect("a client identity")
}

async fn connect_tls(connect: &str, tls: TlsConfig) -> Result<Session, Error> {
    let options = ConnectOptions::new(Duration::from_secs(2)).tls(tls);
    within("a bounded connect", Session::connect_with(connect, &options)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_over_tls_excludes_a_contender_over_tls() {
    let zk = tls_cluster(TlsMode::ServerAuth).await;
    // The secure port speaks nothing but TLS: a session there is a TLS session.
    let a = connect_tls(&secure(&zk), trust(files(&zk))).await.expect("TLS client a");
    let b = connect_tls(&secure(&zk), trust(files(&zk))).await.expect("TLS client b");
    let (ma, mb) =
        (InterProcessMutex::new(&a, "/tls/lock").unwrap(), InterProcessMutex::new(&b, "/tls/lock").unwrap());

    let held = ma.acquire().await.unwrap();
    assert!(mb.try_acquire().await.unwrap().is_none(), "a TLS contender got a held lock");
    let waiting = tokio::spawn(async move { mb.acquire().await.map(|g| (g, mb)) });
    eventually("the contender queues", || async { ma.participants().await.unwrap().len() == 2 }).await;
    assert!(!waiting.is_finished(), "the contender got in while the lock was held");
    let token = held.fencing_token();
    held.release().await.unwrap();
    let (next, _mb) = within("hand-over", waiting).await.unwrap().expect("the contender's turn");
    assert!(next.fencing_token() > token);
    assert_eq!(next.current_status(), LockStatus::Held);
    next.release().await.unwrap();
}

/// docs/security.md, "Across sessions": the session a `Session` starts after an expiry is a TLS
/// session too (the secure port speaks nothing else), and with mutual TLS it is named by the
/// same certificate: it can queue in the creator-only directory the first session made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_started_after_an_expiry_is_tls_with_the_same_identity() {
    let zk = tls_cluster(TlsMode::Mutual).await;
    let proxy = zk.secure_proxy().expect("a TLS cluster").expect("a proxy");
    let session = connect_tls(&proxy.connect_string(), identified(files(&zk), false)).await.expect("TLS");
    let mutex =
        InterProcessMutex::with_options(&session, "/tls/heal", LockOptions::new().acls(Acls::creator_all()))
            .unwrap();
    mutex.acquire().await.unwrap().release().await.unwrap();
    let before = session.generation();

    proxy.blackhole();
    wait_session_state(&session, zk_recipes::ConnectionState::Lost).await;
    proxy.heal();
    let generation = wait_new_generation(&session, before).await;

    let again = within("acquire after expiry", mutex.acquire()).await.expect("acquire after expiry");
    assert_eq!(again.session_generation(), generation);
    again.release().await.unwrap();
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_protocol_or_the_wrong_ca_fails_cleanly() {
    let zk = tls_cluster(TlsMode::ServerAuth).await;
    // Plaintext to the secure port: the server wants a handshake, the client never gets a
    // session. A typed error after the bounded wait, not a hang or a panic.
    let plain = ConnectOptions::new(Duration::from_secs(2));
    match within("plaintext to TLS", Session::connect_with(&secure(&zk), &plain)).await {
        Err(Error::Connect { connect, .. }) => assert_eq!(connect, secure(&zk)),
        other => panic!("a plaintext client reached the secure port: {other:?}"),
    }
    // TLS to the plaintext port.
    match connect_tls(&zk.connect_string(), trust(files(&zk))).await {
        Err(Error::Connect { .. }) => {}
        other => panic!("a TLS client reached the plaintext port: {other:?}"),
    }
    // A CA that did not sign the server's certificate.
    let rogue = TlsConfig::from_ca_file(&files(&zk).rogue_ca).unwrap();
    match connect_tls(&secure(&zk), rogue).await {
        Err(Error::Connect { .. }) => {}
        other => panic!("a server certificate from another CA was accepted: {other:?}"),
    }
    // A name the certificate cannot be checked against is refused before anything is sent.
    let port = secure(&zk).rsplit(':').next().unwrap().to_string();
    match connect_tls(&format!("not_a_host!:{port}"), trust(files(&zk))).await {
        Err(Error::Tls { reason }) => assert!(reason.contains("not_a_host!"), "{reason}"),
        other => panic!("expected a TLS name error, got {other:?}"),
    }
    // And the plaintext port still serves plaintext clients: the failures above broke nothing.
    let c = client(&zk.connect_string()).await;
    assert!(c.check_stat("/").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_names_the_client_by_its_certificate_for_creator_only_locks() {
    let zk = tls_cluster(TlsMode::Mutual).await;
    // No certificate: the server ends the handshake.
    match connect_tls(&secure(&zk), trust(files(&zk))).await {
        Err(Error::Connect { .. }) => {}
        other => panic!("a client without a certificate got a session under ssl.clientAuth=need: {other:?}"),
    }
    let alice = connect_tls(&secure(&zk), identified(files(&zk), false)).await.expect("client certificate");
    let mutex =
        InterProcessMutex::with_options(&alice, "/mtls/lock", LockOptions::new().acls(Acls::creator_all()))
            .unwrap();
    let held = mutex.acquire().await.unwrap();

    // Creator-only means "the certificate's subject": ZooKeeper's x509 provider put it in the ACL.
    let admin = connect_tls(&secure(&zk), identified(files(&zk), false)).await.unwrap();
    let (acl, _) = raw(&admin).get_acl(held.node_path()).await.unwrap();
    assert_eq!(acl.len(), 1, "{acl:?}");
    assert_eq!((acl[0].scheme(), acl[0].id()), ("x509", CLIENT_SUBJECT));

    // Another certificate from the same CA is another identity: refused, with the path.
    let other = connect_tls(&secure(&zk), identified(files(&zk), true)).await.expect("other certificate");
    assert_eq!(raw(&other).delete(held.node_path(), None).await, Err(ZkError::NoAuth));
    match zk_recipes::request_revocation(&other, held.node_path()).await {
        Err(Error::NoAuth { path, .. }) => assert_eq!(path, held.node_path()),
        other => panic!("{OTHER_CLIENT_SUBJECT} could ask for revocation: {other:?}"),
    }
    assert_eq!(held.current_status(), LockStatus::Held);
    held.release().await.unwrap();
    // The same certificate on another session is the same identity: it may take the lock.
    let again =
        InterProcessMutex::with_options(&admin, "/mtls/lock", LockOptions::new().acls(Acls::creator_all()))
            .unwrap();
    again.acquire().await.unwrap().release().await.unwrap();
}

#[test]
fn unusable_ca_files_are_typed_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "no certificate here\n").unwrap();
    match TlsConfig::from_ca_file(&ca) {
        Err(Error::Tls { reason }) => assert!(reason.contains("ca.pem"), "{reason}"),
        other => panic!("an empty CA file was accepted: {other:?}"),
    }
    match TlsConfig::from_ca_file(dir.path().join("missing.pem")) {
        Err(Error::Tls { reason }) => assert!(reason.contains("missing.pem"), "{reason}"),
        other => panic!("a missing CA file was accepted: {other:?}"),
    }
}

#[test]
fn a_client_key_never_reaches_debug_output() {
    // Real material from the harness (no server needed): a CA, a certificate and its key.
    let dir = tempfile::tempdir().unwrap();
    let f = &TlsFiles::generate(dir.path()).unwrap();
    let key = TlsFiles::read(&f.client_key).unwrap();
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    let tls = identified(f, false);
    let shown = format!("{tls:?} {:?}", ConnectOptions::new(Duration::from_secs(1)).tls(tls.clone()));
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    for chunk in body.as_bytes().chunks(16) {
        assert!(!shown.contains(std::str::from_utf8(chunk).unwrap()), "key material in {shown}");
    }
    assert!(shown.contains("key redacted"), "{shown}");
    // A certificate file given as the key is an error naming the file, not a panic.
    match trust(f).with_identity_files(&f.client_cert, &f.client_cert) {
        Err(Error::Tls { reason }) => assert!(reason.contains("client.pem"), "{reason}"),
        other => panic!("a certificate was taken for a key: {other:?}"),
    }
}

/// Following the ensemble relays the connections: with TLS the relay would stand between the
/// client and the server's certificate, so connecting refuses the pair at once, naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_the_ensemble_over_tls_is_a_typed_error() {
    let zk = tls_cluster(TlsMode::ServerAuth).await;
    let options = ConnectOptions::new(Duration::from_secs(2)).tls(trust(files(&zk))).follow_ensemble(true);
    match within("a bounded connect", Session::connect_with(&secure(&zk), &options)).await {
        Err(Error::Tls { reason }) => assert!(reason.contains("follow_ensemble"), "{reason}"),
        other => panic!("following the ensemble over TLS was accepted: {other:?}"),
    }
}
