//! Free loopback ports, asked from the kernel (never a fixed number).

use std::net::{Ipv4Addr, TcpListener};

use crate::HarnessError;

/// Reserves `n` distinct free ports on 127.0.0.1 by binding port 0 and reading back what the
/// kernel chose. All listeners are held until every port is known, so the `n` ports differ.
///
/// There is a window between releasing a port and the server binding it in which another process
/// could take it; the cluster detects a failed start and retries with fresh ports.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, HarnessError> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(HarnessError::io("binding a free loopback port"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(HarnessError::io("reading a bound port"))
}
