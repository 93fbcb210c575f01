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
mod output;
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

use crate::args::Command;
use crate::exit::Failure;

fn main() -> ExitCode {
    let cli = match usage::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    logging::init(cli.log_format.unwrap_or_default());
    // Before the runtime's threads start: the Kerberos environment is process-wide.
    cli.sasl.prepare_env();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return Failure::new(exit::UNAVAILABLE, format!("starting the runtime: {e}")).report(),
    };
    let outcome = runtime.block_on(async {
        match &cli.command {
            Command::Run(args) => run::run(&cli, args).await,
            Command::Hold(args) => hold::hold(&cli, args).await,
            Command::Status(args) => status::show(&cli, args).await,
            Command::Ls(args) => status::ls(&cli, args).await,
            Command::Elect(args) => elect::elect(&cli, args).await,
            Command::Revoke(args) => ops::revoke(&cli, args).await,
            Command::Break(args) => ops::break_lock(&cli, args).await,
            Command::Deadlocks(args) => deadlocks::deadlocks(&cli, args).await,
            Command::Top(args) => top::top(&cli, args).await,
            Command::OncePer(args) => once::once_per(&cli, args).await,
            // Neither needs ZooKeeper nor the runtime: they write what clap knows of zklock.
            Command::Completions(args) => help::completions(args),
            Command::Man(args) => man::man(args),
        }
    });
    // A pending read of stdin (hold) must not keep the process alive.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}
