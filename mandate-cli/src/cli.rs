//! The command line: global options and the subcommands, each defined in its own file
//! under `commands/`.

use clap::{Args, Parser, Subcommand};

use crate::commands::{
    agents, audit, authorize, decisions, enforcement, escrows, events, export, jwks, listen, login,
    mandates, profiles, reviews, simulate, verify, webhooks, witness,
};
use std::time::Duration;

use clap::parser::ValueSource;

use crate::client::HttpOptions;
use crate::commands::Context;
use crate::config::{Given, Source};
use crate::error::{CmdResult, EXIT_CODES_HELP};

const ABOUT: &str = "Script the Mandate API and verify signed verdicts offline";

const LONG_ABOUT: &str = "\
Script the Mandate API and verify signed verdicts offline.

Mandate decides whether an AI agent may spend money and signs each verdict as an ES256
JWT. This tool registers agents, writes and revokes mandates, asks for authorizations,
resolves reviews, switches enforcement, reads decisions, funds escrows from allowed
decisions and moves them, exports the decision log for audit, and manages webhooks and the
event log; it checks a verdict token against the published key set without any account
(`verify`), replays past decisions through a draft mandate to show what would change
(`simulate`), and receives and verifies webhook events on this machine while you develop a
consumer (`listen`).

Connection settings: a flag beats its environment variable, which beats the profile
(--profile NAME, MANDATE_PROFILE, or the profile named `default`). Profiles are stored
by `mandate login` in $XDG_CONFIG_HOME/mandate/config.json (~/.config/mandate/;
%APPDATA%\\mandate\\ on Windows).";

/// `mandate`: the command line.
#[derive(Debug, Parser)]
#[command(
    name = "mandate",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXIT_CODES_HELP,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Options every subcommand takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// API base URL [default: http://127.0.0.1:8080/v1]
    ///
    /// For example https://api.example.com; the /v1 segment is added when missing. Plain
    /// http is accepted only for localhost.
    #[arg(
        long,
        env = "MANDATE_BASE_URL",
        global = true,
        hide_env_values = true,
        value_name = "URL",
        help_heading = GLOBAL
    )]
    pub base_url: Option<String>,

    /// API key, organization (sk_…) or agent (ak_…)
    ///
    /// Prefer MANDATE_API_KEY or a profile: a flag is visible in the process list.
    #[arg(
        long,
        env = "MANDATE_API_KEY",
        global = true,
        hide_env_values = true,
        value_name = "KEY",
        help_heading = GLOBAL
    )]
    pub api_key: Option<String>,

    /// Stored profile to use [default: the profile named `default`]
    ///
    /// Profiles are written by `mandate login` and listed by `mandate profiles`.
    #[arg(
        long,
        env = "MANDATE_PROFILE",
        global = true,
        hide_env_values = true,
        value_name = "NAME",
        help_heading = GLOBAL
    )]
    pub profile: Option<String>,

    /// Print JSON for scripts: the server's objects as they came
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,

    /// Seconds to wait for each HTTP request
    #[arg(
        long,
        global = true,
        default_value_t = 30,
        value_name = "SECS",
        help_heading = GLOBAL
    )]
    pub timeout: u64,

    /// Retries after a network error, a 5xx or a short 429
    ///
    /// A POST is retried with the same Idempotency-Key, so it never acts twice.
    #[arg(
        long,
        env = "MANDATE_RETRIES",
        global = true,
        hide_env_values = true,
        default_value_t = 2,
        value_name = "N",
        help_heading = GLOBAL
    )]
    pub retries: u32,
}

/// The heading of the global options in every help page.
const GLOBAL: &str = "Global options";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Store an API key (and base URL) under a profile name
    #[command(long_about = login::LONG_ABOUT)]
    Login(login::LoginArgs),
    /// List the stored profiles, keys masked
    #[command(long_about = profiles::LONG_ABOUT)]
    Profiles(profiles::ProfilesArgs),
    /// Register, list and read agents (organization key)
    #[command(subcommand)]
    Agents(agents::AgentsCommand),
    /// Write, list, read and revoke mandates
    #[command(subcommand)]
    Mandates(mandates::MandatesCommand),
    /// Ask for an authorization to spend (agent key); exits 4 on a denial, 5 on review
    #[command(long_about = authorize::LONG_ABOUT)]
    Authorize(authorize::AuthorizeArgs),
    /// Approve or deny a pending review (organization key)
    #[command(subcommand)]
    Reviews(reviews::ReviewsCommand),
    /// Read or switch the enforcement mode, the kill switch (organization key)
    #[command(subcommand)]
    Enforcement(enforcement::EnforcementCommand),
    /// List and read decisions, the log of every verdict
    #[command(subcommand)]
    Decisions(decisions::DecisionsCommand),
    /// Verify a signed verdict or event offline; exits 0 only for a valid, matching allow
    /// (7 with --signature-only)
    #[command(long_about = verify::LONG_ABOUT)]
    Verify(verify::VerifyArgs),
    /// Fetch the public key set and cache it for `verify`
    #[command(subcommand)]
    Jwks(jwks::JwksCommand),
    /// Replay past decisions through a draft mandate and show what would change
    #[command(long_about = simulate::LONG_ABOUT)]
    Simulate(simulate::SimulateArgs),
    /// Register, list, read, delete and ping webhook endpoints (organization key)
    #[command(subcommand)]
    Webhooks(webhooks::WebhooksCommand),
    /// List and read events, the log of what was notified (organization key)
    #[command(subcommand)]
    Events(events::EventsCommand),
    /// Fund an escrow from an allow decision, then deliver, release, refund or dispute it
    #[command(subcommand)]
    Escrows(escrows::EscrowsCommand),
    /// Stream the audit export of decisions (NDJSON) to a file, which `simulate` reads
    #[command(subcommand)]
    Export(export::ExportCommand),
    /// Audit the organization's decision log: accept a checkpoint only if it extends the
    /// one accepted before (exit 8 if not)
    Audit(audit::AuditArgs),
    /// Receive, verify and print webhook events locally, optionally forwarding them
    #[command(long_about = listen::LONG_ABOUT)]
    Listen(listen::ListenArgs),
    /// Serve Mandate to an agent host as MCP tools (stdio, or --http), acting for one agent
    #[command(long_about = crate::mcp::LONG_ABOUT)]
    Mcp(crate::mcp::McpArgs),
    /// Witness decision logs (C2SP tlog-witness): cosign a checkpoint only if it extends
    /// the last one cosigned
    #[command(long_about = witness::LONG_ABOUT)]
    Witness(witness::WitnessArgs),
}

impl GlobalArgs {
    /// The commands' context, from these global options and the matches that tell a flag
    /// from an environment variable.
    pub fn context(&self, matches: &clap::ArgMatches) -> Context {
        let global = self;
        Context {
            given: Given {
                base_url: global
                    .base_url
                    .clone()
                    .map(|u| (u, source(matches, "base_url"))),
                api_key: global
                    .api_key
                    .clone()
                    .map(|k| (k, source(matches, "api_key"))),
                profile: global.profile.clone(),
            },
            json: global.json,
            http: HttpOptions {
                timeout: Duration::from_secs(global.timeout.max(1)),
                retries: global.retries,
            },
            profile_flag: global.profile.is_some() && source(matches, "profile") == Source::Flag,
        }
    }
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self, ctx: &Context) -> CmdResult {
        match self {
            Command::Login(args) => login::run(args, ctx),
            Command::Profiles(args) => profiles::run(args, ctx),
            Command::Agents(cmd) => agents::run(cmd, ctx),
            Command::Mandates(cmd) => mandates::run(cmd, ctx),
            Command::Authorize(args) => authorize::run(args, ctx),
            Command::Reviews(cmd) => reviews::run(cmd, ctx),
            Command::Enforcement(cmd) => enforcement::run(cmd, ctx),
            Command::Decisions(cmd) => decisions::run(cmd, ctx),
            Command::Verify(args) => verify::run(args, ctx),
            Command::Jwks(cmd) => jwks::run(cmd, ctx),
            Command::Simulate(args) => simulate::run(args, ctx),
            Command::Webhooks(cmd) => webhooks::run(cmd, ctx),
            Command::Events(cmd) => events::run(cmd, ctx),
            Command::Escrows(cmd) => escrows::run(cmd, ctx),
            Command::Export(cmd) => export::run(cmd, ctx),
            Command::Audit(args) => audit::run(args, ctx),
            Command::Listen(args) => listen::run(args, ctx),
            Command::Mcp(args) => crate::mcp::run(args, ctx),
            Command::Witness(args) => witness::run(args, ctx),
        }
    }
}

/// The network options, by id: taken by every subcommand that calls the API.
const NETWORK: &[&str] = &["base_url", "api_key", "profile", "timeout", "retries"];

/// The network options each subcommand that does not call the API (or calls only public
/// URLs, or only stores settings) leaves out: hidden from its help, refused on its command
/// line. Their variables are ignored there, as before.
const UNUSED: &[(&str, &[&str])] = &[
    ("verify", NETWORK),
    ("witness", NETWORK),
    ("simulate", NETWORK),
    ("profiles", NETWORK),
    ("jwks", &["base_url", "api_key", "profile"]),
    ("listen", &["base_url", "api_key", "profile"]),
    ("login", &["timeout", "retries"]),
];

/// The command line as parsed and shown: [`Cli`]'s, with each subcommand's help listing
/// only the network options it uses. A subcommand that leaves one out gets a hidden option
/// of the same name of its own, which keeps the global one from being copied into it (and
/// into its subcommands, where the flag is then unknown): given there, it is refused by
/// [`unused_option`].
pub fn command() -> clap::Command {
    use clap::CommandFactory as _;
    let mut command = Cli::command();
    for (name, unused) in UNUSED {
        command = command.mut_subcommand(*name, |mut sub| {
            for id in *unused {
                sub = sub.arg(clap::Arg::new(*id).long(flag(id)).num_args(1).hide(true));
            }
            sub
        });
    }
    command
}

/// The flag of a network option's id.
fn flag(id: &str) -> &'static str {
    match id {
        "base_url" => "base-url",
        "api_key" => "api-key",
        "profile" => "profile",
        "timeout" => "timeout",
        _ => "retries",
    }
}

/// A network option given on the command line to a subcommand that does not use it, as
/// the usage error to print.
pub fn unused_option(matches: &clap::ArgMatches) -> Option<String> {
    let (name, sub) = matches.subcommand()?;
    let (_, unused) = UNUSED.iter().find(|(n, _)| *n == name)?;
    let given = unused.iter().find(|id| {
        [matches, sub]
            .iter()
            .any(|m| m.value_source(id) == Some(ValueSource::CommandLine))
    })?;
    Some(format!(
        "mandate {name} does not use --{}: it takes none of the options of the API it does not call",
        flag(given)
    ))
}

fn source(matches: &clap::ArgMatches, id: &str) -> Source {
    match matches.value_source(id) {
        Some(ValueSource::EnvVariable) => Source::Env,
        _ => Source::Flag,
    }
}
