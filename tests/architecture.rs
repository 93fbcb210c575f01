//! The library's layering, checked: every file of `src/` imports only from lower layers or its
//! own layer, another module only through its public face (its `mod.rs`), and no file imports
//! another in a loop, inside a folder included. Also: no struct keeps more than
//! [`MAX_FIELDS`] fields, and `docs/ARCHITECTURE.md` names only paths that exist.
//!
//! A short reader of `src/` rather than a tool (cargo-modules needs rust-analyzer's build, some
//! minutes on CI's two cores, and knows nothing of our layers): it strips comments, strings and
//! `#[cfg(test)]` modules, follows every `crate::`, `super::` and `self::` path (in `use` lines
//! and in code), and resolves it to the file that defines the module it reaches.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom first: a module may import from its own layer and the ones before it.
/// `docs/ARCHITECTURE.md` explains each.
const LAYERS: &[&[&str]] = &[
    &["error", "format", "status", "util"],
    &["markers", "path", "naming"],
    &["identity", "options", "metrics"],
    &["session"],
    &["queue", "participants", "revocation"],
    &["hold"],
    &["guard"],
    &["lock_core"],
    &["recipes"],
    &["leader"],
    &["inspect"],
    &["", "__fuzz"], // the crate root, lib.rs, and its hidden fuzzing hooks
];

/// The most fields a struct may keep.
const MAX_FIELDS: usize = 12;

/// The tree checked: this repository, or another checkout named by `ZK_RECIPES_TREE` (to see
/// what an older tree looked like).
fn repo() -> PathBuf {
    std::env::var_os("ZK_RECIPES_TREE")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// Every `.rs` file under `src/`, by module path (`session::conn`; the root is empty).
fn modules() -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                let mut inner = prefix.to_vec();
                inner.push(name);
                walk(&path, &inner, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut module = prefix.to_vec();
                if name != "mod" && name != "lib" {
                    module.push(name);
                }
                out.insert(module.join("::"), path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&repo().join("src"), &[], &mut out);
    out
}

/// The code of a file without comments, string and char literals, and `#[cfg(test)]` modules.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !is_ident(chars.get(i.wrapping_sub(1)))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a), which stays.
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// The paths in `code` (`a::b`, `crate::a`, `super::a::{b, c}`), each as its segments; a group
/// (`a::{b, c::d}`) gives one path per item, with the item's first segment. Which of them reach
/// our modules is for [`resolve`] to say.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if is_ident(chars.get(i.wrapping_sub(1)))
            || (i > 0 && chars[i - 1] == ':')
            || !is_ident(Some(&chars[i]))
        {
            i += 1;
            continue;
        }
        let (_, after) = ident_at(&chars, i);
        if !starts_path(&chars, after) {
            i = after.max(i + 1);
            continue;
        }
        let (mut segments, end) = segments_at(&chars, i);
        if chars.get(end) == Some(&':')
            && chars.get(end + 1) == Some(&':')
            && chars.get(end + 2) == Some(&'{')
        {
            // A group: one path per top-level item.
            let mut depth = 0;
            let mut j = end + 2;
            let mut item_start = j + 1;
            while j < chars.len() {
                match chars[j] {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        let item: String = chars[item_start..j].iter().collect();
                        let first = item.trim().split("::").next().unwrap_or("").trim().to_string();
                        if !first.is_empty() {
                            let mut path = segments.clone();
                            if first != "self" {
                                path.push(first.split_whitespace().next().unwrap().to_string());
                            }
                            found.push(path);
                        }
                        item_start = j + 1;
                        if chars[j] == '}' {
                            break;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
                j += 1;
            }
            i = j + 1;
        } else {
            segments.retain(|s| !s.is_empty());
            found.push(segments);
            i = end;
        }
    }
    found
}

fn ident_at(chars: &[char], start: usize) -> (String, usize) {
    let mut end = start;
    while is_ident(chars.get(end)) {
        end += 1;
    }
    (chars[start..end].iter().collect(), end)
}

fn starts_path(chars: &[char], at: usize) -> bool {
    chars.get(at) == Some(&':') && chars.get(at + 1) == Some(&':')
}

/// `a::b::c` from `start`; returns the segments and where they end.
fn segments_at(chars: &[char], start: usize) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    let mut at = start;
    loop {
        let (word, end) = ident_at(chars, at);
        if word.is_empty() {
            return (segments, at);
        }
        segments.push(word);
        if starts_path(chars, end) && is_ident(chars.get(end + 2)) {
            at = end + 2;
        } else {
            return (segments, end);
        }
    }
}

/// The module a path from `from` (a module path; `is_dir_module` when it is a `mod.rs` or the
/// root) reaches: the deepest module file along it.
fn resolve(
    path: &[String],
    from: &str,
    is_dir_module: bool,
    known: &BTreeMap<String, PathBuf>,
) -> Option<String> {
    // `self` is the module itself; each `super` is its parent (for a `mod.rs`, the folder's
    // parent; for a plain file, its folder).
    let _ = is_dir_module;
    let mut base: Vec<String> =
        if from.is_empty() { Vec::new() } else { from.split("::").map(String::from).collect() };
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &path[1..];
        }
        Some("self") => rest = &path[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        // A path from one of this module's children (`use latch::X` in a `mod.rs`), or from
        // anything else (`std::`, a crate, a type): only the first is ours.
        Some(first) => {
            let mut child = base.clone();
            child.push(first.to_string());
            if !known.contains_key(&child.join("::")) {
                return None;
            }
        }
        None => return None,
    }
    let mut module = base;
    for segment in rest {
        let mut candidate = module.clone();
        candidate.push(segment.clone());
        if known.contains_key(&candidate.join("::")) {
            module = candidate;
        } else {
            break;
        }
    }
    Some(module.join("::"))
}

fn layer_of(module: &str) -> usize {
    let top = module.split("::").next().unwrap_or("");
    LAYERS.iter().position(|layer| layer.contains(&top)).unwrap_or_else(|| {
        panic!("module `{module}` is in no layer: add it to LAYERS here and to docs/ARCHITECTURE.md")
    })
}

/// Every module's imports (module → modules it names), self-references left out.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let known = modules();
    let mut graph = BTreeMap::new();
    for (module, file) in &known {
        let name = file.file_name().unwrap().to_string_lossy();
        let is_dir_module = name == "mod.rs" || name == "lib.rs";
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let targets: BTreeSet<String> = paths_in(&code)
            .iter()
            .filter_map(|path| resolve(path, module, is_dir_module, &known))
            .filter(|target| target != module)
            .collect();
        graph.insert(module.clone(), targets);
    }
    graph
}

#[test]
fn imports_point_down_and_through_each_modules_face() {
    let graph = imports();
    let mut wrong = Vec::new();
    for (from, targets) in &graph {
        for to in targets {
            let (top_from, top_to) = (from.split("::").next().unwrap(), to.split("::").next().unwrap());
            if layer_of(to) > layer_of(from) {
                wrong.push(format!("{from} imports {to}, a higher layer"));
            }
            // Into another module only through its face: its `mod.rs`, not its files.
            if top_from != top_to && to.contains("::") && !from.is_empty() {
                wrong.push(format!("{from} reaches into {to}: import it through `{top_to}`'s mod.rs"));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn no_file_imports_another_in_a_loop() {
    let graph = imports();
    // Depth-first search for a back edge; report the loop it closes.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        loops: &mut Vec<String>,
    ) {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            loops.push(cycle.join(" -> "));
            return;
        }
        if done.contains(node) {
            return;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, stack, done, loops);
        }
        stack.pop();
        done.insert(node.to_string());
    }
    let (mut done, mut loops) = (BTreeSet::new(), Vec::new());
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done, &mut loops);
    }
    assert!(loops.is_empty(), "import loops:\n{}", loops.join("\n"));
}

#[test]
fn no_struct_keeps_more_than_twelve_fields() {
    let mut big = Vec::new();
    for file in modules().values() {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let mut rest = code.as_str();
        while let Some(at) = rest.find("struct ") {
            let after = &rest[at + 7..];
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let header_end = after.find(['{', ';', '(']).unwrap_or(after.len());
            if after[header_end..].starts_with('{') {
                let body = &after[header_end + 1..];
                let (mut depth, mut fields, mut end) = (0i32, 0, body.len());
                for (i, c) in body.char_indices() {
                    match c {
                        '{' | '(' | '<' | '[' => depth += 1,
                        '>' if body[..i].ends_with('-') => {}
                        '}' | ')' | '>' | ']' if depth > 0 => depth -= 1,
                        '}' => {
                            end = i;
                            break;
                        }
                        ',' if depth == 0 => fields += 1,
                        _ => {}
                    }
                }
                if !body[..end].trim().is_empty() && !body[..end].trim_end().ends_with(',') {
                    fields += 1;
                }
                if fields > MAX_FIELDS {
                    big.push(format!("{}: struct {name} has {fields} fields", file.display()));
                }
            }
            rest = &after[header_end..];
        }
    }
    assert!(big.is_empty(), "structs over {MAX_FIELDS} fields:\n{}", big.join("\n"));
}

#[test]
fn the_architecture_map_names_only_paths_that_exist() {
    let map = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let mut missing = Vec::new();
    let mut named = 0;
    for quoted in map.split('`').skip(1).step_by(2) {
        let path = quoted.trim_end_matches('/');
        let top = path.split('/').next().unwrap_or("");
        if !["src", "tests", "cli", "bench", "examples", "testcontainers", "docs", "scripts", ".ci"]
            .contains(&top)
            || !path.contains('/')
            || path.contains(' ')
        {
            continue;
        }
        named += 1;
        if !repo().join(path).exists() {
            missing.push(path.to_string());
        }
    }
    assert!(named >= 20, "the map names only {named} paths");
    assert!(missing.is_empty(), "docs/ARCHITECTURE.md names paths that do not exist: {missing:?}");
    // And every module of the library is on the map.
    let unmapped: Vec<String> = modules()
        .values()
        .map(|file| file.strip_prefix(repo()).unwrap().display().to_string())
        .filter(|file| !map.contains(&format!("`{file}`")))
        .collect();
    assert!(unmapped.is_empty(), "files of src/ missing from docs/ARCHITECTURE.md: {unmapped:?}");
}

/// Names the map uses that are not this project's: Curator's and `zookeeper-client`'s types, a
/// socket option and a loader variable.
const FOREIGN_NAMES: &[&str] =
    &["LockInternals", "Revoker", "LockClient", "Stat", "TCP_NODELAY", "LD_PRELOAD"];

#[test]
fn the_architecture_map_names_only_types_and_files_that_exist() {
    let map = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let mut files = Vec::new();
    for dir in ["src", "cli", "testcontainers", "bench", "tests", "examples"] {
        rust_files(&repo().join(dir), &mut files);
    }
    let code: String = files.iter().map(|f| std::fs::read_to_string(f).expect("a source file")).collect();
    let (mut names, mut short_paths, mut missing) = (0, 0, Vec::new());
    for quoted in map.split('`').skip(1).step_by(2) {
        let item = quoted.trim_end_matches("()");
        let word =
            |part: &str| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let name = item.split("::").next().unwrap_or("");
        if name.starts_with(|c: char| c.is_ascii_uppercase()) && item.split("::").all(word) {
            if FOREIGN_NAMES.contains(&name) {
                continue;
            }
            names += 1;
            if !defines(&code, name) {
                missing.push(quoted.to_string());
            }
        } else if quoted.ends_with(".rs") && !quoted.contains(['*', ' ']) && !quoted.starts_with("src/") {
            // A file named from its folder (`session/proof.rs`, `ports.rs`): some file ends so.
            short_paths += 1;
            let suffix = format!("/{quoted}");
            if !files.iter().any(|f| f.to_string_lossy().ends_with(&suffix)) {
                missing.push(quoted.to_string());
            }
        }
    }
    assert!(names >= 50 && short_paths >= 20, "the map names {names} types and {short_paths} short paths");
    assert!(missing.is_empty(), "docs/ARCHITECTURE.md names what does not exist: {missing:?}");
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `code` defines `name`: an item (`struct`, `enum`, `trait`, `type`, `const`,
/// `static`), an enum variant (a line that starts with it), or an environment variable it
/// reads (`"NAME"`).
fn defines(code: &str, name: &str) -> bool {
    let ends_word = |rest: &str| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
    let item = ["struct", "enum", "trait", "type", "const", "static"].iter().any(|kind| {
        let needle = format!("{kind} {name}");
        code.match_indices(&needle).any(|(at, _)| ends_word(&code[at + needle.len()..]))
    });
    let variant = code.lines().map(str::trim_start).any(|line| {
        line.strip_prefix(name)
            .is_some_and(|rest| rest.trim_start().starts_with(['{', '(', ',', '=']) && ends_word(rest))
    });
    item || variant || code.contains(&format!("\"{name}\""))
}

/// The reader itself: paths, groups, comments and strings.
#[test]
fn the_reader_finds_paths_in_code_only() {
    let code = code_of(
        "use crate::a::{b, c::d, self};\n// crate::comment::x\nlet s = \"crate::string\";\n\
         let c = '{';\nfn f<'a>() { super::e::f(); }\n#[cfg(test)]\nmod tests { use crate::test_only; }",
    );
    let paths: Vec<String> = paths_in(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["crate::a::b", "crate::a::c", "crate::a", "super::e::f"]);
    // A child module's path counts; anything else's (`std::`) does not.
    let known: BTreeMap<String, PathBuf> =
        ["leader", "leader::latch"].iter().map(|m| (m.to_string(), PathBuf::new())).collect();
    let child = vec!["latch".to_string(), "LeaderLatch".to_string()];
    assert_eq!(resolve(&child, "leader", true, &known).as_deref(), Some("leader::latch"));
    assert_eq!(resolve(&["std".into(), "sync".into()], "leader", true, &known), None);
}
