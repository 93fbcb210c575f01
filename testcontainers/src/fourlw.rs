//! ZooKeeper's four-letter-word admin commands (`srvr`, `mntr`) over plain TCP.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::HarnessError;

/// Sends a four-letter word and returns the whole answer. The server closes the connection after
/// answering, so this reads to EOF. A short timeout keeps a frozen server from hanging the caller.
pub(crate) async fn ask(addr: SocketAddr, word: &str) -> std::io::Result<String> {
    let io = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(word.as_bytes()).await?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await?;
        Ok(out)
    };
    tokio::time::timeout(Duration::from_secs(2), io)
        .await
        .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "4lw timed out")))
}

/// Sends four-letter word `word` (`srvr`, `dump`, `cons`, ...) to the server at `addr` and
/// returns its answer: [`crate::ZkCluster::four_letter`] for a task that does not hold the
/// cluster (its addresses are [`crate::ZkCluster::client_addr`]). Gives up after 2 s.
///
/// # Errors
/// [`HarnessError::Io`] when the server does not answer.
pub async fn four_letter_at(addr: SocketAddr, word: &str) -> Result<String, HarnessError> {
    ask(addr, word).await.map_err(HarnessError::io(format!("{word} on {addr}")))
}

/// The server's role, from the `Mode:` line of `srvr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A single server, not part of an ensemble.
    Standalone,
    /// The ensemble's leader.
    Leader,
    /// A follower.
    Follower,
    /// An observer.
    Observer,
}

/// Parses the `Mode:` line of a `srvr` answer. `None` while the server is not serving
/// (for example `This ZooKeeper instance is not currently serving requests`).
pub(crate) fn parse_mode(srvr: &str) -> Option<Mode> {
    let mode = srvr.lines().find_map(|l| l.strip_prefix("Mode:"))?.trim();
    match mode {
        "standalone" => Some(Mode::Standalone),
        "leader" => Some(Mode::Leader),
        "follower" => Some(Mode::Follower),
        "observer" => Some(Mode::Observer),
        _ => None,
    }
}

/// Parses `mntr` output: one `key<TAB>value` pair a line.
pub(crate) fn parse_mntr(mntr: &str) -> BTreeMap<String, String> {
    mntr.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mode_lines() {
        assert_eq!(
            parse_mode("Zookeeper version: 3.8.0\nMode: follower\nNode count: 5\n"),
            Some(Mode::Follower)
        );
        assert_eq!(parse_mode("Mode: standalone\n"), Some(Mode::Standalone));
        assert_eq!(parse_mode("This ZooKeeper instance is not currently serving requests\n"), None);
    }

    #[test]
    fn parses_mntr_pairs() {
        let m = parse_mntr("zk_version\t3.8.0-x, built\nzk_packets_received\t12\nzk_znode_count\t5\n");
        assert_eq!(m["zk_packets_received"], "12");
        assert_eq!(m["zk_znode_count"], "5");
        assert_eq!(m.len(), 3);
    }
}
