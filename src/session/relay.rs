//! Following the ensemble's configuration ([`crate::ConnectOptions::follow_ensemble`]), as
//! Curator's `EnsembleTracker` does: the session reads `/zookeeper/config` (and watches it) on
//! every generation, and its connections go to the servers it names.
//!
//! `zookeeper-client` 0.11 fixes a client's server list when it is built (it has no
//! `updateServerList`), and a client is bound to one session. So the client is given one
//! address that never changes, a relay on a loopback port of this process, and the relay
//! carries each of the client's connections, byte for byte (it reads nothing of the protocol),
//! to one of the servers of the latest configuration, each host resolved again at each
//! connection. The client crate's own reconnection does the rest, on the same client: the
//! session, its watches (the crate sets them again on the new connection), its credentials and
//! chroot carry over, and the safe window moves only with answers, as after any reconnection.
//!
//! **When a connection moves:** only when the configuration no longer names the server it goes
//! to (that server was removed by a `reconfig`): the relay closes it, and the client reconnects
//! through the relay to a server that is named. A configuration that adds servers moves
//! nothing (no rebalancing). A configuration without client addresses (an ensemble whose
//! `server.N` lines carry none, reconfiguration off) is not followed: the connect string stays.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use zookeeper_client::{Client, EventType};

use super::connect::server_list;
use super::options::ConnectOptions;
use crate::error::{Error, Result};

/// Where a session connects: the connect string as given, and its relay when it follows the
/// ensemble.
pub(crate) struct Servers {
    pub shown: String,
    pub relay: Option<Arc<Relay>>,
}

impl std::fmt::Display for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Servers {
    /// What the client crate connects to instead of the servers, if anything.
    pub fn relay_address(&self) -> Option<std::net::SocketAddr> {
        self.relay.as_ref().map(|r| r.address())
    }
}

/// The relay of one session: its loopback address and the servers it carries connections to.
pub(crate) struct Relay {
    address: std::net::SocketAddr,
    servers: watch::Sender<Vec<String>>,
}

impl Relay {
    /// Starts a relay to `servers` (`host:port` each) on a free loopback port; it stops when
    /// dropped.
    pub fn start(servers: Vec<String>, connect_timeout: Duration) -> std::io::Result<Arc<Relay>> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let listener = TcpListener::from_std(listener)?;
        let (tx, rx) = watch::channel(servers);
        tokio::spawn(accept(listener, rx, connect_timeout));
        Ok(Arc::new(Relay { address, servers: tx }))
    }

    /// What the client crate connects to.
    pub fn address(&self) -> std::net::SocketAddr {
        self.address
    }

    /// The servers connections go to now.
    pub fn servers(&self) -> Vec<String> {
        self.servers.borrow().clone()
    }

    /// Follows a configuration (the data of `/zookeeper/config`): its servers' client
    /// addresses, unless it names none or one has none.
    fn follow_config(&self, config: &[u8]) {
        let Some(servers) = std::str::from_utf8(config).ok().and_then(client_addresses) else {
            tracing::debug!("the ensemble's configuration names no client addresses: not followed");
            return;
        };
        self.servers.send_if_modified(|now| {
            let changed = *now != servers;
            if changed {
                tracing::info!(
                    from = ?now,
                    to = ?servers,
                    "the ensemble's configuration changed: following it"
                );
                *now = servers;
            }
            changed
        });
    }
}

/// Starts the relay of a session that follows the ensemble, to the servers of `connect`.
///
/// # Errors
/// [`Error::Resolve`] (naming the loopback address) when no loopback port can be bound.
pub(super) fn start(connect: &str, options: &ConnectOptions) -> Result<Arc<Relay>> {
    // Servers tried in turn within the client crate's connection timeout (2/5 of the session's).
    let timeout = (options.session_timeout / 10).clamp(Duration::from_millis(100), Duration::from_secs(2));
    Relay::start(server_list(connect), timeout).map_err(|e| Error::Resolve {
        connect: connect.to_string(),
        host: "127.0.0.1".to_string(),
        reason: format!("could not open the relay that follows the ensemble on a loopback port: {e}"),
    })
}

/// Accepts the client crate's connections until the relay is dropped.
async fn accept(listener: TcpListener, mut servers: watch::Receiver<Vec<String>>, timeout: Duration) {
    // Each connection starts from the next server: a server that accepts but does not serve
    // (being restarted, say) is not tried first again and again.
    let mut next = 0;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((inbound, _)) => {
                    tokio::spawn(carry(inbound, servers.clone(), next, timeout));
                    next = next.wrapping_add(1);
                }
                Err(e) => {
                    // Out of descriptors, say: the client crate tries again; no busy loop.
                    tracing::debug!(error = %e, "relay: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            changed = servers.changed() => if changed.is_err() {
                break;
            },
        }
    }
}

/// Carries one connection to the first of the servers (from the `start`th, in turn) that
/// accepts one, until either side closes it or the configuration no longer names that server.
/// When none accepts, the connection is closed: the client crate tries again.
async fn carry(
    mut inbound: TcpStream,
    mut servers: watch::Receiver<Vec<String>>,
    start: usize,
    timeout: Duration,
) {
    let list = servers.borrow_and_update().clone();
    let mut upstream = None;
    for k in 0..list.len() {
        let server = &list[(start + k) % list.len()];
        // A host name is resolved again here, at each connection.
        match tokio::time::timeout(timeout, TcpStream::connect(server.as_str())).await {
            Ok(Ok(stream)) => {
                upstream = Some((server.clone(), stream));
                break;
            }
            Ok(Err(e)) => tracing::debug!(%server, error = %e, "relay: server refused"),
            Err(_) => tracing::debug!(%server, "relay: server did not answer"),
        }
    }
    let Some((server, mut outbound)) = upstream else { return };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
    tokio::pin!(copy);
    loop {
        tokio::select! {
            _ = &mut copy => return,
            changed = servers.changed() => match changed {
                // The session is closing: the client's last requests (its `closeSession`) still
                // go through, until it closes its side.
                Err(_) => {
                    let _ = copy.await;
                    return;
                }
                Ok(()) if !servers.borrow_and_update().contains(&server) => {
                    tracing::info!(%server, "the server left the ensemble's configuration: moving off it");
                    return;
                }
                Ok(()) => {}
            },
        }
    }
}

/// Reads `/zookeeper/config` through `client` and follows it, again at each change, until the
/// client's session ends; started for each generation, aborted at its end (it holds a clone of
/// the client). A read that fails (connection loss) is tried again after `pause`.
pub(super) fn follow(client: Client, relay: Arc<Relay>, pause: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match client.get_and_watch_config().await {
                Ok((config, _, watcher)) => {
                    relay.follow_config(&config);
                    if watcher.changed().await.event_type == EventType::Session {
                        return;
                    }
                }
                Err(e) if client.state().is_terminated() => {
                    tracing::debug!(error = %e, "following the configuration: the session ended");
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "could not read the ensemble's configuration; trying again");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    })
}

/// The client addresses (`host:port`) of the `server.N` lines of a dynamic configuration, in
/// their order; `None` when there is none, or a line has none (then nothing can be followed).
/// A client address's host that is missing or a wildcard (`0.0.0.0`, `::`) is the server's
/// quorum host, as Curator reads it.
pub(crate) fn client_addresses(config: &str) -> Option<Vec<String>> {
    let mut found = Vec::new();
    for line in config.lines().map(str::trim).filter(|l| l.starts_with("server.")) {
        let (_, value) = line.split_once('=')?;
        let (quorum, client) = value.split_once(';')?;
        let quorum_host = split_host(quorum)?.0;
        let client = client.trim();
        let (host, port) = match split_host(client) {
            Some((host, port)) => (host, port.trim_start_matches(':')),
            None => ("", client),
        };
        let port: u16 = port.parse().ok().filter(|&p| p != 0)?;
        let host = match host {
            "" | "0.0.0.0" | "::" | "[::]" => quorum_host,
            host => host,
        };
        found.push(format!("{host}:{port}"));
    }
    (!found.is_empty()).then_some(found)
}

/// `host` and the rest (from the `:` after it) of `host:...` or `[v6]:...`; `None` without a
/// `:` after the host.
fn split_host(address: &str) -> Option<(&str, &str)> {
    let end = match address.strip_prefix('[') {
        Some(rest) => rest.find(']')? + 2,
        None => address.find(':')?,
    };
    address[end..].starts_with(':').then(|| (&address[..end], &address[end..]))
}

#[cfg(test)]
mod tests {
    use super::client_addresses;

    #[test]
    fn reads_the_client_addresses_of_a_dynamic_configuration() {
        let config = "server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181\n\
                      server.2=zk2:2888:3888:observer;0.0.0.0:2182\n\
                      server.3=[::1]:2888:3888;2183\n\
                      server.4=zk4:2888:3888:participant;[::1]:2184\n\
                      version=100000003\n";
        let want = ["127.0.0.1:2181", "zk2:2182", "[::1]:2183", "[::1]:2184"];
        assert_eq!(client_addresses(config), Some(want.map(String::from).to_vec()));
    }

    #[test]
    fn a_configuration_without_client_addresses_is_not_followed() {
        assert_eq!(client_addresses(""), None);
        assert_eq!(client_addresses("version=1\n"), None);
        assert_eq!(client_addresses("server.1=a:1:2\nserver.2=b:1:2;b:3\n"), None);
        assert_eq!(client_addresses("server.1=a:1:2;b:0\n"), None);
        assert_eq!(client_addresses("server.1=a:1:2;b:x\n"), None);
    }
}
