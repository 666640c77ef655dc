//! `mandate enforcement get|set`: the kill switch of the key's environment.

use clap::{Args, Subcommand, ValueEnum};
use mandate_core::Mode;
use mandate_protocol::{wire::Enforcement, wire::SetEnforcement};

use super::{Context, PostArgs, print_object};
use crate::error::{CmdResult, Exit};

/// `mandate enforcement …`.
#[derive(Debug, Subcommand)]
pub enum EnforcementCommand {
    /// Show the mode in force and since when
    Get,
    /// Switch the mode; effective on the next decision
    #[command(long_about = LONG_ABOUT)]
    Set(SetArgs),
}

/// The two modes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Verdicts are recorded and nothing blocks (verdict is always allow)
    Observe,
    /// Verdicts take effect
    Enforce,
}

/// The long help of `SetArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const LONG_ABOUT: &str = "Switch the enforcement mode of the key's environment (a sandbox key \
changes only the sandbox). Setting the mode already in force changes nothing, `since` \
included.";

/// `mandate enforcement set observe|enforce`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  mandate enforcement set observe   # stop blocking, keep recording"
)]
pub struct SetArgs {
    /// The mode to switch to
    #[arg(value_enum)]
    pub mode: ModeArg,
    #[command(flatten)]
    pub post: PostArgs,
}

/// Runs `mandate enforcement …`.
pub fn run(command: EnforcementCommand, ctx: &Context) -> CmdResult {
    let client = ctx.client()?;
    let response = match command {
        EnforcementCommand::Get => client.get("/enforcement", &[])?,
        EnforcementCommand::Set(args) => {
            let mode = match args.mode {
                ModeArg::Observe => Mode::Observe,
                ModeArg::Enforce => Mode::Enforce,
            };
            let body = SetEnforcement { mode };
            client.post("/enforcement", &body, &args.post.key()?)?
        }
    };
    print_object::<Enforcement>(ctx, &response, "an enforcement mode")?;
    Ok(Exit::Success)
}
