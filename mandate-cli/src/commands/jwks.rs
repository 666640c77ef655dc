//! `mandate jwks fetch URL`: read the service's public key set and cache it for `verify`.

use clap::{Args, Subcommand};
use mandate_core::{JwkSet, LogKeys};
use serde_json::Value;

use super::Context;
use crate::client;
use crate::error::{CliError, CmdResult, Exit};
use crate::jwks_cache::{self, CacheEntry};
use crate::output;

/// The `use` of a log key in the JWK Set (docs/audit.md).
const LOG_KEY_USE: &str = "tlog-checkpoint";

/// `mandate jwks …`.
#[derive(Debug, Subcommand)]
pub enum JwksCommand {
    /// Fetch the JWK Set and cache it (for its Cache-Control max-age, or five minutes)
    #[command(long_about = LONG_ABOUT)]
    Fetch(FetchArgs),
}

/// The long help of `FetchArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const LONG_ABOUT: &str = "Fetch the service's JWK Set (no key needed) and cache it for `mandate verify`.\n\n\
URL is the verdicts URL (the issuer of tokens, e.g. https://verdicts.example.com) or the \
set's own URL ending in /.well-known/jwks.json. Redirects are followed (at most five, never \
from https to plain http). The set is checked strictly (EC P-256 ES256 public keys only) \
and written with the fetch time, the response's Cache-Control and the issuer, taken from \
the final URL without /.well-known/jwks.json, to a file of that issuer's own in \
$XDG_CACHE_HOME/mandate/jwks/ (~/.cache/mandate/; %LOCALAPPDATA%\\mandate\\ on Windows), \
so that each issuer's set is kept, and as the last set fetched to jwks.json beside it. \
`verify --issuer URL` uses that issuer's set, `verify` without it the last one, for the \
response's max-age (five minutes when it names none, a day at most) and then asks for a \
fresh fetch. The table lists every key of the set with its use: sig for a verdict key, \
tlog-checkpoint for a log key (it signs the checkpoints of the decision log that `verify \
--log` and `audit` check).";

/// `mandate jwks fetch URL`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  mandate jwks fetch https://verdicts.example.com")]
pub struct FetchArgs {
    /// The verdicts URL, or the JWK Set URL
    pub url: String,
}

fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Runs `mandate jwks …`.
pub fn run(command: JwksCommand, ctx: &Context) -> CmdResult {
    let JwksCommand::Fetch(args) = command;
    let url = client::parse_url(&jwks_cache::jwks_url(&args.url))?;
    let (final_url, response) = client::fetch_public(&url, ctx.http)?;
    let bytes = serde_json::to_vec(&response.body)
        .map_err(|e| CliError::usage(format!("cannot encode the key set: {e}")))?;
    let set = JwkSet::from_json(&bytes).map_err(|e| CliError::UnexpectedResponse {
        status: response.status,
        detail: format!("{final_url} did not return a valid key set: {e}"),
        request_id: None,
    })?;
    let entry = CacheEntry {
        source: final_url.to_string(),
        issuer: jwks_cache::issuer_of(&final_url),
        fetched_at: now_unix(),
        jwks: response.body.clone(),
        cache_control: response.cache_control.clone(),
    };
    // The issuer's own file, kept when another issuer's set is fetched, and the last set
    // fetched, which `verify` reads without --issuer.
    let last = jwks_cache::cache_path()?;
    let path = match &entry.issuer {
        Some(issuer) => jwks_cache::issuer_cache_path(issuer)?,
        None => last.clone(),
    };
    jwks_cache::save(&path, &entry)?;
    if path != last {
        jwks_cache::save(&last, &entry)?;
    }

    if ctx.json {
        output::json(&response.body)?;
        return Ok(Exit::Success);
    }
    // Every key as served, those a `JwkSet` skips (other key types, the log keys) included,
    // with its use: `sig` for a verdict key, `tlog-checkpoint` for a log key.
    let rows: Vec<Vec<String>> = response
        .body
        .get("keys")
        .and_then(Value::as_array)
        .map(|keys| {
            keys.iter()
                .map(|k| {
                    vec![
                        output::text(k.get("kid")),
                        output::text(k.get("use")),
                        output::text(k.get("alg")),
                        output::text(k.get("crv")),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    output::table(&["KID", "USE", "ALG", "CRV"], &rows)?;
    // The log keys, counted once they read as strictly as `verify --log` reads them.
    let log_keys = match LogKeys::from_jwks_json(&bytes) {
        Ok(_) => rows.iter().filter(|row| row[1] == LOG_KEY_USE).count(),
        Err(e) => {
            output::note(&format!("the log keys of the set cannot be read: {e}"));
            0
        }
    };
    output::fields(&[
        (
            "keys".to_owned(),
            format!(
                "{} ({} verdict, {log_keys} log)",
                set.keys.len() + log_keys,
                set.keys.len()
            ),
        ),
        ("source".to_owned(), entry.source.clone()),
        (
            "issuer".to_owned(),
            entry.issuer.clone().unwrap_or_else(|| {
                "(not derivable from the URL: pass --issuer to verify)".to_owned()
            }),
        ),
        ("cached_in".to_owned(), path.display().to_string()),
        (
            "usable_until".to_owned(),
            format!(
                "{} ({} s)",
                unix_to_text(entry.fetched_at + entry.lifetime_secs()),
                entry.lifetime_secs()
            ),
        ),
    ])?;
    Ok(Exit::Success)
}

/// A Unix time as an RFC 3339 timestamp (or the number when out of range).
pub fn unix_to_text(at: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(at)
        .map(mandate_protocol::timefmt::format)
        .unwrap_or_else(|_| at.to_string())
}
