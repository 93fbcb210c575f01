//! `TCP_NODELAY` on a session's connections.
//!
//! `zookeeper-client` 0.11 connects with Nagle's algorithm on, and offers no way to turn it off.
//! With Nagle on, a request written while an earlier one is still unacknowledged waits for that
//! acknowledgement, which in practice rides on the earlier reply: requests the recipes send back
//! to back (a create and its listing; a dropped guard's delete and the next create) then go one
//! round trip apart instead of together. ZooKeeper's Java client turns Nagle off on every
//! connection it makes; so do we, after each connection, on the socket itself: the process's TCP
//! sockets whose peer is one of the session's servers (their hosts resolved again each time).
//!
//! Another client of the same servers in this process gets the option too, which only helps it.
//! The sockets are found through `/proc/self/fd`, so this is Linux only; elsewhere it does
//! nothing. [`crate::ConnectOptions::tcp_nodelay`] turns it off.

use std::net::SocketAddr;

/// Whether [`apply`] can find sockets on this platform.
pub(crate) const SUPPORTED: bool = cfg!(target_os = "linux");

/// Sets `TCP_NODELAY` on every TCP socket of this process connected to one of `servers`, and
/// returns how many sockets have it now (set here or before).
#[cfg(target_os = "linux")]
pub(crate) fn apply(servers: &[SocketAddr]) -> usize {
    use std::os::unix::ffi::OsStrExt;

    if servers.is_empty() {
        return 0;
    }
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return 0 };
    let mut on = 0;
    for entry in dir.flatten() {
        let Some(fd) = std::str::from_utf8(entry.file_name().as_bytes()).ok().and_then(|n| n.parse().ok())
        else {
            continue;
        };
        // `peer` fails on anything that is not a connected socket.
        if peer(fd).is_some_and(|p| servers.iter().any(|s| same(*s, p))) && set(fd) {
            on += 1;
        }
    }
    on
}

/// Elsewhere: nothing (see the module docs).
#[cfg(not(target_os = "linux"))]
pub(crate) fn apply(_servers: &[SocketAddr]) -> usize {
    0
}

/// Whether `a` and `b` are one address, an IPv4 address and its IPv4-mapped IPv6 form alike.
#[cfg(any(target_os = "linux", test))]
fn same(a: SocketAddr, b: SocketAddr) -> bool {
    let canonical = |s: SocketAddr| (s.ip().to_canonical(), s.port());
    canonical(a) == canonical(b)
}

/// The peer of socket `fd`, if it is a connected IPv4 or IPv6 socket.
#[cfg(target_os = "linux")]
fn peer(fd: libc::c_int) -> Option<SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr};

    // SAFETY: an all-zero sockaddr_storage is a valid value for getpeername to overwrite.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getpeername writes at most `len` bytes into the storage we pass. The descriptor is
    // neither owned nor borrowed here (it is the client crate's, or anyone's in this process):
    // the call only uses its number, and on one that is not a socket (or was closed meanwhile)
    // it fails.
    let rc = unsafe { libc::getpeername(fd, std::ptr::addr_of_mut!(storage).cast(), &mut len) };
    if rc != 0 {
        return None;
    }
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large enough for.
            let v4: libc::sockaddr_in =
                unsafe { std::ptr::addr_of!(storage).cast::<libc::sockaddr_in>().read() };
            let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(v4.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6, which it is large enough for.
            let v6: libc::sockaddr_in6 =
                unsafe { std::ptr::addr_of!(storage).cast::<libc::sockaddr_in6>().read() };
            let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(v6.sin6_port))))
        }
        _ => None,
    }
}

/// Turns Nagle off on `fd`; whether it is off now.
///
/// The descriptor is another part of this process's (the client crate's connection): if it was
/// closed and its number reused between [`peer`] and here, the option lands on that other
/// socket, where it changes only how small writes are coalesced, or the call fails.
#[cfg(target_os = "linux")]
fn set(fd: libc::c_int) -> bool {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads an int of the size we pass; it only uses the descriptor number.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            std::ptr::addr_of!(one).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn an_ipv4_address_and_its_mapped_form_are_the_same_server() {
        let v4 = "127.0.0.1:2281".parse().unwrap();
        assert!(same(v4, "[::ffff:127.0.0.1]:2281".parse().unwrap()));
        assert!(!same(v4, "127.0.0.1:2282".parse().unwrap()));
        assert!(!same(v4, "[::1]:2281".parse().unwrap()));
    }
}
