//! [`NodeFormat`]: whose node names a recipe uses. How names are built and read in each format
//! is the wire layer's (`naming/`); the choice itself sits at the bottom, where errors name it.

/// A node-naming convention, for sharing a lock path with another client library.
///
/// Curator and kazoo can never safely share a path (Curator sorts kazoo's names, which have no
/// `lock-`, by the whole name), so a recipe refuses a path that holds the other format's nodes
/// ([`crate::Error::FormatConflict`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeFormat {
    /// Apache Curator's protected names, `_c_<uuid>-<marker><seq>` (the default).
    #[default]
    Curator,
    /// kazoo's names, `<32-hex uuid>__lock__<seq>` (read locks `__rlock__`).
    Kazoo,
}

impl std::fmt::Display for NodeFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NodeFormat::Curator => "curator",
            NodeFormat::Kazoo => "kazoo",
        })
    }
}

impl std::str::FromStr for NodeFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<NodeFormat, String> {
        match s.to_ascii_lowercase().as_str() {
            "curator" => Ok(NodeFormat::Curator),
            "kazoo" => Ok(NodeFormat::Kazoo),
            other => Err(format!("unknown node format {other:?} (curator or kazoo)")),
        }
    }
}
