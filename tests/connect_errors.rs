//! Connecting fails with an error that says why, naming the addresses and what to check:
//! a host name that can't be resolved (`Error::Resolve`); nothing listening,
//! something that is not a ZooKeeper client port, nothing answering (`Error::Connect` with its
//! `ConnectFailure`); a session timeout ZooKeeper cannot be asked for, and
//! the one the server granted instead of the one asked for.

mod common;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tracing::instrument::WithSubscriber as _;
use zk_recipes::{ConnectFailure, ConnectOptions, Error, Probe, Session};
use zk_testcluster::ClusterConfig;

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

/// A loopback address that nothing listens on (a port we bound, then closed).
fn closed_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address")
}

/// Asserts that nobody connected to `listener` (a refusal came before anything was sent).
fn assert_nothing_connected(listener: &TcpListener) {
    listener.set_nonblocking(true).unwrap();
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "nothing should have connected: {accepted:?}"
    );
}

/// A loopback listener that is never accepted from: the kernel completes each connection (it
/// waits in the backlog), and nothing is ever written back. A server that is not ZooKeeper, or
/// a ZooKeeper that does not answer.
fn silent_listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a listener");
    let address = listener.local_addr().expect("its address");
    (listener, address)
}

/// A loopback listener that answers every connection with an HTTP error and closes it: another
/// service on the port. Stopped when dropped.
struct GarbageServer {
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl GarbageServer {
    async fn start() -> GarbageServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a listener");
        let address = listener.local_addr().expect("its address");
        let task = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut stream, _)) = listener.accept().await {
                let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await;
                let _ = stream.shutdown().await;
            }
        });
        GarbageServer { address, task }
    }
}

impl Drop for GarbageServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A loopback address that drops every connection attempt, as a firewall that drops packets
/// does: a listener with a backlog of 0, filled by one connection that is never accepted, so
/// the kernel drops every further SYN. Kept alive by the returned value.
async fn blackhole() -> (impl Sized, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
    let listener = socket.listen(0).expect("listen with a backlog of 0");
    let address = listener.local_addr().expect("its address");
    let filler = TcpStream::connect(address).expect("the one connection the backlog holds");
    // The precondition: a further connection gets no answer at all (neither accepted nor refused).
    let probe = TcpStream::connect_timeout(&address, Duration::from_millis(200));
    assert!(
        matches!(&probe, Err(e) if e.kind() == std::io::ErrorKind::TimedOut),
        "the full backlog should drop connections: {probe:?}"
    );
    ((listener, filler), address)
}

/// The reason, the probes and the message of a failed connect.
fn connect_failure(result: Result<Session, Error>) -> (ConnectFailure, Vec<(SocketAddr, Probe)>, String) {
    match result {
        Err(err @ Error::Connect { .. }) => {
            let message = err.to_string();
            let Error::Connect { reason, probes, .. } = err else { unreachable!() };
            assert_eq!(message.lines().count(), 1, "one line: {message}");
            (reason, probes, message)
        }
        Err(other) => panic!("expected Error::Connect, got {other:?} ({other})"),
        Ok(_) => panic!("connected"),
    }
}

/// Backs "nothing listening is reported as refused, naming the address and what to check"
/// (it said only `timeout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_reported_as_refused() {
    init_tracing();
    let address = closed_address();
    let (reason, probes, message) = connect_failure(connect(&address.to_string()).await);
    assert_eq!(reason, ConnectFailure::Refused, "{message}");
    assert_eq!(probes, vec![(address, Probe::Refused)]);
    assert!(message.starts_with(&format!("cannot connect to ZooKeeper at \"{address}\": ")), "{message}");
    assert!(message.contains(&format!("{address} refused the connection")), "{message}");
    assert!(message.contains("is ZooKeeper running there"), "{message}");
}

/// Backs "a port that accepts connections but starts no ZooKeeper session is reported as such":
/// a listener that never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_never_answers_started_no_session() {
    init_tracing();
    let (_listener, address) = silent_listener();
    let (reason, probes, message) = connect_failure(connect(&address.to_string()).await);
    assert_eq!(reason, ConnectFailure::NoSession, "{message}");
    assert_eq!(probes, vec![(address, Probe::Accepted)]);
    assert!(
        message.contains(&format!("{address} accepted the connection but started no ZooKeeper session")),
        "{message}"
    );
    assert!(message.contains("is that ZooKeeper's client port"), "{message}");
}

/// The same for another service on the port: it answers, but not as ZooKeeper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_answers_garbage_started_no_session() {
    init_tracing();
    let server = GarbageServer::start().await;
    let (reason, probes, message) = connect_failure(connect(&server.address.to_string()).await);
    assert_eq!(reason, ConnectFailure::NoSession, "{message}");
    assert_eq!(probes, vec![(server.address, Probe::Accepted)]);
    assert!(message.contains("is that ZooKeeper's client port"), "{message}");
}

/// Backs "an address that answers nothing is reported as such", and the bound on the connect
/// wait: only the wait's end stops this connect (no refusal, no connection), and it ends in the
/// documented error, classified in the part of the wait kept for it, not in a hang (the
/// `within` guard) or another error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_answers_nothing_is_reported_as_no_answer() {
    init_tracing();
    let (_blackhole, address) = blackhole().await;
    let (reason, probes, message) = connect_failure(connect(&address.to_string()).await);
    assert_eq!(reason, ConnectFailure::NoAnswer, "{message}");
    assert_eq!(probes, vec![(address, Probe::NoAnswer)]);
    assert!(message.contains(&format!("{address} did not answer")), "{message}");
    assert!(message.contains("firewall"), "{message}");
}

/// Each address of an ensemble is probed and named; one that accepts connections decides the
/// reason (it is the server to look at).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_names_what_each_address_did() {
    init_tracing();
    let refused = closed_address();
    let (_listener, silent) = silent_listener();
    let (_blackhole, dropped) = blackhole().await;
    let ensemble = format!("{refused},{silent},{dropped}");
    let (reason, probes, message) = connect_failure(connect(&ensemble).await);
    assert_eq!(reason, ConnectFailure::NoSession, "{message}");
    assert_eq!(
        probes,
        vec![(refused, Probe::Refused), (silent, Probe::Accepted), (dropped, Probe::NoAnswer)]
    );
    for said in [
        format!("{refused} refused the connection"),
        format!("{silent} accepted the connection but started no ZooKeeper session"),
        format!("{dropped} did not answer"),
    ] {
        assert!(message.contains(&said), "{said:?} in {message}");
    }
    // Without the one that accepts, nothing answered.
    let (reason, probes, message) = connect_failure(connect(&format!("{refused},{dropped}")).await);
    assert_eq!(reason, ConnectFailure::NoAnswer, "{message}");
    assert_eq!(probes, vec![(refused, Probe::Refused), (dropped, Probe::NoAnswer)]);
}

/// A connect string the client cannot read is reported as such, at once (nothing to probe).
#[tokio::test]
async fn a_connect_string_the_client_cannot_read_is_reported_as_such() {
    init_tracing();
    for bad in ["127.0.0.1:x", "127.0.0.1:0", ""] {
        let (reason, probes, message) = connect_failure(connect(bad).await);
        assert_eq!(reason, ConnectFailure::BadConnectString, "{bad:?}: {message}");
        assert!(probes.is_empty());
        assert!(message.contains("the connect string cannot be read"), "{message}");
    }
}

/// Backs "connect does not give up at the first refusal": a server restarted while we connect
/// (it refuses connections until it is back) gives a session within the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_keeps_trying_while_a_restarting_server_refuses() {
    let mut zk = standalone().await;
    zk.stop(0).await.expect("stop the server");
    let connect = zk.connect_string();
    let connecting = tokio::spawn(async move { Session::connect(&connect, Duration::from_secs(40)).await });
    zk.restart(0).await.expect("start the server again");
    let session = within("a session once the server is back", connecting).await.expect("the task");
    let session = session.expect("a session once the server is back");
    raw(&session).list_children("/").await.expect("a working session");
    session.close().await;
}

/// Backs "a session timeout under 1 ms or over i32::MAX ms is refused before anything is sent"
/// (zero became the client crate's default of 6 s).
#[tokio::test]
async fn a_session_timeout_zookeeper_cannot_take_is_refused_before_connecting() {
    init_tracing();
    let (listener, address) = silent_listener();
    let too_long = Duration::from_millis(i32::MAX as u64) + Duration::from_millis(1);
    for requested in [Duration::ZERO, Duration::from_micros(999), too_long, Duration::MAX] {
        match within("a refused timeout", Session::connect(&address.to_string(), requested)).await {
            Err(err @ Error::InvalidSessionTimeout { .. }) => {
                let message = err.to_string();
                assert!(matches!(err, Error::InvalidSessionTimeout { requested: r } if r == requested));
                assert!(
                    message.contains("invalid session timeout") && message.contains("2147483647 ms"),
                    "{message}"
                );
            }
            other => panic!("{requested:?} was not refused: {other:?}"),
        }
    }
    assert_nothing_connected(&listener);
}

/// Backs "a beat period outside a twentieth to three twentieths of the timeout is refused before
/// anything is sent" (`ConnectOptions::beat_period`).
#[tokio::test]
async fn a_beat_period_outside_a_twentieth_to_three_twentieths_is_refused_before_connecting() {
    init_tracing();
    let (listener, address) = silent_listener();
    for fraction in [0.0, 0.049, 0.151, 0.2, 1.0, -0.1, f64::NAN, f64::INFINITY] {
        let options = ConnectOptions::new(Duration::from_secs(4)).beat_period(fraction);
        match within("a refused period", Session::connect_with(&address.to_string(), &options)).await {
            Err(err @ Error::InvalidBeatPeriod { .. }) => {
                let message = err.to_string();
                let asked = |f: f64| f.to_bits() == fraction.to_bits();
                assert!(matches!(err, Error::InvalidBeatPeriod { fraction: f } if asked(f)), "{message}");
                assert!(message.contains("invalid beat period") && message.contains("0.15"), "{message}");
            }
            other => panic!("{fraction} was not refused: {other:?}"),
        }
    }
    assert_nothing_connected(&listener);
}

/// A writer for a test's own `tracing` subscriber: everything logged, as text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        let logs = self.clone();
        tracing_subscriber::fmt().with_ansi(false).with_writer(move || logs.clone()).finish()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Backs "the server bounds the session timeout; both values are visible and a warning names
/// them": the harness's servers grant 2 to `max_session_timeout` ticks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_timeout_the_server_bounds_is_reported() {
    let zk = standalone().await;
    let config = ClusterConfig::default();
    let min = config.tick_time * 2;
    let cases = [
        (Duration::from_millis(100), min),
        (Duration::from_millis(1), min),
        (Duration::from_millis(i32::MAX as u64), config.max_session_timeout),
    ];
    for (requested, granted) in cases {
        let logs = Logs::default();
        let session = within(
            "connect",
            Session::connect(&zk.connect_string(), requested).with_subscriber(logs.subscriber()),
        )
        .await
        .expect("a session");
        assert_eq!(session.requested_session_timeout(), requested);
        assert_eq!(session.session_timeout(), granted);
        let logged = logs.text();
        let warning =
            logged.lines().find(|line| line.contains("WARN") && line.contains("bounded the session timeout"));
        let warning = warning.unwrap_or_else(|| panic!("no warning for {requested:?}: {logged}"));
        assert!(warning.contains(&format!("requested={requested:?}")), "{warning}");
        assert!(warning.contains(&format!("negotiated={granted:?}")), "{warning}");
        session.close().await;
    }
    // A timeout within the server's bounds is granted as asked, without a warning.
    let logs = Logs::default();
    let requested = min * 3;
    let session = within(
        "connect",
        Session::connect(&zk.connect_string(), requested).with_subscriber(logs.subscriber()),
    )
    .await
    .expect("a session");
    assert_eq!((session.requested_session_timeout(), session.session_timeout()), (requested, requested));
    assert!(!logs.text().contains("bounded the session timeout"), "{}", logs.text());
    session.close().await;
}
