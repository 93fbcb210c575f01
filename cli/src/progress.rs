//! The live "waiting for /locks/x: 3 ahead" line on stderr.
//!
//! For a lock, the line follows the acquire's own queue events ([`Progress::event`]): no
//! request of its own but one read of the holder's id per change, and no polling. An election
//! has no such events: [`Progress::while_waiting`] lists the queue once, then watches the
//! holder's node and our predecessor's (one-shot `exists` watches on the current raw client),
//! and lists again only when one of them fires.

use std::future::Future;
use std::io::{IsTerminal, Write};

use zk_recipes::zookeeper_client::{Client, Error as ZkError, OneshotWatcher};
use zk_recipes::Participant;

/// A progress line as it is written: as it is, or under `--log-format json` an event.
fn as_logged(line: &str) -> String {
    if crate::say::json() {
        crate::say::line(crate::say::Level::Info, line, None)
    } else {
        line.to_string()
    }
}

/// Where waiting progress goes: a live line on a terminal, plain lines with `-v`, else nowhere.
#[derive(Clone, Copy)]
pub struct Progress {
    tty: bool,
    verbose: bool,
}

impl Progress {
    pub fn new(verbose: bool) -> Progress {
        // Under --log-format json, no live line: each change is an event of its own.
        Progress { tty: std::io::stderr().is_terminal() && !crate::say::json(), verbose }
    }

    pub fn enabled(&self) -> bool {
        self.tty || self.verbose
    }

    fn show(&self, line: &str) {
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{}", as_logged(line));
        }
        let _ = err.flush();
    }

    /// Clears the live line.
    pub fn done(&self) {
        if self.tty {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }

    pub fn note(&self, line: &str) {
        if self.enabled() {
            self.done();
            let _ = writeln!(std::io::stderr(), "{}", as_logged(line));
        }
    }

    /// Shows what an acquire of `path` reports.
    pub fn event(&self, path: &str, event: &zk_recipes::QueueEvent) {
        use zk_recipes::QueueEvent as E;
        if !self.enabled() {
            return;
        }
        let holder = |holder: &Option<String>| holder.clone().unwrap_or_else(|| "?".into());
        match event {
            E::Queued { ahead, holder: h, .. } | E::MovedUp { ahead, holder: h, .. } => {
                self.show(&format!("waiting for {path}: {ahead} ahead (holder: {})", holder(h)))
            }
            E::Requeued { generation, .. } => self.show(&format!(
                "waiting for {path}: the session expired; queued again (generation {generation})"
            )),
            E::LockDelay { wait, vanished, .. } => self.show(&format!(
                "waiting for {path}: lock delay of {} ({vanished} vanished without a clean release)",
                humantime::format_duration(*wait)
            )),
            _ => self.done(),
        }
    }

    /// Shows how many are ahead of `me` while `waiting` runs. Lists the queue, watches the
    /// holder and our predecessor, and lists again only when a watch fires.
    pub async fn while_waiting<T, F, L>(
        &self,
        path: &str,
        me: &str,
        waiting: F,
        list: impl Fn() -> L,
        client: Client,
    ) -> T
    where
        F: Future<Output = T>,
        L: Future<Output = zk_recipes::Result<Vec<Participant>>>,
    {
        if !self.enabled() {
            return waiting.await;
        }
        tokio::pin!(waiting);
        let mut last = String::new();
        // Until our node shows up, a children watch is armed *before* each listing, so that
        // a node arriving in between is seen.
        let mut arm_children = true;
        loop {
            let watching = async {
                let children = if arm_children { watch_children(&client, path).await } else { None };
                let Ok(queue) = list().await else {
                    // Cannot read the queue (connection trouble): show nothing more; the
                    // acquire reports real errors.
                    return std::future::pending::<()>().await;
                };
                let at = queue.iter().position(|p| p.id == me);
                let line = waiting_line(path, &queue, at);
                if line != last {
                    self.show(&line);
                    last = line;
                }
                arm_children = at.is_none();
                let watchers = match (at, children) {
                    (None, Some(children)) => vec![children],
                    (None, None) => return,
                    (Some(at), _) => match watch_ahead(&client, path, &queue, at).await {
                        Ahead::Watching(watchers) => watchers,
                        Ahead::Gone => return,
                        Ahead::Unreadable => return std::future::pending::<()>().await,
                    },
                };
                if watchers.is_empty() {
                    return std::future::pending::<()>().await;
                }
                let fired: Vec<_> = watchers.into_iter().map(|w| Box::pin(w.changed())).collect();
                let _ = futures_select_any(fired).await;
            };
            tokio::select! {
                out = &mut waiting => {
                    self.done();
                    return out;
                }
                _ = watching => {}
            }
        }
    }
}

/// The line shown while waiting: how many are ahead of our node (at `at` in `queue`) and who
/// holds, or only the path while our node is not listed yet.
fn waiting_line(path: &str, queue: &[Participant], at: Option<usize>) -> String {
    match at {
        Some(ahead) => format!(
            "waiting for {path}: {ahead} ahead (holder: {})",
            queue.first().map_or("?", |p| p.id.as_str())
        ),
        None => format!("waiting for {path}"),
    }
}

/// What [`watch_ahead`] armed.
enum Ahead {
    /// A watch on the holder and one on our predecessor: one when they are the same node, and
    /// only our own node's while we hold.
    Watching(Vec<OneshotWatcher>),
    /// One of them is gone already: list again at once.
    Gone,
    /// The watches could not be set (connection trouble): show nothing more.
    Unreadable,
}

/// Watches the holder of `queue` and the node just ahead of ours (at `at`).
async fn watch_ahead(client: &Client, path: &str, queue: &[Participant], at: usize) -> Ahead {
    let mut nodes = vec![queue.first().map(|p| p.node.clone())];
    nodes.push(at.checked_sub(1).map(|i| queue[i].node.clone()));
    let mut nodes: Vec<String> = nodes.into_iter().flatten().collect();
    nodes.dedup();
    let mut watchers = Vec::new();
    for node in nodes {
        match client.check_and_watch_stat(&format!("{path}/{node}")).await {
            Ok((Some(_), watcher)) => watchers.push(watcher),
            Ok((None, _)) => return Ahead::Gone,
            Err(_) => return Ahead::Unreadable,
        }
    }
    Ahead::Watching(watchers)
}

/// A one-shot watch on the children of `path`, or on its creation if it does not exist.
async fn watch_children(client: &Client, path: &str) -> Option<OneshotWatcher> {
    match client.list_and_watch_children(path).await {
        Ok((_, watcher)) => Some(watcher),
        Err(ZkError::NoNode) => client.check_and_watch_stat(path).await.ok().map(|(_, w)| w),
        Err(_) => None,
    }
}

/// Resolves when the first of `futures` does.
async fn futures_select_any<F: Future + Unpin>(futures: Vec<F>) {
    let mut futures = futures;
    std::future::poll_fn(move |cx| {
        for f in futures.iter_mut() {
            if std::pin::Pin::new(f).poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}
