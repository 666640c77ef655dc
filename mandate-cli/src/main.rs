//! `mandate`: the command-line client of the Mandate service.
//!
//! For three kinds of users: a counterparty who checks a signed verdict offline before it
//! settles (`verify`, `jwks fetch`), an organization scripting its agents, mandates and
//! webhooks and writing the receiver of its events (`listen`), and an agent developer
//! trying the service (`authorize`, `simulate`). `main` only parses and dispatches; each
//! subcommand lives in its own file under `commands/`, and the exit codes are defined once
//! in [`error::Exit`].
// The doc comments of clap's arguments are the `--help` text, written for a terminal
// (`agt_<name>`, bare URLs), not as rustdoc markup.
#![allow(
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls,
    rustdoc::broken_intra_doc_links
)]

mod backtest;
mod cli;
mod client;
mod commands;
mod config;
mod error;
mod http1;
mod jwks_cache;
mod listener;
mod mcp;
mod output;
mod replay_store;

use std::process::ExitCode;

use clap::FromArgMatches as _;

use crate::cli::Cli;

fn main() -> ExitCode {
    let mut command = cli::command();
    let matches = command.get_matches_mut();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let Some(message) = cli::unused_option(&matches) {
        command
            .error(clap::error::ErrorKind::ArgumentConflict, message)
            .exit();
    }
    let ctx = cli.global.context(&matches);
    match cli.command.run(&ctx) {
        Ok(exit) => exit.into(),
        Err(error) => error::report(&error, ctx.json).into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::error::Exit;
    use clap::CommandFactory as _;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exit_codes_are_stable() {
        let codes: Vec<u8> = [
            Exit::Success,
            Exit::Api,
            Exit::Usage,
            Exit::Network,
            Exit::Denied,
            Exit::Review,
            Exit::Rejected,
            Exit::SignatureOnly,
            Exit::LogRefused,
        ]
        .iter()
        .map(|e| e.code())
        .collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
