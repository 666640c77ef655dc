//! `mandate login`: store an API key, and optionally a base URL, under a profile name.
//!
//! The key comes from the global `--api-key` (or `MANDATE_API_KEY`), or from one line on
//! stdin when neither is given, so that it need not appear in the process list. The
//! profile is `--profile NAME` (or `MANDATE_PROFILE`), `default` when absent.

use std::io::{BufRead as _, IsTerminal as _};

use clap::Args;
use serde::Serialize;

use super::Context;
use crate::config::{self, ConfigFile, DEFAULT_PROFILE};
use crate::error::{CliError, CmdResult, Exit};
use crate::output;

/// The long help of `LoginArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const LONG_ABOUT: &str = "Store an API key under a profile name.\n\n\
The key is taken from --api-key or MANDATE_API_KEY, or read as one line from stdin when \
neither is given (`mandate login --profile live < key.txt` keeps it out of the process \
list). --base-url is stored with it; without it an existing profile keeps its URL. The \
profile defaults to `default`, which is used whenever no profile is selected. The file \
is $XDG_CONFIG_HOME/mandate/config.json (~/.config/mandate/; %APPDATA%\\mandate\\ on \
Windows), written with mode 0600.";

/// `mandate login [--profile NAME] [--api-key KEY] [--base-url URL]`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  mandate login --profile sandbox --api-key sk_sandbox_… --base-url https://api.example.com"
)]
pub struct LoginArgs {}

fn read_key_from_stdin() -> Result<String, CliError> {
    if std::io::stdin().is_terminal() {
        return Err(CliError::usage(
            "no API key given: pass --api-key KEY, set MANDATE_API_KEY, or pipe the key on stdin",
        ));
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CliError::usage(format!("cannot read the key from stdin: {e}")))?;
    Ok(line.trim().to_owned())
}

/// The `--json` report of a stored profile, its key masked.
#[derive(Serialize)]
struct Stored<'a> {
    profile: &'a str,
    api_key: String,
    base_url: &'a str,
    file: String,
}

/// Runs `mandate login`.
pub fn run(_args: LoginArgs, ctx: &Context) -> CmdResult {
    let name = ctx
        .given
        .profile
        .clone()
        .unwrap_or_else(|| DEFAULT_PROFILE.to_owned());
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(CliError::usage(
            "a profile name must be non-empty, without spaces",
        ));
    }
    let key = match &ctx.given.api_key {
        Some((key, _)) => key.trim().to_owned(),
        None => read_key_from_stdin()?,
    };
    if key.is_empty() || key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(CliError::usage(
            "the API key must be non-empty, without spaces",
        ));
    }
    if !config::has_known_prefix(&key) {
        output::note(
            "the key has none of the prefixes sk_sandbox_, sk_live_, ak_sandbox_, ak_live_; stored anyway",
        );
    }
    let base_url = match &ctx.given.base_url {
        Some((url, _)) => {
            let url = config::normalize_base_url(url);
            crate::client::parse_url(&url)?;
            Some(url)
        }
        None => None,
    };

    let path = config::config_path()?;
    let mut file = ConfigFile::load(&path)?;
    let profile = file.profiles.entry(name.clone()).or_default();
    profile.api_key = Some(key.clone());
    if base_url.is_some() {
        profile.base_url = base_url;
    }
    let shown_url = profile
        .base_url
        .clone()
        .unwrap_or_else(|| config::DEFAULT_BASE_URL.to_owned());
    file.save(&path)?;

    if ctx.json {
        output::json(&Stored {
            profile: &name,
            api_key: config::mask_key(&key),
            base_url: &shown_url,
            file: path.display().to_string(),
        })?;
    } else {
        output::line(&format!(
            "stored {} as profile {name} ({shown_url}) in {}",
            config::mask_key(&key),
            path.display()
        ))?;
    }
    Ok(Exit::Success)
}
