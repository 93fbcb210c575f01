//! Validated ZooKeeper paths for recipe roots.

use crate::error::{Error, PathError, Result};

/// A validated absolute path for a recipe's root directory, such as `/locks/orders`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockPath(String);

impl LockPath {
    /// The longest path accepted, in bytes. ZooKeeper itself only bounds a request by
    /// `jute.maxbuffer`; a lock path longer than this is almost surely a mistake, and node names
    /// (about 50 bytes) are appended to it.
    pub const MAX_LEN: usize = 1024;

    /// Validates `path`.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] with the [`PathError`]: empty, no leading `/`, the root itself, a
    /// trailing `/`, an empty segment, `.` or `..`, a NUL or another character ZooKeeper
    /// refuses, under the reserved `/zookeeper`, or longer than [`LockPath::MAX_LEN`].
    pub fn new(path: impl Into<String>) -> Result<LockPath> {
        let path = path.into();
        match check(&path) {
            Ok(()) => Ok(LockPath(path)),
            Err(reason) => Err(Error::InvalidPath { path, reason }),
        }
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path of child `name`.
    pub(crate) fn child(&self, name: &str) -> String {
        let mut path = String::with_capacity(self.0.len() + 1 + name.len());
        path.push_str(&self.0);
        path.push('/');
        path.push_str(name);
        path
    }
}

impl std::fmt::Display for LockPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LockPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Characters ZooKeeper's `PathUtils.validatePath` refuses, besides NUL. (It also refuses
/// surrogates, which a Rust `str` cannot hold.)
fn refused(c: char) -> bool {
    matches!(c, '\u{1}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

fn check(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.len() > LockPath::MAX_LEN {
        return Err(PathError::TooLong { len: path.len(), max: LockPath::MAX_LEN });
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if path == "/" {
        return Err(PathError::Root);
    }
    if path.ends_with('/') {
        return Err(PathError::TrailingSlash);
    }
    if let Some(c) = path.chars().find(|&c| c == '\0' || refused(c)) {
        return Err(if c == '\0' { PathError::Nul } else { PathError::BadCharacter(c) });
    }
    for segment in path[1..].split('/') {
        match segment {
            "" => return Err(PathError::EmptySegment),
            "." | ".." => return Err(PathError::RelativeSegment),
            _ => {}
        }
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return Err(PathError::Reserved);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(path: &str) -> PathError {
        match LockPath::new(path) {
            Err(Error::InvalidPath { reason, .. }) => reason,
            other => panic!("{path:?} gave {other:?}"),
        }
    }

    #[test]
    fn accepts_ordinary_paths() {
        for ok in ["/a", "/locks/orders", "/with space/x", "/日本/ロック", "/a.b/..c/d..", "/zookeeperish"]
        {
            assert_eq!(LockPath::new(ok).expect(ok).as_str(), ok);
        }
    }

    #[test]
    fn refuses_each_bad_form_with_its_reason() {
        assert_eq!(reason(""), PathError::Empty);
        assert_eq!(reason("locks/x"), PathError::NotAbsolute);
        assert_eq!(reason("/"), PathError::Root);
        assert_eq!(reason("/locks/"), PathError::TrailingSlash);
        assert_eq!(reason("/locks//x"), PathError::EmptySegment);
        assert_eq!(reason("/locks/./x"), PathError::RelativeSegment);
        assert_eq!(reason("/locks/.."), PathError::RelativeSegment);
        assert_eq!(reason("/lo\0cks"), PathError::Nul);
        assert_eq!(reason("/lo\u{7}cks"), PathError::BadCharacter('\u{7}'));
        assert_eq!(reason("/zookeeper/quota"), PathError::Reserved);
        let long = format!("/{}", "x".repeat(LockPath::MAX_LEN));
        assert_eq!(reason(&long), PathError::TooLong { len: LockPath::MAX_LEN + 1, max: LockPath::MAX_LEN });
    }

    mod fuzz {
        use proptest::prelude::*;

        use super::super::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            /// Any string: a typed error or a path that keeps every rule; never a panic.
            #[test]
            fn any_string_is_refused_or_valid(path in "(/|[a-z.]|\\PC){0,40}") {
                if let Ok(p) = LockPath::new(path.clone()) {
                    let p = p.as_str();
                    prop_assert!(p.starts_with('/') && !p.ends_with('/') && p.len() <= LockPath::MAX_LEN);
                    prop_assert!(p[1..].split('/').all(|seg| !seg.is_empty() && seg != "." && seg != ".."));
                    prop_assert!(!p.contains('\0'));
                }
            }
        }
    }
}
