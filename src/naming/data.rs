//! A queue node's data: the participant id, and after a newline the value it proclaimed.

/// A queue node's data as `(participant id, proclaimed value)`: `<id>` or `<id>\n<value>`.
pub(crate) fn split_data(data: &[u8]) -> (String, Vec<u8>) {
    match data.iter().position(|b| *b == b'\n') {
        Some(at) => (String::from_utf8_lossy(&data[..at]).into_owned(), data[at + 1..].to_vec()),
        None => (String::from_utf8_lossy(data).into_owned(), Vec::new()),
    }
}

/// What a participant `id` that proclaimed `value` stores in its node (see [`split_data`]).
pub(crate) fn join_data(id: &str, value: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(id.len() + 1 + value.len());
    data.extend_from_slice(id.as_bytes());
    data.push(b'\n');
    data.extend_from_slice(value);
    data
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
}
