//! Watches a waiter no longer needs, kept until they fire.
//!
//! A one-shot watch dropped before it fires is removed with a request of its own (the client
//! sends `removeWatches`: a request and its reply), unless another watcher of ours on the same
//! path still waits. Kept, it costs only its event, when it fires. A waiter admitted while a
//! watch of its has not fired (a semaphore's first waiter's child watch on the semaphore's
//! children, set by its last listing; a watch on a holder) hands it here
//! ([`super::Conn::keep_until_fired`]), and the session's task drives it.
//!
//! Invariants:
//! * At most one watch is kept per path and generation: another one on a path already kept is
//!   dropped, which sends no request while the kept one still waits on that path (if the kept
//!   one has just fired and its future has not run yet, the drop costs the removal it would
//!   have cost anyway). So what is kept is bounded by the nodes that still stand, however many
//!   holds come and go.
//! * Every kept watch ends: when what it watches changes (a node deleted, its data or its
//!   children changed), or at the latest with its session (the client tells every watcher of
//!   its session's end). Its path is then let go, as it is if the future is dropped unfired
//!   (the session's task ended with its runtime).

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::util::lock;

/// One kept watch's place in [`Parked`]: dropped, it lets its path go.
struct Entry {
    kept: Arc<Mutex<HashSet<(u64, String)>>>,
    key: (u64, String),
}

impl Drop for Entry {
    fn drop(&mut self) {
        lock(&self.kept).remove(&self.key);
    }
}

/// The paths (with their generation) whose watch is kept.
#[derive(Default)]
pub(crate) struct Parked {
    kept: Arc<Mutex<HashSet<(u64, String)>>>,
}

impl Parked {
    /// Takes `watches` (each with the path it watches) of generation `generation`: the first
    /// on its path is kept, in the returned future (to be driven to its end); the others are
    /// dropped. `None` when none is kept.
    pub fn keep<W>(
        &self,
        generation: u64,
        watches: Vec<(String, W)>,
    ) -> Option<impl Future<Output = ()> + Send>
    where
        W: Future + Send + 'static,
    {
        let kept: Vec<_> = {
            let mut set = lock(&self.kept);
            watches.into_iter().filter(|(path, _)| set.insert((generation, path.clone()))).collect()
        };
        if kept.is_empty() {
            return None;
        }
        let ends = kept.into_iter().map(|(path, watch)| {
            // Lets the path go when the watch has fired, or when its future is dropped unfired
            // (the session's task ended with its runtime).
            let entry = Entry { kept: self.kept.clone(), key: (generation, path) };
            async move {
                let _entry = entry;
                watch.await;
            }
        });
        let all = futures_util::future::join_all(ends);
        Some(async move {
            all.await;
        })
    }

    /// How many watches are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.kept).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn one_watch_is_kept_per_path_and_generation_until_it_fires() {
        let parked = Parked::default();
        let (fire_a, a) = oneshot::channel::<()>();
        let (fire_b, b) = oneshot::channel::<()>();
        let (_fire_c, c) = oneshot::channel::<()>();
        let job = parked.keep(1, vec![("/p/a".to_string(), a), ("/p/b".to_string(), b)]).expect("kept");
        assert_eq!(parked.len(), 2);
        // A second watch on a kept path is dropped; on a new generation it is kept.
        assert!(parked.keep(1, vec![("/p/a".to_string(), c)]).is_none());
        let (_fire_d, d) = oneshot::channel::<()>();
        let later = parked.keep(2, vec![("/p/a".to_string(), d)]).expect("kept");
        assert_eq!(parked.len(), 3);
        // A watch that fires lets its path go; the job ends once all of its watches have.
        let job = tokio::spawn(job);
        fire_a.send(()).unwrap();
        while parked.len() != 2 {
            tokio::task::yield_now().await;
        }
        assert!(!job.is_finished());
        drop(fire_b);
        job.await.unwrap();
        assert_eq!(parked.len(), 1, "the other generation's watch is still kept");
        // Dropped unfired (its task gone), it lets its path go too.
        drop(later);
        assert_eq!(parked.len(), 0);
    }
}
