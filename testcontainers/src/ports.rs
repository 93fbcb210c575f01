//! Free loopback ports, asked from the kernel (never a fixed number).

use std::net::{Ipv4Addr, TcpListener};

use crate::HarnessError;

/// Reserves `n` distinct free ports on 127.0.0.1; all listeners are held until every port is
/// known, so the `n` ports differ.
///
/// The ports are drawn at random **below the kernel's ephemeral range**
/// (`net.ipv4.ip_local_port_range`) and checked free by binding them. A port inside that range
/// (what binding port 0 gives) can be taken, while a server is down for a restart, as the local
/// port of any outgoing connection on the machine (a client reconnecting, a proxy dialling a
/// server), and the server then cannot bind it again. Where the range leaves no room below it,
/// the kernel picks (port 0).
///
/// There is still a window between releasing a port and the server binding it in which another
/// process could take it; the cluster detects a failed start and retries with fresh ports.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, HarnessError> {
    let below = ephemeral_start().filter(|&start| start >= LOWEST + 2_000);
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(n);
    if let Some(start) = below {
        let mut rng = seed();
        let span = u64::from(start - LOWEST);
        for _ in 0..n * 50 {
            if listeners.len() == n {
                break;
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let port = LOWEST + (rng % span) as u16;
            if listeners.iter().any(|l| l.local_addr().is_ok_and(|a| a.port() == port)) {
                continue;
            }
            if let Ok(l) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
                listeners.push(l);
            }
        }
    }
    while listeners.len() < n {
        listeners.push(
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .map_err(HarnessError::io("binding a free loopback port"))?,
        );
    }
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(HarnessError::io("reading a bound port"))
}

/// The lowest port drawn: above the well-known and the commonly registered service ports.
const LOWEST: u16 = 20_000;

/// The first port of the kernel's ephemeral range, if it can be read.
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A seed that differs between processes and calls (xorshift needs it non-zero).
fn seed() -> u64 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    (nanos as u64 ^ (u64::from(std::process::id()) << 32)) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_below_the_ephemeral_range() {
        let ports = free_ports(12).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 12, "{ports:?}");
        if let Some(start) = ephemeral_start().filter(|&s| s >= LOWEST + 2_000) {
            assert!(ports.iter().all(|&p| (LOWEST..start).contains(&p)), "{ports:?} (range from {start})");
        }
        // That they are released is not checked here by binding them again: this binary's other
        // tests draw ports and start servers meanwhile, and one of them may take a port in the
        // moment after its release (it did on CI). Every server the harness starts binds ports
        // drawn here, so a port left held would fail every test that starts one.
    }
}
