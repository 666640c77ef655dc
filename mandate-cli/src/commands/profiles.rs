//! `mandate profiles`: the stored profiles, keys masked (never printed whole).

use clap::Args;
use serde::Serialize;

use super::Context;
use crate::config::{self, ConfigFile, DEFAULT_BASE_URL, DEFAULT_PROFILE};
use crate::error::{CmdResult, Exit};
use crate::output;

/// The long help of `ProfilesArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const LONG_ABOUT: &str = "List the stored profiles with their base URLs and masked keys \
(sk_sandbox_abcd…wxyz). A key is never printed whole. The profile named `default` is \
used when neither --profile nor MANDATE_PROFILE selects one.";

/// `mandate profiles`.
#[derive(Debug, Args)]
pub struct ProfilesArgs {}

/// A stored profile as listed, its key masked.
#[derive(Serialize)]
struct ProfileRow<'a> {
    name: &'a str,
    selected: bool,
    base_url: String,
    api_key: Option<String>,
}

/// The `--json` listing.
#[derive(Serialize)]
struct Listing<'a> {
    file: String,
    profiles: Vec<ProfileRow<'a>>,
}

/// Runs `mandate profiles`.
pub fn run(_args: ProfilesArgs, ctx: &Context) -> CmdResult {
    let path = config::config_path()?;
    let file = ConfigFile::load(&path)?;
    let selected = ctx
        .given
        .profile
        .clone()
        .unwrap_or_else(|| DEFAULT_PROFILE.to_owned());
    let rows: Vec<ProfileRow<'_>> = file
        .profiles
        .iter()
        .map(|(name, p)| ProfileRow {
            name,
            selected: *name == selected,
            base_url: p
                .base_url
                .clone()
                .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned()),
            api_key: p.api_key.as_deref().map(config::mask_key),
        })
        .collect();
    if ctx.json {
        output::json(&Listing {
            file: path.display().to_string(),
            profiles: rows,
        })?;
        return Ok(Exit::Success);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                if r.selected { "*" } else { "" }.to_owned(),
                r.name.to_owned(),
                r.base_url.clone(),
                r.api_key.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    output::table(&["", "PROFILE", "BASE URL", "API KEY"], &table)?;
    if file.profiles.is_empty() {
        output::note(&format!(
            "no profiles in {}; add one with `mandate login --profile NAME --api-key KEY`",
            path.display()
        ));
    }
    Ok(Exit::Success)
}
