//! The pair proxies between the servers of a partitionable ensemble.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::Node;
use crate::{FaultProxy, HarnessError};

/// The proxy carrying what server `from` sends to server `to` (its quorum and election
/// connections), for a [`ClusterConfig::partitionable`] cluster.
///
/// Server `from`'s `zoo.cfg` lists `to` at this proxy's two addresses, so every connection that
/// `from` opens to `to` crosses it: a follower's connection to its leader (the quorum port) and
/// the election connections. One case needs more: ZooKeeper 3.8 keeps only the election
/// connection opened by the higher `sid`; when the lower one connects, the higher closes that
/// connection and connects back to the address the lower one *announced* in its first message
/// (its real port), not to the address in its own `zoo.cfg` (`QuorumCnxManager.handleConnection`
/// and `startConnection`). That connection back would bypass every proxy and keep the election
/// talking across a partition, so the election listener of this proxy rewrites the announced
/// address to the proxy from `to` back to `from` (see `proxy::Announce`). With that, every
/// TCP connection between two servers crosses exactly one pair proxy.
pub(super) struct Link {
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) proxy: FaultProxy,
}

/// How long a pair proxy waits for a peer's port to open before it closes a connection it
/// accepted (see `proxy::connect_upstream`): about what ZooKeeper's learner would spend retrying a
/// refused connect to a leader that has just been elected.
const PAIR_PATIENCE: Duration = Duration::from_secs(3);

/// One proxy per ordered pair of servers, each forwarding to the destination's real quorum and
/// election ports; see [`Link`].
pub(super) fn links(nodes: &[Node]) -> Result<Vec<Link>, HarnessError> {
    let n = nodes.len();
    let loopback = |port: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // Bind every listener first: the election proxy `i -> j` must know the address of `j -> i`.
    let mut bound = BTreeMap::new();
    for from in 0..n {
        for to in (0..n).filter(|&to| to != from) {
            bound.insert((from, to), (crate::proxy::bind_loopback()?, crate::proxy::bind_loopback()?));
        }
    }
    let mut election_addr = BTreeMap::new();
    for (&pair, (_, election)) in &bound {
        election_addr
            .insert(pair, election.local_addr().map_err(HarnessError::io("reading the proxy address"))?);
    }
    let mut links = Vec::with_capacity(bound.len());
    for ((from, to), (quorum, election)) in bound {
        let announce = crate::proxy::Announce {
            from: loopback(nodes[from].election_port).to_string(),
            to: election_addr[&(to, from)].to_string(),
        };
        let proxy = FaultProxy::start_bound(
            vec![
                (quorum, loopback(nodes[to].quorum_port), None),
                (election, loopback(nodes[to].election_port), Some(std::sync::Arc::new(announce))),
            ],
            PAIR_PATIENCE,
        )?;
        links.push(Link { from, to, proxy });
    }
    Ok(links)
}
