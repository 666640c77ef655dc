//! One module per subcommand, each with its `…Args` (or `…Command`) type and a `run`
//! function; this module holds what they share: the [`Context`], the options of every
//! POST and every list, and the parsers of typed arguments.

pub mod agents;
pub mod audit;
pub mod authorize;
pub mod decisions;
pub mod enforcement;
pub mod escrows;
pub mod events;
pub mod export;
pub mod jwks;
pub mod listen;
pub mod listen_order;
pub mod login;
pub mod mandates;
pub mod profiles;
pub mod reviews;
pub mod simulate;
pub mod verify;
pub mod verify_log;
pub mod webhooks;
pub mod witness;

use std::io::Read as _;
use std::path::Path;

use clap::Args;
use mandate_core::{Category, Currency, Principal, Recipient, Verdict};
use mandate_protocol::wire::ListPage;
use serde::de::DeserializeOwned;

use crate::client::{self, Client, HttpOptions, Paging, Sent};
use crate::config::{self, ConfigFile, Given, Source};
use crate::error::CliError;
use crate::output;

/// What every command gets: the connection settings as given, and the output mode.
#[derive(Debug, Clone)]
pub struct Context {
    /// `--base-url`, `--api-key` and `--profile`, with where each came from.
    pub given: Given,
    /// `--json`.
    pub json: bool,
    /// Timeout and retries.
    pub http: HttpOptions,
    /// Whether `--profile` was given on the command line (not through `MANDATE_PROFILE`).
    pub profile_flag: bool,
}

impl Context {
    /// The API client, from flags, environment and profile.
    pub fn client(&self) -> Result<Client, CliError> {
        // Flags and variables that give everything need no config file (nor a valid one).
        let complete = self.given.profile.is_none()
            && self.given.api_key.is_some()
            && self.given.base_url.is_some();
        let file = if complete {
            ConfigFile::default()
        } else {
            ConfigFile::load(&config::config_path()?)?
        };
        let resolved = config::resolve(&self.given, &file)?;
        if self.profile_flag && resolved.key_source == Some(Source::Env) {
            output::note(&format!(
                "MANDATE_API_KEY overrides the key of profile {}",
                resolved.profile.as_deref().unwrap_or("?")
            ));
        }
        Client::new(&resolved, self.http)
    }

    /// The base URL (ending in `/v1`) and the agent key, from flags, environment and
    /// profile, for `mandate mcp`; an organization key is refused (the server acts for one
    /// agent), and the key is never part of a message.
    pub fn agent_credentials(&self) -> Result<(String, String), CliError> {
        let file = if self.given.profile.is_none()
            && self.given.api_key.is_some()
            && self.given.base_url.is_some()
        {
            ConfigFile::default()
        } else {
            ConfigFile::load(&config::config_path()?)?
        };
        let resolved = config::resolve(&self.given, &file)?;
        let url = client::parse_url(&resolved.base_url)?;
        let key = resolved.api_key.ok_or_else(|| {
            CliError::usage(
                "no API key: set MANDATE_API_KEY to the agent's key (ak_…) or store it with `mandate login`",
            )
        })?;
        if !key.starts_with("ak_") {
            return Err(CliError::usage(
                "mandate mcp acts for one agent: give it an agent key (ak_…), not an organization key",
            ));
        }
        Ok((url.as_str().trim_end_matches('/').to_owned(), key))
    }
}

/// The option of every command that POSTs.
#[derive(Debug, Clone, Args)]
pub struct PostArgs {
    /// Idempotency-Key of the POST [default: a fresh random key]
    ///
    /// Run the command again with the same key to retry it safely: the server replays the
    /// first result (for 24 hours) instead of acting twice.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

impl PostArgs {
    /// The key given, or a fresh random one.
    pub fn key(&self) -> Result<String, CliError> {
        match &self.idempotency_key {
            Some(key) => Ok(key.clone()),
            None => client::new_idempotency_key(),
        }
    }
}

/// The options of every list.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Page size, 1 to 100 [server default: 20]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=100))]
    pub limit: Option<u8>,
    /// Start from this cursor (the next_cursor of a previous page)
    #[arg(long, value_name = "CURSOR", conflicts_with = "all")]
    pub cursor: Option<String>,
    /// Walk every page until has_more is false (progress on stderr when it is a terminal)
    #[arg(long)]
    pub all: bool,
}

impl ListArgs {
    /// As the client's paging options.
    pub fn paging(&self) -> Paging {
        Paging {
            limit: self.limit,
            cursor: self.cursor.clone(),
            all: self.all,
        }
    }
}

/// Prints a list: the envelope as the server sent it with `--json`, else a table of the
/// objects (read as their wire type `T`) and a hint when more follow.
pub fn print_list<T>(
    ctx: &Context,
    page: &ListPage<Sent<T>>,
    columns: &[output::Column<T>],
) -> Result<(), CliError> {
    if ctx.json {
        return output::json(page);
    }
    output::list_table(columns, page.data.iter().map(|sent| &sent.object))?;
    if page.has_more {
        match &page.next_cursor {
            Some(cursor) => output::note(&format!(
                "more results: pass --all, or --cursor {cursor} for the next page"
            )),
            None => output::note("more results: pass --all"),
        }
    }
    Ok(())
}

/// Prints an answer that is one object of wire type `T` (`what` names it): checked to read
/// as its type, then printed as the server sent it (see [`print_answer`]).
pub fn print_object<T: DeserializeOwned>(
    ctx: &Context,
    response: &client::Response,
    what: &str,
) -> Result<(), CliError> {
    response.read::<T>(what)?;
    print_answer(response, ctx.json, &[])
}

/// Prints an answer as the server sent it: its JSON with `--json`, else its members as
/// aligned `name  value` lines (nested ones dotted), but those named in `except`, which
/// the caller shows its own way.
pub fn print_answer(
    response: &client::Response,
    as_json: bool,
    except: &[&str],
) -> Result<(), CliError> {
    if as_json {
        output::json(&response.body)
    } else {
        output::fields(&output::flatten(&response.body, except))
    }
}

/// Reads a file, or stdin for `-`.
pub fn read_input(path: &Path) -> Result<String, CliError> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CliError::usage(format!("cannot read stdin: {e}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))
}

/// clap parser: a verdict (`allow`, `review`, `deny_limit`, ...).
pub fn parse_verdict(text: &str) -> Result<Verdict, String> {
    Verdict::parse(text).ok_or_else(|| {
        let all: Vec<&str> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
        format!("must be one of {}", all.join(", "))
    })
}

/// clap parser: a currency code.
pub fn parse_currency(text: &str) -> Result<Currency, String> {
    Currency::parse(text).map_err(|e| e.to_string())
}

/// clap parser: a recipient, `vendor:<name>`.
pub fn parse_recipient(text: &str) -> Result<Recipient, String> {
    Recipient::parse(text).map_err(|e| e.to_string())
}

/// clap parser: a spending category.
pub fn parse_category(text: &str) -> Result<Category, String> {
    Category::parse(text).map_err(|e| e.to_string())
}

/// clap parser: a principal, `role:<name>`.
pub fn parse_principal(text: &str) -> Result<Principal, String> {
    Principal::parse(text).map_err(|e| e.to_string())
}
