//! Each server's `zoo.cfg`, from the cluster's [`ClusterConfig`] and its nodes' ports.

use std::fmt::Write as _;

#[cfg(doc)]
use super::ClusterConfig;
use super::{grey, TlsMode, ZkCluster};

impl ZkCluster {
    /// Node `i`'s `zoo.cfg`.
    pub(super) fn zoo_cfg(&self, i: usize) -> String {
        let c = &self.config;
        let node = &self.nodes[i];
        let tick = c.tick_time.as_millis().max(1);
        let mut cfg = String::new();
        let _ = writeln!(cfg, "tickTime={tick}");
        let _ = writeln!(cfg, "dataDir={}", node.dir.join("data").display());
        if c.log_disk_mb.is_some() {
            let _ = writeln!(cfg, "dataLogDir={}", grey::log_dir(node).display());
        }
        let _ = writeln!(cfg, "clientPort={}", node.client_port);
        let _ = writeln!(cfg, "clientPortAddress={}", node.host);
        let _ = writeln!(cfg, "maxClientCnxns={}", c.max_client_cnxns);
        let _ = writeln!(cfg, "minSessionTimeout={}", 2 * tick);
        let _ = writeln!(cfg, "maxSessionTimeout={}", c.max_session_timeout.as_millis().max(2 * tick));
        let _ = writeln!(cfg, "forceSync={}", if c.force_sync { "yes" } else { "no" });
        let _ = writeln!(cfg, "admin.enableServer=false");
        let _ = writeln!(cfg, "4lw.commands.whitelist=*");
        let _ = writeln!(cfg, "preAllocSize=4096");
        let _ = writeln!(cfg, "autopurge.purgeInterval=0");
        if let (Some(port), Some(tls)) = (node.secure_port, &self.tls) {
            // TLS needs Netty (the default NIO factory has no TLS); PEM stores need no passwords.
            let _ = writeln!(cfg, "secureClientPort={port}");
            let _ = writeln!(cfg, "secureClientPortAddress={}", node.host);
            let _ = writeln!(cfg, "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory");
            let _ = writeln!(cfg, "ssl.keyStore.location={}", tls.server_store.display());
            let _ = writeln!(cfg, "ssl.keyStore.type=PEM");
            let _ = writeln!(cfg, "ssl.trustStore.location={}", tls.ca.display());
            let _ = writeln!(cfg, "ssl.trustStore.type=PEM");
            let need = if c.tls == TlsMode::Mutual { "need" } else { "none" };
            let _ = writeln!(cfg, "ssl.clientAuth={need}");
            let _ = writeln!(
                cfg,
                "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider"
            );
        }
        if self.nodes.len() > 1 {
            // Generous limits in ticks: a loaded 2-core machine must not drop followers.
            let _ = writeln!(cfg, "initLimit=50");
            let _ = writeln!(cfg, "syncLimit=10");
            let _ = writeln!(cfg, "standaloneEnabled=false");
            let _ = writeln!(cfg, "reconfigEnabled={}", c.reconfig);
            if c.reconfig {
                // `reconfig` is for a super user; the test cluster lets anyone.
                let _ = writeln!(cfg, "skipACL=yes");
            }
            for (j, peer) in self.nodes.iter().enumerate().filter(|(j, n)| n.member || *j == i) {
                // A server binds its own line's ports; with links, it reaches each peer through
                // the proxy of that ordered pair.
                let (quorum, election) = match self.link(i, j) {
                    Some(link) => (link.proxy.addrs()[0].port(), link.proxy.addrs()[1].port()),
                    None => (peer.quorum_port, peer.election_port),
                };
                let _ = write!(cfg, "server.{}=127.0.0.1:{quorum}:{election}", j + 1);
                match c.reconfig {
                    // The client address goes in the dynamic configuration, for clients that
                    // follow it (`/zookeeper/config`).
                    true => writeln!(cfg, ":participant;{}:{}", peer.host, peer.client_port),
                    false => writeln!(cfg),
                }
                .expect("writing to a String");
            }
        }
        for (k, v) in &c.extra {
            let _ = writeln!(cfg, "{k}={v}");
        }
        cfg
    }
}
