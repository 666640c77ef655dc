//! `mandate verify TOKEN`: check a signed verdict (or a webhook event) fully offline, the
//! way a counterparty must before it settles.
//!
//! The key set comes from `--jwks FILE` or from the cache `mandate jwks fetch` wrote (used
//! for five minutes). The signature, `alg` (ES256 only), `kid`, `iss` and `exp` are checked
//! by the core's `verify_verdict`/`verify_event`; then, for a verdict, that it is `allow`,
//! that the transaction matches (`--amount`, `--currency`, `--recipient`), and with
//! `--replay-store` that its nonce was never accepted before. Exit 0 only when all hold.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use clap::Args;
use mandate_core::amount::Amount;
use mandate_core::claims::VerdictClaims;
use mandate_core::jwk::JwkSet;
use mandate_core::jws::{VerifyOptions, verify_event, verify_verdict};
use mandate_core::names::{Currency, Recipient};
use mandate_core::policy::Verdict;
use serde_json::Value;

use super::jwks::unix_to_text;
use super::{Context, parse_currency, parse_recipient, read_input};
use crate::error::{CliError, CmdResult, Exit};
use crate::jwks_cache;
use crate::output;
use crate::replay_store::{self, Seen};

/// The long help of `VerifyArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const LONG_ABOUT: &str = "Verify a signed verdict, or with --event a webhook event, without any account.\n\n\
Checks, in order: the signature against the key named by the token's kid in the key set \
(--jwks FILE, or the cache written by `mandate jwks fetch`, usable for five minutes); the \
algorithm (ES256 only); the issuer (--issuer, or the issuer recorded with the cache); the \
expiry (verdicts live five minutes). For a verdict, then: that the verdict is allow; that \
--amount (an exact decimal: 42.5 matches 42.50), --currency and --recipient equal the \
signed request; and with --replay-store FILE that its nonce was never accepted before (the \
nonce is recorded when the token is accepted). For an event, the replay store records the \
event id. The claims are printed either way.\n\n\
Exit 0 only for a valid allow that matches; 6 when the token is refused; 2 when the key \
set is missing or stale, or the arguments are wrong.";

/// `mandate verify TOKEN`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate jwks fetch https://verdicts.example.com
  mandate verify \"$TOKEN\" --amount 42.50 --currency USD --recipient vendor:acme \\
      --replay-store ~/.local/state/settled-nonces
  mandate verify --jwks jwks.json --issuer https://verdicts.example.com --event < event.jwt")]
pub struct VerifyArgs {
    /// The token (compact JWS); `-` or absent reads it from stdin
    pub token: Option<String>,
    /// JWK Set file to verify against, instead of the cache (needs --issuer)
    #[arg(long, value_name = "FILE")]
    pub jwks: Option<PathBuf>,
    /// The expected issuer, the service's verdicts URL [default: the cached set's issuer]
    #[arg(long, value_name = "URL")]
    pub issuer: Option<String>,
    /// The amount to be settled; must equal the signed amount as a decimal
    #[arg(long, value_name = "AMOUNT", conflicts_with = "event")]
    pub amount: Option<Amount>,
    /// The currency to be settled
    #[arg(long, value_name = "CODE", value_parser = parse_currency, conflicts_with = "event")]
    pub currency: Option<Currency>,
    /// The recipient to be paid, vendor:<name>
    #[arg(long, value_name = "RECIPIENT", value_parser = parse_recipient, conflicts_with = "event")]
    pub recipient: Option<Recipient>,
    /// Append-only file of accepted nonces (event ids with --event); a token seen before
    /// is refused as a replay
    #[arg(long, value_name = "FILE")]
    pub replay_store: Option<PathBuf>,
    /// The token is a webhook event, not a verdict
    #[arg(long)]
    pub event: bool,
    /// Verify as of this time, seconds since the Unix epoch, also for the cache's age
    /// (for tests and audits) [default: now]
    #[arg(long, value_name = "UNIX")]
    pub now: Option<i64>,
    /// Clock skew allowed on exp and iat, in seconds
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub leeway: i64,
}

/// The key set and the expected issuer.
fn key_set(args: &VerifyArgs, now: i64) -> Result<(JwkSet, String), CliError> {
    if let Some(path) = &args.jwks {
        let issuer = args.issuer.clone().ok_or_else(|| {
            CliError::usage("--issuer URL is required with --jwks (the service's verdicts URL)")
        })?;
        let bytes = std::fs::read(path)
            .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
        let set = JwkSet::from_json(&bytes).map_err(|e| {
            CliError::usage(format!("{} is not a valid key set: {e}", path.display()))
        })?;
        return Ok((set, issuer));
    }
    let path = jwks_cache::cache_path()?;
    let entry = jwks_cache::load(&path)?.ok_or_else(|| {
        CliError::usage(format!(
            "no key set: pass --jwks FILE, or fetch one with `mandate jwks fetch URL` (cache {})",
            path.display()
        ))
    })?;
    if !entry.is_fresh_at(now) {
        return Err(CliError::usage(format!(
            "the cached key set from {} was fetched {} s ago, more than five minutes: fetch it again with `mandate jwks fetch {}`",
            entry.source,
            entry.age_at(now),
            entry.issuer.as_deref().unwrap_or(&entry.source)
        )));
    }
    let issuer = match (&args.issuer, &entry.issuer) {
        (Some(issuer), _) => issuer.clone(),
        (None, Some(issuer)) => issuer.clone(),
        (None, None) => {
            return Err(CliError::usage(format!(
                "the issuer cannot be derived from {}: pass --issuer URL",
                entry.source
            )));
        }
    };
    Ok((entry.key_set()?, issuer))
}

fn read_token(args: &VerifyArgs) -> Result<String, CliError> {
    let text = match args.token.as_deref() {
        None if std::io::stdin().is_terminal() => {
            return Err(CliError::usage(
                "no token given: pass it as an argument or on stdin",
            ));
        }
        None | Some("-") => read_input(std::path::Path::new("-"))?,
        Some(token) => token.to_owned(),
    };
    let token = text.trim().to_owned();
    if token.is_empty() {
        return Err(CliError::usage("no token given"));
    }
    Ok(token)
}

/// Why a valid verdict still may not be settled.
fn objections(args: &VerifyArgs, claims: &VerdictClaims) -> Vec<String> {
    let mut out = Vec::new();
    if claims.verdict != Verdict::Allow {
        out.push(format!(
            "the verdict is {}, not allow: do not settle",
            claims.verdict
        ));
    }
    let signed = &claims.request;
    if let Some(amount) = args.amount
        && amount.value() != signed.amount.value()
    {
        out.push(format!(
            "amount {amount} does not match the signed amount {}",
            signed.amount
        ));
    }
    if let Some(currency) = &args.currency
        && *currency != signed.currency
    {
        out.push(format!(
            "currency {currency} does not match the signed currency {}",
            signed.currency
        ));
    }
    if let Some(recipient) = &args.recipient
        && *recipient != signed.recipient
    {
        out.push(format!(
            "recipient {recipient} does not match the signed recipient {}",
            signed.recipient
        ));
    }
    out
}

fn print_claims(claims: &Value, status: &str, as_json: bool) -> Result<(), CliError> {
    if as_json {
        return output::json(claims);
    }
    let mut pairs = vec![("status".to_owned(), status.to_owned())];
    pairs.extend(output::flatten(claims));
    for (name, value) in pairs.iter_mut() {
        if (name == "iat" || name == "exp")
            && let Ok(at) = value.parse::<i64>()
        {
            *value = format!("{value} ({})", unix_to_text(at));
        }
    }
    output::fields(&pairs)
}

fn record(args: &VerifyArgs, id: &str, now: i64) -> Result<(), CliError> {
    if let Some(path) = &args.replay_store
        && replay_store::check_and_record(path, id, now)? == Seen::Before
    {
        return Err(CliError::Rejected(format!(
            "{id} was accepted before (replay store {}): this is a replay",
            path.display()
        )));
    }
    Ok(())
}

/// Runs `mandate verify`.
pub fn run(args: VerifyArgs, ctx: &Context) -> CmdResult {
    let now = args
        .now
        .unwrap_or_else(|| time::OffsetDateTime::now_utc().unix_timestamp());
    let token = read_token(&args)?;
    let (set, issuer) = key_set(&args, now)?;
    let options = VerifyOptions {
        issuer,
        now,
        leeway_secs: args.leeway,
    };
    let encode = |v: Result<Value, serde_json::Error>| {
        v.map_err(|e| CliError::usage(format!("cannot encode the claims: {e}")))
    };

    if args.event {
        let claims =
            verify_event(&token, &set, &options).map_err(|e| CliError::Rejected(e.to_string()))?;
        let value = encode(serde_json::to_value(&claims))?;
        record(&args, claims.jti.as_str(), now)?;
        print_claims(&value, "valid event", ctx.json)?;
        return Ok(Exit::Success);
    }

    let claims =
        verify_verdict(&token, &set, &options).map_err(|e| CliError::Rejected(e.to_string()))?;
    let value = encode(serde_json::to_value(&claims))?;
    let objections = objections(&args, &claims);
    if !objections.is_empty() {
        print_claims(&value, "refused", ctx.json)?;
        return Err(CliError::Rejected(objections.join("; ")));
    }
    record(&args, claims.nonce.as_str(), now)?;
    let compared = args.amount.is_some() || args.currency.is_some() || args.recipient.is_some();
    let status = if compared {
        "valid allow verdict, matches the transaction"
    } else {
        "valid allow verdict"
    };
    print_claims(&value, status, ctx.json)?;
    if !compared {
        output::note(
            "the transaction was not compared: pass --amount, --currency and --recipient before settling",
        );
    }
    if claims.policy_verdict != claims.verdict {
        output::note(&format!(
            "issued in observe mode: the policy verdict was {}",
            claims.policy_verdict
        ));
    }
    Ok(Exit::Success)
}
