//! `mandate agents create|list|get`: the agents of the organization.

use clap::{Args, Subcommand};
use mandate_core::{AgentId, AgentName};
use mandate_protocol::{wire::Agent, wire::CreateAgent, wire::CreatedAgent};

use super::{Context, ListArgs, PostArgs, print_list, print_object};
use crate::error::{CmdResult, Exit};
use crate::output::{self, Column};

/// The columns of an agent list.
const COLUMNS: &[Column<Agent>] = &[
    ("ID", |a| a.id.to_string()),
    ("NAME", |a| a.name.to_string()),
    ("CREATED", |a| output::time(a.created_at)),
];

/// `mandate agents …`.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Register an agent; its key is printed once and never again
    Create(CreateArgs),
    /// List agents, newest first
    List(ListArgs),
    /// Show one agent
    Get(GetArgs),
}

/// `mandate agents create NAME`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  mandate agents create buyer")]
pub struct CreateArgs {
    /// The agent's name, [a-z0-9][a-z0-9_-]{0,62}; its id is agt_<name>
    #[arg(value_parser = parse_name)]
    pub name: AgentName,
    #[command(flatten)]
    pub post: PostArgs,
}

/// `mandate agents get ID`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The agent id, agt_<name>
    pub id: AgentId,
}

fn parse_name(text: &str) -> Result<AgentName, String> {
    AgentName::parse(text).map_err(|e| e.to_string())
}

/// Runs `mandate agents …`.
pub fn run(command: AgentsCommand, ctx: &Context) -> CmdResult {
    let client = ctx.client()?;
    match command {
        AgentsCommand::Create(args) => {
            let body = CreateAgent { name: args.name };
            let response = client.post("/agents", &body, &args.post.key()?)?;
            print_object::<CreatedAgent>(ctx, &response, "an agent with its key")?;
            if !ctx.json {
                output::note(
                    "the agent_key is shown only this once: store it now, e.g. `mandate login --profile NAME` with the key on stdin",
                );
            }
        }
        AgentsCommand::List(args) => {
            let page = client.list::<Agent>("/agents", &[], &args.paging(), "an agent")?;
            print_list(ctx, &page, COLUMNS)?;
        }
        AgentsCommand::Get(args) => {
            let response = client.get(&format!("/agents/{}", args.id), &[])?;
            print_object::<Agent>(ctx, &response, "an agent")?;
        }
    }
    Ok(Exit::Success)
}
