//! `mandate-server`: serve the API, or run an operator command on the database. This file
//! starts the runtime and the log and hands the command line to `commands/`.

use std::process::ExitCode;

use clap::Parser;
use mandate_server::logging;

mod cli;
mod commands;

use cli::{Cli, Command};

/// Threads for blocking work: SQLite reads (which share 4 reader connections, so more
/// threads would only wait on their locks) and DNS lookups of webhook deliveries. With
/// tokio's default of 512, loading many agents' states at once starts dozens of threads,
/// each with its own stack and allocator caches: more memory resident, and a slower first
/// pass.
const BLOCKING_THREADS: usize = 8;

/// jemalloc, not glibc's malloc: the hot path makes many small allocations on tokio's
/// workers and frees some of them on other threads (the writer, the sync thread), where
/// glibc's `malloc`, `free` and `malloc_consolidate` take a large share of the server's
/// CPU; with jemalloc the server is faster and its resident set smaller
/// (docs/performance.md). `unprefixed` in Cargo.toml makes SQLite's allocations use it too.
/// Its options (two arenas, freed pages returned after 1 s) are compiled in from
/// `.cargo/config.toml`; with jemalloc's defaults the resident set with 10 M decisions can
/// go over the 200 MB budget.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(main_async())
}

async fn main_async() -> ExitCode {
    let cli = Cli::parse();
    let format = match &cli.command {
        Command::Serve(args) => args.log_format.into(),
        _ => logging::Format::Text,
    };
    logging::init(format);
    match commands::run(cli.command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}
