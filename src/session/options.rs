//! How to connect a session: [`ConnectOptions`], and the checks of its values made before
//! anything is sent.

use std::time::Duration;

#[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
use super::sasl::SaslConfig;
#[cfg(feature = "tls")]
use super::tls::TlsConfig;
use crate::error::{Error, Result};

/// How to connect a [`crate::Session`]. `ConnectOptions::new(timeout)` is what
/// [`crate::Session::connect`] uses.
#[derive(Clone)]
#[must_use]
pub struct ConnectOptions {
    pub(crate) session_timeout: Duration,
    pub(crate) backoff: (Duration, Duration),
    pub(super) auth: Vec<(String, Vec<u8>)>,
    pub(super) create_chroot: bool,
    pub(crate) tcp_nodelay: bool,
    pub(crate) beat_period: f64,
    pub(crate) follow_ensemble: bool,
    pub(crate) beat_while_idle: bool,
    #[cfg(feature = "tls")]
    pub(super) tls: Option<TlsConfig>,
    #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
    pub(super) sasl: Option<SaslConfig>,
}

impl std::fmt::Debug for ConnectOptions {
    /// Credentials never reach logs: only their schemes are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let schemes: Vec<&str> = self.auth.iter().map(|(scheme, _)| scheme.as_str()).collect();
        let mut out = f.debug_struct("ConnectOptions");
        out.field("session_timeout", &self.session_timeout)
            .field("auth", &format_args!("{schemes:?} (credentials redacted)"))
            .field("create_chroot", &self.create_chroot)
            .field("tcp_nodelay", &self.tcp_nodelay)
            .field("beat_period", &self.beat_period)
            .field("follow_ensemble", &self.follow_ensemble)
            .field("beat_while_idle", &self.beat_while_idle)
            .field("backoff", &self.backoff);
        #[cfg(feature = "tls")]
        out.field("tls", &self.tls);
        #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
        out.field("sasl", &self.sasl);
        out.finish()
    }
}

impl ConnectOptions {
    /// A session timeout of 1 ms to `i32::MAX` ms (connecting refuses any other with
    /// [`Error::InvalidSessionTimeout`]; the server bounds it to its `[minSessionTimeout,
    /// maxSessionTimeout]`, by default 2 to 20 ticks); no credentials; a missing chroot is an
    /// error; reconnection after an expiry backs off from 50 ms up to 5 s; Nagle's algorithm off on the
    /// connections, on Linux (see [`ConnectOptions::tcp_nodelay`]); while the safe window is
    /// asked for, a beat 0.14 of the timeout after the previous one's answer (see
    /// [`ConnectOptions::beat_period`]).
    pub fn new(session_timeout: Duration) -> ConnectOptions {
        ConnectOptions {
            session_timeout,
            backoff: (Duration::from_millis(50), Duration::from_secs(5)),
            auth: Vec::new(),
            create_chroot: false,
            tcp_nodelay: true,
            beat_period: DEFAULT_BEAT_PERIOD,
            follow_ensemble: false,
            beat_while_idle: false,
            #[cfg(feature = "tls")]
            tls: None,
            #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
            sasl: None,
        }
    }

    /// Authenticates every connection with SASL ([`SaslConfig`]: DIGEST-MD5 or GSSAPI), the
    /// first, each reconnection and each new session after an expiry, before any request. A
    /// session whose authentication the servers refuse is never handed out: connecting fails
    /// with [`Error::AuthFailed`], within the connect wait. Works over TLS too.
    #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))))]
    pub fn sasl(mut self, sasl: SaslConfig) -> ConnectOptions {
        self.sasl = Some(sasl);
        self
    }

    /// The error for servers that refused this session's authentication at `shown`.
    pub(super) fn refused(&self, shown: &str) -> Error {
        #[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
        if let Some(sasl) = &self.sasl {
            let mechanism = sasl.mechanism();
            let reason = format!("the servers refused the {mechanism} credentials");
            return Error::AuthFailed { connect: shown.to_string(), mechanism, reason };
        }
        let reason = "the servers require SASL authentication and none is configured".to_string();
        Error::AuthFailed { connect: shown.to_string(), mechanism: "none", reason }
    }

    /// Connects over TLS with this trust (and identity): every server of the connect string is
    /// reached on its secure client port, unless written with a `tcp://` prefix. Its
    /// certificate must name the host or IP address as written in the connect string.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: TlsConfig) -> ConnectOptions {
        self.tls = Some(tls);
        self
    }

    /// Adds credentials, e.g. `auth("digest", b"user:password")`. Nodes created with
    /// [`Acls::creator_all`](zookeeper_client::Acls::creator_all) (see
    /// [`crate::LockOptions::acls`]) are then ours alone.
    pub fn auth(mut self, scheme: &str, credentials: &[u8]) -> ConnectOptions {
        self.auth.push((scheme.to_string(), credentials.to_vec()));
        self
    }

    /// How a [`crate::Session`] paces its attempts to start a new session after an expiry:
    /// the first waits about `initial`, each next one twice as long, at most `max`, each with
    /// random jitter (between half and the whole of the delay). Attempts go on until the session
    /// is closed.
    pub fn reconnect_backoff(mut self, initial: Duration, max: Duration) -> ConnectOptions {
        let initial = initial.max(Duration::from_millis(1));
        self.backoff = (initial, max.max(initial));
        self
    }

    /// Creates the connect string's chroot (`host:port/app`) when it does not exist, instead of
    /// failing with [`Error::ChrootMissing`].
    pub fn create_chroot(mut self, create: bool) -> ConnectOptions {
        self.create_chroot = create;
        self
    }

    /// Whether the session turns Nagle's algorithm off (`TCP_NODELAY`) on its connections, as
    /// ZooKeeper's Java client does; on by default. `zookeeper-client` leaves it on, and then a
    /// request written while an earlier one is unanswered waits for that answer: the requests a
    /// recipe sends back to back (a create and its listing, a release's delete and the next
    /// create) would go a round trip apart.
    ///
    /// The client crate gives no access to its socket, so the session sets the option after
    /// each connection (the first, every reconnection, a new session after an expiry) on this
    /// process's TCP sockets connected to one of its servers, as their hosts resolve at that
    /// moment (the sockets are found through `/proc/self/fd`). So another client of the same
    /// servers in this process gets it too, and `false` here does not stop another session
    /// with the option on from setting it on this one's connections to the same servers. Linux
    /// only; elsewhere this does nothing.
    pub fn tcp_nodelay(mut self, on: bool) -> ConnectOptions {
        self.tcp_nodelay = on;
        self
    }

    /// How long after a beat's answer the session sends the next beat, as a fraction of the
    /// **negotiated** session timeout (the one the server granted,
    /// [`crate::Session::session_timeout`], for every new session too): from `0.05` (a
    /// twentieth) to `0.15` (three twentieths); `0.14` by default. The period is at least 10 ms.
    ///
    /// A beat is a `sync` that the leader answers. With `j` answered, `m` the first beat sent
    /// a quarter of the timeout or more after that, and `k` the next, `k`'s answer proves that
    /// `j` reached the leader: [`crate::Session::safe_until`] counts from that proof
    /// (docs/safety.md, "The safe window").
    ///
    /// **The session beats only while the window is asked for**: while a hold lives, while an
    /// acquire is under way, for a session timeout after a call of
    /// [`crate::Session::safe_until`] or [`crate::Session::last_contact`], while a receiver of
    /// [`crate::Session::contacts`] lives, and for a session timeout after the last of those
    /// (docs/sessions.md, "When the session beats"). Otherwise it sends only the client crate's
    /// pings. The period trades three things while it beats:
    ///
    /// * **The requests.** The client crate pings about every fifth of the timeout when
    ///   nothing else goes; a beat every `0.14` replaces those pings with about 1.4 times as
    ///   many requests, every twentieth with four times as many.
    /// * **The window's freshness.** The proven contact lags the latest answer by a quarter of
    ///   the timeout rounded up to whole periods plus one period, and one period more just
    ///   before the next proof (plus round trips). So `safe_until()` stays ahead, while
    ///   connected, by about 0.43 to 0.58 of the timeout at the default, 0.65 to 0.7 at `0.05`,
    ///   0.5 to 0.62 at `0.125`, 0.4 to 0.55 at `0.15` (docs/sessions.md). A hold that stops
    ///   at its `safe_until()` gets that much less time, and a process stalled for longer than
    ///   what is left is suspended by its own session. Half the timeout at the least takes
    ///   `0.125` or less: more requests than the default (1.6 times the pings).
    /// * **Failover after a crash.** The server expires a killed process's session one timeout
    ///   after it last heard from it: with a longer period it had last heard from it, on
    ///   average, about half a period before the crash, and the failover comes that much
    ///   sooner.
    ///
    /// The range ends at three twentieths because the client crate pings the server by itself
    /// three twentieths of the timeout after its last request: with a longer period those
    /// pings fill the gaps, so the requests grow again while the window grows staler (at
    /// `0.2`, 0.2 to 0.4 of the timeout ahead, with more requests than at `0.15`).
    ///
    /// # Errors
    /// Connecting ([`crate::Session::connect_with`]) fails at once, nothing sent, with
    /// [`Error::InvalidBeatPeriod`] for a fraction outside `[0.05, 0.15]` or not a number.
    pub fn beat_period(mut self, fraction_of_timeout: f64) -> ConnectOptions {
        self.beat_period = fraction_of_timeout;
        self
    }

    /// Follows the ensemble's configuration, as Curator's `EnsembleTracker` does: the session
    /// reads `/zookeeper/config` (and watches it), and connects to the servers it names, so
    /// that it carries on when `reconfig` replaces every server of the connect string. Off by
    /// default. The connect string is used until the first configuration is read, and while
    /// the configuration names no client addresses.
    ///
    /// The client crate cannot be given a new server list, so the session's connections go
    /// through a relay on a loopback port of this process (one more hop on every request);
    /// a connection moves only when its server leaves the configuration, as a reconnection
    /// (`Suspended`, then `Reconnected`, same session). Follow only an ensemble whose
    /// configuration names addresses this process can reach. docs/sessions.md, "Ensembles
    /// that change", gives the rules.
    ///
    /// # Errors
    /// Connecting fails at once with [`Error::Tls`] when TLS is on too: the relay would stand
    /// between the client and the server's certificate.
    pub fn follow_ensemble(mut self, on: bool) -> ConnectOptions {
        self.follow_ensemble = on;
        self
    }

    /// Beats for as long as the session lives, as if its safe window were always asked for.
    /// Off by default: a session beats only while a hold, an acquire or a caller of its window
    /// asks (and for one timeout after), and sends nothing but the client crate's pings
    /// otherwise; an acquire on a session nobody asked for in a while then waits until a
    /// proof puts the window half a timeout ahead, up to about a quarter of the timeout.
    ///
    /// On, that wait never comes (the window stays proven), for a beat every
    /// [`ConnectOptions::beat_period`] while idle: about 1.4 times the pings' requests at the
    /// default period, each forwarded to the leader. For a service that takes a lock now and
    /// then and must not wait for the window. docs/sessions.md, "When the session beats".
    pub fn beat_while_idle(mut self, on: bool) -> ConnectOptions {
        self.beat_while_idle = on;
        self
    }
}

/// The smallest session timeout that can be asked for: ZooKeeper counts it in whole milliseconds,
/// and the client crate reads 0 as "its default" (6 s).
const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(1);
/// The largest: the connect request carries it as a signed 32-bit count of milliseconds.
const MAX_SESSION_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// Refuses a session timeout ZooKeeper cannot be asked for (see [`Error::InvalidSessionTimeout`]).
pub(crate) fn check_session_timeout(requested: Duration) -> Result<()> {
    if (MIN_SESSION_TIMEOUT..=MAX_SESSION_TIMEOUT).contains(&requested) {
        Ok(())
    } else {
        Err(Error::InvalidSessionTimeout { requested })
    }
}

/// The default beat period, as a fraction of the negotiated session timeout: 0.14, so that a
/// session that holds sends about 1.4 times the requests of the client crate's own pings (see
/// [`ConnectOptions::beat_period`]).
pub(crate) const DEFAULT_BEAT_PERIOD: f64 = 0.14;
/// The shortest beat period that can be asked for: a twentieth.
const MIN_BEAT_PERIOD: f64 = 1.0 / 20.0;
/// The longest: three twentieths, when the client crate's own pings begin to fill the gaps
/// (see [`ConnectOptions::beat_period`]).
const MAX_BEAT_PERIOD: f64 = 3.0 / 20.0;

/// Refuses a beat period outside `[MIN_BEAT_PERIOD, MAX_BEAT_PERIOD]` (and NaN), see
/// [`Error::InvalidBeatPeriod`].
pub(crate) fn check_beat_period(fraction: f64) -> Result<()> {
    if (MIN_BEAT_PERIOD..=MAX_BEAT_PERIOD).contains(&fraction) {
        Ok(())
    } else {
        Err(Error::InvalidBeatPeriod { fraction })
    }
}
