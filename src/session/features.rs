//! [`ServerFeatures`]: what the server a session is connected to can do, learned by asking it
//! (the client protocol never says a server's version), and the session's cache of the answer.
//!
//! The probe is one `multi`: the create of an ephemeral child of a parent the caller writes
//! anyway (a recipe's root), and its delete. The transaction is atomic, so no listing ever sees
//! the child; watchers of the parent's children hear one change, as they do after a release.
//! The answer holds for the connection it came over: a session may move to another server, of
//! another version, without a new session (a rolling upgrade), so every disconnection forgets it.
//!
//! Also kept here: whether the server lacks `whoami` (ZooKeeper 3.6). That one is kept for the
//! session's generation, not forgotten on disconnection: a 3.6 server closes the connection after
//! answering a request it does not know, so asking again would close the connection again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{
    Acls, AuthUser, Client, CreateMode, Error as ZkError, MultiWriteResult, SessionState, StateWatcher,
};

use crate::error::{ClientError, Error, Result};
use crate::path::LockPath;
use crate::util::{lock, on_connection_loss};

/// What the ZooKeeper server a [`crate::Session`] is connected to can do, as a probe of it found
/// ([`crate::Session::server_features`]). More fields may come with later releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerFeatures {
    /// A create inside a `multi` answers with the new node's `Stat`: servers 3.7.2+, 3.8.2+ and
    /// 3.9.0+ (ZOOKEEPER-4026). Older ones (3.8.0, 3.6.3) answer without it, which
    /// `zookeeper-client` reports as a `Stat` whose `czxid` is -1 (`Stat::is_invalid`).
    pub multi_create_stat: bool,
    /// The server applied the probe's `multi` (a create and a delete) and answered each
    /// operation. `false` when it answered with no result at all: a follower without
    /// ZOOKEEPER-4026 (3.8.0, seen here) led by a server with it (3.9.3, in a rolling upgrade)
    /// does not apply a `multi` holding a create, whose transaction the newer leader writes in
    /// a form it does not know (`create2` inside the `multi`), so its data differ from the
    /// leader's from then on (until it restarts and syncs): creates inside a `multi` must not be
    /// relied on there. Other servers of such an
    /// ensemble can be in that state while this one is not (see `docs/compatibility.md`).
    pub multi_create_applied: bool,
}

/// The session's latest probe answer, for its current connection.
#[derive(Default)]
pub(crate) struct FeatureCache {
    /// How many times the connection changed, and the answer learned on the current one.
    state: Mutex<(u64, Option<ServerFeatures>)>,
    /// The server answered `whoami` with `Unimplemented` (ZooKeeper 3.6), at connect (a SASL
    /// session's identity check) or at [`FeatureCache::whoami`].
    no_whoami: AtomicBool,
}

impl FeatureCache {
    /// The answer learned on the current connection, if any.
    pub(crate) fn get(&self) -> Option<ServerFeatures> {
        lock(&self.state).1
    }

    /// The connection changed (or may have): the server may be another one.
    pub(crate) fn forget(&self) {
        let mut state = lock(&self.state);
        *state = (state.0 + 1, None);
    }

    fn epoch(&self) -> u64 {
        lock(&self.state).0
    }

    /// Keeps `features` unless the connection changed since the probe began (`epoch`).
    fn record(&self, epoch: u64, features: ServerFeatures) {
        let mut state = lock(&self.state);
        if state.0 == epoch {
            state.1 = Some(features);
        }
    }
}

/// Sends the probe under `parent` (see the module's documentation); its transaction's answers.
async fn probe(
    client: &Client,
    parent: &str,
) -> std::result::Result<Vec<MultiWriteResult>, zookeeper_client::Error> {
    let name = format!("zk-recipes-probe-{:x}", client.session_id().0);
    let path = if parent == "/" { format!("/{name}") } else { format!("{parent}/{name}") };
    let options = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    on_connection_loss(|| {
        let mut writer = client.new_multi_writer();
        let built = writer.add_create(&path, &[], &options).and_then(|()| writer.add_delete(&path, None));
        async move {
            built?;
            writer.commit().await.map_err(zookeeper_client::Error::from)
        }
    })
    .await
}

impl FeatureCache {
    /// The answer for the current connection: the cached one, or a probe's under `parent`
    /// (which [`crate::Session::server_features`] documents).
    pub(crate) async fn learn(&self, client: &Client, parent: &str) -> Result<ServerFeatures> {
        if parent != "/" {
            LockPath::new(parent)?;
        }
        if let Some(known) = self.get() {
            return Ok(known);
        }
        let epoch = self.epoch();
        let op = "server features probe";
        let answers = probe(client, parent).await.map_err(Error::zk(op, parent))?;
        let features = match answers.first() {
            Some(MultiWriteResult::Create { stat, .. }) => {
                ServerFeatures { multi_create_stat: !stat.is_invalid(), multi_create_applied: true }
            }
            None => {
                tracing::warn!(
                    "the server answered a multi with no results: an older follower of a newer \
                     leader, which does not apply creates inside a multi (its data now lag the \
                     leader's); see docs/compatibility.md"
                );
                ServerFeatures { multi_create_stat: false, multi_create_applied: false }
            }
            other => {
                let odd = zookeeper_client::Error::UnexpectedError(format!(
                    "the probe's create answered {other:?}"
                ));
                return Err(Error::ZooKeeper {
                    op,
                    path: parent.to_string(),
                    source: ClientError::from(odd),
                });
            }
        };
        self.record(epoch, features);
        tracing::debug!(?features, "probed the server's features");
        Ok(features)
    }
}

impl FeatureCache {
    /// Notes that the server has no `whoami`.
    pub(crate) fn note_no_whoami(&self) {
        self.no_whoami.store(true, Ordering::SeqCst);
    }

    /// The session's identities (`whoami`), as [`crate::Session::whoami`] documents: a typed
    /// [`Error::ServerTooOld`] from a server known to lack it, without asking; after a 3.6
    /// server's `Unimplemented`, once the client crate has connected again (within `wait`).
    pub(crate) async fn whoami(&self, client: &Client, wait: Duration) -> Result<Vec<AuthUser>> {
        let too_old = || Error::ServerTooOld { op: "whoami", path: "/".to_string() };
        if self.no_whoami.load(Ordering::SeqCst) {
            return Err(too_old());
        }
        let mut states = client.state_watcher();
        match client.list_auth_users().await {
            Ok(users) => Ok(users),
            Err(ZkError::Unimplemented) => {
                self.note_no_whoami();
                if let Err(reason) = connected_again(&mut states, Instant::now() + wait, wait).await {
                    tracing::warn!("{reason}");
                }
                Err(too_old())
            }
            Err(e) => Err(Error::from_zk("whoami", "/", e)),
        }
    }
}

/// Waits, until `deadline`, for the client crate to connect again after a 3.6 server answered
/// `Unimplemented` (to `whoami`): its `UnimplementedRequestProcessor` answers, then closes the
/// connection; the session lives on, and the client crate reconnects. `states` was taken before
/// the request, when the client was connected, so any connected state it reports is the new
/// connection's. A connection still open at the deadline is taken as it is. Returns what went
/// wrong otherwise, for a message.
pub(crate) async fn connected_again(
    states: &mut StateWatcher,
    deadline: Instant,
    wait: Duration,
) -> std::result::Result<(), String> {
    let reconnected = async {
        loop {
            match states.changed().await {
                SessionState::SyncConnected | SessionState::ConnectedReadOnly => return Ok(()),
                SessionState::Disconnected => continue,
                ended => return Err(ended),
            }
        }
    };
    match tokio::time::timeout_at(deadline, reconnected).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(ended)) => Err(format!(
            "the server closed the connection after answering whoami Unimplemented (ZooKeeper 3.6), \
             and reconnecting ended the session: {ended:?}"
        )),
        Err(_) if states.peek_state() == SessionState::SyncConnected => Ok(()),
        Err(_) => Err(format!(
            "the server closed the connection after answering whoami Unimplemented (ZooKeeper 3.6), \
             and the session did not reconnect within {wait:?}"
        )),
    }
}
