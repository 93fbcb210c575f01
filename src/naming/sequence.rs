//! ZooKeeper's sequence suffix: reading it (only exactly as ZooKeeper writes it), writing it
//! without the formatting machinery, and ordering it as its text, as Curator and kazoo do.

/// ZooKeeper's sequence suffix: `%010d` of an `i32`, so ten digits, or a minus sign and at
/// least nine digits, exactly as ZooKeeper writes it. Anything else (`+5`, `12`, spaces,
/// overflow, extra zero padding such as `-0000000005`) is not a sequence: every sequence we
/// accept is [`sequence_text`] of its value, so sorting by that text is sorting by the name's
/// own text, as Curator and kazoo do.
pub(crate) fn parse_sequence(text: &str) -> Option<i32> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if text.len() < 10 || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq: i32 = text.parse().ok()?;
    // Canonical (what `sequence_text(seq)` writes), checked without allocating: it runs for
    // every child of every listing.
    let canonical = if digits.len() == text.len() {
        text.len() == 10
    } else {
        match digits.len() {
            9 => seq != 0,
            10 => !digits.starts_with('0'),
            _ => false,
        }
    };
    canonical.then_some(seq)
}

/// A key whose order is the order of [`sequence_text`] (the text Curator and kazoo sort by),
/// computed without formatting: `-` sorts before every digit; non-negative values are ten
/// digits, so their text order is numeric; a negative value's digits (nine, zero-padded, or
/// ten) compare as text, where a nine-digit text that is a prefix of a ten-digit one comes
/// first.
pub(super) fn text_order_key(seq: i32) -> (u8, u32, u8, u8) {
    if seq >= 0 {
        return (1, seq as u32, 0, 0);
    }
    let digits = seq.unsigned_abs();
    if digits < 1_000_000_000 {
        (0, digits, 0, 0)
    } else {
        (0, digits / 10, 1, (digits % 10) as u8)
    }
}

/// The suffix ZooKeeper writes for `seq`: Java's `%010d`, which Rust's `{:010}` matches (the
/// sign counts in the width): `0000000042`, `-000000005`, `-2147483648`.
#[cfg(test)] // the reference the allocation-free code is tested against
pub(crate) fn sequence_text(seq: i32) -> String {
    format!("{seq:010}")
}

/// Appends [`sequence_text`] of `seq` to `out` without the formatting machinery (it runs on every
/// acquire, to name the node we created).
pub(crate) fn push_sequence_text(out: &mut String, seq: i32) {
    let mut digits = [b'0'; 10];
    let mut n = seq.unsigned_abs();
    let mut used = 0;
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
        used += 1;
        if n == 0 {
            break;
        }
    }
    // Ten characters in all, the sign included; zeros pad on the left of the digits.
    let width = if seq < 0 { 9 } else { 10 };
    if seq < 0 {
        out.push('-');
    }
    let start = digits.len() - used.max(width);
    out.reserve(digits.len() + 1 - start);
    for &digit in &digits[start..] {
        out.push(char::from(digit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_sequences_as_zookeeper_does() {
        assert_eq!(sequence_text(42), "0000000042");
        assert_eq!(sequence_text(-5), "-000000005");
        assert_eq!(sequence_text(i32::MIN), "-2147483648");
        assert_eq!(sequence_text(i32::MAX), "2147483647");
        for seq in [0, 7, 42, -1, -5, 999_999_999, -999_999_999, 1_000_000_000, i32::MIN, i32::MAX] {
            let mut pushed = String::new();
            push_sequence_text(&mut pushed, seq);
            assert_eq!(pushed, sequence_text(seq), "{seq}");
        }
        // The order key at the width boundaries orders as the text.
        let edges = [
            i32::MIN,
            -2_147_483_647,
            -1_000_000_001,
            -1_000_000_000,
            -999_999_999,
            -214_748_365,
            -100_000_001,
            -100_000_000,
            -99_999_999,
            -10,
            -1,
            0,
            1,
            999_999_999,
            1_000_000_000,
            i32::MAX,
        ];
        for a in edges {
            for b in edges {
                assert_eq!(
                    text_order_key(a).cmp(&text_order_key(b)),
                    sequence_text(a).cmp(&sequence_text(b)),
                    "{a} {b}"
                );
            }
        }
        // Extra zero padding is not ZooKeeper's, and would sort differently as text.
        assert_eq!(parse_sequence("-0000000005"), None);
        assert_eq!(parse_sequence("-000000000"), None);
        assert_eq!(parse_sequence("-000000005"), Some(-5));
    }

    mod fuzz {
        use proptest::prelude::*;

        use super::super::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            /// The allocation-free order key orders as the text does, and the canonical check
            /// accepts exactly the texts `sequence_text` writes.
            #[test]
            fn the_text_order_key_is_the_text_order(a in any::<i32>(), b in any::<i32>()) {
                prop_assert_eq!(
                    text_order_key(a).cmp(&text_order_key(b)),
                    sequence_text(a).cmp(&sequence_text(b)),
                    "{} {}", a, b
                );
                prop_assert_eq!(parse_sequence(&sequence_text(a)), Some(a));
                let mut pushed = String::from("x");
                push_sequence_text(&mut pushed, a);
                prop_assert_eq!(&pushed[1..], sequence_text(a));
            }

            /// Texts that look like sequences are accepted exactly when canonical.
            #[test]
            fn only_canonical_sequence_texts_parse(text in "-?[0-9]{8,12}") {
                let canonical = text.parse::<i32>().ok().filter(|seq| sequence_text(*seq) == text);
                prop_assert_eq!(parse_sequence(&text), canonical, "{}", text);
            }
        }
    }
}
