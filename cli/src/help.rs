//! The text `--help` and the man pages share: exit codes, examples, the command's environment.
//! One table each, so that `zklock --help` and `man zklock-run` never disagree.

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs};
use crate::exit::Failure;

/// One exit status: what it means in `zklock --help` and zklock(1) (`text`, every case), and
/// on each subcommand's page (`by`: the subcommands that can exit with it, each group with its
/// own words). A subcommand named in no group never exits with it.
pub struct Code {
    pub code: &'static str,
    pub text: &'static str,
    pub by: &'static [(&'static [&'static str], &'static str)],
}

impl Code {
    /// What the code means for `sub`, if `sub` can exit with it.
    pub fn for_sub(&self, sub: &str) -> Option<&'static str> {
        self.by.iter().find(|(subs, _)| subs.contains(&sub)).map(|(_, text)| *text)
    }
}

const TALKING: &[&str] =
    &["run", "hold", "status", "ls", "elect", "revoke", "break", "deadlocks", "top", "once-per"];
const READING: &[&str] = &["status", "ls", "revoke", "break", "deadlocks", "top", "once-per"];

/// Every exit status, in order. The first is the command's own (for `run` and `elect`).
pub const CODES: &[Code] = &[
    Code {
        code: "0",
        text: "success (hold: released after stdin closed or SIGINT/SIGTERM; elect --observe: \
               ended by a signal; deadlocks: no deadlock; top: ended by q or Ctrl-C)",
        by: &[
            (&["run"], "the command exited 0"),
            (&["hold"], "released after stdin closed, SIGINT/SIGTERM or a revocation request"),
            (&["elect"], "the command exited 0; with --observe: ended by SIGINT/SIGTERM"),
            (&["status", "ls", "revoke", "break", "once-per", "completions", "man"], "success"),
            (&["deadlocks"], "no deadlock found"),
            (&["top"], "ended by q or Ctrl-C, or one frame printed (--once)"),
        ],
    },
    Code {
        code: "1",
        text: "break/revoke: nobody holds the path, or break was not confirmed; deadlocks: a \
               deadlock was found; once-per --clear: no marker",
        by: &[
            (&["revoke"], "nobody holds the path"),
            (&["break"], "nobody holds the path, or the deletion was not confirmed"),
            (&["deadlocks"], "a deadlock was found"),
            (&["once-per"], "--clear: there is no marker to clear"),
        ],
    },
    Code {
        code: "64",
        text: "bad input: an invalid lock path, a missing `--` before the command, a path holding \
               another recipe's or the other --format's nodes, unusable TLS files, --min-hold \
               longer than --max-hold",
        by: &[
            (
                &["run", "elect"],
                "bad input: an invalid path, a missing `--` before the command, a path holding \
                 another recipe's or the other --format's nodes, unusable TLS files, --min-hold \
                 longer than --max-hold",
            ),
            (
                &["hold"],
                "bad input: an invalid path, a path holding another recipe's or the other \
                 --format's nodes, unusable TLS files",
            ),
            (
                &["revoke", "break"],
                "bad input: an invalid path or option, --node naming no node of the queue, unusable \
                 TLS files",
            ),
            (READING, "bad input: an invalid path or option, unusable TLS files"),
            (&["completions", "man"], "bad input: an unknown shell or option"),
        ],
    },
    Code {
        code: "69",
        text: "ZooKeeper unreachable (also: not connected within --connect-timeout or --timeout), \
               session expired, or authentication failed",
        by: &[
            (
                TALKING,
                "ZooKeeper unreachable (also: not connected within --connect-timeout or --timeout), \
                 session expired, or authentication failed",
            ),
            (&["man"], "a page could not be written (--dir)"),
        ],
    },
    Code {
        code: "75",
        text: "lock busy (--no-wait) or not acquired within --timeout (or -E N)",
        by: &[(&["run", "hold"], "lock busy (--no-wait) or not acquired within --timeout (or -E N)")],
    },
    Code {
        code: "76",
        text: "lock or leadership lost while the command ran (its group got SIGTERM, then SIGKILL)",
        by: &[
            (&["run"], "the lock was lost while the command ran (its group got SIGTERM, then SIGKILL)"),
            (&["elect"], "leadership was lost while the command ran (its group got SIGTERM, then SIGKILL)"),
            (&["hold"], "the lock was lost while held (its node deleted, or the session lost)"),
        ],
    },
    Code {
        code: "79",
        text: "run --once-per: a run succeeded within the period (on any host); the command was \
               not run",
        by: &[(
            &["run"],
            "--once-per: a run succeeded within the period (on any host); the command was not run",
        )],
    },
    Code {
        code: "124",
        text: "run --max-hold passed: the command's group got SIGTERM, then SIGKILL; lock released",
        by: &[(&["run"], "--max-hold passed: the command's group got SIGTERM, then SIGKILL; lock released")],
    },
    Code {
        code: "126",
        text: "the command could not be executed; 127 the command was not found",
        by: &[(&["run", "elect"], "the command could not be executed; 127 the command was not found")],
    },
    Code {
        code: "130",
        text: "SIGINT while waiting; 143 SIGTERM while waiting (our queue node deleted first)",
        by: &[
            (
                &["run", "hold"],
                "SIGINT while waiting for the lock; 143 SIGTERM (our queue node deleted first)",
            ),
            (&["elect"], "SIGINT while waiting for leadership; 143 SIGTERM (our queue node deleted first)"),
        ],
    },
];

/// What `run` and `elect` exit with when the command ran to its end.
pub const OWN_STATUS: &str = "the command's own status (128+N if it was killed by signal N), or";

pub const EXAMPLES: &[&str] = &[
    "export ZK_CONNECT=zk1:PORT,zk2:PORT,zk3:PORT",
    "zklock run --once-per 20h /locks/nightly-report -- ./report.sh --full",
    "zklock run -c 'make build && make deploy' /locks/deploy",
    "zklock run --no-wait -E 0 /locks/deploy -- make deploy  # exit 0 if someone deploys now",
    "zklock run -n --min-hold 1m /locks/cron-job -- ./job    # cron on many hosts, skewed clocks",
    "zklock run --timeout 30s /locks/db-migrate -- ./migrate",
    "zklock run --shared /locks/db -- ./read-report          # many readers...",
    "zklock run --exclusive /locks/db -- ./migrate           # ...or one writer",
    "zklock run --limit 3 /locks/crawlers -- ./crawl         # at most 3 at once",
    "coproc L { exec zklock hold /locks/b; }; read -r t <&\"${L[0]}\"; ...; kill $L_PID; wait $L_PID",
    "zklock status /locks/nightly-report",
    "zklock ls /locks",
    "zklock deadlocks /locks                                 # exit 1: sessions wait for each other",
    "zklock top /locks                                       # live: holders, waiters, hold ages",
    "zklock once-per --clear /locks/nightly-report           # the next --once-per run runs",
    "zklock elect --id $(hostname) /election/scheduler -- ./scheduler",
    "zklock elect --observe /election/scheduler",
    "zklock revoke /locks/deploy                             # ask the holder to finish",
    "zklock break /locks/deploy                              # delete the holder's node",
    "zklock completions bash > /etc/bash_completion.d/zklock",
    "zklock man --dir /usr/local/share/man/man1              # zklock(1), zklock-run(1), ...",
];

/// The variables `run` and `elect` set for the command.
pub const COMMAND_ENV: &[(&str, &str)] = &[
    (
        "ZKLOCK_FENCING_TOKEN",
        "strictly increasing across holders: pass it to what you write, so that a stale holder's \
         writes can be refused",
    ),
    ("ZKLOCK_PATH", "the lock or election path"),
    ("ZKLOCK_NODE", "the full path of our queue node"),
];

/// Variables zklock reads that are not a flag's.
pub const OTHER_ENV: &[(&str, &str)] = &[
    (
        "RUST_LOG",
        "which log events go to stderr, as tracing-subscriber's EnvFilter reads it (default: warn); \
         e.g. RUST_LOG=debug or RUST_LOG=zk_recipes=info. See --log-format",
    ),
    (
        "ZK_SASL_PASSWORD",
        "the DIGEST-MD5 password for --sasl digest:USER (unless --sasl-password-file is given); \
         there is no flag for it, so that it never shows on a command line",
    ),
    (
        "KRB5CCNAME, KRB5_CLIENT_KTNAME, KRB5_CONFIG",
        "MIT Kerberos' credential cache, client keytab and configuration, for --sasl gssapi \
         (--keytab sets the first two for this zklock)",
    ),
];

pub const SAFETY: &str = "\
The command runs in its own process group and sees ZKLOCK_FENCING_TOKEN (strictly increasing
across holders: pass it to what you write, so that a stale holder's writes can be refused),
ZKLOCK_PATH and ZKLOCK_NODE. On a loss its group gets SIGTERM at once and SIGKILL after --grace,
but never later than the session's safe window minus --kill-margin. If zklock itself is killed,
the command (not its children) gets SIGKILL; only fencing tokens protect against what is left.";

/// Wraps `text` at `width` columns, the first line after `first`, the others after `rest`.
fn wrap(text: &str, width: usize, first: &str, rest: &str) -> String {
    let mut out = String::from(first);
    let mut column = first.len();
    let mut fresh = true;
    for word in text.split_whitespace() {
        if !fresh && column + 1 + word.len() > width {
            out.push('\n');
            out.push_str(rest);
            column = rest.len();
            fresh = true;
        }
        if !fresh {
            out.push(' ');
            column += 1;
        }
        out.push_str(word);
        column += word.len();
        fresh = false;
    }
    out
}

/// The text after `zklock --help`: exit codes, examples, the safety note.
pub fn after_help() -> String {
    let mut text = String::from("Exit codes:\n  ");
    text.push_str(OWN_STATUS);
    for code in CODES {
        text.push('\n');
        text.push_str(&wrap(code.text, 96, &format!("  {:>3}  ", code.code), "       "));
    }
    text.push_str("\n\nExamples:\n");
    for example in EXAMPLES {
        text.push_str("  ");
        text.push_str(example);
        text.push('\n');
    }
    text.push('\n');
    text.push_str(SAFETY);
    text
}

/// The clap command, with the generated text after `--help`: what parsing, the completions and
/// the man pages use.
pub fn command() -> clap::Command {
    Cli::command().after_help(after_help())
}

/// `zklock completions SHELL`: the shell's completion script on stdout.
pub fn completions(args: &CompletionsArgs) -> Result<u8, Failure> {
    clap_complete::generate(args.shell, &mut command(), "zklock", &mut std::io::stdout());
    Ok(0)
}
