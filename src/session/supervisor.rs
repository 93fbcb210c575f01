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
/// The generation is suspended while its connection is down or its safe window has passed
/// (`window.rs`): a timer at the window's end suspends it if no proof came meanwhile, and it
/// is reported `Reconnected` only once connected with the window open again (a beat is sent at
/// once after a reconnection that found it passed).
///
/// Beats (`sync`s) go one at a time, each a period after the last one's answer (a twentieth of
/// the negotiated timeout unless `ConnectOptions::beat_period` says otherwise): each answer
/// proves that an earlier beat reached the leader (`proof.rs`).
async fn serve(
    shared: &Arc<Shared>,
    conn: &Conn,
    mut states: StateWatcher,
    closing: &mut watch::Receiver<bool>,
) -> Ended {
    let generation = conn.generation;
    let mut chain = BeatChain::new(conn.client.session_timeout(), shared.options.beat_period);
    let mut beat: Option<JoinHandle<Option<(Instant, Instant)>>> = None;
    let mut next_beat = Instant::now();
    let mut contacts = shared.contact.channel.subscribe();
    let mut state = states.state();
    let mut changed = false;
    // Following the ensemble's configuration (`relay.rs`): a task of this generation.
    let follow = shared.connect.relay.as_ref().map(|relay| {
        let pause = conn.client.session_timeout() / 20;
        super::relay::follow(zookeeper_client::Client::clone(&conn.client), relay.clone(), pause)
    });
    let ended = loop {
        let connected = matches!(state, SessionState::SyncConnected | SessionState::ConnectedReadOnly);
        let reconnected = std::mem::take(&mut changed) && connected;
        if reconnected {
            // A reconnection may be to another server (the Disconnected before it can be
            // skipped by the state channel): what the last one could do is not known of it.
            conn.features.forget();
            shared.nodelay().await;
        }
        match state {
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed => break Ended::Expired,
            SessionState::Disconnected => {
                // The next connection may be to a server of another version.
                conn.features.forget();
                shared.suspend(generation)
            }
            // Connected: resume if suspended. Just back, but the window passed meanwhile: beat
            // now, once (the proofs that open it again follow, a few beats later).
            _ if connected && !shared.resume(generation) && reconnected => {
                next_beat = next_beat.min(Instant::now());
            }
            _ => {}
        }
        // The window's end, while not suspended: if no proof moved it by then, suspend.
        let window_end = (!shared.is_suspended()).then(|| shared.safe_until(generation)).flatten();
        let beat_due = beat.is_none().then_some(next_beat);
        tokio::select! {
            _ = closing.wait_for(|c| *c) => break Ended::Closed,
            next = states.changed() => {
                state = next;
                changed = true;
            }
            _ = sleep_until_some(beat_due) => beat = Some(heartbeat(conn)),
            answer = join_some(&mut beat) => {
                beat = None;
                let now = Instant::now();
                if let Some(proven) = answer.and_then(|(sent, at)| chain.answered(sent, at)) {
                    conn.note_contact(proven);
                }
                next_beat = now + chain.period();
            }
            // A proof: the window moved (and may open again after a lapse).
            _ = contacts.changed() => {}
            _ = sleep_until_some(window_end) => shared.check_window(generation),
        }
    };
    if let Some(beat) = beat {
        beat.abort();
    }
    if let Some(follow) = follow {
        follow.abort();
    }
    ended
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
            opened = open_client(&shared.connect.shown, shared.connect.relay_address(), &shared.options) => match opened {
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
        let nodes: Vec<String> = lock(&shared.nodes).drain().collect();
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
