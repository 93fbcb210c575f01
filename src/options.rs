//! Options shared by the lock recipes.

use std::sync::Arc;

use zookeeper_client::{Acl, Acls};

use crate::format::NodeFormat;
use crate::status::LossPolicy;

/// Options for a lock recipe. `LockOptions::default()` is what `new` uses.
#[derive(Clone, Debug)]
#[must_use]
pub struct LockOptions {
    pub(crate) participant_id: Option<String>,
    pub(crate) loss_policy: LossPolicy,
    pub(crate) format: NodeFormat,
    pub(crate) acls: Option<Arc<[Acl]>>,
    pub(crate) role: Option<Arc<str>>,
    pub(crate) revocable: bool,
    pub(crate) watch_own_node: bool,
    pub(crate) max_hold: Option<std::time::Duration>,
    pub(crate) lock_delay: Option<std::time::Duration>,
    pub(crate) party: crate::naming::Party,
}

impl Default for LockOptions {
    fn default() -> LockOptions {
        LockOptions {
            participant_id: None,
            loss_policy: LossPolicy::default(),
            format: NodeFormat::default(),
            acls: None,
            role: None,
            revocable: false,
            watch_own_node: true,
            max_hold: None,
            lock_delay: None,
            party: crate::naming::Party::default(),
        }
    }
}

impl LockOptions {
    /// The defaults: participant id `hostname:pid`, [`LossPolicy::SuspendedIsLost`], Curator
    /// node names.
    pub fn new() -> LockOptions {
        LockOptions::default()
    }

    /// The participant id stored as our nodes' data (shown by `participants()`).
    pub fn participant_id(mut self, id: impl Into<String>) -> LockOptions {
        self.participant_id = Some(id.into());
        self
    }

    /// Whether a suspended connection counts as a lost lock.
    pub fn loss_policy(mut self, policy: LossPolicy) -> LockOptions {
        self.loss_policy = policy;
        self
    }

    /// The node naming format, for sharing a path with Curator (the default) or kazoo clients.
    pub fn format(mut self, format: NodeFormat) -> LockOptions {
        self.format = format;
        self
    }

    /// The ACLs of the nodes the recipe creates, parents included (default: open to anyone, as
    /// Curator's). With digest credentials on the client, `Acls::creator_all()` makes our nodes
    /// ours alone: nobody else can delete them or set `__REVOKE__` on them.
    pub fn acls(mut self, acls: Acls<'_>) -> LockOptions {
        self.acls = Some(Arc::from(acls.to_vec()));
        self
    }

    /// Makes the holder report revocation requests, as Curator's `makeRevocable()`: it then
    /// sees [`crate::LockStatus::RevocationRequested`] when someone asks it to release
    /// ([`crate::request_revocation`], `zklock revoke`). Without it (the default) a request is
    /// ignored, as Curator ignores it on a lock that is not revocable. A revocable lock always
    /// watches its own node, whatever [`LockOptions::watch_own_node`] says.
    pub fn revocable(mut self, revocable: bool) -> LockOptions {
        self.revocable = revocable;
        self
    }

    /// Whether every node of ours carries a data watch (default: yes), so that a holder learns
    /// at once that its node was deleted by someone else (an operator, `zklock break`): its
    /// status turns [`crate::LockStatus::Lost`] and [`crate::LockGuard::lost`] resolves. The
    /// watch costs one request per acquisition, sent right after the create and never waited
    /// for, and one event when our own delete fires it: 3 packets on top of the 6 of an
    /// uncontended acquire and release. On fresh paths (a lock per order id: the session's
    /// recent acquires found the parent missing), and in a session whose recent acquires each
    /// found their node alone (an idle lock), the join's listing carries a child watch that
    /// stands in for it while nobody else joins: then it costs only the event; when someone
    /// joins, the holder reads its node and watches its data (3 more packets). Revocable locks
    /// and the lock delay keep the data watch from the start.
    ///
    /// **What `false` gives up:** a holder whose node is deleted by someone else is not told.
    /// It stays [`crate::LockStatus::Held`] (until the session ends) while another contender
    /// takes the lock, and learns of the deletion only from a fenced write
    /// ([`crate::LockGuard::fenced_writer`], refused at once) or at release
    /// ([`crate::Error::LockLost`]). Session loss is reported either way. Only turn it off
    /// when nothing deletes lock nodes but their owners, and every write the lock protects is
    /// fenced. Revocable locks and elections watch their nodes regardless.
    pub fn watch_own_node(mut self, watch: bool) -> LockOptions {
        self.watch_own_node = watch;
        self
    }

    /// The longest a hold may last (default: no limit), as Curator's auto-release after a
    /// lease time and Redisson's `leaseTime`. When `limit` has passed since the acquire, the
    /// hold ends as if lost: its status turns [`crate::LockStatus::Lost`] (counted in
    /// `zk_recipes_holds_lost_total` with cause `max_hold`), [`crate::LockGuard::lost`]
    /// resolves, [`crate::LockGuard::safe_until`] is `None`, and our node is deleted at once,
    /// which admits the next waiter. Releasing the guard afterwards returns
    /// [`crate::Error::LockLost`], as after any loss. (A [`crate::LeaderSelector`] owns the
    /// work it guards, and ends it first: it stops its task, then deletes the node; see
    /// [`crate::SelectorOptions::max_hold`].)
    ///
    /// The limit only ever ends a hold earlier: it keeps nothing alive, so a hold whose
    /// session expires first is lost then (cause `session_expired`), as without a limit. It
    /// is the holder's clock that measures it, so it is no fence for other clients: work that
    /// must not overlap the next holder stops when [`crate::LockGuard::lost`] resolves, and
    /// checks its writes with the fencing token.
    pub fn max_hold(mut self, limit: std::time::Duration) -> LockOptions {
        self.max_hold = Some(limit);
        self
    }

    /// The lock delay (default: none), as Consul's: a waiter that saw a node ahead of it
    /// vanish without a clean release (its session expired: its owner may be a paused process
    /// that still writes) waits `delay` more, from the moment it learned of it, before its
    /// acquire returns. It keeps its place at the head meanwhile, so nobody else enters either.
    /// After a clean release it enters at once. The acquire reports the wait
    /// ([`crate::QueueEvent::LockDelay`]) and records it in `zk_recipes_lock_delay_seconds`.
    ///
    /// **Set it on every contender of the path.** A release tells waiters it is clean by
    /// writing a marker into its node in the transaction that deletes it, and only holders
    /// with the lock delay on do that; they also mark a waiter's leaving (a timeout). So a
    /// waiter with the delay on waits after every release of a contender without it, and of
    /// every Curator or kazoo contender (they never mark), as it does after an expiry. A
    /// waiter behind a marked release lists the queue again before it enters (one more round
    /// trip per handoff than without the delay), whatever its own options. A hold that ends at
    /// its [`LockOptions::max_hold`] is not a clean release: the next holder waits.
    ///
    /// What counts is what the waiter saw: a node already gone when it joined (or when its own
    /// session was renewed) imposes no delay, unlike Consul's, which the server applies to the
    /// key. A node that vanished while the waiter could not watch it (gone before its watch was
    /// set, or during a connection loss) counts as unclean. A zero `delay` turns it off.
    pub fn lock_delay(mut self, delay: std::time::Duration) -> LockOptions {
        self.lock_delay = Some(delay).filter(|d| !d.is_zero());
        self
    }

    /// Whether our nodes carry a data watch (see [`LockOptions::watch_own_node`]).
    pub(crate) fn watches_own_node(&self) -> bool {
        self.watch_own_node || self.revocable
    }

    /// The `role` label of this lock's metrics (default `default`): name what the path is for
    /// (`orders`, `stock`), never the path itself, so that label values stay few.
    pub fn metrics_role(mut self, role: &str) -> LockOptions {
        self.role = Some(Arc::from(role));
        self
    }

    /// Says which party our sessions belong to, for the deadlock finder
    /// ([`crate::inspect::inspect`]): contenders whose options carry the same `label`, in any
    /// process or session, are taken as one party that releases nothing until it has all it
    /// waits for. Give it to the sessions of one unit of work that holds one lock while it
    /// waits for another through another session (a job that spreads its locks over several
    /// sessions or processes); without it, each session is a party of its own. The label goes
    /// into our nodes' data as a last line after the participant id ([`crate::Party`]), which
    /// Curator and kazoo contenders read as part of our id; with no label (the default) the
    /// data is the id alone.
    pub fn owner(mut self, label: impl Into<String>) -> LockOptions {
        self.party.owner = Some(label.into());
        self
    }

    /// All the evidence of [`crate::Party`] at once (what `zklock` records: the node of an
    /// enclosing hold, the host and the parent process); replaces [`LockOptions::owner`].
    pub fn party(mut self, party: crate::naming::Party) -> LockOptions {
        self.party = party;
        self
    }

    pub(crate) fn data(&self) -> Vec<u8> {
        let id = self.participant_id.clone().unwrap_or_else(crate::identity::default_participant_id);
        crate::naming::party_data(&id, &self.party)
    }
}
