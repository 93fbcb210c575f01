//! A queue node's data: the participant id, and after a newline the value it proclaimed; then,
//! only when the contender said who it works for, a last line that ties its session to others
//! ([`Party`]).
//!
//! `<id>`, `<id>\n<value>`, `<id>\n<party line>` or `<id>\n<value>\n<party line>`, where the
//! party line is `zk-recipes.party` followed by ` key=value` fields (`owner`, `within`,
//! `host`, `process`, `parent`, `for-parent`), each value with `%`, space, `=` and newlines
//! escaped as `%25`, `%20`, `%3D`, `%0A`. Nodes of Curator and kazoo clients, and ours before
//! the party line existed, carry no such line: their whole data after the first newline is the
//! value, as before. Those clients read our data as text whose first line is our id.

/// What starts the party line.
const TAG: &str = "zk-recipes.party";

/// What ties a queue node's session to other sessions: evidence that several sessions are one
/// party, which releases nothing until it has all it waits for (for
/// [`crate::inspect::inspect`]'s deadlock finder). Set it with [`crate::LockOptions::owner`]
/// (or [`crate::LockOptions::party`]); read it back in [`crate::Participant::party`].
///
/// Two sessions are one party when their nodes carry the same [`Party::owner`]; when one's
/// [`Party::within`] is a node of the other (a lock taken inside another's hold, as a nested
/// `zklock run`); or when one is a [`Party::for_parent`] hold and the other a contender with
/// the same [`Party::host`] and [`Party::parent`] (a script that holds one lock through a
/// `zklock hold` coprocess and waits for another with `zklock run`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Party {
    /// A label naming the party: sessions whose nodes carry the same label are one party.
    pub owner: Option<String>,
    /// The full path of the node of an enclosing hold, of another session, inside which this
    /// contender runs.
    pub within: Option<String>,
    /// The host the contender runs on (its name and boot), for [`Party::parent`].
    pub host: Option<String>,
    /// The contender's process on that host (`pid.start`), for the reader's information.
    pub process: Option<String>,
    /// The contender's parent process on that host (`pid.start`).
    pub parent: Option<String>,
    /// Whether the contender holds on its parent's behalf, releasing when the parent says so
    /// (a `zklock hold`): then every contender with the same parent is of its party.
    pub for_parent: bool,
}

impl Party {
    /// No evidence: nothing is written, and the node's data is the participant id alone.
    pub fn is_empty(&self) -> bool {
        *self == Party::default()
    }

    fn line(&self) -> String {
        let mut line = TAG.to_string();
        let fields = [
            ("owner", &self.owner),
            ("within", &self.within),
            ("host", &self.host),
            ("process", &self.process),
            ("parent", &self.parent),
        ];
        for (key, value) in fields {
            if let Some(value) = value {
                line.push_str(&format!(" {key}={}", escape(value)));
            }
        }
        if self.for_parent {
            line.push_str(" for-parent=1");
        }
        line
    }

    fn parse(line: &str) -> Option<Party> {
        let rest = line.strip_prefix(TAG)?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        let mut party = Party::default();
        for field in rest.split(' ').filter(|f| !f.is_empty()) {
            let Some((key, value)) = field.split_once('=') else { continue };
            let value = unescape(value);
            match key {
                "owner" => party.owner = Some(value),
                "within" => party.within = Some(value),
                "host" => party.host = Some(value),
                "process" => party.process = Some(value),
                "parent" => party.parent = Some(value),
                "for-parent" => party.for_parent = value == "1",
                // A field of a later version: ignored.
                _ => {}
            }
        }
        Some(party)
    }
}

fn escape(value: &str) -> String {
    value.replace('%', "%25").replace(' ', "%20").replace('=', "%3D").replace('\n', "%0A")
}

fn unescape(value: &str) -> String {
    value.replace("%0A", "\n").replace("%3D", "=").replace("%20", " ").replace("%25", "%")
}

/// A queue node's data as `(participant id, proclaimed value, party)` (see the module's note).
pub(crate) fn read_data(data: &[u8]) -> (String, Vec<u8>, Party) {
    let (id, rest) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (String::from_utf8_lossy(&data[..at]).into_owned(), &data[at + 1..]),
        None => return (String::from_utf8_lossy(data).into_owned(), Vec::new(), Party::default()),
    };
    let (value, last) = match rest.iter().rposition(|b| *b == b'\n') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (&rest[..0], rest),
    };
    match std::str::from_utf8(last).ok().and_then(Party::parse) {
        Some(party) => (id, value.to_vec(), party),
        None => (id, rest.to_vec(), Party::default()),
    }
}

/// A queue node's data as `(participant id, proclaimed value)`: `<id>` or `<id>\n<value>`,
/// less any party line.
pub(crate) fn split_data(data: &[u8]) -> (String, Vec<u8>) {
    let (id, value, _) = read_data(data);
    (id, value)
}

/// What a participant `id` that proclaimed `value` stores in its node (see [`split_data`]).
/// A value whose last line would read as a party line gets an empty one after it, so that it
/// reads back whole.
pub(crate) fn join_data(id: &str, value: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(id.len() + 1 + value.len());
    data.extend_from_slice(id.as_bytes());
    data.push(b'\n');
    data.extend_from_slice(value);
    let last = value.iter().rposition(|b| *b == b'\n').map_or(value, |at| &value[at + 1..]);
    if std::str::from_utf8(last).ok().and_then(Party::parse).is_some() {
        data.push(b'\n');
        data.extend_from_slice(TAG.as_bytes());
    }
    data
}

/// What a participant `id` of `party` stores in its node when it joins: the id alone, as
/// before, when the party is empty.
pub(crate) fn party_data(id: &str, party: &Party) -> Vec<u8> {
    if party.is_empty() {
        return id.as_bytes().to_vec();
    }
    format!("{id}\n{}", party.line()).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_data_splits_at_the_first_newline() {
        assert_eq!(split_data(b"id"), ("id".to_string(), Vec::new()));
        assert_eq!(split_data(b"id\nvalue\nmore"), ("id".to_string(), b"value\nmore".to_vec()));
        assert_eq!(split_data(&join_data("me", b"v")), ("me".to_string(), b"v".to_vec()));
        assert_eq!(split_data(b"\xff\n"), ("\u{fffd}".to_string(), Vec::new()));
    }

    #[test]
    fn a_party_line_round_trips_and_leaves_id_and_value_alone() {
        let party = Party {
            owner: Some("billing job=7 %x\nb".into()),
            within: Some("/l/a/_c_x-lock-0000000001".into()),
            host: Some("h1.b00t".into()),
            process: Some("12.34".into()),
            parent: Some("10.30".into()),
            for_parent: true,
        };
        let data = party_data("me", &party);
        assert_eq!(read_data(&data), ("me".to_string(), Vec::new(), party.clone()));
        // The id stays the first line, for Curator's and kazoo's readers.
        assert!(data.starts_with(b"me\nzk-recipes.party "), "{}", String::from_utf8_lossy(&data));
        // After a proclaimed value too.
        let mut proclaimed = join_data("me", b"v\nw");
        proclaimed.extend_from_slice(format!("\n{}", party.line()).as_bytes());
        assert_eq!(read_data(&proclaimed), ("me".to_string(), b"v\nw".to_vec(), party));
        // No party: the id alone, as before.
        assert_eq!(party_data("me", &Party::default()), b"me");
        // A proclaimed value that looks like a party line reads back whole.
        for value in [&b"zk-recipes.party owner=x"[..], b"v\nzk-recipes.party", b"zk-recipes.party\n"] {
            assert_eq!(split_data(&join_data("me", value)), ("me".to_string(), value.to_vec()), "{value:?}");
        }
    }

    #[test]
    fn old_and_foreign_data_has_no_party() {
        // Curator's default lock data (the client's address), kazoo's identifier, an old
        // zk-recipes node, a proclaimed value, empty data: all as before.
        for data in [&b"10.0.0.7"[..], b"worker-1", b"host:123", b"id\nvalue", b"", b"id\nzk-recipes.partyX"]
        {
            let (id, value, party) = read_data(data);
            assert_eq!((id, value), split_data_old(data));
            assert!(party.is_empty(), "{data:?}");
        }
    }

    /// The reading before the party line existed.
    fn split_data_old(data: &[u8]) -> (String, Vec<u8>) {
        match data.iter().position(|b| *b == b'\n') {
            Some(at) => (String::from_utf8_lossy(&data[..at]).into_owned(), data[at + 1..].to_vec()),
            None => (String::from_utf8_lossy(data).into_owned(), Vec::new()),
        }
    }
}
