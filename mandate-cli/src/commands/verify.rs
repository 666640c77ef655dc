//! `mandate verify TOKEN`: check a signed verdict (or a webhook event) fully offline, the
//! way a counterparty must before it settles.
//!
//! The key set comes from `--jwks FILE` or from the cache `mandate jwks fetch` wrote (used
//! for five minutes). The signature, `alg` (ES256 only), `kid`, `iss` and `exp` are checked
//! by the core (`Counterparty::check` for a verdict, `verify_event` for an event); then the
//! environment of the signing key
//! (a `sandbox-` kid only with `--sandbox`: sandbox and live share the issuer and the key
//! set, and a sandbox organization can have itself an `allow` for any amount), and for a
//! verdict that it is `allow`, that the transaction matches (`--amount`, `--currency`,
//! `--recipient`, all three required), and with `--replay-store` that its nonce was never
//! accepted before. Exit 0 only when all hold; `--signature-only` checks all but the
//! transaction and exits 7, never 0.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use clap::Args;
use mandate_core::{
    Allowance, Amount, CheckError, Counterparty, Currency, Environment, EnvironmentPolicy,
    ExpectedTransaction, JwkSet, LogEntry, LogKeys, MemoryReplayGuard, Objection,
    PaymentRequirements, Recipient, ReplayGuard, VerifiedVerdict, VerifyOptions, token_kid,
    verify_event,
};
use mandate_protocol::tlog::WitnessKey;
use serde::Serialize;
use serde_json::Value;

use super::jwks::unix_to_text;
use super::verify_log;
use super::{Context, parse_currency, parse_recipient, read_input};
use crate::error::{CliError, CmdResult, Exit};
use crate::jwks_cache;
use crate::output;
use crate::replay_store::{self, FileReplayStore, Seen};

/// The long help of `VerifyArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const LONG_ABOUT: &str = "Verify a signed verdict, or with --event a webhook event, without any account.\n\n\
Checks, in order: the signature against the key named by the token's kid in the key set \
(--jwks FILE, or the cache written by `mandate jwks fetch`: the set of the --issuer given, \
else the last set fetched, usable for its max-age, five minutes by default); the \
algorithm (ES256 only); the issuer (--issuer, or the issuer recorded with the cache); the \
expiry (verdicts live five minutes); the environment of the signing key: a live key \
(kid live-…), or with --sandbox also a sandbox key (kid sandbox-…). Sandbox and live share \
the issuer and the key set, and a sandbox verdict authorizes no real payment, so a sandbox \
token is refused without --sandbox. For a verdict, then: that the verdict is allow; that \
--amount (an exact decimal: 42.5 matches 42.50), --currency and --recipient equal the \
signed request (all three are required, unless --signature-only; the recipient without \
regard to ASCII letter case, as the engine matches recipients, and shown as signed); with --x402 FILE \
(and --decimals N) that the verdict is bound to that x402 payment (its x402_payment claim \
the digest of the payment's scheme, network, asset, amount and payTo) and that the payment \
is the transaction (payTo the recipient's name, a fiat asset the currency, the atomic \
amount --amount at N decimals; for an upto payment, whose amount is the maximum the client \
signed, --amount is the amount settled, at most the signed one); with --ap2 FILE \
({\"ap2_mandate\": DIGEST, \"ap2_transaction\": ID}) that its ap2_mandate and \
ap2_transaction claims are those; with --acp FILE (an ACP allowance) that its acp_allowance \
claim is the allowance's digest and acp_checkout_session its checkout session, and that \
--amount (the charge) is at most its max_amount, in its currency, to vendor:<merchant_id>, \
before its expires_at; a binding the verdict carries that was not asked about is noted, not \
refused; with --log FILE (the decision as read, or its log member) that the verdict is in \
the issuer's decision log (the inclusion proof leads from the token to a checkpoint signed \
by a log key of the key set; the log and the leaf are printed; with --log-origin ORIGIN \
that the log is that one; with --witness VKEY, repeated, that the checkpoint carries the \
cosignatures of those witnesses, all of them or --witnesses-required K); and with --replay-store \
FILE that its nonce was never accepted before (the nonce is recorded when the token is \
accepted). For an event, the replay store records the event id. Once the signature holds, \
the status, the environment and the claims are printed, also when the token is then \
refused (with --json the claims are the output and the environment is a note on stderr).\n\n\
Exit 0 only for a valid allow that matches the transaction (or a valid event); 7 for a \
valid allow under --signature-only, whose transaction was not compared; 6 when the token is \
refused; 2 when the key set is missing or stale, or the arguments are wrong (a verdict \
without --amount, --currency and --recipient or --signature-only).";

/// `mandate verify TOKEN`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate jwks fetch https://verdicts.example.com
  mandate verify \"$TOKEN\" --amount 42.50 --currency USD --recipient vendor:acme \\
      --replay-store ~/.local/state/settled-nonces
  mandate verify \"$TOKEN\" --amount 0.01 --currency USD --recipient vendor:0x2096…287C \\
      --x402 payment-payload.json --decimals 6
  mandate verify \"$TOKEN\" --amount 18.40 --currency USD --recipient vendor:acme_store \\
      --acp allowance.json
  mandate verify \"$TOKEN\" --signature-only --sandbox     # exit 7: a valid sandbox allow
  mandate verify --jwks jwks.json --issuer https://verdicts.example.com --event < event.jwt")]
pub struct VerifyArgs {
    /// The token (compact JWS); `-` or absent reads it from stdin
    pub token: Option<String>,
    /// JWK Set file to verify against, instead of the cache (needs --issuer)
    #[arg(long, value_name = "FILE")]
    pub jwks: Option<PathBuf>,
    /// The expected issuer, the service's verdicts URL; its cached set is used [default:
    /// the issuer of the last set fetched]
    #[arg(long, value_name = "URL")]
    pub issuer: Option<String>,
    /// The amount to be settled; must equal the signed amount as a decimal (with an x402
    /// upto payment or an ACP allowance, at most the signed maximum)
    #[arg(long, value_name = "AMOUNT", conflicts_with_all = ["event", "signature_only"])]
    pub amount: Option<Amount>,
    /// The currency to be settled
    #[arg(
        long,
        value_name = "CODE",
        value_parser = parse_currency,
        conflicts_with_all = ["event", "signature_only"]
    )]
    pub currency: Option<Currency>,
    /// The recipient to be paid, vendor:<name>; ASCII letter case is not compared, as
    /// the engine matches recipients (vendor:Shop matches a token signed for vendor:shop,
    /// which is shown as signed)
    #[arg(
        long,
        value_name = "RECIPIENT",
        value_parser = parse_recipient,
        conflicts_with_all = ["event", "signature_only"]
    )]
    pub recipient: Option<Recipient>,
    /// Check the verdict but not the transaction (no --amount, --currency, --recipient):
    /// a valid allow exits 7, never 0
    #[arg(long, conflicts_with_all = ["event", "replay_store"])]
    pub signature_only: bool,
    /// Also accept tokens signed with a sandbox key (kid sandbox-…), for testing; without
    /// it they are refused, as a sandbox verdict authorizes no real payment
    #[arg(long)]
    pub sandbox: bool,
    /// Append-only file of accepted nonces (event ids with --event); a token seen before
    /// is refused as a replay
    #[arg(long, value_name = "FILE")]
    pub replay_store: Option<PathBuf>,
    /// The decision as read (`mandate decisions get ID --json`), or its `log` member alone
    /// (`-` for stdin): the verdict must be in the issuer's log, its checkpoint signed by a
    /// log key of the key set
    #[arg(long, value_name = "FILE", conflicts_with_all = ["event", "signature_only"])]
    pub log: Option<PathBuf>,
    /// With --log: the log the verdict must be in, its checkpoint's origin
    /// (`<verdicts host>/log/<org>/<env>`, as `verify --log` prints it); a checkpoint of
    /// another log is refused
    #[arg(long, value_name = "ORIGIN", requires = "log")]
    pub log_origin: Option<String>,
    /// With --log: a witness whose cosignature the checkpoint must carry, by its verifier
    /// key (`<name>+<key id>+<key>`, as `mandate witness init` prints it); repeat for each
    #[arg(
        long = "witness",
        value_name = "VKEY",
        requires = "log",
        conflicts_with_all = ["event", "signature_only"],
        value_parser = verify_log::parse_witness
    )]
    pub witnesses: Vec<WitnessKey>,
    /// With --witness: how many of those witnesses must have cosigned [default: all]
    #[arg(long, value_name = "K", requires = "witnesses")]
    pub witnesses_required: Option<usize>,
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
    /// The x402 payment to be settled: a JSON file holding its v2 PaymentRequirements, or
    /// the PaymentPayload (its `accepted` requirements are read). The verdict's
    /// x402_payment must be their digest, payTo the recipient's name (vendor:<payTo>), a
    /// fiat asset the currency, and the atomic amount --amount at --decimals (for scheme
    /// upto: the requirements the client signed, whose atomic amount is the signed
    /// maximum; --amount is what is settled, at most that)
    #[arg(
        long,
        value_name = "FILE",
        requires = "decimals",
        conflicts_with_all = ["event", "signature_only"]
    )]
    pub x402: Option<PathBuf>,
    /// With --x402: the asset's decimals (6 for USDC; the ISO 4217 exponent for fiat), to
    /// compare its atomic amount with --amount
    #[arg(long, value_name = "N", requires = "x402", value_parser = clap::value_parser!(u32).range(0..=28))]
    pub decimals: Option<u32>,
    /// The AP2 payment this settles: a JSON file {"ap2_mandate": DIGEST, "ap2_transaction":
    /// ID} (either or both), the open payment mandate's digest and the closed mandate's
    /// transaction id; the verdict's claims must equal them
    #[arg(long, value_name = "FILE", conflicts_with_all = ["event", "signature_only"])]
    pub ap2: Option<PathBuf>,
    /// The ACP delegated payment allowance this charge is made under: a JSON file holding
    /// the allowance (reason, max_amount, currency, checkout_session_id, merchant_id,
    /// expires_at), or an object with it as `allowance` (the delegate_payment request).
    /// The verdict's acp_allowance must be its digest and acp_checkout_session its
    /// checkout session; --amount is the charge, at most max_amount
    #[arg(long, value_name = "FILE", conflicts_with_all = ["event", "signature_only"])]
    pub acp: Option<PathBuf>,
}

/// What `--x402`, `--ap2` and `--acp` add to the transaction the verdict must match.
fn with_bindings(
    mut expected: ExpectedTransaction,
    args: &VerifyArgs,
) -> Result<ExpectedTransaction, CliError> {
    let read = |path: &PathBuf, what: &str| -> Result<Value, CliError> {
        let bytes = std::fs::read(path)
            .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| CliError::usage(format!("{} is not {what} JSON: {e}", path.display())))
    };
    if let Some(path) = &args.x402 {
        let value = read(path, "x402 PaymentRequirements or PaymentPayload")?;
        let requirements = PaymentRequirements::from_json(&value, "x402")
            .map_err(|e| CliError::usage(format!("--x402 {}: {e}", path.display())))?;
        expected = expected.with_x402(requirements, args.decimals);
    }
    if let Some(path) = &args.ap2 {
        let value = read(path, "{\"ap2_mandate\", \"ap2_transaction\"}")?;
        let member = |key: &str| -> Result<Option<String>, CliError> {
            match value.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) if !text.is_empty() => Ok(Some(text.clone())),
                Some(_) => Err(CliError::usage(format!(
                    "--ap2 {}: {key} must be a non-empty string",
                    path.display()
                ))),
            }
        };
        let (mandate, transaction) = (member("ap2_mandate")?, member("ap2_transaction")?);
        if mandate.is_none() && transaction.is_none() {
            return Err(CliError::usage(format!(
                "--ap2 {}: give ap2_mandate (the open payment mandate's digest), ap2_transaction (the closed mandate's transaction id) or both",
                path.display()
            )));
        }
        if let Some(digest) = mandate {
            expected = expected.with_ap2_mandate(digest);
        }
        if let Some(id) = transaction {
            expected = expected.with_ap2_transaction(id);
        }
    }
    if let Some(path) = &args.acp {
        let value = read(path, "ACP allowance")?;
        // The allowance, or the delegate_payment request that carries it.
        let (allowance, at) = match value.get("allowance") {
            Some(inner) => (inner, "allowance"),
            None => (&value, "the allowance"),
        };
        let allowance = Allowance::from_json(allowance, at)
            .map_err(|e| CliError::usage(format!("--acp {}: {e}", path.display())))?;
        expected = expected.with_acp(allowance);
    }
    Ok(expected)
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
    let (path, entry) = jwks_cache::load_for(args.issuer.as_deref())?;
    let entry = entry.ok_or_else(|| match &args.issuer {
        Some(issuer) => CliError::usage(format!(
            "no key set cached for the issuer {issuer}: fetch it with `mandate jwks fetch {issuer}`, or pass --jwks FILE (cache {})",
            path.display()
        )),
        None => CliError::usage(format!(
            "no key set: pass --jwks FILE, or fetch one with `mandate jwks fetch URL` (cache {})",
            path.display()
        )),
    })?;
    if !entry.is_fresh_at(now) {
        return Err(CliError::usage(format!(
            "the cached key set from {} was fetched {} s ago, past the {} s it may be kept (its Cache-Control max-age, or five minutes): fetch it again with `mandate jwks fetch {}`",
            entry.source,
            entry.age_at(now),
            entry.lifetime_secs(),
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

/// A verdict without the whole transaction to compare is refused before anything is read:
/// exit 0 must mean that the token matched what is about to be settled.
fn check_transaction_given(args: &VerifyArgs) -> Result<(), CliError> {
    if args.event || args.signature_only {
        return Ok(());
    }
    let missing: Vec<&str> = [
        ("--amount", args.amount.is_none()),
        ("--currency", args.currency.is_none()),
        ("--recipient", args.recipient.is_none()),
    ]
    .into_iter()
    .filter_map(|(flag, absent)| absent.then_some(flag))
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(CliError::usage(format!(
        "{} missing: pass --amount, --currency and --recipient of the transaction to settle, or --signature-only to check the token alone (a valid allow then exits 7, never 0)",
        missing.join(", ")
    )))
}

/// The environment of the key that signed an accepted token, as printed.
struct SignedBy {
    kid: String,
    environment: Option<Environment>,
}

impl SignedBy {
    /// Reads the kid of a token the core accepted (the header is under the signature).
    fn of(token: &str) -> Self {
        let kid = token_kid(token).unwrap_or_default();
        Self {
            environment: Environment::of_kid(&kid),
            kid,
        }
    }

    /// `live (kid live-1)`.
    fn describe(&self) -> String {
        let name = self.environment.map_or("unknown", Environment::as_str);
        format!("{name} (kid {})", self.kid)
    }

    /// Why the key's environment is not acceptable, if it is not; `event` for a webhook
    /// event, which reports a change rather than authorizing a payment.
    fn objection(&self, sandbox_allowed: bool, event: bool) -> Option<String> {
        let meaning = if event {
            "a sandbox event reports only what happened in the sandbox"
        } else {
            "a sandbox token authorizes no real payment"
        };
        match self.environment {
            Some(Environment::Live) => None,
            Some(Environment::Sandbox) if sandbox_allowed => None,
            Some(Environment::Sandbox) => Some(format!(
                "signed with the sandbox key {}: {meaning}; pass --sandbox to accept it while testing",
                self.kid
            )),
            None => Some(format!(
                "the key {:?} belongs to no environment: only live-… keys (and sandbox-… with --sandbox) sign tokens",
                self.kid
            )),
        }
    }
}

/// An objection of the core's check, in the words of this command (its flags).
fn describe(objection: &Objection, args: &VerifyArgs) -> String {
    match objection {
        Objection::Environment {
            kid,
            environment: Some(Environment::Sandbox),
        } => format!(
            "signed with the sandbox key {kid}: a sandbox token authorizes no real payment; pass --sandbox to accept it while testing"
        ),
        Objection::Environment { kid, .. } => format!(
            "the key {kid:?} belongs to no environment: only live-… keys (and sandbox-… with --sandbox) sign tokens"
        ),
        Objection::Replay(nonce) => match &args.replay_store {
            Some(path) => format!(
                "{nonce} was accepted before (replay store {}): this is a replay",
                path.display()
            ),
            None => format!("{nonce} was accepted before: this is a replay"),
        },
        other => other.to_string(),
    }
}

/// Prints the status, the signing key's environment and the claims: as fields, or with
/// `--json` the claims on stdout (their shape unchanged) and the environment as a note.
fn print_claims(
    claims: &impl Serialize,
    status: &str,
    signed_by: &SignedBy,
    as_json: bool,
) -> Result<(), CliError> {
    // Through the JSON of the claims, whose members come sorted by name, nested ones too.
    let claims = serde_json::to_value(claims)
        .map_err(|e| CliError::usage(format!("cannot encode the claims: {e}")))?;
    if as_json {
        output::note(&format!("environment {}", signed_by.describe()));
        return output::json(&claims);
    }
    let mut pairs = vec![
        ("status".to_owned(), status.to_owned()),
        ("environment".to_owned(), signed_by.describe()),
    ];
    pairs.extend(output::flatten(&claims, &[]));
    for (name, value) in pairs.iter_mut() {
        if (name == "iat" || name == "exp")
            && let Ok(at) = value.parse::<i64>()
        {
            *value = format!("{value} ({})", unix_to_text(at));
        }
    }
    output::fields(&pairs)
}

/// Refuses the token: the claims are printed first (the signature held), then the reasons.
fn refuse(
    claims: &impl Serialize,
    signed_by: &SignedBy,
    reasons: Vec<String>,
    as_json: bool,
) -> CmdResult {
    print_claims(claims, "refused", signed_by, as_json)?;
    Err(CliError::Rejected(reasons.join("; ")))
}

/// Records `id` in the replay store, if there is one; `Some(reason)` when it was there.
fn replayed(args: &VerifyArgs, id: &str, now: i64) -> Result<Option<String>, CliError> {
    if let Some(path) = &args.replay_store
        && replay_store::check_and_record(path, id, now)? == Seen::Before
    {
        return Ok(Some(format!(
            "{id} was accepted before (replay store {}): this is a replay",
            path.display()
        )));
    }
    Ok(None)
}

/// The signed recipient, when the check refused a recipient that differs from it in ASCII
/// letter case only.
fn case_only_difference<T>(checked: &Result<T, CheckError>) -> Option<Recipient> {
    let Err(CheckError::Refused { objections, .. }) = checked else {
        return None;
    };
    objections.iter().find_map(|objection| match objection {
        Objection::Recipient { signed, expected }
            if signed.as_str().eq_ignore_ascii_case(expected.as_str()) =>
        {
            Some(signed.clone())
        }
        _ => None,
    })
}

/// Runs `mandate verify`.
pub fn run(args: VerifyArgs, ctx: &Context) -> CmdResult {
    check_transaction_given(&args)?;
    let now = args
        .now
        .unwrap_or_else(|| time::OffsetDateTime::now_utc().unix_timestamp());
    let token = read_token(&args)?;
    let (set, issuer) = key_set(&args, now)?;
    let options = VerifyOptions {
        issuer,
        now: time::OffsetDateTime::from_unix_timestamp(now)
            .map_err(|_| CliError::usage(format!("--now {now} is out of range")))?,
        leeway_secs: args.leeway,
    };
    if args.event {
        return run_event(&args, ctx, &token, &set, &options, now);
    }
    let mut witnessed = None;
    let log = match &args.log {
        Some(path) if path.as_os_str() == "-" && args.token.as_deref().is_none_or(|t| t == "-") => {
            return Err(CliError::usage(
                "the token and --log cannot both be read from stdin: pass the token as an argument",
            ));
        }
        Some(path) => {
            let entry = verify_log::read_entry(path)?;
            if let Some(origin) = &args.log_origin {
                verify_log::require_origin(&entry, origin)?;
            }
            // Before anything is checked or recorded, as --log-origin.
            if let Some(policy) =
                verify_log::witness_policy(&args.witnesses, args.witnesses_required)?
            {
                witnessed = Some(
                    verify_log::require_witnesses(&policy, &entry.checkpoint)
                        .map_err(CliError::Rejected)?,
                );
            }
            Some((
                entry,
                verify_log::keys(args.jwks.as_deref(), args.issuer.as_deref())?,
            ))
        }
        None => None,
    };
    let checked = check_verdict(&args, &token, &set, options, now, log.clone())?;
    let entry = log.as_ref().map(|(e, _)| e);
    accept_verdict(&args, ctx, &token, checked, entry, witnessed.as_deref())
}

/// The check of a verdict, with its log entry when `--log` gave one.
fn check_with<G: ReplayGuard + ?Sized>(
    counterparty: &Counterparty,
    token: &str,
    entry: Option<&LogEntry>,
    set: &JwkSet,
    expected: &ExpectedTransaction,
    guard: &mut G,
    at: time::OffsetDateTime,
) -> Result<VerifiedVerdict, CheckError> {
    match entry {
        Some(entry) => counterparty.check_logged(token, entry, set, expected, guard, at),
        None => counterparty.check(token, set, expected, guard, at),
    }
}

/// `--event`: the event's signature, issuer and expiry, its signing key's environment, then
/// the replay store.
fn run_event(
    args: &VerifyArgs,
    ctx: &Context,
    token: &str,
    set: &JwkSet,
    options: &VerifyOptions,
    now: i64,
) -> CmdResult {
    let claims = verify_event(token, set, options)
        .map_err(|e| CliError::Rejected(output::token_error(&e)))?;
    let signed_by = SignedBy::of(token);
    if let Some(objection) = signed_by.objection(args.sandbox, true) {
        return refuse(&claims, &signed_by, vec![objection], ctx.json);
    }
    if let Some(replay) = replayed(args, claims.jti.as_str(), now)? {
        return refuse(&claims, &signed_by, vec![replay], ctx.json);
    }
    print_claims(&claims, "valid event", &signed_by, ctx.json)?;
    Ok(Exit::Success)
}

/// The whole counterparty check of a verdict in one call: signature, issuer, expiry,
/// environment, allow, the transaction, then the replay store (only when everything else
/// held); the signature alone with `--signature-only`.
fn check_verdict(
    args: &VerifyArgs,
    token: &str,
    set: &JwkSet,
    options: VerifyOptions,
    now: i64,
    log: Option<(LogEntry, LogKeys)>,
) -> Result<Result<VerifiedVerdict, CheckError>, CliError> {
    let (entry, log_keys) = log.unzip();
    let counterparty = Counterparty::new(options.issuer)
        .leeway_secs(options.leeway_secs)
        .environments(if args.sandbox {
            EnvironmentPolicy::LiveOrSandbox
        } else {
            EnvironmentPolicy::LiveOnly
        });
    let counterparty = match log_keys {
        Some(keys) => counterparty.require_log(keys),
        None => counterparty,
    };
    let entry = entry.as_ref();
    let at = time::OffsetDateTime::from_unix_timestamp(now)
        .map_err(|e| CliError::usage(format!("--now {now} is not a time: {e}")))?;
    let check = |recipient: &Recipient| -> Result<_, CliError> {
        let (Some(amount), Some(currency)) = (&args.amount, &args.currency) else {
            return Ok(counterparty.check_signature_only(token, set, at));
        };
        let expected = ExpectedTransaction::new(*amount, currency.clone(), recipient.clone());
        let expected = with_bindings(expected, args)?;
        Ok(match &args.replay_store {
            Some(path) => {
                let mut store = FileReplayStore::new(path);
                check_with(&counterparty, token, entry, set, &expected, &mut store, at)
            }
            None => {
                let mut guard = MemoryReplayGuard::default();
                check_with(&counterparty, token, entry, set, &expected, &mut guard, at)
            }
        })
    };
    let Some(recipient) = args.recipient.as_ref().filter(|_| !args.signature_only) else {
        return Ok(counterparty.check_signature_only(token, set, at));
    };
    let checked = check(recipient)?;
    // Recipients match without regard to ASCII letter case, as the engine matches them: a
    // refusal whose recipient differs only in case is checked again with the recipient as
    // signed (nothing was recorded: a refused token records no nonce), which is what is
    // shown.
    match case_only_difference(&checked) {
        Some(signed) => {
            output::note(&format!(
                "recipient {recipient} matches the signed {signed}: letter case is not compared, as the engine's recipient rules"
            ));
            check(&signed)
        }
        None => Ok(checked),
    }
}

/// What the check of a verdict found, printed, and the exit code it means.
fn accept_verdict(
    args: &VerifyArgs,
    ctx: &Context,
    token: &str,
    checked: Result<VerifiedVerdict, CheckError>,
    entry: Option<&LogEntry>,
    witnessed: Option<&str>,
) -> CmdResult {
    let signed_by = SignedBy::of(token);
    let logged = checked.as_ref().ok().and_then(|v| v.log.clone());
    let claims = match checked {
        Ok(verified) if args.signature_only => verified.claims,
        Ok(verified) => {
            if !verified.unchecked.is_empty() {
                let unchecked = serde_json::to_string(&verified.unchecked).unwrap_or_default();
                output::note(&format!(
                    "the verdict is also bound to {unchecked}, not checked: pass --x402, --ap2 or --acp when settling through that protocol"
                ));
            }
            verified.claims
        }
        Err(CheckError::Token(e)) => return Err(CliError::Rejected(output::token_error(&e))),
        Err(CheckError::Refused { claims, objections }) => {
            let reasons = objections.iter().map(|o| describe(o, args)).collect();
            return refuse(&*claims, &signed_by, reasons, ctx.json);
        }
        Err(CheckError::ReplayGuard(e)) => return Err(CliError::usage(e.0)),
        Err(other) => return Err(CliError::Rejected(other.to_string())),
    };
    let status = if args.signature_only {
        "valid allow verdict, transaction not compared (--signature-only)"
    } else {
        "valid allow verdict, matches the transaction"
    };
    print_claims(&claims, status, &signed_by, ctx.json)?;
    if let (Some(checkpoint), Some(entry)) = (&logged, entry) {
        let place = verify_log::accepted(checkpoint, entry);
        for line in std::iter::once(place.as_str()).chain(witnessed) {
            if ctx.json {
                output::note(line);
            } else {
                output::line(line)?;
            }
        }
    }
    if claims.policy_verdict != claims.verdict {
        output::note(&format!(
            "issued in observe mode: the policy verdict was {}",
            claims.policy_verdict
        ));
    }
    if args.signature_only {
        output::note(
            "the transaction was not compared: pass --amount, --currency and --recipient before settling",
        );
        return Ok(Exit::SignatureOnly);
    }
    Ok(Exit::Success)
}
