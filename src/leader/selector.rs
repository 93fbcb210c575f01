//! [`LeaderSelector`]: runs a caller's async task while we lead.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use zookeeper_client::Client;

use super::lifecycle::Lifecycle;
use super::Leadership;
use crate::error::Result;
use crate::lock_core::LockCore;
use crate::mutex::InterProcessMutex;
use crate::options::LockOptions;
use crate::participants::Participant;
use crate::status::LossPolicy;

/// Options for a [`LeaderSelector`].
#[derive(Clone, Debug)]
pub struct SelectorOptions {
    id: String,
    auto_requeue: bool,
    grace: Duration,
    policy: LossPolicy,
    format: crate::NodeFormat,
    acls: Option<zookeeper_client::Acls<'static>>,
}

impl SelectorOptions {
    /// A participant `id`, no requeue, 5 s grace, the default [`LossPolicy`].
    pub fn new(id: impl Into<String>) -> SelectorOptions {
        SelectorOptions {
            id: id.into(),
            auto_requeue: false,
            grace: Duration::from_secs(5),
            policy: LossPolicy::default(),
            format: crate::NodeFormat::default(),
            acls: None,
        }
    }

    /// Rejoin the queue after each term (Curator's `autoRequeue()`).
    pub fn auto_requeue(mut self, on: bool) -> SelectorOptions {
        self.auto_requeue = on;
        self
    }

    /// How long a task may run on after it was told leadership is lost, before the selector
    /// drops (cancels) it. Leadership is reported lost at once either way.
    pub fn grace(mut self, grace: Duration) -> SelectorOptions {
        self.grace = grace;
        self
    }

    /// The ACLs of the nodes the selector creates (`Acls::creator_all()`, `Acls::anyone_all()`, ...).
    pub fn acls(mut self, acls: zookeeper_client::Acls<'static>) -> SelectorOptions {
        self.acls = Some(acls);
        self
    }

    /// Curator's lock names (default) or kazoo's.
    pub fn format(mut self, format: crate::NodeFormat) -> SelectorOptions {
        self.format = format;
        self
    }

    /// Whether a suspended connection ends the term.
    pub fn loss_policy(mut self, policy: LossPolicy) -> SelectorOptions {
        self.policy = policy;
        self
    }
}

/// What a leadership task gets: its fencing token and a signal to stop.
#[derive(Clone, Debug)]
pub struct LeadershipContext {
    fencing_token: u64,
    stop: watch::Receiver<bool>,
}

impl LeadershipContext {
    /// The fencing token of this term (the `czxid` of our node).
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// Resolves when the task must stop: leadership was lost, or the selector is closing.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|s| *s).await;
    }

    /// Whether the task has been told to stop.
    pub fn is_stopped(&self) -> bool {
        *self.stop.borrow()
    }
}

type Task = Arc<dyn Fn(LeadershipContext) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Leader election that runs a task while we lead, as Curator's `LeaderSelector`.
///
/// It contends on an exclusive queue with Curator's lock names (`_c_<uuid>-lock-<seq>`), the
/// way Curator's `LeaderSelector` uses an `InterProcessMutex`. When we lead it calls the task;
/// when leadership is lost it reports [`Leadership::NotLeader`] at once and tells the task
/// through [`LeadershipContext::stopped`], dropping it after the grace period if it does not
/// return. When the task returns, leadership is relinquished, and with `auto_requeue` we rejoin.
pub struct LeaderSelector {
    inner: Arc<Inner>,
}

struct Inner {
    core: LockCore,
    options: SelectorOptions,
    requeue: AtomicBool,
    life: Lifecycle,
}

impl std::fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("path", &self.inner.core.queue.root)
            .field("id", &self.inner.options.id)
            .finish()
    }
}

impl LeaderSelector {
    /// A selector on `path`. Nothing is sent until [`LeaderSelector::start`].
    ///
    /// # Errors
    /// [`Error::InvalidPath`](crate::Error::InvalidPath) for an invalid path.
    pub fn new(client: Client, path: &str, options: SelectorOptions) -> Result<LeaderSelector> {
        let mut lock_options = LockOptions::new()
            .participant_id(options.id.clone())
            .loss_policy(options.policy)
            .format(options.format);
        if let Some(acls) = options.acls {
            lock_options = lock_options.acls(acls);
        }
        let core = InterProcessMutex::core(client, path, &lock_options, false)?;
        let life = Lifecycle::new(path);
        Ok(LeaderSelector {
            inner: Arc::new(Inner { core, requeue: AtomicBool::new(options.auto_requeue), options, life }),
        })
    }

    /// Starts contending; `task` runs once per term.
    ///
    /// # Errors
    /// [`Error::AlreadyStarted`](crate::Error::AlreadyStarted), or [`Error::Closed`](crate::Error::Closed) after close.
    pub fn start<F, Fut>(&self, task: F) -> Result<()>
    where
        F: Fn(LeadershipContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let task: Task = Arc::new(move |ctx| Box::pin(task(ctx)));
        let inner = self.inner.clone();
        let span =
            tracing::info_span!("leader_selector", path = %inner.core.queue.root, id = %inner.options.id);
        self.inner.life.start(move |closing| tracing::Instrument::instrument(run(inner, task, closing), span))
    }

    /// Stops: tells a running task to stop, waits for it (up to the grace period), relinquishes
    /// leadership and deletes our node.
    ///
    /// # Cancel safety
    /// If dropped, the selector still closes in the background.
    pub async fn close(&self) {
        self.inner.life.close().await;
        self.inner.core.queue.janitor.settled().await;
    }

    /// Turns requeueing after each term on or off.
    pub fn set_auto_requeue(&self, on: bool) {
        self.inner.requeue.store(on, Ordering::SeqCst);
    }

    /// Whether we lead now.
    pub fn has_leadership(&self) -> bool {
        self.inner.life.current().is_leader()
    }

    /// Leadership changes, starting with the current state.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.inner.life.subscribe()
    }

    /// Waits until we lead; returns the term's fencing token.
    ///
    /// # Errors
    /// [`Error::Closed`](crate::Error::Closed) if the selector stopped first, or the error that stopped it.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn await_leadership(&self) -> Result<u64> {
        self.inner.life.await_leadership().await
    }

    /// Every participant in order; the first leads.
    ///
    /// # Errors
    /// [`Error::SessionExpired`](crate::Error::SessionExpired), [`Error::NoAuth`](crate::Error::NoAuth) or [`Error::ZooKeeper`](crate::Error::ZooKeeper).
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        self.inner.core.participants().await
    }
}

impl Drop for LeaderSelector {
    fn drop(&mut self) {
        self.inner.life.close_in_background();
    }
}

async fn run(inner: Arc<Inner>, task: Task, mut closing: oneshot::Receiver<()>) -> Result<()> {
    loop {
        let guard = tokio::select! {
            _ = &mut closing => return Ok(()),
            guard = inner.core.acquire_forever(inner.core.marker) => guard?,
        };
        let fencing_token = guard.fencing_token();
        inner.life.set(Leadership::Leader { fencing_token });
        let (stop, stop_rx) = watch::channel(false);
        let mut work = task(LeadershipContext { fencing_token, stop: stop_rx });
        let mut closed = false;
        tokio::select! {
            _ = &mut work => {
                inner.life.set(Leadership::NotLeader);
            }
            _ = guard.lost() => {
                inner.life.set(Leadership::NotLeader);
                stop.send_replace(true);
                wind_down(&mut work, inner.options.grace).await;
            }
            _ = &mut closing => {
                closed = true;
                inner.life.set(Leadership::NotLeader);
                stop.send_replace(true);
                wind_down(&mut work, inner.options.grace).await;
            }
        }
        drop(work);
        if let Err(e) = guard.release().await {
            tracing::debug!(error = %e, "relinquishing leadership");
        }
        if closed || !inner.requeue.load(Ordering::SeqCst) {
            return Ok(());
        }
    }
}

/// Lets a told-to-stop task finish, up to `grace`; after that it is dropped (cancelled).
async fn wind_down(work: &mut Pin<Box<dyn Future<Output = ()> + Send>>, grace: Duration) {
    if tokio::time::timeout(grace, work).await.is_err() {
        tracing::warn!(?grace, "leadership task ignored the stop signal; dropping it");
    }
}
