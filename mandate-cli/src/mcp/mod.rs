//! `mandate mcp`: an MCP server (the official Rust SDK, `rmcp`) that lets an agent host use
//! Mandate as tools, acting for one agent. Over stdio (what hosts launch) or streamable
//! HTTP (`--http ADDR`, on loopback unless told otherwise). The agent key comes from
//! `MANDATE_API_KEY` or a profile and goes only into the `Authorization` header: it is never
//! printed, logged or put in a tool result. `tools.rs` holds the tools (their arguments in
//! `args.rs`, their results in `outputs.rs`), `server.rs` the handler, `review.rs` the
//! reads of a review shared by its waits, `api.rs` the calls. A review is a task
//! (`tasks.rs`): under 2026-07-28 as rmcp models it, under 2025-11-25 as `tasks_2025.rs`
//! answers it, carried past rmcp by `edges.rs` in both transports (`stdio.rs`; `http.rs`
//! with `sessions.rs`); cancelling a task withdraws its review on the server. With the
//! console's URL, a review is shown to the user through URL-mode elicitation (`console.rs`).

mod api;
mod args;
mod console;
mod edges;
mod http;
mod outputs;
mod review;
mod server;
mod sessions;
mod stdio;
mod tasks;
mod tasks_2025;
mod tools;

use std::net::SocketAddr;

use clap::Args;
use std::time::Duration;

use crate::commands::Context;
use crate::error::{CliError, CmdResult, Exit};

/// jemalloc, the process allocator of the whole `mandate` binary (declared here, where the
/// need is): `mandate mcp --http` holds memory per session and must give it back once the
/// sessions close; glibc's malloc kept it resident (260 MB after 5,000 sessions had
/// closed), jemalloc with the options of `.cargo/config.toml` (freed pages returned after
/// 1 s by its background thread) returns it. The test
/// `five_thousand_sessions_cost_bounded_memory_given_back_when_idle` holds it.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Long help of `mandate mcp`.
pub const LONG_ABOUT: &str = "\
Serve Mandate to an agent host as MCP tools, acting for one agent.

The tools: authorize_payment, wait_for_review, get_mandate, list_decisions and
verify_verdict (docs/mcp.md). The agent key comes from MANDATE_API_KEY or a profile
(`mandate login`); it must be an agent key (ak_…) and is never printed nor returned.

By default the server speaks MCP over stdin and stdout, as agent hosts launch it. With
--http it serves streamable HTTP at http://ADDR/mcp instead (127.0.0.1:8765 when ADDR is
not given); the bound address is printed on stderr. It accepts loopback Host and Origin
headers (and the origins of --allow-origin), requires a bearer token when given one
(--http-token or MANDATE_MCP_HTTP_TOKEN), caps its sessions (--max-sessions, closed
after --session-idle seconds without a request) and its connections (--max-connections),
and gives a request --read-timeout seconds for its head and again for its body.

With --console-url, a review asks the client's user (when the client takes URL-mode
elicitation) to open it in the review console.";

/// `mandate mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP on ADDR instead of stdio [default ADDR: 127.0.0.1:8765]
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8765")]
    pub http: Option<SocketAddr>,

    /// With --http: an origin (scheme://host[:port]) whose pages may call the server,
    /// besides loopback ones (repeatable)
    #[arg(long = "allow-origin", value_name = "ORIGIN", requires = "http")]
    pub allow_origins: Vec<String>,

    /// With --http: the bearer token every request must carry (Authorization: Bearer
    /// TOKEN); set it whenever something else on this machine must not act as the agent
    #[arg(
        long,
        env = "MANDATE_MCP_HTTP_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub http_token: Option<HttpToken>,

    /// With --http: live sessions at most (protocol 2025-11-25; a new one past it is a 503)
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_sessions: u32,

    /// With --http: a session is closed after this many seconds without a request
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub session_idle: u64,

    /// With --http: open connections at most; past it the longest idle are closed, or the
    /// new one when every connection has a request in flight
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_connections: u32,

    /// With --http: seconds a client has to send a request's head, and then its body
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub read_timeout: u64,

    /// The service's verdicts URL (the tokens' issuer), whose JWK Set verify_verdict uses
    #[arg(long, env = "MANDATE_ISSUER", value_name = "URL")]
    pub issuer: Option<String>,

    /// verify_verdict accepts tokens signed with a sandbox key too (testing only: a sandbox
    /// verdict authorizes no real payment)
    #[arg(long)]
    pub sandbox: bool,

    /// The review console's URL (e.g. https://verdicts.example.com/console/): a review asks
    /// the client's user, when the client takes URL-mode elicitation, to open it there. For
    /// a user who approves the agent's payments themselves
    #[arg(long, env = "MANDATE_CONSOLE_URL", value_name = "URL")]
    pub console_url: Option<String>,
}

/// The HTTP transport's bearer token: never shown, not even in a debug print.
#[derive(Clone)]
pub struct HttpToken(String);

impl std::str::FromStr for HttpToken {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Debug for HttpToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpToken(…)")
    }
}

impl McpArgs {
    /// How the HTTP transport is guarded.
    fn http_options(&self) -> http::HttpOptions {
        http::HttpOptions {
            origins: self.allow_origins.clone(),
            token: self
                .http_token
                .clone()
                .map(|t| t.0)
                .filter(|t| !t.is_empty()),
            max_sessions: self.max_sessions as usize,
            idle: Duration::from_secs(self.session_idle),
            max_connections: self.max_connections as usize,
            read_timeout: Duration::from_secs(self.read_timeout),
        }
    }
}

/// Runs `mandate mcp` until the host closes stdin (stdio) or the process is stopped.
pub fn run(args: McpArgs, ctx: &Context) -> CmdResult {
    let (base, key) = ctx.agent_credentials()?;
    let api = api::Api::new(base, key).map_err(|e| CliError::usage(e.0))?;
    for url in [&args.issuer, &args.console_url].into_iter().flatten() {
        crate::client::parse_url(url)?;
    }
    let tools = tools::MandateTools::new(
        api,
        args.issuer.clone(),
        args.sandbox,
        args.console_url.clone(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::usage(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        match args.http {
            None => stdio::serve(tools).await,
            Some(addr) => http::serve(tools, addr, args.http_options()).await,
        }
    })?;
    Ok(Exit::Success)
}
