//! SASL GSSAPI (Kerberos) against a real MIT KDC and servers that require SASL.
//!
//! Kerberos' client configuration is process-wide (`KRB5_CONFIG`, `KRB5CCNAME`,
//! `KRB5_CLIENT_KTNAME`), so the cases run one after another in one test, each with the
//! environment it needs.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{raw, within};
use zk_recipes::zookeeper_client::{Acls, Error as ZkError};
use zk_recipes::{
    ConnectOptions, ConnectionState, Error, InterProcessMutex, LatchOptions, LeaderLatch, LockOptions,
    SaslConfig, Session,
};
use zk_testcluster::{ClusterConfig, Kdc, KdcConfig, ZkCluster, KERBEROS_REALM};

/// Tickets live this long: the test waits past it to see them renewed from the keytab.
const TICKET_LIFE: Duration = Duration::from_secs(20);

/// Points this process's Kerberos at `kdc`, as the keys in `keytab`, with a fresh cache.
fn kerberos_env(kdc: &Kdc, keytab: &Path, cache: &str) {
    for (key, value) in kdc.client_env(keytab, cache) {
        std::env::set_var(key, value);
    }
}

fn gssapi(timeout: Duration) -> ConnectOptions {
    ConnectOptions::new(timeout).sasl(SaslConfig::gssapi())
}

async fn refused(connect: &str, options: ConnectOptions) -> String {
    match within("a refusal", Session::connect_with(connect, &options)).await {
        Err(Error::AuthFailed { mechanism, reason, .. }) => {
            assert_eq!(mechanism, "GSSAPI", "{reason}");
            reason
        }
        Err(other) => panic!("expected AuthFailed, got {other:?}"),
        Ok(_) => panic!("a GSSAPI session connected without valid Kerberos credentials"),
    }
}

async fn acl_ids(session: &Session, path: &str) -> Vec<String> {
    let (acls, _) = raw(session).get_acl(path).await.expect("get_acl");
    acls.iter().map(|acl| format!("{}:{}", acl.scheme(), acl.id())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kerberos_sessions_lock_lead_heal_and_bad_credentials_are_refused_typed() {
    common::init_tracing();
    let config = KdcConfig { max_life: TICKET_LIFE, ..KdcConfig::default() };
    let mut kdc = Kdc::start_with(config).await.expect("start a KDC");
    let sasl = kdc.zookeeper_service("127.0.0.1").expect("service principal");
    let zk =
        ZkCluster::start(ClusterConfig { sasl, ..ClusterConfig::default() }).await.expect("start ZooKeeper");
    let c = zk.connect_string();
    let alice = kdc.principal("alice").unwrap();
    let bob = kdc.principal("bob").unwrap();
    let alice_id = format!("sasl:alice@{KERBEROS_REALM}");

    // Connect, lock and lead as alice; the nodes carry her principal.
    kerberos_env(&kdc, &alice, "alice-1");
    let session =
        within("connect", Session::connect_with(&c, &gssapi(Duration::from_secs(10)))).await.unwrap();
    let mine = LockOptions::new().acls(Acls::creator_all());
    let mutex = InterProcessMutex::with_options(&session, "/krb/lock", mine).unwrap();
    let held = within("acquire", mutex.acquire()).await.expect("acquire");
    assert_eq!(acl_ids(&session, held.node_path()).await, std::slice::from_ref(&alice_id));
    let latch =
        LeaderLatch::with_options(&session, "/krb/leader", LatchOptions::new().acls(Acls::creator_all()))
            .unwrap();
    latch.start().unwrap();
    within("leadership", latch.await_leadership()).await.expect("leadership");
    latch.close().await;

    // Bob is another identity: he can't delete alice's node, and gets a typed NoAuth naming
    // the path when he tries to queue.
    kerberos_env(&kdc, &bob, "bob-1");
    let other =
        within("connect bob", Session::connect_with(&c, &gssapi(Duration::from_secs(10)))).await.unwrap();
    assert_eq!(raw(&other).delete(held.node_path(), None).await, Err(ZkError::NoAuth));
    match within("refused acquire", InterProcessMutex::new(&other, "/krb/lock").unwrap().acquire()).await {
        Err(Error::NoAuth { path, .. }) => assert!(path.starts_with("/krb/lock"), "{path}"),
        other => panic!("bob queued on alice's creator-only lock: {other:?}"),
    }
    held.release().await.unwrap();
    other.close().await;

    // Refusals, typed and within the connect wait: no Kerberos identity at all, a principal
    // the KDC does not know, a service principal it does not know, no SASL.
    let short = Duration::from_secs(4);
    kerberos_env(&kdc, Path::new("/nonexistent/zk-recipes.keytab"), "nobody");
    let reason = refused(&c, gssapi(short)).await;
    assert!(reason.contains("credentials") && reason.contains("/nonexistent/zk-recipes.keytab"), "{reason}");
    let gone = kdc.principal("mallory").unwrap();
    kdc.delete_principal("mallory").unwrap();
    kerberos_env(&kdc, &gone, "mallory");
    let reason = refused(&c, gssapi(short)).await;
    assert!(reason.contains("mallory") && reason.contains("not found"), "{reason}");
    kerberos_env(&kdc, &alice, "carol");
    let reason = refused(&c, ConnectOptions::new(short).sasl(SaslConfig::gssapi().principal("carol"))).await;
    assert!(reason.contains("carol"), "{reason}");
    kerberos_env(&kdc, &alice, "alice-2");
    let wrong_host = ConnectOptions::new(short).sasl(SaslConfig::gssapi().service_host("elsewhere"));
    let reason = refused(&c, wrong_host).await;
    assert!(reason.contains("zookeeper@elsewhere"), "{reason}");
    match within("no SASL", Session::connect_with(&c, &ConnectOptions::new(short))).await {
        Err(Error::AuthFailed { mechanism, .. }) => assert_eq!(mechanism, "none"),
        other => panic!("expected AuthFailed, got {:?}", other.map(|_| "a session")),
    }

    // Tickets expire while the session runs; an expiry after that heals with a new handshake,
    // whose tickets MIT Kerberos gets afresh from the keytab (KRB5_CLIENT_KTNAME).
    let proxy = zk.proxy().unwrap();
    kerberos_env(&kdc, &alice, "alice-3");
    let healing =
        within("connect", Session::connect_with(&proxy.connect_string(), &gssapi(Duration::from_secs(2))))
            .await
            .unwrap();
    let before = healing.generation();
    tokio::time::sleep(TICKET_LIFE + Duration::from_secs(2)).await;
    proxy.blackhole();
    common::wait_session_state(&healing, ConnectionState::Lost).await;
    proxy.heal();
    common::wait_new_generation(&healing, before).await;
    let mutex =
        InterProcessMutex::with_options(&healing, "/krb/heal", LockOptions::new().acls(Acls::creator_all()))
            .unwrap();
    let again = within("acquire after expiry", mutex.acquire()).await.expect("acquire after expiry");
    assert_eq!(acl_ids(&healing, again.node_path()).await, [alice_id]);
    again.release().await.unwrap();
    healing.close().await;
    session.close().await;

    // With a credential cache alone (a `kinit` by hand, no client keytab), nothing renews the
    // ticket: after it expired, a session that expires does not heal (each new handshake is
    // refused) until the cache holds a valid ticket again.
    let cache = alice.with_extension("ccache");
    std::env::set_var("KRB5_CLIENT_KTNAME", "/nonexistent/no-client-keytab");
    std::env::set_var("KRB5CCNAME", format!("FILE:{}", cache.display()));
    kinit(&kdc, &alice);
    let cached =
        within("connect", Session::connect_with(&proxy.connect_string(), &gssapi(Duration::from_secs(2))))
            .await
            .unwrap();
    let before = cached.generation();
    tokio::time::sleep(TICKET_LIFE + Duration::from_secs(2)).await;
    proxy.blackhole();
    common::wait_session_state(&cached, ConnectionState::Lost).await;
    proxy.heal();
    // Several of the session's attempts (50 ms backoff, doubling) fit in this; none may succeed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = *cached.states().borrow();
    assert!(!(now.generation > before && now.state.is_connected()), "healed on an expired ticket: {now:?}");
    kinit(&kdc, &alice);
    common::wait_new_generation(&cached, before).await;
    cached.close().await;

    // No KDC: a new session can't get a ticket (fresh cache), typed.
    kdc.stop();
    kerberos_env_after_stop("alice-4");
    let reason = refused(&c, gssapi(short)).await;
    assert!(reason.contains("ticket") || reason.contains("KDC"), "{reason}");
}

/// `kinit -k -t keytab alice` into the cache `KRB5CCNAME` names (another process: a file cache).
fn kinit(kdc: &Kdc, keytab: &Path) {
    let status = std::process::Command::new("kinit")
        .arg("-k")
        .arg("-t")
        .arg(keytab)
        .arg("alice")
        .env("KRB5_CONFIG", kdc.krb5_conf())
        .status()
        .expect("kinit runs");
    assert!(status.success(), "kinit: {status}");
}

/// A fresh, empty credential cache, the rest of the environment kept.
fn kerberos_env_after_stop(cache: &str) {
    std::env::set_var("KRB5CCNAME", format!("MEMORY:{cache}"));
}

/// A session that follows the ensemble dials its loopback relay, and GSSAPI would ask for the
/// relay's principal: without `SaslConfig::service_host` it is refused at once, typed, before
/// any Kerberos call (so this needs no KDC and sets no Kerberos environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_the_ensemble_with_gssapi_needs_the_service_host() {
    let zk = ZkCluster::standalone().await.unwrap();
    let options = gssapi(Duration::from_secs(4)).follow_ensemble(true);
    let reason = refused(&zk.connect_string(), options).await;
    assert!(reason.contains("SaslConfig::service_host"), "{reason}");
}
