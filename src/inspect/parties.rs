//! Parties: the sessions that the evidence in their nodes ([`crate::Party`]) ties into one unit
//! of work, which releases nothing until it has all it waits for. Pure.
//!
//! The rules, each from what the nodes themselves say (nothing is guessed from ids or names):
//! - the same owner label ([`crate::LockOptions::owner`]);
//! - a node whose `within` names another session's node (a lock taken inside another's hold:
//!   a `zklock run` in the command of another);
//! - a hold on its parent's behalf (`for_parent`, a `zklock hold`) and any contender with the
//!   same host and parent process: the parent holds through the one and waits through the
//!   other (a script's `coproc zklock hold` and its `zklock run`). Two contenders of one
//!   parent where neither holds for it (two `zklock run` started by one shell) stay apart.

use std::collections::BTreeMap;

use crate::participants::Participant;

/// Every session's party (its lowest session id), for the sessions of `members` (path, node)
/// that share one; with what joined them, in words.
#[derive(Debug, Default)]
pub(crate) struct Parties {
    leader: BTreeMap<i64, i64>,
    evidence: BTreeMap<i64, Vec<String>>,
}

impl Parties {
    /// The party of `session`: the lowest session id in it (itself when alone).
    pub fn of(&self, session: i64) -> i64 {
        self.leader.get(&session).copied().unwrap_or(session)
    }

    /// The sessions of `party`, sorted.
    pub fn sessions(&self, party: i64) -> Vec<i64> {
        let mut all: Vec<i64> = self.leader.iter().filter(|(_, &l)| l == party).map(|(&s, _)| s).collect();
        if all.is_empty() {
            all.push(party);
        }
        all
    }

    /// Every session of `parties`, sorted.
    pub fn all(&self, parties: impl Iterator<Item = i64>) -> Vec<i64> {
        let mut all: Vec<i64> = parties.flat_map(|p| self.sessions(p)).collect();
        all.sort_unstable();
        all
    }

    /// What joined the sessions of `party`.
    pub fn evidence(&self, party: i64) -> Vec<String> {
        self.evidence.get(&party).cloned().unwrap_or_default()
    }
}

fn root(up: &mut BTreeMap<i64, i64>, s: i64) -> i64 {
    let mut at = s;
    while let Some(&next) = up.get(&at).filter(|&&n| n != at) {
        at = next;
    }
    at
}

/// Finds the parties among the members of every queue (`(queue path, member)`).
pub(crate) fn parties<'a>(members: impl Iterator<Item = (&'a str, &'a Participant)> + Clone) -> Parties {
    let joins = joins(members.filter(|(_, m)| m.session != 0));
    let mut found = Parties { leader: leaders(&joins), ..Parties::default() };
    // Evidence per party, each joining line once (only those that joined two sessions).
    for (a, b, why) in joins {
        if a != b {
            let party = found.of(a);
            let said = found.evidence.entry(party).or_default();
            if !said.contains(&why) {
                said.push(why);
            }
        }
    }
    // Sessions alone in their party are not kept.
    let counts = found.leader.values().fold(BTreeMap::new(), |mut c: BTreeMap<i64, usize>, l| {
        *c.entry(*l).or_default() += 1;
        c
    });
    found.leader.retain(|_, l| counts[l] > 1);
    found.evidence.retain(|l, _| counts.get(l).is_some_and(|&n| n > 1));
    found
}

/// What joins two live members' sessions into one party, with the line that says why: one
/// owner label, a hold taken inside another's, or a hold for a parent process and another
/// contender of that parent on one host. A pair may name one session twice (the first member
/// with an owner label); [`parties`] leaves those out of the evidence.
fn joins<'a>(live: impl Iterator<Item = (&'a str, &'a Participant)> + Clone) -> Vec<(i64, i64, String)> {
    let mut joins: Vec<(i64, i64, String)> = Vec::new();
    let mut owners: BTreeMap<&str, i64> = BTreeMap::new();
    let mut nodes: BTreeMap<String, i64> = BTreeMap::new();
    let mut parents: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for (path, m) in live.clone() {
        nodes.insert(format!("{path}/{}", m.node), m.session);
        if let (Some(host), Some(parent), true) = (&m.party.host, &m.party.parent, m.party.for_parent) {
            parents.entry((host.as_str(), parent.as_str())).or_insert(m.session);
        }
    }
    for (path, m) in live {
        let s = m.session;
        let (id, node) = (&m.id, format!("{path}/{}", m.node));
        if let Some(owner) = &m.party.owner {
            let first = *owners.entry(owner.as_str()).or_insert(s);
            joins.push((s, first, format!("owner label {owner:?} on {node} ({id})")));
        }
        if let Some(outer) = m.party.within.as_ref().and_then(|w| nodes.get(w).map(|&o| (w, o))) {
            joins.push((s, outer.1, format!("{node} ({id}) was taken inside the hold of {}", outer.0)));
        }
        if let (Some(host), Some(parent)) = (&m.party.host, &m.party.parent) {
            if let Some(&holder) = parents.get(&(host.as_str(), parent.as_str())) {
                joins.push((
                    s,
                    holder,
                    format!("{node} ({id}) and a hold for the same parent process {parent} on {host}"),
                ));
            }
        }
    }
    joins
}

/// Each session named by `joins` with its party's leader (the lowest session of the party),
/// by union-find.
fn leaders(joins: &[(i64, i64, String)]) -> BTreeMap<i64, i64> {
    let mut up: BTreeMap<i64, i64> = BTreeMap::new();
    for (a, b, _) in joins {
        let (ra, rb) = (root(&mut up, *a), root(&mut up, *b));
        up.entry(*a).or_insert(*a);
        up.entry(*b).or_insert(*b);
        if ra != rb {
            let (low, high) = (ra.min(rb), ra.max(rb));
            up.insert(high, low);
            up.insert(low, low);
        }
    }
    let sessions: Vec<i64> = up.keys().copied().collect();
    sessions.into_iter().map(|s| (s, root(&mut up, s))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::Party;

    fn member(session: i64, node: &str, party: Party) -> Participant {
        Participant {
            position: 0,
            node: node.into(),
            id: format!("p{session}"),
            value: Vec::new(),
            is_holder: false,
            session,
            czxid: session,
            ctime_ms: 0,
            party,
        }
    }

    fn of_parent(parent: &str, for_parent: bool) -> Party {
        Party { host: Some("h".into()), parent: Some(parent.into()), for_parent, ..Party::default() }
    }

    fn found(members: &[(&'static str, Participant)]) -> Parties {
        parties(members.iter().map(|(p, m)| (*p, m)))
    }

    #[test]
    fn a_nested_hold_an_owner_label_and_a_hold_for_the_parent_join_sessions() {
        let within = Party { within: Some("/l/a/n1".into()), ..Party::default() };
        let owner = |o: &str| Party { owner: Some(o.into()), ..Party::default() };
        let all = [
            ("/l/a", member(1, "n1", Party::default())),
            ("/l/b", member(2, "n2", within)),
            ("/l/c", member(3, "n3", owner("job"))),
            ("/l/d", member(4, "n4", owner("job"))),
            ("/l/e", member(5, "n5", of_parent("10.7", true))),
            ("/l/f", member(6, "n6", of_parent("10.7", false))),
        ];
        let p = found(&all);
        assert_eq!((p.of(1), p.of(2)), (1, 1));
        assert_eq!((p.of(3), p.of(4)), (3, 3));
        assert_eq!((p.of(5), p.of(6)), (5, 5));
        assert_eq!(p.sessions(5), [5, 6]);
        assert!(p.evidence(1)[0].contains("inside the hold of /l/a/n1"), "{:?}", p.evidence(1));
        assert!(p.evidence(5)[0].contains("same parent process 10.7 on h"), "{:?}", p.evidence(5));
    }

    #[test]
    fn contenders_of_one_parent_none_holding_for_it_stay_apart() {
        let all = [
            // Two runs started by one shell; a third under another parent beside a hold.
            ("/l/a", member(1, "n1", of_parent("10.7", false))),
            ("/l/b", member(2, "n2", of_parent("10.7", false))),
            ("/l/c", member(3, "n3", of_parent("11.8", false))),
            ("/l/d", member(4, "n4", of_parent("12.9", true))),
            // A `within` naming a node nobody has (its hold is over) joins nothing.
            ("/l/e", member(5, "n5", Party { within: Some("/l/gone/n".into()), ..Party::default() })),
        ];
        let p = found(&all);
        for s in 1..=5 {
            assert_eq!(p.sessions(p.of(s)), [s], "{p:?}");
        }
    }
}
