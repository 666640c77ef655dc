//! `mandate mcp`: an MCP server (the official Rust SDK, `rmcp`) that lets an agent host use
//! Mandate as tools, acting for one agent. Over stdio (what hosts launch) or streamable
//! HTTP (`--http ADDR`, on loopback unless told otherwise). The agent key comes from
//! `MANDATE_API_KEY` or a profile and goes only into the `Authorization` header: it is never
//! printed, logged or put in a tool result. `tools.rs` holds the tools, `api.rs` the calls.

mod api;
mod tools;

use std::net::SocketAddr;

use clap::Args;
use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::commands::Context;
use crate::error::{CliError, CmdResult, Exit};

/// Long help of `mandate mcp`.
pub const LONG_ABOUT: &str = "\
Serve Mandate to an agent host as MCP tools, acting for one agent.

The tools: authorize_payment, wait_for_review, get_mandate, list_decisions and
verify_verdict (docs/mcp.md). The agent key comes from MANDATE_API_KEY or a profile
(`mandate login`); it must be an agent key (ak_…) and is never printed nor returned.

By default the server speaks MCP over stdin and stdout, as agent hosts launch it. With
--http it serves streamable HTTP at http://ADDR/mcp instead (127.0.0.1:8765 when ADDR is
not given); the bound address is printed on stderr.";

/// `mandate mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP on ADDR instead of stdio [default ADDR: 127.0.0.1:8765]
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8765")]
    pub http: Option<SocketAddr>,

    /// The service's verdicts URL (the tokens' issuer), whose JWK Set verify_verdict uses
    #[arg(long, env = "MANDATE_ISSUER", value_name = "URL")]
    pub issuer: Option<String>,

    /// verify_verdict accepts tokens signed with a sandbox key too (testing only: a sandbox
    /// verdict authorizes no real payment)
    #[arg(long)]
    pub sandbox: bool,
}

/// Runs `mandate mcp` until the host closes stdin (stdio) or the process is stopped.
pub fn run(args: McpArgs, ctx: &Context) -> CmdResult {
    let (base, key) = ctx.agent_credentials()?;
    let api = api::Api::new(base, key).map_err(|e| CliError::usage(e.0))?;
    if let Some(issuer) = &args.issuer {
        crate::client::parse_url(issuer)?;
    }
    let tools = tools::MandateTools::new(api, args.issuer.clone(), args.sandbox);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::usage(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        match args.http {
            None => serve_stdio(tools).await,
            Some(addr) => serve_http(tools, addr).await,
        }
    })?;
    Ok(Exit::Success)
}

async fn serve_stdio(tools: tools::MandateTools) -> Result<(), CliError> {
    let running = tools
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| CliError::usage(format!("MCP session failed to start: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| CliError::usage(format!("MCP session ended with an error: {e}")))?;
    Ok(())
}

async fn serve_http(tools: tools::MandateTools, addr: SocketAddr) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::usage(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::usage(format!("cannot read the bound address: {e}")))?;
    let mut config = StreamableHttpServerConfig::default();
    if !bound.ip().is_loopback() {
        // rmcp accepts loopback Host headers only (DNS rebinding); a chosen address too.
        config.allowed_hosts.push(bound.ip().to_string());
        config.allowed_hosts.push(bound.to_string());
        eprintln!(
            "mandate mcp: warning: serving on {bound}, not loopback: anyone who reaches it acts as this agent"
        );
    }
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        LocalSessionManager::default().into(),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    eprintln!("mandate mcp: listening on http://{bound}/mcp");
    axum::serve(listener, router)
        .await
        .map_err(|e| CliError::usage(format!("the HTTP server failed: {e}")))
}
