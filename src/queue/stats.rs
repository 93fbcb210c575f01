//! Counters of the requests and events one handle's queue work caused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What one handle's queue work has cost so far. Diagnostics for herd and cost checks; a
/// snapshot, cheap to take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Nodes created (one per acquisition that reached ZooKeeper).
    pub creates: u64,
    /// Listings of the lock path's children (the first one of each acquisition included).
    pub listings: u64,
    /// Watch events received on a node ahead of us: wake-ups. (A semaphore's first waiter
    /// watches the path's children: any change of them counts, a join behind it included.)
    pub wakeups: u64,
    /// Admissions without a new listing, thanks to the head-of-queue rule.
    pub relists_saved: u64,
    /// Creates whose reply was lost with the connection and whose node we then found (or not)
    /// by its protection prefix.
    pub recoveries: u64,
    /// Of the admissions without a new listing, those that read our own node first, because its
    /// watch could not vouch for it (the connection changed since it was set, say).
    pub own_rereads: u64,
    /// Of the admissions without a new listing, those behind a node that left having been
    /// admitted at the head (its tombstone said so), though no listing had shown it there.
    pub behind_head: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    creates: AtomicU64,
    listings: AtomicU64,
    wakeups: AtomicU64,
    relists_saved: AtomicU64,
    recoveries: AtomicU64,
    own_rereads: AtomicU64,
    behind_head: AtomicU64,
}

/// Which counter to bump.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Count {
    Create,
    Listing,
    Wakeup,
    RelistSaved,
    Recovery,
    OwnReread,
    BehindHead,
}

impl Counters {
    pub fn bump(self: &Arc<Self>, what: Count) {
        let counter = match what {
            Count::Create => &self.creates,
            Count::Listing => &self.listings,
            Count::Wakeup => &self.wakeups,
            Count::RelistSaved => &self.relists_saved,
            Count::Recovery => &self.recoveries,
            Count::OwnReread => &self.own_rereads,
            Count::BehindHead => &self.behind_head,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> QueueStats {
        QueueStats {
            creates: self.creates.load(Ordering::Relaxed),
            listings: self.listings.load(Ordering::Relaxed),
            wakeups: self.wakeups.load(Ordering::Relaxed),
            relists_saved: self.relists_saved.load(Ordering::Relaxed),
            recoveries: self.recoveries.load(Ordering::Relaxed),
            own_rereads: self.own_rereads.load(Ordering::Relaxed),
            behind_head: self.behind_head.load(Ordering::Relaxed),
        }
    }
}
