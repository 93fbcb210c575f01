//! A TCP fault proxy in front of ZooKeeper nodes: cut, blackhole and latency.
//!
//! Each [`FaultProxy`] listens on one free loopback port per node and forwards to that node's
//! client port. Its faults apply to every connection it carries, so a test isolates one client by
//! giving that client a proxy of its own ([`crate::ZkCluster::proxy`]).
//!
//! Threads, not tasks: the proxy must keep working (or keep *not* working) whatever the test's
//! async runtime is doing, including a current-thread runtime that is busy.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::HarnessError;

#[derive(Default)]
struct Faults {
    blackholed: bool,
    /// Only what the client sends is held back (see [`FaultProxy::hold_requests`]).
    requests_held: bool,
    latency: Duration,
    reply_latency: Duration,
    /// Live connections, as clones of both sockets, so that `cut` can shut them down at once.
    live: Vec<(u64, TcpStream, TcpStream)>,
    next_id: u64,
}

struct Shared {
    faults: Mutex<Faults>,
    healed: Condvar,
    closing: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Faults> {
        // A panicking forwarder thread must not disable the proxy: take the state regardless.
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks while the proxy is blackholed, then returns the latency to apply in this direction.
    fn pass(&self, to_client: bool) -> Duration {
        let mut faults = self.lock();
        while (faults.blackholed || (faults.requests_held && !to_client))
            && !self.closing.load(Ordering::SeqCst)
        {
            faults = self.healed.wait(faults).unwrap_or_else(|e| e.into_inner());
        }
        faults.latency + if to_client { faults.reply_latency } else { Duration::ZERO }
    }
}

/// A fault-injecting TCP proxy in front of every node of a cluster. See the module docs.
pub struct FaultProxy {
    shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy").field("addrs", &self.addrs).finish()
    }
}

impl FaultProxy {
    /// Starts a proxy with one listener for each upstream address.
    pub(crate) fn start(upstreams: &[SocketAddr]) -> Result<FaultProxy, HarnessError> {
        let shared = Arc::new(Shared {
            faults: Mutex::new(Faults::default()),
            healed: Condvar::new(),
            closing: AtomicBool::new(false),
        });
        let mut addrs = Vec::with_capacity(upstreams.len());
        for &upstream in upstreams {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .map_err(HarnessError::io("binding a proxy listener"))?;
            addrs.push(listener.local_addr().map_err(HarnessError::io("reading the proxy address"))?);
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("zk-proxy-accept".into())
                .spawn(move || accept_loop(listener, upstream, shared))
                .map_err(HarnessError::io("spawning a proxy thread"))?;
        }
        Ok(FaultProxy { shared, addrs })
    }

    /// The connect string through this proxy, e.g. `127.0.0.1:40001,127.0.0.1:40002`.
    pub fn connect_string(&self) -> String {
        self.addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",")
    }

    /// The connect string through this proxy with a chroot suffix (`/app`).
    pub fn connect_string_chroot(&self, chroot: &str) -> String {
        format!("{}{}", self.connect_string(), chroot)
    }

    /// Closes every connection the proxy carries now. New connections are accepted as usual, so
    /// a client sees a disconnect and then reconnects.
    pub fn cut(&self) {
        let live = std::mem::take(&mut self.shared.lock().live);
        tracing::debug!(connections = live.len(), "proxy cut");
        for (_, a, b) in live {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// Resets every connection the proxy carries now: the client's socket gets a TCP RST (its
    /// next read fails with `ECONNRESET`) instead of the orderly FIN of [`FaultProxy::cut`], as
    /// when a server host drops the flow or a process dies with unread bytes. New connections
    /// are accepted as usual.
    pub fn reset(&self) {
        let live = std::mem::take(&mut self.shared.lock().live);
        tracing::debug!(connections = live.len(), "proxy reset");
        for (_, client, server) in live {
            abort(&client);
            let _ = server.shutdown(Shutdown::Both);
        }
    }

    /// Stops forwarding in both directions: connections are accepted but no byte moves, as in a
    /// network partition, until [`FaultProxy::heal`].
    pub fn blackhole(&self) {
        self.shared.lock().blackholed = true;
    }

    /// Holds back what clients send (requests and pings) while what the servers send (replies to
    /// requests already through, and watch events) still flows, until [`FaultProxy::heal`]: a
    /// half-dead network, and a way to show that a client acted on an event without asking the
    /// server anything.
    pub fn hold_requests(&self) {
        self.shared.lock().requests_held = true;
    }

    /// Ends a blackhole or held requests: bytes held back flow again.
    pub fn heal(&self) {
        let mut faults = self.shared.lock();
        faults.blackholed = false;
        faults.requests_held = false;
        drop(faults);
        self.shared.healed.notify_all();
    }

    /// Delays every chunk forwarded in either direction by `latency` (zero removes it).
    pub fn set_latency(&self, latency: Duration) {
        self.shared.lock().latency = latency;
    }

    /// Delays only what flows from the servers to the client, so that a request reaches the
    /// server while its reply is still held back (zero removes it).
    pub fn set_reply_latency(&self, latency: Duration) {
        self.shared.lock().reply_latency = latency;
    }

    /// The number of connections the proxy carries now.
    pub fn connections(&self) -> usize {
        self.shared.lock().live.len()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        self.heal();
        self.cut();
        // Wake each accept loop so that it sees `closing` and exits.
        for addr in &self.addrs {
            let _ = TcpStream::connect_timeout(addr, Duration::from_millis(200));
        }
    }
}

/// Aborts a TCP connection at once: `connect` with `AF_UNSPEC` makes Linux disconnect the
/// socket and send the peer an RST, whichever threads still hold the descriptor (closing with
/// linger zero would wait for the last of them). The pipes then see the socket closed and exit.
fn abort(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed sockaddr with family AF_UNSPEC, passed with its own size, to a valid
    // socket descriptor.
    let rc = unsafe {
        let mut unspec: libc::sockaddr = std::mem::zeroed();
        unspec.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
        libc::connect(stream.as_raw_fd(), &unspec, std::mem::size_of::<libc::sockaddr>() as libc::socklen_t)
    };
    if rc != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "could not abort a proxied connection; cutting it");
        let _ = stream.shutdown(Shutdown::Both);
    }
}

fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.closing.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = conn else { continue };
        let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) else {
            // The node is down: refuse as the node itself would.
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) =
            (client.try_clone(), server.try_clone(), client.try_clone(), server.try_clone())
        else {
            continue;
        };
        let id = {
            let mut faults = shared.lock();
            faults.next_id += 1;
            let id = faults.next_id;
            faults.live.push((id, c3, s3));
            id
        };
        for (from, to, to_client) in [(client, server, false), (s2, c2, true)] {
            let shared = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("zk-proxy-pipe".into())
                .spawn(move || pipe(from, to, to_client, id, shared));
            if spawned.is_err() {
                break;
            }
        }
    }
}

/// Copies bytes one way until either side closes, honouring blackhole and latency.
///
/// Latency is a delay line, as a network's is: each chunk is stamped when read and written
/// `latency` later by a writer thread, in order. Chunks in flight do not wait for each other, so
/// pipelined requests keep their pipelining (a sleep per chunk in the reading thread would
/// serialize them and add the latency once per chunk).
fn pipe(mut from: TcpStream, to: TcpStream, to_client: bool, id: u64, shared: Arc<Shared>) {
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = {
        let shared = shared.clone();
        let from = from.try_clone();
        std::thread::Builder::new()
            .name("zk-proxy-write".into())
            .spawn(move || deliver(rx, to, from.ok(), to_client, id, shared))
    };
    if writer.is_err() {
        let _ = from.shutdown(Shutdown::Both);
        return;
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // Hold back before reading too, so that a blackholed proxy does not even drain the
        // sender's socket: the sender sees its writes pile up, as in a partition.
        shared.pass(to_client);
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let latency = shared.pass(to_client);
        if tx.send((Instant::now() + latency, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    // Dropping `tx` lets the writer deliver what is in flight, then close both sides.
}

/// The writing end of [`pipe`]: writes each chunk when it is due (and not blackholed), then
/// closes both sockets once the reader is done or the destination fails.
fn deliver(
    rx: std::sync::mpsc::Receiver<(Instant, Vec<u8>)>,
    mut to: TcpStream,
    from: Option<TcpStream>,
    to_client: bool,
    id: u64,
    shared: Arc<Shared>,
) {
    for (due, chunk) in rx.iter() {
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        // A blackhole that started while the chunk was in flight holds it too.
        shared.pass(to_client);
        if to.write_all(&chunk).is_err() {
            break;
        }
    }
    if let Some(from) = from {
        let _ = from.shutdown(Shutdown::Both);
    }
    let _ = to.shutdown(Shutdown::Both);
    shared.lock().live.retain(|(i, _, _)| *i != id);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free loopback port, for one connection.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut back = conn.try_clone().unwrap();
            let _ = std::io::copy(&mut conn, &mut back);
        });
        addr
    }

    #[test]
    fn a_delayed_burst_arrives_whole_and_in_order() {
        let proxy = FaultProxy::start(&[echo()]).unwrap();
        proxy.set_latency(Duration::from_millis(20));
        let mut conn = TcpStream::connect(proxy.addrs[0]).unwrap();
        conn.set_nodelay(true).unwrap();
        // Many small writes in a row: each may be its own chunk in flight at once.
        let sent: Vec<u8> = (0..2000u32).flat_map(|i| i.to_be_bytes()).collect();
        for piece in sent.chunks(16) {
            conn.write_all(piece).unwrap();
        }
        let mut got = vec![0u8; sent.len()];
        conn.read_exact(&mut got).unwrap();
        assert_eq!(got, sent);
    }
}
