//! One session generation's plain deletes of our nodes, batched while others are in flight.
//!
//! The server's work per request dwarfs its work per operation: on ZooKeeper 3.8 (pinned, one
//! session), eight creates in one `multi` and their eight deletes in another cost the server
//! about 120 µs of CPU, and the same as sixteen plain requests about 650 µs (docs/performance.md,
//! "The CPU-bound rows"). So when many tasks of one session
//! release at once (many locks, per-order locks), their deletes go out together: a delete is sent
//! at once while fewer than [`WINDOW`] deletes of the generation are in flight, and otherwise
//! waits for one of them to be answered, then goes out with every other delete that waited (up to
//! [`MOST`]), in one `multi`. A lone release (nothing in flight) is sent at once, as a plain
//! delete, exactly as without batching.
//!
//! Only the plain delete of one of our own nodes, by a caller that awaits its answer before its
//! next request (`release().await`: `Conn::send_delete_batched`), is batched: a queued delete is
//! not ordered before the session's later requests, and a dropped guard promises that order. A
//! marked or tombstoned release is already a `multi` of its own (`Conn::send_delete`).
//!
//! Invariants:
//! * Every delete handed in is sent, and its answer is its own: a `multi` is atomic, so when
//!   one of its deletes fails, the others did not happen; the failed one gets its error, and
//!   the others wait again, at the head of the queue, for the next `multi` (or plain delete).
//!   A connection loss answers every delete of the `multi` with it (each caller's own retry
//!   follows, as after a plain delete's).
//! * The queue always drains: at most one delete in flight is answered through its caller's
//!   own future (the first, sent when nothing else was in flight: the lone release's path, with
//!   no hop through another task); every other one, and every `multi`, is awaited on the
//!   session's task, whose answer sends what waits. A delete stays queued only while [`WINDOW`]
//!   are in flight, so one of them is always on the session's task.
//! * An in-flight slot is given back exactly once: when its answer is in (or its caller's
//!   future is dropped unanswered, which cannot stall the queue either).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use zookeeper_client::{Client, Error as ZkError, MultiWriteError, MultiWriteResult};

use super::driver::Job;
use crate::util::lock;

/// A delete of one of our nodes, sent already (or queued to go), as `Conn::send_delete` returns
/// it.
pub(crate) type DeleteFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ZkError>> + Send>>;

/// How many deletes (plain, or `multi`s of them) one generation keeps in flight before the next
/// ones wait to go out together.
pub(crate) const WINDOW: usize = 2;

/// The most deletes in one `multi`: a request stays far below the server's `jute.maxbuffer`
/// (1 MiB by default; a lock node's path is about 100 bytes), and the rest wait for the next.
pub(crate) const MOST: usize = 256;

/// Where a delete's answer goes.
type Answer = oneshot::Sender<Result<(), ZkError>>;

/// Hands a [`Job`] to the session's task; `false` (the job dropped unrun) when there is none to
/// run it (the session is gone, or no runtime).
pub(crate) type Drive = Box<dyn Fn(Job) -> bool + Send + Sync>;

/// The batching of one generation's plain deletes.
pub(crate) struct Deletes {
    client: Arc<Client>,
    drive: Drive,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Deletes and `multi`s of them sent and not yet answered.
    in_flight: usize,
    /// Deletes waiting to go out, in the order they were handed in.
    queued: VecDeque<(String, Answer)>,
}

impl Deletes {
    /// The deletes of the generation whose client is `client`; `drive` runs a future on the
    /// session's task.
    pub fn new(client: Arc<Client>, drive: Drive) -> Deletes {
        Deletes { client, drive, state: Mutex::default() }
    }

    /// Sends the plain delete of our node at `path` (or queues it for the next `multi`, see the
    /// module's docs), and returns its answer to come.
    pub fn send(self: &Arc<Self>, path: &str) -> DeleteFuture {
        let alone = {
            let mut state = lock(&self.state);
            let alone = state.in_flight == 0;
            if alone {
                state.in_flight += 1;
            }
            alone
        };
        if alone {
            // Nothing in flight: sent now, and answered through the caller's own future.
            let sent = self.client.delete(path, None);
            let slot = Slot(self.clone());
            return Box::pin(async move {
                let answer = sent.await;
                drop(slot);
                answer
            });
        }
        // Sent now on the session's task if a slot is free (alone, nothing else waits then), or
        // with the next batch.
        let (tx, rx) = oneshot::channel();
        lock(&self.state).queued.push_back((path.to_string(), tx));
        self.flush();
        Box::pin(answered(rx))
    }

    /// Sends what waits, if a slot is free: one delete alone, or up to [`MOST`] of them in one
    /// `multi`.
    fn flush(self: &Arc<Self>) {
        let batch: Vec<(String, Answer)> = {
            let mut state = lock(&self.state);
            if state.queued.is_empty() || state.in_flight >= WINDOW {
                return;
            }
            state.in_flight += 1;
            let most = state.queued.len().min(MOST);
            state.queued.drain(..most).collect()
        };
        let slot = Slot(self.clone());
        let job: Job = if let [(path, _)] = batch.as_slice() {
            let sent = self.client.delete(path, None);
            Box::pin(async move {
                let answer = sent.await;
                if let Some((_, tx)) = batch.into_iter().next() {
                    let _ = tx.send(answer);
                }
                drop(slot);
            })
        } else {
            let client = self.client.clone();
            let paths: Vec<String> = batch.iter().map(|(path, _)| path.clone()).collect();
            // Its first poll builds the transaction and sends it, now.
            let sent = crate::util::sent_now(Box::pin(async move {
                let mut writer = client.new_multi_writer();
                for path in &paths {
                    writer.add_delete(path, None)?;
                }
                writer.commit().await
            }));
            Box::pin(async move {
                let answer = sent.await;
                slot.0.answer(batch, answer);
                drop(slot);
            })
        };
        // Dropped unrun, the job gives its slot back and its callers see a connection loss,
        // which they retry.
        (self.drive)(job);
    }

    /// Hands a `multi`'s answer to its deletes: all succeeded, or the one that failed gets its
    /// error and the others wait again, first in line (they did not happen).
    fn answer(&self, batch: Vec<(String, Answer)>, answer: Result<Vec<MultiWriteResult>, MultiWriteError>) {
        match answer {
            Ok(_) => batch.into_iter().for_each(|(_, tx)| drop(tx.send(Ok(())))),
            Err(MultiWriteError::OperationFailed { index, source }) if index < batch.len() => {
                let mut state = lock(&self.state);
                for (i, (path, tx)) in batch.into_iter().enumerate().rev() {
                    if i == index {
                        let _ = tx.send(Err(source.clone()));
                    } else {
                        state.queued.push_front((path, tx));
                    }
                }
            }
            // The request failed (a connection loss, say), or an operation it does not have
            // failed (no server answers so; sent again as it was, the batch would fail again):
            // every delete of the batch gets the error.
            Err(
                MultiWriteError::RequestFailed { source } | MultiWriteError::OperationFailed { source, .. },
            ) => {
                batch.into_iter().for_each(|(_, tx)| drop(tx.send(Err(source.clone()))));
            }
        }
    }
}

/// A delete's answer from the session's task; a job dropped unrun answers with a connection loss.
async fn answered(rx: oneshot::Receiver<Result<(), ZkError>>) -> Result<(), ZkError> {
    rx.await.unwrap_or(Err(ZkError::ConnectionLoss))
}

/// One in-flight delete (or `multi`) of [`Deletes`]: dropped, it gives its slot back and sends
/// what waits.
struct Slot(Arc<Deletes>);

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.0.state).in_flight -= 1;
        self.0.flush();
    }
}
