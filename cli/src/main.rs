//! `zklock`: run a command under a ZooKeeper lock or leadership.

mod acquire;
mod args;
mod child;
mod connect;
mod deadline;
mod deadlocks;
mod elect;
mod exit;
mod help;
mod hold;
mod logging;
mod man;
mod metrics;
mod minhold;
mod once;
mod ops;
mod party;
mod progress;
mod run;
mod sasl;
mod say;
mod status;
mod term;
mod top;
mod usage;
mod zk;

use std::process::ExitCode;

use crate::args::{Command, ManArgs};
use crate::exit::Failure;

fn main() -> ExitCode {
    let cli = match usage::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    logging::init(cli.log_format.unwrap_or_default());
    // Before the runtime's threads start: the Kerberos environment is process-wide.
    cli.sasl.prepare_env();
    match &cli.command {
        Command::Completions(args) => {
            clap_complete::generate(args.shell, &mut help::command(), "zklock", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Man(args) => return man_pages(args),
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return Failure::new(exit::UNAVAILABLE, format!("starting the runtime: {e}")).report(),
    };
    let outcome = runtime.block_on(async {
        match &cli.command {
            Command::Run(args) => run::run(&cli, args).await,
            Command::Hold(args) => hold::hold(&cli, args).await,
            Command::Status(args) => {
                let conn = cli.connect().await?;
                status::show(&conn, &args.lockpath, cli.format(), args.json).await.map(|()| 0)
            }
            Command::Ls(args) => {
                let conn = cli.connect().await?;
                status::ls(&conn, &args.prefix, cli.format(), args.json).await.map(|()| 0)
            }
            Command::Elect(args) => elect::elect(&cli, args).await,
            Command::Revoke(args) => {
                let conn = cli.connect().await?;
                ops::revoke(&conn, &args.lockpath, cli.format(), args.node.as_deref(), args.json).await
            }
            Command::Break(args) => {
                let conn = cli.connect().await?;
                ops::break_lock(
                    &conn,
                    &args.lockpath,
                    cli.format(),
                    args.node.as_deref(),
                    args.yes,
                    args.json,
                )
                .await
            }
            Command::Deadlocks(args) => deadlocks::deadlocks(&cli.connect().await?, args).await,
            Command::Top(args) => top::top(&cli.connect().await?, args).await,
            Command::OncePer(args) => once::once_per(&cli.connect().await?, args).await,
            Command::Completions(_) | Command::Man(_) => Ok(0),
        }
    });
    // A pending read of stdin (hold) must not keep the process alive.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}

/// `zklock man`: zklock(1) on stdout, or every page into `--dir`.
fn man_pages(args: &ManArgs) -> ExitCode {
    use std::io::Write;
    let written = match &args.dir {
        Some(dir) => man::write_all(dir).map(|files| {
            for file in files {
                println!("{}", dir.join(file).display());
            }
        }),
        None => man::pages().and_then(|pages| std::io::stdout().write_all(&pages[0].text)),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => Failure::new(exit::UNAVAILABLE, format!("writing the man pages: {e}")).report(),
    }
}
