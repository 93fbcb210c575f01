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
    /// Only what the servers send is held back (see [`FaultProxy::hold_replies`]).
    replies_held: bool,
    latency: Duration,
    reply_latency: Duration,
    request_latency: Duration,
    /// Connections go to this upstream only (see [`FaultProxy::pin_to`]).
    pinned: Option<SocketAddr>,
    /// Extra delay of what flows back from one server (by its address): a slow server.
    slow_servers: Vec<(SocketAddr, Duration)>,
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
    /// The extra delay of replies from `upstream` (see [`FaultProxy::set_server_latency`]).
    fn slowness(&self, upstream: SocketAddr) -> Duration {
        self.lock().slow_servers.iter().find(|(s, _)| *s == upstream).map_or(Duration::ZERO, |(_, d)| *d)
    }

    fn pass(&self, to_client: bool) -> Duration {
        let mut faults = self.lock();
        while (faults.blackholed
            || (faults.requests_held && !to_client)
            || (faults.replies_held && to_client))
            && !self.closing.load(Ordering::SeqCst)
        {
            faults = self.healed.wait(faults).unwrap_or_else(|e| e.into_inner());
        }
        faults.latency + if to_client { faults.reply_latency } else { faults.request_latency }
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
        let listeners = upstreams
            .iter()
            .map(|&upstream| Ok((bind_loopback()?, upstream, None)))
            .collect::<Result<Vec<_>, HarnessError>>()?;
        FaultProxy::start_bound(listeners, Duration::ZERO)
    }

    /// Starts a proxy on listeners already bound (see [`bind_loopback`]), each forwarding to its
    /// upstream and, for a ZooKeeper election port, rewriting the announced address (see
    /// [`Announce`]). A connection accepted while its upstream refuses is closed at once, unless
    /// the upstream accepts within `patience` (see [`connect_upstream`]).
    pub(crate) fn start_bound(
        listeners: Vec<(TcpListener, SocketAddr, Option<Arc<Announce>>)>,
        patience: Duration,
    ) -> Result<FaultProxy, HarnessError> {
        let shared = Arc::new(Shared {
            faults: Mutex::new(Faults::default()),
            healed: Condvar::new(),
            closing: AtomicBool::new(false),
        });
        let mut addrs = Vec::with_capacity(listeners.len());
        for (listener, upstream, announce) in listeners {
            addrs.push(listener.local_addr().map_err(HarnessError::io("reading the proxy address"))?);
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("zk-proxy-accept".into())
                .spawn(move || accept_loop(listener, upstream, announce, patience, shared))
                .map_err(HarnessError::io("spawning a proxy thread"))?;
        }
        Ok(FaultProxy { shared, addrs })
    }

    /// The proxy's listening addresses, in the order of its upstreams.
    pub(crate) fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
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

    /// Holds back what the servers send (replies and watch events) while what clients send
    /// still reaches the servers, until [`FaultProxy::heal`]: the other half-dead network, where
    /// requests take effect on the server but their client is never told.
    pub fn hold_replies(&self) {
        self.shared.lock().replies_held = true;
    }

    /// Ends a blackhole or held requests or replies: bytes held back flow again.
    pub fn heal(&self) {
        let mut faults = self.shared.lock();
        faults.blackholed = false;
        faults.requests_held = false;
        faults.replies_held = false;
        drop(faults);
        self.shared.healed.notify_all();
    }

    /// Delays every chunk forwarded in either direction by `latency` (zero removes it).
    pub fn set_latency(&self, latency: Duration) {
        self.shared.lock().latency = latency;
    }

    /// Delays what flows back from the server at `server` (its client address, as
    /// [`crate::ZkCluster::client_addr`] gives it) by `latency`, on top of any other latency:
    /// a slow server (a disk stall, a long GC) as every client of this proxy sees it. Zero
    /// removes it.
    pub fn set_server_latency(&self, server: SocketAddr, latency: Duration) {
        let mut faults = self.shared.lock();
        faults.slow_servers.retain(|(s, _)| *s != server);
        if !latency.is_zero() {
            faults.slow_servers.push((server, latency));
        }
    }

    /// Delays only what flows from the servers to the client, so that a request reaches the
    /// server while its reply is still held back (zero removes it).
    pub fn set_reply_latency(&self, latency: Duration) {
        self.shared.lock().reply_latency = latency;
    }

    /// Delays only what flows from the client to the servers (zero removes it).
    pub fn set_request_latency(&self, latency: Duration) {
        self.shared.lock().request_latency = latency;
    }

    /// Lets connections reach the server at `server` (its client address) only: the connections
    /// the proxy carries to any other server are closed now, and new ones to them are closed as
    /// soon as accepted (as a server that is down), so that a client moves to `server`, until
    /// [`FaultProxy::unpin`].
    pub fn pin_to(&self, server: SocketAddr) {
        let mut faults = self.shared.lock();
        faults.pinned = Some(server);
        let (kept, elsewhere) = std::mem::take(&mut faults.live)
            .into_iter()
            .partition::<Vec<_>, _>(|(_, _, up)| up.peer_addr().is_ok_and(|a| a == server));
        faults.live = kept;
        drop(faults);
        for (_, a, b) in elsewhere {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// Ends [`FaultProxy::pin_to`]: every server is reachable again.
    pub fn unpin(&self) {
        self.shared.lock().pinned = None;
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
        let error = std::io::Error::last_os_error();
        tracing::warn!(%error, "could not abort a proxied connection; cutting it");
        let _ = stream.shutdown(Shutdown::Both);
    }
}

/// A listener on a free loopback port.
pub(crate) fn bind_loopback() -> Result<TcpListener, HarnessError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(HarnessError::io("binding a proxy listener"))
}

/// Rewrites the election address a ZooKeeper server announces when it opens an election
/// connection, so that the peer's connection back goes through a proxy too.
///
/// ZooKeeper 3.8's `QuorumCnxManager.startConnection` opens every election connection with an
/// initial message: protocol version (a negative `i64`), the sender's `sid` (`i64`), then the
/// sender's own election address as `host:port` (an `i32` length and the bytes). When the
/// receiver has the higher `sid`, `handleConnection` closes that connection and connects back
/// to the address announced, not to the address in its own `zoo.cfg`. Behind a proxy the
/// announced address is the sender's real port, so the connection back would bypass the proxy
/// and survive a partition. The proxy from server `i` to server `j` therefore replaces `i`'s real
/// address (`from`) with the address of the proxy from `j` to `i` (`to`). Anything else (an old
/// protocol with no address, another address) passes unchanged.
#[derive(Debug)]
pub(crate) struct Announce {
    pub(crate) from: String,
    pub(crate) to: String,
}

/// The longest announced address we look at; a longer length field is not a header we know.
const MAX_ANNOUNCED: usize = 1024;

/// Feeds the first bytes of an election connection through [`Announce`].
struct AnnounceRewriter {
    rule: Arc<Announce>,
    pending: Vec<u8>,
    done: bool,
}

impl AnnounceRewriter {
    /// The bytes to forward now for `chunk`: nothing while the header is incomplete, then the
    /// (rewritten) header and everything after it.
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.done {
            return chunk.to_vec();
        }
        self.pending.extend_from_slice(chunk);
        let p = &self.pending;
        let field = |at: usize, len: usize| p.get(at..at + len);
        let Some(version) = field(0, 8) else { return Vec::new() };
        if i64::from_be_bytes(version.try_into().unwrap_or([0; 8])) >= 0 {
            return self.pass();
        }
        let Some(len) = field(16, 4) else { return Vec::new() };
        let len = i32::from_be_bytes(len.try_into().unwrap_or([0; 4]));
        let Some(len) = usize::try_from(len).ok().filter(|&l| l <= MAX_ANNOUNCED) else {
            return self.pass();
        };
        let Some(addr) = field(20, len) else { return Vec::new() };
        if addr != self.rule.from.as_bytes() {
            return self.pass();
        }
        let to = self.rule.to.as_bytes();
        let mut out = Vec::with_capacity(self.pending.len() + to.len());
        out.extend_from_slice(&self.pending[..16]);
        out.extend_from_slice(&(to.len() as i32).to_be_bytes());
        out.extend_from_slice(to);
        out.extend_from_slice(&self.pending[20 + len..]);
        self.done = true;
        self.pending = Vec::new();
        out
    }

    fn pass(&mut self) -> Vec<u8> {
        self.done = true;
        std::mem::take(&mut self.pending)
    }
}

/// Connects to `upstream`, retrying for up to `patience` while it refuses.
///
/// The proxy has accepted the connection before it knows whether the upstream listens, so a
/// refusal reaches the peer as a connection that closes at once, not as a refused connect. For a
/// client that is the node being down. For a follower connecting to a new leader's quorum port
/// it is not: ZooKeeper's `Learner.connectToLeader` retries a refused connect (the leader opens
/// its port a moment after the election), but takes a connection closed after it was accepted
/// for the leader failing and starts a new election round, which can leave the servers in
/// different rounds for `initLimit` ticks. The pair proxies between servers therefore wait a
/// little for the port to open, as that retry would.
fn connect_upstream(upstream: SocketAddr, patience: Duration) -> Option<TcpStream> {
    let until = Instant::now() + patience;
    loop {
        match TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) {
            Ok(server) => return Some(server),
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return None,
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    announce: Option<Arc<Announce>>,
    patience: Duration,
    shared: Arc<Shared>,
) {
    for conn in listener.incoming() {
        if shared.closing.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = conn else { continue };
        if shared.lock().pinned.is_some_and(|p| p != upstream) {
            // Pinned elsewhere: this server is as good as down for the proxy's clients.
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Some(server) = connect_upstream(upstream, patience) else {
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
            let rewriter = announce.clone().filter(|_| !to_client).map(|rule| AnnounceRewriter {
                rule,
                pending: Vec::new(),
                done: false,
            });
            let spawned = std::thread::Builder::new()
                .name("zk-proxy-pipe".into())
                .spawn(move || pipe(from, to, to_client, upstream, rewriter, id, shared));
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
fn pipe(
    mut from: TcpStream,
    to: TcpStream,
    to_client: bool,
    upstream: SocketAddr,
    mut rewriter: Option<AnnounceRewriter>,
    id: u64,
    shared: Arc<Shared>,
) {
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
        let chunk = match rewriter.as_mut() {
            Some(rewriter) => rewriter.feed(&buf[..n]),
            None => buf[..n].to_vec(),
        };
        if chunk.is_empty() {
            continue;
        }
        let latency =
            shared.pass(to_client) + if to_client { shared.slowness(upstream) } else { Duration::ZERO };
        if tx.send((Instant::now() + latency, chunk)).is_err() {
            break;
        }
    }
    // An incomplete header still goes out as it came.
    if let Some(rest) = rewriter.filter(|r| !r.done && !r.pending.is_empty()).map(|r| r.pending) {
        let _ = tx.send((Instant::now() + shared.pass(to_client), rest));
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

    /// An election connection's first message as ZooKeeper 3.8 writes it, then `rest`.
    fn initial_message(addr: &str, rest: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&(-65536i64).to_be_bytes());
        m.extend_from_slice(&2i64.to_be_bytes());
        m.extend_from_slice(&(addr.len() as i32).to_be_bytes());
        m.extend_from_slice(addr.as_bytes());
        m.extend_from_slice(rest);
        m
    }

    fn rewriter() -> AnnounceRewriter {
        let rule = Arc::new(Announce { from: "127.0.0.1:5000".into(), to: "127.0.0.1:61234".into() });
        AnnounceRewriter { rule, pending: Vec::new(), done: false }
    }

    #[test]
    fn the_announced_election_address_is_rewritten_whatever_the_chunking() {
        let sent = initial_message("127.0.0.1:5000", b"notification");
        let want = initial_message("127.0.0.1:61234", b"notification");
        let mut whole = rewriter();
        assert_eq!(whole.feed(&sent), want);
        let mut bytewise = rewriter();
        let got: Vec<u8> = sent.iter().flat_map(|b| bytewise.feed(&[*b])).collect();
        assert_eq!(got, want);
        // Only the first message is touched.
        assert_eq!(bytewise.feed(&sent), sent);
    }

    #[test]
    fn other_first_messages_pass_unchanged() {
        let other = initial_message("127.0.0.1:5001", b"x");
        assert_eq!(rewriter().feed(&other), other);
        // The old protocol: a non-negative sid and no address.
        let old = [2i64.to_be_bytes().as_slice(), b"x"].concat();
        assert_eq!(rewriter().feed(&old), old);
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
