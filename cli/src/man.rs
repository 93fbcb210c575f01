//! The man pages: zklock(1) and one per subcommand (zklock-run(1), ...), from the clap
//! definitions (clap_mangen) plus EXIT STATUS, ENVIRONMENT, EXAMPLES and SEE ALSO sections of
//! our own (its roff), from the tables `--help` uses too.

use std::path::Path;

use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;

use crate::args::ManArgs;
use crate::exit::{self, Failure};
use crate::help;

/// One page: its file name (`zklock-run.1`) and its roff text.
pub struct Page {
    pub file: String,
    pub text: Vec<u8>,
}

/// The subcommands that get a page of their own (clap's `help` does not: `zklock help X` is
/// `zklock X --help`).
fn subcommands(cmd: &clap::Command) -> Vec<&clap::Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help").collect()
}

/// Every page: zklock(1) first.
pub fn pages() -> std::io::Result<Vec<Page>> {
    let mut root = help::command();
    root.build();
    let names: Vec<String> = subcommands(&root).iter().map(|s| s.get_name().to_string()).collect();
    let mut pages = vec![render(&root, None, &names)?];
    for sub in subcommands(&root) {
        pages.push(render(sub, Some(sub.get_name()), &names)?);
    }
    Ok(pages)
}

/// Writes every page into `dir` (created if missing); returns the files written.
pub fn write_all(dir: &Path) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for page in pages()? {
        std::fs::write(dir.join(&page.file), &page.text)?;
        written.push(page.file);
    }
    Ok(written)
}

/// The page of the root command (`sub: None`) or of one subcommand.
fn render(cmd: &clap::Command, sub: Option<&str>, all: &[String]) -> std::io::Result<Page> {
    // Without the after-help text: its parts are sections of their own here.
    let source = format!("zklock {}", env!("CARGO_PKG_VERSION"));
    let man = Man::new(cmd.clone().after_help(None::<&str>)).date("").source(source).manual("zklock manual");
    let mut text = Vec::new();
    man.render_title(&mut text)?;
    man.render_name_section(&mut text)?;
    man.render_synopsis_section(&mut text)?;
    man.render_description_section(&mut text)?;
    man.render_options_section(&mut text)?;
    let mut roff = Roff::new();
    if sub.is_none() {
        subcommands_section(&mut roff, cmd);
    }
    exit_status(&mut roff, sub);
    environment(&mut roff, cmd, sub);
    if sub.is_none() {
        examples(&mut roff);
    }
    if matches!(sub, None | Some("run") | Some("elect")) {
        roff.control("SH", ["NOTES"]);
        paragraphs(&mut roff, help::SAFETY);
    }
    see_also(&mut roff, sub, all);
    roff.to_writer(&mut text)?;
    if sub.is_none() {
        man.render_version_section(&mut text)?;
    }
    Ok(Page { file: man.get_filename(), text })
}

fn paragraphs(roff: &mut Roff, text: &str) {
    roff.text([roman(text.split_whitespace().collect::<Vec<_>>().join(" "))]);
}

/// Each subcommand with its page, e.g. `zklock-run(1)`; `help` has none and is left out.
fn subcommands_section(roff: &mut Roff, cmd: &clap::Command) {
    roff.control("SH", ["SUBCOMMANDS"]);
    for sub in subcommands(cmd) {
        roff.control("TP", []);
        roff.text([bold(format!("zklock-{}", sub.get_name())), roman("(1)")]);
        if let Some(about) = sub.get_about() {
            paragraphs(roff, &about.to_string());
        }
    }
}

fn exit_status(roff: &mut Roff, sub: Option<&str>) {
    roff.control("SH", ["EXIT STATUS"]);
    if matches!(sub, None | Some("run") | Some("elect")) {
        roff.text([roman(help::OWN_STATUS)]);
    }
    for code in help::CODES {
        let Some(text) = sub.map_or(Some(code.text), |name| code.for_sub(name)) else { continue };
        roff.control("TP", []);
        roff.text([bold(code.code)]);
        paragraphs(roff, text);
    }
}

/// The variables the options read (from clap's `env`), the others zklock reads, and those it
/// sets for the command.
fn environment(roff: &mut Roff, cmd: &clap::Command, sub: Option<&str>) {
    roff.control("SH", ["ENVIRONMENT"]);
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let (Some(var), Some(long)) = (arg.get_env(), arg.get_long()) else { continue };
        roff.control("TP", []);
        roff.text([bold(var.to_string_lossy().into_owned())]);
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let first = help.split(". ").next().unwrap_or_default().trim_end_matches('.');
        let mut chars = first.chars();
        let first: String = chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default();
        roff.text([roman("As "), bold(format!("--{long}")), roman(format!(": {first}."))]);
    }
    for (var, text) in help::OTHER_ENV {
        roff.control("TP", []);
        roff.text([bold(*var)]);
        paragraphs(roff, text);
    }
    if matches!(sub, None | Some("run") | Some("elect")) {
        roff.control("PP", []);
        roff.text([roman("Set for the command (run, elect):")]);
        for (var, text) in help::COMMAND_ENV {
            roff.control("TP", []);
            roff.text([bold(*var)]);
            paragraphs(roff, text);
        }
    }
}

fn examples(roff: &mut Roff) {
    roff.control("SH", ["EXAMPLES"]);
    roff.control("nf", []);
    for example in help::EXAMPLES {
        roff.text([roman(*example)]);
        roff.control("br", []);
    }
    roff.control("fi", []);
}

/// The other generated pages, and the tools zklock is modelled on.
fn see_also(roff: &mut Roff, sub: Option<&str>, all: &[String]) {
    roff.control("SH", ["SEE ALSO"]);
    let mut refs: Vec<String> = Vec::new();
    if sub.is_some() {
        refs.push("zklock".into());
    }
    refs.extend(all.iter().filter(|n| Some(n.as_str()) != sub).map(|n| format!("zklock-{n}")));
    let mut line = Vec::new();
    for (i, name) in refs.iter().enumerate() {
        if i > 0 {
            line.push(roman(", "));
        }
        line.push(bold(name.clone()));
        line.push(roman("(1)"));
    }
    line.push(roman(", "));
    line.push(bold("flock"));
    line.push(roman("(1); "));
    line.push(italic("docs/zklock.md"));
    line.push(roman(" in the source repository."));
    roff.text(line);
}

/// `zklock man`: zklock(1) on stdout, or every page into `--dir` (each path written printed). A
/// closed stdout (`| head`) is no failure.
///
/// # Errors
/// A page that could not be written (exit 69).
pub fn man(args: &ManArgs) -> Result<u8, Failure> {
    use std::io::Write;
    let written = match &args.dir {
        Some(dir) => write_all(dir).map(|files| {
            for file in files {
                println!("{}", dir.join(file).display());
            }
        }),
        None => pages().and_then(|pages| std::io::stdout().write_all(&pages[0].text)),
    };
    match written {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(Failure::new(exit::UNAVAILABLE, format!("writing the man pages: {e}"))),
    }
}
