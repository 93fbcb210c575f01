//! What a join sends ([`JoinPlan`]), decided before anything is sent: from the queue's options
//! and the session's guesses (`session/guess.rs`). Pure: `Queue::join` has the queue's one
//! sender (`Sender::join_round`) send a plan's requests and reads their answers; this file
//! only says which.

/// What decides a join's first plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct JoinInputs {
    /// Our nodes carry a watch (`Queue::watching_own_nodes`).
    pub watch_own: bool,
    /// The listing's child watch may stand in for the data watch on our node: our nodes carry a
    /// watch, it need not be a data watch from the start (revocable locks, a lock delay's
    /// release marks need one), and the listing needs not read the root's version.
    pub stand_in: bool,
    /// The root must carry data (a semaphore's maximum): the listing reads the root's version,
    /// and missing parents are made one by one (`Sender::make_parents`).
    pub root_data: bool,
    /// The session's guess that the parent is missing (a fresh lock path).
    pub parent_missing: bool,
    /// The connection's server answers a `multi`'s creates with their `Stat` and applies such
    /// a `multi` (`ServerFeatures`, as the session's probe learned it): a guessed parent's
    /// create and ours may go out as one request.
    pub together: bool,
    /// The session's guess that our node will be alone (an idle lock); only asked when the
    /// child watch may stand in.
    pub idle: bool,
}

/// Whether, and why, the parent's create goes out just before ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ParentCreate {
    /// Not sent: the parent is there, we hope.
    Skip,
    /// Sent on the session's guess: its answer teaches the guess, and a failure of it is not
    /// ours to report (our create, sent anyway, decides).
    Guessed,
    /// Sent on the session's guess with ours, in one `multi` (one request and one transaction
    /// for the server, where two plain creates are two): its answer teaches the guess. A failure
    /// of the parent's fails ours too (a `multi` lands whole or not at all): the next round
    /// sends ours alone when the parent was there, or makes the parents when its own parent
    /// was missing.
    WithOurs,
    /// Sent because our last create found the parent missing.
    Known,
}

/// The listing pipelined behind our create (ZooKeeper answers a session's requests in order,
/// so it shows our node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Listing {
    /// None pipelined: our create goes alone, the listing after its answer.
    After,
    /// The children.
    Plain,
    /// The children, with a child watch that stands in for the data watch on our node (see
    /// `own_watch::own_watch_from_listing`).
    ChildWatch,
    /// The children and the root's version (see `Queue::verify_root`).
    RootVersion,
}

/// What one round of a join sends, in order: the parents one by one (awaited), then back to
/// back the parent's create, ours (or the two in one `multi`) and the listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct JoinPlan {
    /// Make the missing parents one by one before the round (`Sender::make_parents`).
    pub make_parents: bool,
    pub parent: ParentCreate,
    pub listing: Listing,
    /// Whether our create's answer teaches the parent guess (the first round's create, when no
    /// guess sent the parent's).
    pub teaches_parent_guess: bool,
    inputs: JoinInputs,
}

impl JoinPlan {
    /// The first round. On the guess of a missing parent, its create goes first (a fresh path
    /// costs one round trip and no failed create), in one `multi` with ours where the server
    /// allows; a root that must carry data is made by `make_parents` instead, so there our
    /// create goes alone, the listing after it.
    pub fn first(inputs: JoinInputs) -> JoinPlan {
        let guessed = inputs.parent_missing && !inputs.root_data;
        let parent = match (guessed, inputs.together) {
            (false, _) => ParentCreate::Skip,
            (true, false) => ParentCreate::Guessed,
            (true, true) => ParentCreate::WithOurs,
        };
        let alone = inputs.parent_missing && inputs.root_data;
        JoinPlan::round(inputs, false, parent, alone, !guessed)
    }

    /// The round after our create found the parent missing: with the parent's create first,
    /// or after making the parents one by one when the root must carry data or the parent's
    /// own parent was missing too.
    pub fn after_missing_parent(self, grandparent_missing: bool) -> JoinPlan {
        let make_parents = self.inputs.root_data || grandparent_missing;
        let parent = if make_parents { ParentCreate::Skip } else { ParentCreate::Known };
        JoinPlan::round(self.inputs, make_parents, parent, false, false)
    }

    /// The round after the parent's create failed the `multi` it went out in with ours
    /// ([`ParentCreate::WithOurs`]): after making the parents one by one when its own parent
    /// was missing; else (the parent was there, most likely) ours alone, and the listing.
    pub fn after_parent_failed(self, grandparent_missing: bool) -> JoinPlan {
        if grandparent_missing {
            return self.after_missing_parent(true);
        }
        JoinPlan::round(self.inputs, false, ParentCreate::Skip, false, false)
    }

    /// The round after our create was lost with the connection (and no node of ours was found):
    /// the same requests, the parent's create plain, and a guess is never taught twice.
    pub fn after_lost_create(self) -> JoinPlan {
        let parent = match self.parent {
            ParentCreate::Guessed | ParentCreate::WithOurs => ParentCreate::Known,
            other => other,
        };
        let alone = self.listing == Listing::After;
        JoinPlan::round(self.inputs, false, parent, alone, self.teaches_parent_guess)
    }

    fn round(
        inputs: JoinInputs,
        make_parents: bool,
        parent: ParentCreate,
        alone: bool,
        teaches: bool,
    ) -> JoinPlan {
        // On a guessed fresh path or an idle lock, the listing's child watch stands in for the
        // data watch on our node.
        let guessed = matches!(parent, ParentCreate::Guessed | ParentCreate::WithOurs);
        let child_watch = inputs.stand_in && (guessed || inputs.idle);
        let listing = match (alone, inputs.root_data, child_watch) {
            (true, _, _) => Listing::After,
            (false, true, _) => Listing::RootVersion,
            (false, false, true) => Listing::ChildWatch,
            (false, false, false) => Listing::Plain,
        };
        JoinPlan { make_parents, parent, listing, teaches_parent_guess: teaches, inputs }
    }

    /// Whether our node's data watch is sent as soon as our create returns (else the listing's
    /// child watch stands in for it, or our nodes carry none).
    pub fn sends_data_watch(&self) -> bool {
        self.inputs.watch_own && self.listing != Listing::ChildWatch
    }

    /// Whether the pipelined listing's answer teaches the session's idle guess.
    pub fn teaches_idle_guess(&self) -> bool {
        self.inputs.stand_in
    }

    /// Whether our nodes carry a watch (a recovered node is watched with a read).
    pub fn watches_own(&self) -> bool {
        self.inputs.watch_own
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mutex's queue with default options.
    const MUTEX: JoinInputs = JoinInputs {
        watch_own: true,
        stand_in: true,
        root_data: false,
        parent_missing: false,
        together: false,
        idle: false,
    };
    /// A semaphore's: its root carries the maximum.
    const SEMAPHORE: JoinInputs = JoinInputs {
        watch_own: true,
        stand_in: false,
        root_data: true,
        parent_missing: false,
        together: false,
        idle: false,
    };

    #[test]
    fn a_busy_lock_creates_lists_and_watches_its_node() {
        let plan = JoinPlan::first(MUTEX);
        assert_eq!(
            (plan.make_parents, plan.parent, plan.listing),
            (false, ParentCreate::Skip, Listing::Plain)
        );
        assert!(plan.teaches_parent_guess && plan.sends_data_watch() && plan.teaches_idle_guess());
    }

    #[test]
    fn an_idle_lock_lets_the_listings_child_watch_stand_in() {
        let plan = JoinPlan::first(JoinInputs { idle: true, ..MUTEX });
        assert_eq!((plan.parent, plan.listing), (ParentCreate::Skip, Listing::ChildWatch));
        assert!(!plan.sends_data_watch());
        // Not when a data watch is needed from the start (revocable, lock delay).
        let plan = JoinPlan::first(JoinInputs { idle: true, stand_in: false, ..MUTEX });
        assert_eq!(plan.listing, Listing::Plain);
        assert!(plan.sends_data_watch() && !plan.teaches_idle_guess());
    }

    #[test]
    fn a_guessed_fresh_path_sends_the_parent_first_and_watches_the_children() {
        let plan = JoinPlan::first(JoinInputs { parent_missing: true, ..MUTEX });
        assert_eq!((plan.parent, plan.listing), (ParentCreate::Guessed, Listing::ChildWatch));
        assert!(!plan.teaches_parent_guess, "the parent's answer teaches the guess");
        // Lost with the connection: the same requests, the guess not taught again, the child
        // watch only on an idle guess.
        let again = plan.after_lost_create();
        assert_eq!((again.parent, again.listing), (ParentCreate::Known, Listing::Plain));
        let idle =
            JoinPlan::first(JoinInputs { parent_missing: true, idle: true, ..MUTEX }).after_lost_create();
        assert_eq!(idle.listing, Listing::ChildWatch);
    }

    #[test]
    fn where_the_server_allows_a_guessed_parent_goes_with_ours_in_one_multi() {
        let fresh = JoinInputs { parent_missing: true, together: true, ..MUTEX };
        let plan = JoinPlan::first(fresh);
        assert_eq!(
            (plan.make_parents, plan.parent, plan.listing),
            (false, ParentCreate::WithOurs, Listing::ChildWatch)
        );
        assert!(!plan.teaches_parent_guess && !plan.sends_data_watch());
        // Only on the guess of a missing parent; never for a root that carries data.
        assert_eq!(JoinPlan::first(JoinInputs { together: true, ..MUTEX }).parent, ParentCreate::Skip);
        let semaphore = JoinPlan::first(JoinInputs { parent_missing: true, together: true, ..SEMAPHORE });
        assert_eq!((semaphore.parent, semaphore.listing), (ParentCreate::Skip, Listing::After));
        // The parent was there: ours alone, the listing behind it, the guess not taught again.
        let again = plan.after_parent_failed(false);
        assert_eq!(
            (again.make_parents, again.parent, again.listing),
            (false, ParentCreate::Skip, Listing::Plain)
        );
        assert!(!again.teaches_parent_guess && again.sends_data_watch());
        // Its own parent was missing: the parents one by one, then ours.
        let again = plan.after_parent_failed(true);
        assert_eq!((again.make_parents, again.parent), (true, ParentCreate::Skip));
        // Lost with the connection, nothing of ours found: the parent's create goes plain.
        let again = plan.after_lost_create();
        assert_eq!((again.parent, again.listing), (ParentCreate::Known, Listing::Plain));
    }

    #[test]
    fn a_missing_parent_sends_it_first_next_round_or_makes_the_parents() {
        let plan = JoinPlan::first(MUTEX).after_missing_parent(false);
        assert_eq!(
            (plan.make_parents, plan.parent, plan.listing),
            (false, ParentCreate::Known, Listing::Plain)
        );
        assert!(!plan.teaches_parent_guess);
        let plan = JoinPlan::first(MUTEX).after_missing_parent(true);
        assert_eq!((plan.make_parents, plan.parent), (true, ParentCreate::Skip));
        // A lost create after that keeps the plan, parents made already.
        let again = plan.after_lost_create();
        assert_eq!(
            (again.make_parents, again.parent, again.listing),
            (false, ParentCreate::Skip, Listing::Plain)
        );
    }

    #[test]
    fn a_root_with_data_reads_its_version_and_makes_parents_one_by_one() {
        let plan = JoinPlan::first(SEMAPHORE);
        assert_eq!((plan.parent, plan.listing), (ParentCreate::Skip, Listing::RootVersion));
        // On a guessed fresh path our create goes alone: the listing after its answer.
        let plan = JoinPlan::first(JoinInputs { parent_missing: true, ..SEMAPHORE });
        assert_eq!((plan.parent, plan.listing), (ParentCreate::Skip, Listing::After));
        assert!(plan.teaches_parent_guess);
        assert_eq!(plan.after_lost_create().listing, Listing::After);
        let plan = plan.after_missing_parent(false);
        assert_eq!(
            (plan.make_parents, plan.parent, plan.listing),
            (true, ParentCreate::Skip, Listing::RootVersion)
        );
    }

    #[test]
    fn without_an_own_watch_nothing_stands_in() {
        let inputs = JoinInputs { watch_own: false, stand_in: false, idle: false, ..MUTEX };
        let plan = JoinPlan::first(inputs);
        assert_eq!(plan.listing, Listing::Plain);
        assert!(!plan.sends_data_watch() && !plan.watches_own());
    }
}
