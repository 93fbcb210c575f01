//! `zklock man`: a page per subcommand and zklock(1), each with EXIT STATUS
//! and ENVIRONMENT, naming only pages that exist, and rendered by man(1) (or groff).

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::*;

fn man_dir() -> (tempfile::TempDir, BTreeSet<String>) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(ZKLOCK).args(["man", "--dir"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    (dir, files)
}

/// A page that cannot be written is exit 69, as zklock-man(1) says.
#[test]
fn man_pages_that_cannot_be_written_exit_69() {
    let file = tempfile::NamedTempFile::new().unwrap(); // a file where a directory must be
    let out = Command::new(ZKLOCK).args(["man", "--dir"]).arg(file.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", String::from_utf8_lossy(&out.stderr));
    let (dir, _) = man_dir();
    let page = std::fs::read_to_string(dir.path().join("zklock-man.1")).unwrap();
    assert!(page.contains("could not be written"), "zklock-man(1) names no exit 69:\n{page}");
}

/// The subcommands, as `zklock --help` lists them (less clap's `help`).
fn subcommands() -> Vec<String> {
    let out = Command::new(ZKLOCK).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let listed = help.split("Commands:").nth(1).unwrap().split("Options:").next().unwrap().to_string();
    listed
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|name| name != "help")
        .collect()
}

/// A page's roff with the font changes and escaped hyphens undone.
fn plain(roff: &str) -> String {
    roff.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "")
}

#[test]
fn man_dir_writes_a_page_per_subcommand_with_exit_status_and_environment() {
    let (dir, files) = man_dir();
    let subs = subcommands();
    assert!(subs.len() >= 9 && subs.contains(&"run".to_string()), "{subs:?}");
    let mut expected: BTreeSet<String> = subs.iter().map(|s| format!("zklock-{s}.1")).collect();
    expected.insert("zklock.1".into());
    assert_eq!(files, expected);
    for file in &files {
        let page = plain(&std::fs::read_to_string(dir.path().join(file)).unwrap());
        let name = file.trim_end_matches(".1");
        assert!(page.contains(&format!(".TH {name} 1")), "{file}");
        assert!(page.contains(".SH \"EXIT STATUS\""), "{file}: no EXIT STATUS");
        assert!(page.contains(".SH ENVIRONMENT"), "{file}: no ENVIRONMENT");
        assert!(page.contains("ZK_CONNECT") && page.contains("RUST_LOG"), "{file}");
        assert!(!page.contains(".SH EXTRA"), "{file}: an EXTRA section");
        // Every page it names is one that was written.
        for named in page.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '(' || c == ')')) {
            if let Some(stem) = named.strip_suffix("(1)") {
                if stem.starts_with("zklock") {
                    assert!(files.contains(&format!("{stem}.1")), "{file} names {stem}(1), not generated");
                }
            }
        }
    }
    let run = plain(&std::fs::read_to_string(dir.path().join("zklock-run.1")).unwrap());
    for needle in
        ["ZKLOCK_FENCING_TOKEN", "ZKLOCK_NODE", "ZKLOCK_SESSION_TIMEOUT", "--min-hold", "--once-per"]
    {
        assert!(run.contains(needle), "zklock-run(1) lacks {needle}");
    }
    assert!(run.contains("\n79\n") && run.contains("\n124\n"), "run's exit codes");
    let status = plain(&std::fs::read_to_string(dir.path().join("zklock-status.1")).unwrap());
    assert!(!status.contains("\n124\n"), "status cannot exit 124");
    // Each page's EXIT STATUS speaks of its own subcommand only.
    for file in &files {
        let page = plain(&std::fs::read_to_string(dir.path().join(file)).unwrap());
        let Some(sub) = file.strip_prefix("zklock-").and_then(|f| f.strip_suffix(".1")) else { continue };
        let exit = &page[page.find(".SH \"EXIT STATUS\"").unwrap()..page.find(".SH ENVIRONMENT").unwrap()];
        for other in subs.iter().filter(|s| *s != sub) {
            for said in [format!("{other}:"), format!("{other} --"), format!("({other}")] {
                // Not an option of the same name (`--once-per:`).
                let named = exit.match_indices(&said).any(|(at, _)| !exit[..at].ends_with('-'));
                assert!(!named, "{file}'s EXIT STATUS speaks of {other}: {exit}");
            }
        }
    }
    let deadlocks = plain(&std::fs::read_to_string(dir.path().join("zklock-deadlocks.1")).unwrap());
    let exit = &deadlocks[deadlocks.find("EXIT STATUS").unwrap()..deadlocks.find(".SH ENVIRONMENT").unwrap()];
    assert!(
        exit.contains("no deadlock found") && !exit.contains("hold") && !exit.contains("elect"),
        "{exit}"
    );
    // The docs list every page written.
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/zklock.md")).unwrap();
    let listed =
        docs[docs.find("writes zklock(1) and one").unwrap()..].split_once("each with EXIT STATUS").unwrap().0;
    let listed: BTreeSet<String> = listed
        .match_indices("zklock")
        .filter_map(|(at, _)| {
            let stem: String =
                listed[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            listed[at + stem.len()..].starts_with("(1)").then(|| format!("{stem}.1"))
        })
        .collect();
    assert_eq!(listed, files, "docs/zklock.md's list of pages");
    let root = plain(&std::fs::read_to_string(dir.path().join("zklock.1")).unwrap());
    assert!(root.contains(".SH SUBCOMMANDS") && root.contains(".SH EXAMPLES"), "{root}");
    assert!(!root.contains("zklock-help"), "zklock-help(1) is not generated");
}

#[test]
fn man_without_dir_prints_zklock_1() {
    let (dir, _) = man_dir();
    let out = Command::new(ZKLOCK).arg("man").output().unwrap();
    assert!(out.status.success());
    let written = std::fs::read(dir.path().join("zklock.1")).unwrap();
    assert_eq!(out.stdout, written);
}

/// Renders a page with `man -l` if man is installed, else with `groff -man`: no warnings, and
/// the sections show. Returns the renderer used, or None when neither is installed.
fn render(page: &std::path::Path) -> Option<(&'static str, String)> {
    let has = |tool: &str| {
        Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().unwrap().status.success()
    };
    let out = if has("man") {
        Command::new("man")
            .arg("-l")
            .arg(page)
            .env("MANWIDTH", "100")
            .env("MAN_KEEP_FORMATTING", "")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .output()
            .unwrap()
    } else if has("groff") {
        Command::new("groff").args(["-man", "-Tutf8", "-ww"]).arg(page).output().unwrap()
    } else {
        return None;
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let warnings = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(warnings.trim().is_empty(), "{page:?}: {warnings}");
    Some((if has("man") { "man" } else { "groff" }, String::from_utf8_lossy(&out.stdout).into_owned()))
}

#[test]
fn every_page_renders() {
    let (dir, files) = man_dir();
    let mut rendered = 0;
    for file in &files {
        match render(&dir.path().join(file)) {
            Some((tool, text)) => {
                let text = text.replace("\u{8}", "");
                assert!(
                    text.contains("EXIT STATUS") && text.contains("ENVIRONMENT"),
                    "{tool} {file}: {text}"
                );
                rendered += 1;
            }
            None => eprintln!("neither man nor groff is installed: {file} not rendered"),
        }
    }
    eprintln!("rendered {rendered} of {} pages", files.len());
}
