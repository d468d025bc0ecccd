//! `poot`: run a checkpoint from the terminal. See `poot --help`.

mod bench;
mod bench_rows;
mod catalog;
mod cli;
mod draft;
mod embed;
mod encoder_load;
mod error;
mod fetch;
mod models;
mod output;
mod progress;
mod rerank;
mod resolve;
mod run;
mod sizing;
mod status;
mod traffic;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::status::Status;

fn main() -> ExitCode {
    // A panic is a bug in poot: say so on one line, without a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("error: internal error (a bug in poot): {info}");
    }));
    let cli = Cli::parse();
    let devices = match &cli.command {
        Command::Run(a) => a.placement.placement().devices(),
        Command::Bench(a) => a.placement.placement().devices(),
        Command::Models(_) | Command::Embed(_) | Command::Rerank(_) => 1,
    };
    if devices > 1 {
        // NCCL's settings (NVLink multicast off), before any thread that could read the
        // environment starts; a value the caller set stays.
        for (key, value) in poot_llm::backend::GROUP_ENV_DEFAULTS {
            if std::env::var_os(key).is_none() {
                // SAFETY: the process is still single-threaded here.
                unsafe { std::env::set_var(key, value) };
            }
        }
    }
    // Quiets the Vulkan probes' "XDG_RUNTIME_DIR is invalid or not set" on headless machines.
    if let Some(dir) = poot_llm::backend::private_runtime_dir() {
        // SAFETY: the process is still single-threaded here.
        unsafe { std::env::set_var(poot_llm::backend::RUNTIME_DIR_ENV, dir) };
    }
    let status = Status { quiet: cli.quiet };
    let result = match cli.command {
        Command::Run(args) => run::run(*args, status),
        Command::Models(args) => models::models(args, status),
        Command::Bench(args) => bench::bench(args, status),
        Command::Embed(args) => embed::embed(args, status),
        Command::Rerank(args) => rerank::rerank(args, status),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
