//! Connecting to a host name that can't be resolved says so (`Error::Resolve`), instead of
//! retrying until the connect wait ends and reporting a timeout (issue 15, item 7).

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::Error;
use zk_recipes::Session;

/// The one place that connects, so that a change of the connect API is a one-line change.
async fn connect(connect: &str) -> Result<Session, Error> {
    within("a bounded connect", Session::connect(connect, Duration::from_secs(2))).await
}

/// A loopback port that nothing listens on (nothing is ever sent to it: the host has no address).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

fn assert_unresolved(result: Result<Session, Error>, want_host: &str) {
    match result {
        Err(err @ Error::Resolve { .. }) => {
            let message = err.to_string();
            let Error::Resolve { host, .. } = err else { unreachable!() };
            assert_eq!(host, want_host);
            assert!(message.contains("could not be resolved"), "{message}");
            assert!(!message.contains("timed out"), "{message}");
        }
        Err(other) => panic!("expected Error::Resolve for {want_host:?}, got {other:?} ({other})"),
        Ok(_) => panic!("connected to {want_host:?}"),
    }
}

/// Backs the claim "an unresolvable host name is reported as such, not as a timeout".
#[tokio::test]
async fn a_host_name_that_does_not_resolve_is_reported_as_unresolved() {
    init_tracing();
    let port = free_port();
    assert_unresolved(connect(&format!("not a host:{port}")).await, "not a host");
    // `.invalid` never resolves (RFC 2606).
    assert_unresolved(connect(&format!("zk-recipes-test.invalid:{port}")).await, "zk-recipes-test.invalid");
    // With a chroot and the client crate's prefix, the host is still the one reported.
    assert_unresolved(
        connect(&format!("tcp://zk-recipes-test.invalid:{port}/app")).await,
        "zk-recipes-test.invalid",
    );
}

/// Every host of an ensemble is checked: the error names the first one when none resolves.
#[tokio::test]
async fn an_ensemble_of_unresolvable_hosts_names_the_first() {
    init_tracing();
    let (a, b) = (free_port(), free_port());
    assert_unresolved(connect(&format!("first.invalid:{a},second.invalid:{b}")).await, "first.invalid");
}

/// As ZooKeeper's own client: one unresolvable host in an ensemble whose other host is up does
/// not stop the connect (the documented outcome; a warning is logged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_connects_while_one_of_its_hosts_resolves() {
    let zk = standalone().await;
    let port = free_port();
    let ensemble = format!("zk-recipes-test.invalid:{port},{}", zk.connect_string());
    let client = connect(&ensemble).await.expect("the resolvable server is used");
    client.client().expect("a client").list_children("/").await.expect("a working session");
}
