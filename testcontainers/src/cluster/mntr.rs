//! A server's `mntr` counters.

use std::collections::BTreeMap;

/// A server's `mntr` counters, keyed as ZooKeeper names them (`zk_packets_received`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mntr(pub BTreeMap<String, String>);

impl Mntr {
    /// A counter as an integer, when present and numeric.
    pub fn get(&self, key: &str) -> Option<i64> {
        self.0.get(key)?.parse().ok()
    }

    /// `zk_packets_received`.
    pub fn packets_received(&self) -> i64 {
        self.get("zk_packets_received").unwrap_or(0)
    }

    /// `zk_packets_sent`.
    pub fn packets_sent(&self) -> i64 {
        self.get("zk_packets_sent").unwrap_or(0)
    }

    /// Packets both ways.
    pub fn packets(&self) -> i64 {
        self.packets_received() + self.packets_sent()
    }

    /// `zk_bytes_received_count`: bytes read from client connections, every request's length
    /// prefix included (and each four-letter word, `mntr` itself too: 4 bytes).
    pub fn bytes_received(&self) -> i64 {
        self.get("zk_bytes_received_count").unwrap_or(0)
    }

    /// `zk_response_bytes`: bytes of the replies to client requests, as serialized, without
    /// their length prefixes; watch events and the replies that open a session are not counted.
    /// The server adds a reply's bytes after sending it: a reading taken as soon as a reply
    /// arrives may not count it yet.
    pub fn response_bytes(&self) -> i64 {
        self.get("zk_response_bytes").unwrap_or(0)
    }

    /// `zk_watch_count`.
    pub fn watch_count(&self) -> i64 {
        self.get("zk_watch_count").unwrap_or(0)
    }

    /// `zk_znode_count`.
    pub fn znode_count(&self) -> i64 {
        self.get("zk_znode_count").unwrap_or(0)
    }
}
