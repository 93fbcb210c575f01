//! Connecting with typed errors, a bounded wait, credentials and chroot handling.

use std::net::SocketAddr;
use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use super::features::FeatureCache;
use super::options::{check_beat_period, check_session_timeout, ConnectOptions};
use crate::error::{classify, ConnectFailure, Error, Probe, Result};

/// Each server of `connect` as `host:port` (`[v6]:port`), as the client crate reads them: what
/// a relay starts with (see `relay.rs`).
pub(crate) fn server_list(connect: &str) -> Vec<String> {
    let (servers, _) = split_chroot(connect);
    servers
        .split(',')
        .filter_map(host_port)
        .map(
            |(host, port)| {
                if host.contains(':') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                }
            },
        )
        .collect()
}

/// Every address the hosts of `connect` resolve to now (hosts that do not resolve are left out).
/// Blocking: it asks the system resolver.
pub(crate) fn server_addresses(connect: &str) -> Vec<SocketAddr> {
    use std::net::ToSocketAddrs;
    let (servers, _) = split_chroot(connect);
    servers
        .split(',')
        .filter_map(host_port)
        .filter_map(|(host, port)| (host.as_str(), port).to_socket_addrs().ok())
        .flatten()
        .collect()
}

/// Opens one raw client with [`ConnectOptions`]: credentials, TLS, and a chroot that is checked
/// (or created). A [`crate::Session`] calls this for its first session and after every expiry.
/// With the client, what connecting learned of the server (a SASL session's `whoami` check).
///
/// It gives up after [`connect_wait`], everything included; then each address is probed to say
/// why ([`ConnectFailure`]). A server that speaks the other protocol (plaintext where TLS is
/// configured, or the reverse) never completes a handshake, nor does one whose certificate the
/// configured CA did not sign or that does not name the host: that is an [`Error::Connect`]
/// after the wait, as for a server that does not answer.
///
/// # Errors
/// [`Error::InvalidSessionTimeout`] and [`Error::InvalidBeatPeriod`] at once;
/// [`Error::Resolve`] when no host of `connect` resolves to an address (at once, not after the
/// wait); [`Error::Connect`]; [`Error::Tls`] for
/// a server name no certificate can be checked against; [`Error::ChrootMissing`] when the chroot
/// does not exist and `create_chroot` is off; [`Error::NoAuth`] when creating the chroot is
/// refused; [`Error::Timeout`] when the chroot check is not answered within the wait.
///
/// # Cancel safety
/// Cancel-safe: dropping the future abandons the attempt.
///
/// `relay`: the address the client crate connects to instead of the servers, when the session
/// follows the ensemble (`relay.rs`); the servers are still the ones probed after a failure.
pub(crate) async fn open_client(
    connect: &str,
    relay: Option<SocketAddr>,
    options: &ConnectOptions,
) -> Result<(Client, FeatureCache)> {
    check_session_timeout(options.session_timeout)?;
    check_beat_period(options.beat_period)?;
    let wait = connect_wait(options.session_timeout);
    let deadline = tokio::time::Instant::now() + wait;
    let (servers, chroot) = split_chroot(connect);
    let dial = relay.map(|address| address.to_string());
    let client = open(servers, dial.as_deref(), options, connect, deadline, wait).await?;
    let features = FeatureCache::default();
    #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
    if let Some(sasl) = &options.sasl {
        super::sasl::check_identity(&client, sasl, connect, deadline, wait, &features).await?;
    }
    let Some(chroot) = chroot else { return Ok((client, features)) };
    let check = async {
        match client.check_stat(chroot).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) if options.create_chroot => client
                .mkdir(chroot, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
                .await
                .map_err(Error::zk("create chroot", chroot)),
            Ok(None) => Err(Error::ChrootMissing { chroot: chroot.to_string() }),
            Err(e) => Err(Error::from_zk("check chroot", chroot, e)),
        }
    };
    tokio::time::timeout_at(deadline, check).await.map_err(|_| Error::Timeout(wait))??;
    let client = client.chroot(chroot).map_err(|_| Error::InvalidPath {
        path: chroot.to_string(),
        reason: crate::error::PathError::NotAbsolute,
    })?;
    Ok((client, features))
}

/// Splits `host:port,host:port/chroot` into the servers and the chroot (`None` for none or
/// `/`). The chroot follows the last address, after any `tcp://` or `tcp+tls://` prefix.
fn split_chroot(connect: &str) -> (&str, Option<&str>) {
    let last = connect.rfind(',').map_or(0, |comma| comma + 1);
    let address = &connect[last..];
    let skip = ["tcp://", "tcp+tls://"].iter().find(|p| address.starts_with(**p)).map_or(0, |p| p.len());
    match address[skip..].find('/').map(|at| last + skip + at) {
        Some(at) if at + 1 < connect.len() => (&connect[..at], Some(&connect[at..])),
        Some(at) => (&connect[..at], None),
        None => (connect, None),
    }
}

/// The shortest wait for a session, whatever the session timeout (see [`connect_wait`]).
const MIN_CONNECT_WAIT: Duration = Duration::from_secs(2);
/// The longest part of the wait kept for probing the addresses after the attempts failed.
const MAX_PROBE_TIME: Duration = Duration::from_secs(2);

/// How long connecting goes on before it gives up: the session timeout, at least 2 s. Everything
/// (resolving the hosts, the attempts, the chroot check, probing the addresses after a failure)
/// fits in it.
pub(crate) fn connect_wait(session_timeout: Duration) -> Duration {
    session_timeout.max(MIN_CONNECT_WAIT)
}

/// The part of a connect wait kept to probe the addresses: its last fifth, at most 2 s.
fn probe_time(wait: Duration) -> Duration {
    (wait / 5).min(MAX_PROBE_TIME)
}

/// Starts a session on one of `servers` by `deadline`, the end of a wait of `wait` (see
/// [`open_client`]): the connector and the addresses first, then the client crate's attempts,
/// and when none starts a session, the addresses probed to say why.
async fn open(
    servers: &str,
    dial: Option<&str>,
    options: &ConnectOptions,
    shown: &str,
    deadline: tokio::time::Instant,
    wait: Duration,
) -> Result<Client> {
    let started = std::time::Instant::now();
    // The last part of the wait is kept to probe the addresses, so that even an address that
    // drops every packet is classified before the deadline.
    let attempts_end = deadline - probe_time(wait);
    let (connector, secure) = connector(servers, dial, options, shown, attempts_end, wait).await?;
    let addresses = resolve_by(servers, shown, attempts_end, wait).await?;
    // Through a relay the client crate reads only the relay's address: the connect string is
    // checked here as it would have checked it.
    if dial.is_some() && !servers.split(',').all(|server| host_port(server).is_some()) {
        let source = ZkError::BadArguments(&"invalid connect string");
        return Err(bad_connect_string(shown, started, source));
    }
    let attempts = Attempts { connector, secure, servers: dial.unwrap_or(servers), end: attempts_end };
    match attempts.run().await {
        Ok(client) => Ok(client),
        Err(Failed::BadConnectString(source)) => Err(bad_connect_string(shown, started, source)),
        Err(Failed::Refused) => Err(options.refused(shown)),
        Err(Failed::NoSession(last)) => Err(unreachable(addresses, deadline, shown, started, last).await),
    }
}

/// [`resolve_any`] by `attempts_end`: [`Error::Resolve`] when the system resolver has not
/// answered by then.
async fn resolve_by(
    servers: &str,
    shown: &str,
    attempts_end: tokio::time::Instant,
    wait: Duration,
) -> Result<Vec<SocketAddr>> {
    match tokio::time::timeout_at(attempts_end, resolve_any(servers, shown)).await {
        Ok(addresses) => addresses,
        Err(_) => Err(Error::Resolve {
            connect: shown.to_string(),
            host: servers.to_string(),
            reason: format!("the system resolver gave no answer within the connect wait ({wait:?})"),
        }),
    }
}

/// The client crate's attempts to start a session on `servers` (the relay's address for a
/// session that follows the ensemble), up to `end`.
struct Attempts<'a> {
    connector: zookeeper_client::Connector,
    /// Whether to connect on the secure port (TLS).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    secure: bool,
    servers: &'a str,
    end: tokio::time::Instant,
}

/// Why [`Attempts::run`] started no session.
enum Failed {
    /// The client crate cannot read the connect string.
    BadConnectString(ZkError),
    /// Terminal for the client crate (it tries no other server): the servers refused the SASL
    /// exchange, or require SASL from a session without it.
    Refused,
    /// The attempts ran out of time or met another error; the last error they met.
    NoSession(ZkError),
}

impl Attempts<'_> {
    /// Asks the client crate for a session until `end`. The client crate tries every server in
    /// turn, with backoff, until its own deadline (about the session timeout) and reports only
    /// `Timeout`: that is the one outcome tried again. Any other error ends the attempts.
    async fn run(&self) -> std::result::Result<Client, Failed> {
        loop {
            match tokio::time::timeout_at(self.end, self.once()).await {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(ZkError::Timeout)) if tokio::time::Instant::now() < self.end => {
                    let pause = tokio::time::Instant::now() + RETRY_PAUSE;
                    tokio::time::sleep_until(self.end.min(pause)).await;
                }
                Ok(Err(source @ ZkError::BadArguments(_))) => return Err(Failed::BadConnectString(source)),
                Ok(Err(ZkError::AuthFailed)) => return Err(Failed::Refused),
                Ok(Err(error)) => return Err(Failed::NoSession(error)),
                Err(_) => return Err(Failed::NoSession(ZkError::Timeout)),
            }
        }
    }

    /// One connect, on the secure port when `secure`.
    async fn once(&self) -> std::result::Result<Client, ZkError> {
        #[cfg(feature = "tls")]
        if self.secure {
            return self.connector.clone().secure_connect(self.servers).await;
        }
        self.connector.clone().connect(self.servers).await
    }
}

/// The error of a connect whose attempts started no session, the last of them failing with
/// `last`: each of `addresses` probed (by `deadline`) to say why.
async fn unreachable(
    addresses: Vec<SocketAddr>,
    deadline: tokio::time::Instant,
    shown: &str,
    started: std::time::Instant,
    last: ZkError,
) -> Error {
    let within =
        deadline.saturating_duration_since(tokio::time::Instant::now()).max(Duration::from_millis(1));
    let probes = probe(addresses, within).await;
    let reason = classify(&probes);
    tracing::debug!(connect = shown, ?reason, ?probes, error = %last, "no session");
    Error::Connect {
        connect: shown.to_string(),
        reason,
        probes,
        waited: started.elapsed(),
        source: last.into(),
    }
}

/// A connect string the client crate cannot read (`source` says why), found `started` ago.
fn bad_connect_string(shown: &str, started: std::time::Instant, source: ZkError) -> Error {
    Error::Connect {
        connect: shown.to_string(),
        reason: ConnectFailure::BadConnectString,
        probes: Vec::new(),
        waited: started.elapsed(),
        source: source.into(),
    }
}

/// The client crate's connector for `options`: credentials, SASL (checked before any server is
/// asked, up to `attempts_end`) and TLS, and whether to connect on the secure port. `dial` is
/// the relay's address of a session that follows the ensemble, which neither TLS nor a Kerberos
/// principal named after the dialed host can go through.
#[cfg_attr(not(any(feature = "sasl-digest-md5", feature = "sasl-gssapi")), allow(unused_variables))]
async fn connector(
    servers: &str,
    dial: Option<&str>,
    options: &ConnectOptions,
    shown: &str,
    attempts_end: tokio::time::Instant,
    wait: Duration,
) -> Result<(zookeeper_client::Connector, bool)> {
    let mut connector = Client::connector().with_session_timeout(options.session_timeout);
    for (scheme, credentials) in &options.auth {
        connector = connector.with_auth(scheme, credentials);
    }
    #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
    if let Some(sasl) = &options.sasl {
        if dial.is_some() && sasl.names_service_by_dialed_host() {
            return Err(Error::AuthFailed {
                connect: shown.to_string(),
                mechanism: sasl.mechanism(),
                reason: "following the ensemble (ConnectOptions::follow_ensemble) dials a loopback \
                         relay, whose address names no server's Kerberos principal: set \
                         SaslConfig::service_host to the host part of the servers' principal"
                    .to_string(),
            });
        }
        let hosts = servers.split(',').filter_map(host_port).map(|(host, _)| host).collect();
        connector =
            super::sasl::preflight(sasl, hosts, shown, attempts_end, wait).await?.with_sasl(connector);
    }
    #[cfg(feature = "tls")]
    let secure = match &options.tls {
        Some(_) if dial.is_some() => {
            return Err(Error::Tls {
                reason: "following the ensemble (ConnectOptions::follow_ensemble) relays the \
                         connections, which would stand between the client and the server's \
                         certificate: turn one of the two off"
                    .to_string(),
            })
        }
        Some(tls) => {
            super::tls::check_server_names(servers)?;
            connector = connector.with_tls(tls.client_options());
            true
        }
        None => false,
    };
    #[cfg(not(feature = "tls"))]
    let secure = false;
    Ok((connector, secure))
}

/// The pause before asking the client crate again after its own deadline passed.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Connects to each address at once, with a plain TCP connection that waits at most `within`,
/// and closes it. The connections are made on the blocking pool.
async fn probe(addresses: Vec<SocketAddr>, within: Duration) -> Vec<(SocketAddr, Probe)> {
    let probes: Vec<_> = addresses
        .into_iter()
        .map(|address| {
            let probe = tokio::task::spawn_blocking(move || {
                match std::net::TcpStream::connect_timeout(&address, within) {
                    Ok(_) => Probe::Accepted,
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Probe::Refused,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                        ) =>
                    {
                        Probe::NoAnswer
                    }
                    Err(e) => Probe::Failed(e.to_string()),
                }
            });
            (address, probe)
        })
        .collect();
    let mut found = Vec::with_capacity(probes.len());
    for (address, probe) in probes {
        found.push((address, probe.await.unwrap_or_else(|e| Probe::Failed(e.to_string()))));
    }
    found
}

/// Resolves every host of `servers` before connecting, because the client crate retries an
/// unresolvable host until the deadline and then reports only a timeout. As ZooKeeper's own
/// client does, an ensemble goes on while one of its hosts resolves (each host that does not is
/// logged as a warning); [`Error::Resolve`] when none does. Addresses the client crate would
/// refuse are left for it to report. Returns every address found (once each), to probe if no
/// session can be started.
async fn resolve_any(servers: &str, shown: &str) -> Result<Vec<SocketAddr>> {
    let hosts: Vec<(String, u16)> = servers.split(',').filter_map(host_port).collect();
    if hosts.is_empty() {
        return Ok(Vec::new());
    }
    let lookups = tokio::task::spawn_blocking(move || {
        use std::net::ToSocketAddrs;
        hosts
            .into_iter()
            .map(|(host, port)| match (host.as_str(), port).to_socket_addrs() {
                Ok(found) => {
                    let found: Vec<SocketAddr> = found.collect();
                    let failure = found.is_empty().then(|| "no address".to_string());
                    (host, found, failure)
                }
                Err(e) => (host, Vec::new(), Some(e.to_string())),
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| Error::Resolve {
        connect: shown.to_string(),
        host: servers.to_string(),
        reason: e.to_string(),
    })?;
    let mut addresses: Vec<SocketAddr> = Vec::new();
    let mut failures = Vec::new();
    for (host, found, failure) in lookups {
        for address in found {
            if !addresses.contains(&address) {
                addresses.push(address);
            }
        }
        if let Some(reason) = failure {
            failures.push((host, reason));
        }
    }
    if addresses.is_empty() {
        let (host, reason) = failures.into_iter().next().expect("a host that failed to resolve");
        return Err(Error::Resolve { connect: shown.to_string(), host, reason });
    }
    for (host, reason) in failures {
        tracing::warn!(
            connect = shown,
            %host,
            %reason,
            "a host of the connect string does not resolve; using the others"
        );
    }
    Ok(addresses)
}

/// One server's host and port as the client crate reads them (`host`, `host:port`,
/// `[v6]:port`, after a `tcp://` or `tcp+tls://` prefix; port 2181 when none is given), or
/// `None` for an address it would refuse.
fn host_port(server: &str) -> Option<(String, u16)> {
    let address = ["tcp://", "tcp+tls://"].iter().find_map(|p| server.strip_prefix(p)).unwrap_or(server);
    let (host, port) = match address.strip_prefix('[') {
        Some(bracketed) => {
            let (host, rest) = bracketed.split_once(']')?;
            (host, if rest.is_empty() { "" } else { rest.strip_prefix(':')? })
        }
        None => address.rsplit_once(':').unwrap_or((address, "")),
    };
    let port = if port.is_empty() { 2181 } else { port.parse().ok().filter(|&p| p != 0)? };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::{classify, connect_wait, host_port, probe_time, split_chroot, ConnectFailure, Probe};

    #[test]
    fn the_wait_is_the_session_timeout_at_least_2_s_its_last_fifth_for_probes() {
        let s = Duration::from_secs;
        assert_eq!(connect_wait(Duration::from_millis(100)), s(2));
        assert_eq!(connect_wait(s(10)), s(10));
        assert_eq!(probe_time(s(2)), Duration::from_millis(400));
        assert_eq!(probe_time(s(5)), s(1));
        // The default 10 s session of zklock: attempts for 8 s, then the probes.
        assert_eq!(s(10) - probe_time(s(10)), s(8));
        assert_eq!(probe_time(s(60)), s(2));
    }

    #[test]
    fn an_address_that_accepts_is_the_one_to_look_at() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "[::1]:2".parse().unwrap();
        let failed = Probe::Failed("No route to host (os error 113)".to_string());
        assert_eq!(classify(&[(a, Probe::Refused), (b, Probe::Refused)]), ConnectFailure::Refused);
        assert_eq!(classify(&[(a, Probe::Refused), (b, Probe::Accepted)]), ConnectFailure::NoSession);
        assert_eq!(classify(&[(a, Probe::NoAnswer), (b, Probe::Accepted)]), ConnectFailure::NoSession);
        assert_eq!(classify(&[(a, Probe::Refused), (b, Probe::NoAnswer)]), ConnectFailure::NoAnswer);
        assert_eq!(classify(&[(a, Probe::Refused), (b, failed.clone())]), ConnectFailure::NoAnswer);
        assert_eq!(classify(&[(a, failed)]), ConnectFailure::NoAnswer);
        assert_eq!(classify(&[]), ConnectFailure::NoAnswer);
    }

    #[test]
    fn reads_hosts_as_the_client_crate_does() {
        assert_eq!(host_port("zk1:2181"), Some(("zk1".to_string(), 2181)));
        assert_eq!(host_port("zk1"), Some(("zk1".to_string(), 2181)));
        assert_eq!(host_port("tcp+tls://zk1:2281"), Some(("zk1".to_string(), 2281)));
        assert_eq!(host_port("[::1]:5"), Some(("::1".to_string(), 5)));
        assert_eq!(host_port("[::1]"), Some(("::1".to_string(), 2181)));
        assert_eq!(host_port("not a host:7"), Some(("not a host".to_string(), 7)));
        for refused in ["", ":5", "zk1:0", "zk1:x", "[::1", "[::1]x"] {
            assert_eq!(host_port(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn the_chroot_follows_the_last_address_whatever_its_prefix() {
        assert_eq!(split_chroot("a:1,b:2/app/x"), ("a:1,b:2", Some("/app/x")));
        assert_eq!(split_chroot("a:1,b:2"), ("a:1,b:2", None));
        assert_eq!(split_chroot("a:1/"), ("a:1", None));
        assert_eq!(split_chroot("tcp+tls://a:1,tcp://b:2/app"), ("tcp+tls://a:1,tcp://b:2", Some("/app")));
        assert_eq!(split_chroot("tcp+tls://a:1"), ("tcp+tls://a:1", None));
    }
}
