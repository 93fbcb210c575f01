//! Why a connect failed: what a plain TCP connection to each address found, and what to check.
//! (Made by the session's connect; kept here, with the error that carries it.)

use std::net::SocketAddr;
use std::time::Duration;

use zookeeper_client::Error as ZkError;

/// Why no ZooKeeper session could be started ([`super::Error::Connect`]): what a plain TCP connection
/// to each address of the connect string found, once the attempts had failed.
///
/// Match on it to tell a server that is down ([`ConnectFailure::Refused`]) from one that is
/// misconfigured ([`ConnectFailure::NoSession`]) and from a network problem
/// ([`ConnectFailure::NoAnswer`]); the error's `probes` say what each address did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// Every address refused the connection: nothing listens there. ZooKeeper is not running on
    /// that host, or listens on another port.
    Refused,
    /// An address accepts TCP connections, yet no ZooKeeper session was started: it is another
    /// service (ZooKeeper's admin, quorum or election port, another server), a proxy to a server
    /// that is down, the other protocol (plaintext to a TLS port or the reverse), a server
    /// without a quorum or that does not answer, or a server that turned the session down (the
    /// error's source says so).
    NoSession,
    /// No address accepted or refused the connection: nothing answered (a host that is down, a
    /// firewall that drops the packets), or the network has no route to it.
    NoAnswer,
    /// The client crate could not read the connect string (the error's source says why); nothing
    /// was sent.
    BadConnectString,
}

/// What a plain TCP connection to one address found (see [`ConnectFailure`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Probe {
    /// The connection was refused: nothing listens on that port.
    Refused,
    /// The connection was accepted (then closed, without a byte sent).
    Accepted,
    /// No answer before the connect wait ended.
    NoAnswer,
    /// Another error, as the system reported it (no route to the host, say).
    Failed(String),
}

/// The failure the probes show: an address that accepts makes it [`ConnectFailure::NoSession`]
/// (that server is the one to look at); every address refusing, [`ConnectFailure::Refused`];
/// anything else, [`ConnectFailure::NoAnswer`].
pub(crate) fn classify(probes: &[(SocketAddr, Probe)]) -> ConnectFailure {
    if probes.iter().any(|(_, probe)| *probe == Probe::Accepted) {
        ConnectFailure::NoSession
    } else if !probes.is_empty() && probes.iter().all(|(_, probe)| *probe == Probe::Refused) {
        ConnectFailure::Refused
    } else {
        ConnectFailure::NoAnswer
    }
}

/// The part of [`Error::Connect`]'s message after the connect string: what each address did,
/// then what to check.
pub(super) fn describe(
    reason: ConnectFailure,
    probes: &[(SocketAddr, Probe)],
    waited: Duration,
    source: &ZkError,
) -> String {
    use std::fmt::Write;
    if reason == ConnectFailure::BadConnectString {
        return format!(
            "the connect string cannot be read ({source}); write it as host:port[,host:port...][/chroot]"
        );
    }
    let mut out = format!("no session after {waited:.1?} of trying: ");
    for (i, (address, probe)) in probes.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let _ = match probe {
            Probe::Refused => write!(out, "{sep}{address} refused the connection"),
            Probe::Accepted => {
                write!(out, "{sep}{address} accepted the connection but started no ZooKeeper session")
            }
            Probe::NoAnswer => write!(out, "{sep}{address} did not answer"),
            Probe::Failed(error) => write!(out, "{sep}{address} could not be reached ({error})"),
        };
    }
    if probes.is_empty() {
        out.push_str("no address to try");
    }
    let _ = match source {
        ZkError::Timeout | ZkError::ConnectionLoss => Ok(()),
        other => write!(out, " (the client's last error: {other})"),
    };
    write_hints(&mut out, probes);
    out
}

/// Appends to `out` what to check, for each kind of outcome among `probes` (prefixed with the
/// outcome when they differ); no probe at all is treated as no answer.
fn write_hints(out: &mut String, probes: &[(SocketAddr, Probe)]) {
    use std::fmt::Write;
    let hints = [
        (
            "accepted",
            probes.iter().any(|(_, p)| *p == Probe::Accepted),
            "is that ZooKeeper's client port (not its admin, quorum or election port), with TLS on its \
             secure port only? A server without a quorum starts no sessions: see its log.",
        ),
        (
            "refused",
            probes.iter().any(|(_, p)| *p == Probe::Refused),
            "is ZooKeeper running there, on that port (its clientPort, or secureClientPort for TLS)?",
        ),
        (
            "no answer",
            probes.iter().any(|(_, p)| matches!(p, Probe::NoAnswer | Probe::Failed(_))) || probes.is_empty(),
            "is the host up, and does a firewall drop the traffic to that port?",
        ),
    ];
    let found: Vec<_> = hints.iter().filter(|(_, present, _)| *present).collect();
    match found.as_slice() {
        [(_, _, hint)] => {
            let _ = write!(out, "; {hint}");
        }
        several => {
            out.push('.');
            for (outcome, _, hint) in several {
                let _ = write!(out, " Where {outcome}: {hint}");
            }
        }
    }
}
