//! Parsing the arguments: every usage error is one line on stderr and exit 64.

use std::process::ExitCode;

use clap::FromArgMatches;

use crate::args::Cli;
use crate::exit::{self, Failure};

/// Parses the arguments. Every usage error is one line on stderr and exit 64 (EX_USAGE), not
/// clap's 2; a missing `--` before the command says so.
pub fn parse() -> Result<Cli, ExitCode> {
    let parsed = crate::help::command().try_get_matches().and_then(|m| Cli::from_arg_matches(&m));
    let error = match parsed {
        Ok(cli) => return Ok(cli),
        Err(error) => error,
    };
    use clap::error::ErrorKind as K;
    if matches!(
        error.kind(),
        K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = error.print();
        return Err(if error.kind() == K::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(exit::USAGE)
        } else {
            ExitCode::SUCCESS
        });
    }
    let rendered = error.to_string();
    // The first paragraph, on one line ("... not provided: <LOCKPATH>").
    let paragraph: Vec<&str> = rendered.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
    let mut line = paragraph.join(" ").trim_start_matches("error: ").to_string();
    if line.is_empty() {
        line = "bad arguments (see zklock --help)".into();
    }
    // clap's "did you mean" tips, on the same line.
    let (similar, other) = tips(&error);
    for tip in similar.iter().chain(&other) {
        line.push_str(&format!(" (tip: {tip})"));
    }
    // `run` or `elect` without `--`: say where the command goes (unless the word is a
    // misspelt option of ours).
    let args: Vec<String> = std::env::args().skip(1).collect();
    let takes_command = args.iter().any(|a| a == "run" || a == "elect") && !args.iter().any(|a| a == "--");
    if takes_command
        && similar.is_empty()
        && matches!(error.kind(), K::UnknownArgument | K::TooManyValues | K::MissingRequiredArgument)
    {
        line.push_str(" (the command goes after --: zklock run LOCKPATH -- COMMAND [ARGS...], or -c STRING)");
    }
    crate::say::set_json(crate::say::asked_in_args());
    Err(Failure::new(exit::USAGE, line).report())
}

/// clap's tips for an error, worded as clap words them: first the similar subcommands,
/// arguments and values ("a similar argument exists: '--connect'"), then the others ("'run
/// --no-wait' exists"), less "to pass 'X' as a value, use '-- X'": where a command goes after
/// `--` is said by `parse`, and no other zklock argument takes such a value.
fn tips(error: &clap::Error) -> (Vec<String>, Vec<String>) {
    use clap::error::{ContextKind as C, ContextValue as V};
    let mut similar = Vec::new();
    for (kind, what) in
        [(C::SuggestedSubcommand, "subcommand"), (C::SuggestedArg, "argument"), (C::SuggestedValue, "value")]
    {
        let names = match error.get(kind) {
            Some(V::String(name)) => vec![name.clone()],
            Some(V::Strings(names)) => names.clone(),
            _ => continue,
        };
        let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        match quoted.len() {
            0 => {}
            1 => similar.push(format!("a similar {what} exists: {}", quoted[0])),
            _ => similar.push(format!("some similar {what}s exist: {}", quoted.join(", "))),
        }
    }
    let other = match error.get(C::Suggested) {
        Some(V::StyledStrs(tips)) => {
            tips.iter().map(ToString::to_string).filter(|t| !t.starts_with("to pass ")).collect()
        }
        _ => Vec::new(),
    };
    (similar, other)
}
