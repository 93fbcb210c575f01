//! The line protocol between the orchestrator and its worker processes.
//!
//! The orchestrator writes one request a line to a worker's stdin; the worker answers on its
//! stdout, one line per event: a kind, then tab-separated `key=value` fields (values may hold
//! spaces, never a tab or a newline).

use std::collections::BTreeMap;

/// A purchase request: `user` tries to buy one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Unique within a run.
    pub id: usize,
    pub user: String,
    /// The designated purchase: pause (SIGSTOP) between the window check and the writes.
    pub pause: bool,
}

impl Request {
    pub fn encode(&self) -> String {
        format!("BUY\t{}\t{}\t{}\n", self.id, self.user, if self.pause { "pause" } else { "normal" })
    }

    pub fn decode(line: &str) -> Option<Request> {
        let mut parts = line.trim_end().split('\t');
        if parts.next()? != "BUY" {
            return None;
        }
        let id = parts.next()?.parse().ok()?;
        let user = parts.next()?.to_string();
        let pause = match parts.next()? {
            "pause" => true,
            "normal" => false,
            _ => return None,
        };
        Some(Request { id, user, pause })
    }
}

/// One line from a worker: `kind` and its fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub kind: String,
    pub fields: BTreeMap<String, String>,
}

impl Reply {
    pub fn new(kind: &str) -> Reply {
        Reply { kind: kind.to_string(), fields: BTreeMap::new() }
    }

    /// Adds a field; tabs and newlines in the value become spaces.
    pub fn with(mut self, key: &str, value: impl std::fmt::Display) -> Reply {
        let value = value.to_string().replace(['\t', '\n', '\r'], " ");
        self.fields.insert(key.to_string(), value);
        self
    }

    pub fn encode(&self) -> String {
        let mut line = self.kind.clone();
        for (k, v) in &self.fields {
            line.push('\t');
            line.push_str(k);
            line.push('=');
            line.push_str(v);
        }
        line
    }

    pub fn decode(line: &str) -> Option<Reply> {
        let mut parts = line.trim_end().split('\t');
        let kind = parts.next().filter(|k| !k.is_empty())?.to_string();
        let mut fields = BTreeMap::new();
        for part in parts {
            let (k, v) = part.split_once('=')?;
            fields.insert(k.to_string(), v.to_string());
        }
        Some(Reply { kind, fields })
    }

    /// A field, or "" when absent.
    pub fn get(&self, key: &str) -> &str {
        self.fields.get(key).map_or("", String::as_str)
    }

    /// A numeric field.
    pub fn num(&self, key: &str) -> Option<i64> {
        self.fields.get(key)?.parse().ok()
    }

    /// The request this line answers, if any.
    pub fn id(&self) -> Option<usize> {
        self.fields.get("id")?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let r = Request { id: 7, user: "user-03".into(), pause: true };
        assert_eq!(Request::decode(&r.encode()), Some(r));
        let reply = Reply::new("DONE").with("id", 7).with("detail", "a\tb\nc");
        let back = Reply::decode(&reply.encode()).unwrap();
        assert_eq!(back.get("detail"), "a b c");
        assert_eq!(back.id(), Some(7));
        assert_eq!(Reply::decode("DONE\tbroken"), None);
    }
}
