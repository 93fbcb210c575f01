//! The task behind a [`crate::Session`]: it follows the raw client's states, keeps the last
//! contact fresh, starts a new session after an expiry, and closes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use zookeeper_client::{SessionState, StateWatcher};

use super::connect::open_client;
use super::features::FeatureCache;
use super::proof::BeatChain;
use super::shared::{Conn, Shared};
use crate::status::ConnectionState;
use crate::util::lock;

/// How one generation ended.
enum Ended {
    Expired,
    Closed,
}

/// Runs until the session is closed.
///
/// `states` follows `conn`'s client from before Nagle was turned off on its first connection, so
/// that a reconnection in between is seen as a change (see [`serve`]).
pub(super) async fn run(shared: Arc<Shared>, mut conn: Conn, mut states: StateWatcher) {
    let mut closing = shared.closing.subscribe();
    loop {
        let generation = conn.generation;
        if let Ended::Closed = serve(&shared, &conn, states, &mut closing).await {
            break;
        }
        tracing::warn!(
            generation,
            session = format_args!("{:#x}", conn.client.session_id().0),
            "session expired; starting a new one"
        );
        *lock(&shared.current) = None;
        lock(&shared.nodes).clear();
        // The next generation's window is its own: warm again once proven (`demand.rs`).
        shared.contact.demand.set_warm(false);
        drop(conn);
        shared.publish_unsuspended(ConnectionState::Lost, generation);
        match renew(&shared, &mut closing).await {
            Some((opened, asked)) => {
                conn = shared.install(opened, generation + 1, asked);
                states = conn.client.state_watcher();
                shared.nodelay().await;
                tracing::info!(
                    generation = generation + 1,
                    session = format_args!("{:#x}", conn.client.session_id().0),
                    "new session"
                );
                shared.publish_unsuspended(ConnectionState::Connected, generation + 1);
            }
            None => break,
        }
    }
    finish_close(&shared).await;
}

/// Follows one generation until it expires or the session is closed. Each connection of the
/// generation after the first gets Nagle turned off (a reconnection opens a new socket): the
/// first had it done after `states` was made, so any reconnection since is a change here.
///
/// The generation is suspended while its connection is down or its (warm) safe window has
/// passed (`window.rs`): a timer at the window's end suspends it if no proof came meanwhile, and
/// it is reported `Reconnected` only once connected with the window open again (a beat is sent
/// at once after a reconnection that found it passed).
///
/// Beats (`sync`s) go only while someone asks for the window (`demand.rs`), one at a time,
/// each a period after the last one's answer (`ConnectOptions::beat_period` of the negotiated
/// timeout): each answer proves that an earlier beat reached the leader (`proof.rs`). When
/// someone starts asking, a beat goes at once and the next right after its answer, so that a
/// recent enough earlier one is proven within two round trips.
async fn serve(
    shared: &Arc<Shared>,
    conn: &Conn,
    mut states: StateWatcher,
    closing: &mut watch::Receiver<bool>,
) -> Ended {
    let generation = conn.generation;
    let mut beats = Beats::new(conn, shared);
    let mut contacts = shared.contact.channel.subscribe();
    let mut state = states.state();
    let mut changed = false;
    let follow = follow_ensemble(shared, conn);
    let ended = loop {
        let connected = matches!(state, SessionState::SyncConnected | SessionState::ConnectedReadOnly);
        let reconnected = std::mem::take(&mut changed) && connected;
        if reconnected {
            // A reconnection may be to another server (the Disconnected before it can be
            // skipped by the state channel): what the last one could do is not known of it.
            conn.features.forget();
            shared.nodelay().await;
        }
        let asked = beats.follow_demand(shared, generation);
        match state {
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed => break Ended::Expired,
            SessionState::Disconnected => {
                // The next connection may be to a server of another version.
                conn.features.forget();
                shared.suspend(generation)
            }
            // Connected: resume if suspended. Just back, but the window passed meanwhile: beat
            // now, once (the proofs that open it again follow, a few beats later).
            _ if connected && !shared.resume(generation) && reconnected => beats.now(),
            _ => {}
        }
        // The window's end, while warm and not suspended: if no proof moved it by then, suspend.
        let watched = shared.contact.demand.is_warm() && !shared.is_suspended();
        let window_end = watched.then(|| shared.safe_until(generation)).flatten();
        tokio::select! {
            _ = closing.wait_for(|c| *c) => break Ended::Closed,
            next = states.changed() => {
                state = next;
                changed = true;
            }
            _ = sleep_until_some(beats.due()) => beats.send(conn),
            answer = join_some(&mut beats.in_flight) => beats.answered(answer, conn, shared),
            // A proof: the window moved (and may open again after a lapse).
            _ = contacts.changed() => {}
            _ = sleep_until_some(window_end) => shared.check_window(generation),
            // Someone starts asking; or the last asker's time is up.
            _ = shared.contact.demand.woken() => {}
            _ = sleep_until_some(asked.flatten()) => {}
        }
    };
    beats.stop();
    if let Some(follow) = follow {
        follow.abort();
    }
    ended
}

/// Following the ensemble's configuration (`relay.rs`): a task of this generation.
fn follow_ensemble(shared: &Shared, conn: &Conn) -> Option<JoinHandle<()>> {
    shared.connect.relay.as_ref().map(|relay| {
        let pause = conn.client.session_timeout() / 20;
        super::relay::follow(zookeeper_client::Client::clone(&conn.client), relay.clone(), pause)
    })
}

/// One generation's beats: the chain of answers, the beat in flight, when the next is due,
/// and whether anyone asks for them.
struct Beats {
    chain: BeatChain,
    in_flight: Option<JoinHandle<Option<(Instant, Instant)>>>,
    next: Instant,
    /// Whether someone asks for the window (the beats go on).
    asked: bool,
    /// Whether the next beat goes right after the answer of the one in flight (the first
    /// beats after someone started asking).
    quick: bool,
    /// While the window warms: when the first beat since someone started asking was answered.
    /// A beat goes a quarter of the timeout after it (`m`) and the next right after that one's
    /// answer (`k`), which proves it: the window is warm a quarter of the timeout after the ask
    /// rather than a whole number of periods later.
    warming: Option<Instant>,
}

impl Beats {
    fn new(conn: &Conn, shared: &Shared) -> Beats {
        Beats {
            chain: BeatChain::new(conn.client.session_timeout(), shared.options.beat_period),
            in_flight: None,
            next: Instant::now(),
            asked: false,
            quick: false,
            warming: None,
        }
    }

    /// Starts or stops beating as someone asks for the window or nobody does any more
    /// (`demand.rs`); returns the asking as [`Shared::window_asked`] says it.
    fn follow_demand(&mut self, shared: &Shared, generation: u64) -> Option<Option<Instant>> {
        let asked = shared.window_asked(Instant::now());
        match (asked.is_some(), self.asked) {
            (true, false) => {
                tracing::trace!(generation, "the window is asked for: beating");
                self.asked = true;
                self.quick = true;
                self.now();
                shared.warm_if_ahead(generation);
            }
            (false, true) => {
                tracing::trace!(generation, "nobody asks for the window: no more beats");
                self.asked = false;
                shared.contact.demand.set_warm(false);
            }
            _ => {}
        }
        asked
    }

    /// The next beat goes now.
    fn now(&mut self) {
        self.next = self.next.min(Instant::now());
    }

    /// When the next beat is due: `None` while one is in flight or nobody asks.
    fn due(&self) -> Option<Instant> {
        (self.in_flight.is_none() && self.asked).then_some(self.next)
    }

    fn send(&mut self, conn: &Conn) {
        self.in_flight = Some(heartbeat(conn));
    }

    fn answered(&mut self, answer: Option<(Instant, Instant)>, conn: &Conn, shared: &Shared) {
        self.in_flight = None;
        let now = Instant::now();
        if let Some(proven) = answer.and_then(|(sent, at)| self.chain.answered(sent, at)) {
            conn.note_contact(proven);
            if self.asked {
                shared.warm_if_ahead(conn.generation);
            }
        }
        let warm = shared.contact.demand.is_warm();
        self.next = if std::mem::take(&mut self.quick) {
            self.warming = answer.filter(|_| !warm).map(|(_, at)| at);
            now
        } else if let Some(first) = self.warming.filter(|_| !warm) {
            let m = first + self.chain.spacing();
            match answer {
                // That was `m`: `k` now, once.
                Some((sent, _)) if sent >= m => {
                    self.warming = None;
                    now
                }
                _ => (now + self.chain.period()).min(m),
            }
        } else {
            now + self.chain.period()
        };
    }

    fn stop(self) {
        if let Some(beat) = self.in_flight {
            beat.abort();
        }
    }
}

/// Sleeps until `at`, or forever when `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The answer of the beat in flight (`None`: not answered); never resolves without one.
async fn join_some(beat: &mut Option<JoinHandle<Option<(Instant, Instant)>>>) -> Option<(Instant, Instant)> {
    match beat {
        Some(beat) => beat.await.ok().flatten(),
        None => std::future::pending().await,
    }
}

/// One `sync`, which the leader answers (a follower forwards it): its send and answer times,
/// or `None` when it was not answered.
fn heartbeat(conn: &Conn) -> JoinHandle<Option<(Instant, Instant)>> {
    let client = conn.client.clone();
    tokio::spawn(async move {
        let sent = Instant::now();
        // Only a success proves the leader processed it on a live session: an error may come
        // from the server we are connected to alone.
        let answer = client.sync("/").await;
        tracing::trace!(elapsed = ?sent.elapsed(), ?answer, "beat");
        answer.is_ok().then(|| (sent, Instant::now()))
    })
}

/// Starts a new session, backing off between failed attempts; `None` once closed. With the
/// client, when the attempt that made it began.
async fn renew(
    shared: &Arc<Shared>,
    closing: &mut watch::Receiver<bool>,
) -> Option<((zookeeper_client::Client, FeatureCache), Instant)> {
    let (initial, max) = shared.options.backoff;
    let mut delay = initial;
    loop {
        let asked = Instant::now();
        tokio::select! {
            _ = closing.wait_for(|c| *c) => return None,
            opened = open_client(
                &shared.connect.shown,
                shared.connect.relay_address(),
                &shared.options,
            ) => match opened {
                Ok(opened) => return Some((opened, asked)),
                Err(e) => tracing::warn!(error = %e, retry_in = ?delay, "could not start a new session"),
            },
        }
        tokio::select! {
            _ = closing.wait_for(|c| *c) => return None,
            _ = tokio::time::sleep(jitter(delay)) => {}
        }
        delay = (delay * 2).min(max);
    }
}

/// Between half and the whole of `delay`, at random.
fn jitter(delay: Duration) -> Duration {
    let random = (uuid::Uuid::new_v4().as_u128() % 1_000) as u32;
    delay / 2 + delay / 2 * random / 1_000
}

/// Deletes our live nodes at once (other clones of the client may outlive us), drops our
/// client, and reports `Closed`.
async fn finish_close(shared: &Arc<Shared>) {
    let conn = lock(&shared.current).take();
    let generation = shared.reports.status.borrow().generation;
    if let Some(conn) = conn {
        let nodes: Vec<Arc<str>> = lock(&shared.nodes).drain().collect();
        if !nodes.is_empty() && conn.client.state() == SessionState::SyncConnected {
            // Sent back to back; a bounded wait for the answers.
            let deletes: Vec<_> = nodes.iter().map(|path| conn.client.delete(path, None)).collect();
            let all = async {
                for delete in deletes {
                    let _ = delete.await;
                }
            };
            let bound = conn.client.session_timeout().min(Duration::from_secs(2));
            if tokio::time::timeout(bound, all).await.is_err() {
                tracing::warn!("closing: our nodes were not all deleted in time; they go with the session");
            }
        }
        drop(conn);
    }
    shared.publish_unsuspended(ConnectionState::Closed, generation);
}
