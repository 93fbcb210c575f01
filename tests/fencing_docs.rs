//! `docs/fencing.md` cannot drift from the code: every SQL statement and Lua script it shows is
//! byte-identical to a constant of `examples/fencing`, the main ones are all shown, and every
//! test it names as the backing of a claim exists. (No server needed.)

#[path = "../examples/fencing/mod.rs"]
mod fencing;

use fencing::{postgres as pg, redis as rs};

const DOC: &str = include_str!("../docs/fencing.md");

/// Every statement and script of the module, by name.
fn constants() -> Vec<(&'static str, &'static str)> {
    vec![
        ("SCHEMA_SQL", pg::SCHEMA_SQL),
        ("REGISTER_SQL", pg::REGISTER_SQL),
        ("HIGHEST_SQL", pg::HIGHEST_SQL),
        ("WRITE_SET_SQL", pg::WRITE_SET_SQL),
        ("PLACE_ORDER_SQL", pg::PLACE_ORDER_SQL),
        ("DECREMENT_STOCK_SQL", pg::DECREMENT_STOCK_SQL),
        ("WRITE_SET_UNFENCED_SQL", pg::WRITE_SET_UNFENCED_SQL),
        ("REGISTER_LUA", rs::REGISTER_LUA),
        ("DECREMENT_STOCK_LUA", rs::DECREMENT_STOCK_LUA),
        ("WRITE_SET_LUA", rs::WRITE_SET_LUA),
    ]
}

/// The doc's fenced code blocks in `lang`: their text between the fences, without the newline
/// before the closing fence.
fn blocks(lang: &str) -> Vec<String> {
    let open = format!("```{lang}");
    let mut found = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in DOC.lines() {
        match &mut current {
            None if line.trim_end() == open => current = Some(Vec::new()),
            Some(lines) if line.trim_end() == "```" => {
                found.push(lines.join("\n"));
                current = None;
            }
            Some(lines) => lines.push(line),
            None => {}
        }
    }
    assert!(current.is_none(), "an unclosed ```{lang} block in docs/fencing.md");
    found
}

#[test]
fn the_doc_shows_the_modules_statements_and_scripts_verbatim() {
    let constants = constants();
    let mut shown = Vec::new();
    for lang in ["sql", "lua"] {
        for block in blocks(lang) {
            match constants.iter().find(|(_, text)| *text == block) {
                Some((name, _)) => shown.push(*name),
                None => panic!(
                    "docs/fencing.md shows a ```{lang} block that is no constant of \
                     examples/fencing:\n{block}"
                ),
            }
        }
    }
    for required in [
        "SCHEMA_SQL",
        "REGISTER_SQL",
        "HIGHEST_SQL",
        "WRITE_SET_SQL",
        "PLACE_ORDER_SQL",
        "DECREMENT_STOCK_SQL",
        "REGISTER_LUA",
        "DECREMENT_STOCK_LUA",
    ] {
        assert!(shown.contains(&required), "docs/fencing.md does not show {required}");
    }
}

#[test]
fn every_test_the_doc_names_exists() {
    let mut named = 0;
    for (i, _) in DOC.match_indices("tests/") {
        let rest = &DOC[i..];
        let end = rest.find(|c: char| !(c.is_alphanumeric() || "_/.:".contains(c))).unwrap_or(rest.len());
        let Some((file, test)) = rest[..end].split_once("::") else { continue };
        let test = test.trim_end_matches(['.', ':']);
        let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
        let source =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("docs/fencing.md names {path}: {e}"));
        assert!(
            source.contains(&format!("fn {test}(")),
            "docs/fencing.md names {file}::{test}, which does not exist"
        );
        named += 1;
    }
    assert!(named >= 20, "docs/fencing.md should back its claims with tests; it names {named}");
}

/// The tokens the scripts take: 20 digits, so that the halves the scripts compare are exact.
#[test]
fn tokens_travel_to_redis_as_twenty_digits() {
    assert_eq!(rs::token_arg(1), "00000000000000000001");
    assert_eq!(rs::token_arg(i64::MAX), "09223372036854775807");
    assert_eq!(rs::token_arg((1 << 53) + 1), "00009007199254740993");
    assert_eq!(rs::fence_key("/locks/a"), "fence:/locks/a");
}
