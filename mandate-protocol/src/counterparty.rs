//! The whole check a counterparty runs before it settles, in one call.
//!
//! A merchant handed a `verdict_token` must check, in order: the signature against the
//! service's JWK Set (ES256 only, the key by `kid`, low-S), the issuer, the expiry and the
//! issue time; the environment of the signing key (live only, unless told to accept the
//! sandbox: both share the issuer and the key set, and a sandbox `allow` can be had for
//! any amount); that the verdict is exactly `allow` (an unknown code is a denial); that the
//! signed amount, currency and recipient are the transaction about to be settled; and that
//! the nonce was never accepted before. [`Counterparty::check`] does all of it and returns
//! a [`VerifiedVerdict`], or a [`CheckError`] that says what failed: the token itself, or
//! every [`Objection`] to a valid token.
//!
//! The replay guard is a trait, [`ReplayGuard`], because where accepted nonces are kept is
//! the embedder's choice (a database table, a file, Redis); [`MemoryReplayGuard`] keeps
//! them in memory for one process. The nonce is recorded only when everything else holds,
//! so a refused token burns nothing. `now` is an argument: this module reads no clock.
//!
//! A counterparty that wants proof that the verdict is in the issuer's transparency log
//! ([`crate::tlog`]) sets [`Counterparty::require_log`] and checks the token with its
//! decision's `log` entry through [`Counterparty::check_logged`].
//!
//! ```
//! use mandate_protocol::counterparty::{Counterparty, ExpectedTransaction, MemoryReplayGuard};
//! use mandate_protocol::jwk::JwkSet;
//! # fn demo(token: &str, jwks: &JwkSet, now: time::OffsetDateTime)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! let counterparty = Counterparty::new("https://verdicts.example.com");
//! let expected = ExpectedTransaction::new("42.50".parse()?, "USD".parse()?, "vendor:acme".parse()?);
//! let mut guard = MemoryReplayGuard::default();
//! let verified = counterparty.check(token, jwks, &expected, &mut guard, now)?;
//! println!("settle {} for decision {}", verified.claims.request.amount, verified.claims.jti);
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;

use time::OffsetDateTime;

use crate::acp::{Allowance, AllowanceMismatch};
use crate::amount::Amount;
use crate::claims::{Bindings, VerdictClaims};
use crate::environment::{Environment, token_kid};
use crate::id::Nonce;
use crate::jwk::JwkSet;
use crate::jws::{TokenError, VerifyOptions, claim_text, verify_verdict};
use crate::names::{Currency, Recipient};
use crate::policy::Verdict;
use crate::tlog::{Checkpoint, LogEntry, LogError, LogKeys};
use crate::x402::{Inconsistency, PaymentRequirements};

/// Which environments' keys a counterparty accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum EnvironmentPolicy {
    /// Only live keys (`live-<n>`): what production must use.
    #[default]
    LiveOnly,
    /// Live and sandbox keys: for a test system only, as a sandbox verdict authorizes no
    /// real payment.
    LiveOrSandbox,
}

impl EnvironmentPolicy {
    /// Whether a token signed in `environment` is accepted.
    pub(crate) fn accepts(self, environment: Option<Environment>) -> bool {
        matches!(
            (self, environment),
            (_, Some(Environment::Live)) | (Self::LiveOrSandbox, Some(Environment::Sandbox))
        )
    }
}

/// The transaction a counterparty is about to settle: what a verdict must be for.
///
/// Built with [`ExpectedTransaction::new`]; what the verdict must be bound to besides
/// (an x402 payment, an AP2 open mandate and transaction, an ACP allowance) is set by
/// [`ExpectedTransaction::with_x402`], [`ExpectedTransaction::with_ap2_mandate`],
/// [`ExpectedTransaction::with_ap2_transaction`] and [`ExpectedTransaction::with_acp`], so
/// a check written before keeps compiling.
///
/// The amount is compared exactly with the signed one, except where the verdict was
/// decided on a maximum: an x402 `upto` payment and an ACP allowance. There the amount
/// is what is settled, and must be at most the signed amount ([`Objection::AboveMaximum`]).
///
/// A binding expected must be in the token, equal ([`Objection::Binding`]). A binding the
/// token carries that was not expected is no objection: the caller did not ask about that
/// protocol (a verifier written before a binding existed must keep accepting what it
/// accepted), and amount, currency and recipient, which it does check, are what is paid.
/// It is reported in [`VerifiedVerdict::unchecked`], so a caller that settles through that
/// protocol sees it should have checked it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExpectedTransaction {
    /// The amount to be settled; compared as an exact decimal (42.5 equals 42.50), or
    /// with an x402 `upto` payment or an ACP allowance, at most the signed maximum.
    pub(crate) amount: Amount,
    /// Its currency.
    pub(crate) currency: Currency,
    /// Who is to be paid; compared exactly, as signed.
    pub(crate) recipient: Recipient,
    /// The x402 payment to be settled, if it is one: the token's `x402_payment` must be its
    /// digest, and it must be this transaction's payment.
    pub(crate) x402: Option<ExpectedX402>,
    /// The AP2 open payment mandate's digest the token's `ap2_mandate` must be.
    pub(crate) ap2_mandate: Option<String>,
    /// The AP2 closed payment mandate's transaction id the token's `ap2_transaction` must
    /// be.
    pub(crate) ap2_transaction: Option<String>,
    /// The ACP delegated payment allowance the payment is made under: the token's
    /// `acp_allowance` must be its digest and `acp_checkout_session` its checkout
    /// session, and the payment must be within it.
    pub(crate) acp: Option<Allowance>,
}

/// An x402 payment a verdict must be bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExpectedX402 {
    /// The payment's requirements (from the `PaymentRequirements` or the `PaymentPayload`'s
    /// `accepted`).
    pub(crate) requirements: PaymentRequirements,
    /// The asset's decimals (6 for USDC): with them the atomic `amount` is compared with
    /// the transaction's amount; without, only through the digest.
    pub(crate) decimals: Option<u32>,
}

impl ExpectedTransaction {
    /// The amount, currency and recipient of the payment about to be made.
    pub fn new(amount: Amount, currency: Currency, recipient: Recipient) -> Self {
        Self {
            amount,
            currency,
            recipient,
            x402: None,
            ap2_mandate: None,
            ap2_transaction: None,
            acp: None,
        }
    }

    /// Expects the verdict to be bound to the x402 payment of `requirements` (its
    /// `x402_payment` claim their digest) and the payment to be this transaction's: payTo
    /// the recipient's name (`vendor:<payTo>`), a fiat asset the currency, and with
    /// `decimals` (the asset's; for a fiat asset, its ISO 4217 minor units when `None`) the
    /// atomic amount this amount.
    ///
    /// For an `upto` payment, `requirements` are the ones the client signed (its
    /// `PaymentPayload`'s `accepted`, whose `amount` is the maximum), not the
    /// settlement-time ones; this transaction's amount is the one settled, at most the
    /// signed maximum, and the atomic maximum is compared with the signed amount.
    #[must_use]
    pub fn with_x402(mut self, requirements: PaymentRequirements, decimals: Option<u32>) -> Self {
        self.x402 = Some(ExpectedX402 {
            requirements,
            decimals,
        });
        self
    }

    /// Expects the verdict's `ap2_mandate` to be `digest` (the AP2 open payment mandate
    /// the payment is made under).
    #[must_use]
    pub fn with_ap2_mandate(mut self, digest: impl Into<String>) -> Self {
        self.ap2_mandate = Some(digest.into());
        self
    }

    /// Expects the verdict's `ap2_transaction` to be `id` (the AP2 closed payment
    /// mandate's transaction id).
    #[must_use]
    pub fn with_ap2_transaction(mut self, id: impl Into<String>) -> Self {
        self.ap2_transaction = Some(id.into());
        self
    }

    /// Expects the verdict to be bound to the ACP delegated payment `allowance` (its
    /// `acp_allowance` claim the allowance's digest, `acp_checkout_session` its checkout
    /// session) and the payment to be within it: this amount at most its maximum (and at
    /// most the signed amount, its maximum), its currency, recipient `vendor:<merchant_id>`,
    /// before `expires_at`.
    #[must_use]
    pub fn with_acp(mut self, allowance: Allowance) -> Self {
        self.acp = Some(allowance);
        self
    }

    /// Whether the signed amount is a maximum the settled amount may stay under: an
    /// x402 `upto` payment, an ACP allowance.
    fn settles_up_to_the_signed_amount(&self) -> bool {
        self.acp.is_some() || self.x402.as_ref().is_some_and(|x| x.requirements.is_upto())
    }

    /// The bindings the token carries that this transaction does not expect.
    fn unchecked(&self, claims: &VerdictClaims) -> Bindings {
        let mut out = claims.bindings.clone();
        if self.x402.is_some() {
            out.x402_payment = None;
        }
        if self.ap2_mandate.is_some() {
            out.ap2_mandate = None;
        }
        if self.ap2_transaction.is_some() {
            out.ap2_transaction = None;
        }
        if self.acp.is_some() {
            out.acp_allowance = None;
            out.acp_checkout_session = None;
        }
        out
    }

    /// What in the claims' bindings differs from those expected, and what in the expected
    /// x402 payment or ACP allowance is not this transaction at `now`.
    fn binding_objections(
        &self,
        claims: &VerdictClaims,
        now: OffsetDateTime,
        out: &mut Vec<Objection>,
    ) {
        let compare = |claim: &'static str, signed: &Option<String>, expected: Option<String>| {
            let expected = expected?;
            (signed.as_deref() != Some(expected.as_str())).then(|| Objection::Binding {
                claim,
                signed: signed.clone(),
                expected,
            })
        };
        out.extend(compare(
            "ap2_mandate",
            &claims.bindings.ap2_mandate,
            self.ap2_mandate.clone(),
        ));
        out.extend(compare(
            "ap2_transaction",
            &claims.bindings.ap2_transaction,
            self.ap2_transaction.clone(),
        ));
        if let Some(x402) = &self.x402 {
            out.extend(compare(
                "x402_payment",
                &claims.bindings.x402_payment,
                Some(x402.requirements.digest()),
            ));
            // The atomic amount of `upto` requirements is the maximum: the signed amount.
            let atomic_is = if x402.requirements.is_upto() {
                claims.request.amount
            } else {
                self.amount
            };
            let disagreements = x402.requirements.consistency(
                atomic_is,
                &self.currency,
                &self.recipient,
                x402.decimals,
            );
            out.extend(disagreements.into_iter().map(Objection::X402));
        }
        if let Some(allowance) = &self.acp {
            out.extend(compare(
                "acp_allowance",
                &claims.bindings.acp_allowance,
                Some(allowance.digest()),
            ));
            out.extend(compare(
                "acp_checkout_session",
                &claims.bindings.acp_checkout_session,
                Some(allowance.checkout_session_id().to_owned()),
            ));
            let outside =
                allowance.settlement_mismatches(self.amount, &self.currency, &self.recipient, now);
            out.extend(outside.into_iter().map(Objection::Acp));
        }
    }

    /// What in `claims` differs from this transaction at `now`.
    fn objections(&self, claims: &VerdictClaims, now: OffsetDateTime) -> Vec<Objection> {
        let signed = &claims.request;
        let mut out = Vec::new();
        if self.settles_up_to_the_signed_amount() {
            if self.amount.value() > signed.amount.value() {
                out.push(Objection::AboveMaximum {
                    signed: signed.amount,
                    expected: self.amount,
                });
            }
        } else if signed.amount.value() != self.amount.value() {
            out.push(Objection::Amount {
                signed: signed.amount,
                expected: self.amount,
            });
        }
        if signed.currency != self.currency {
            out.push(Objection::Currency {
                signed: signed.currency.clone(),
                expected: self.currency.clone(),
            });
        }
        if signed.recipient != self.recipient {
            out.push(Objection::Recipient {
                signed: signed.recipient.clone(),
                expected: self.recipient.clone(),
            });
        }
        self.binding_objections(claims, now, &mut out);
        out
    }
}

/// Whether a nonce was new (and is now recorded) or accepted before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub enum Seen {
    /// First time: recorded now.
    New,
    /// Accepted before: a replay.
    Before,
}

/// Why a replay guard could not answer (its storage failed). The token is then not
/// accepted: a guard that cannot record must not let a nonce through twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("replay guard failed: {0}")]
pub struct ReplayGuardError(pub String);

/// Where accepted nonces are kept, so that a token is accepted once.
///
/// An implementation records `nonce` and answers [`Seen::New`] if it was not there, or
/// [`Seen::Before`] if it was, in one atomic step (two verifiers sharing a store must not
/// both see `New`). It must keep a nonce at least until `keep_until` (the token's expiry
/// plus the verifier's leeway): after that the token is refused as expired anyway.
pub trait ReplayGuard {
    /// Records `nonce` unless it is there already.
    fn check_and_record(
        &mut self,
        nonce: &str,
        keep_until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Result<Seen, ReplayGuardError>;
}

impl<G: ReplayGuard + ?Sized> ReplayGuard for &mut G {
    fn check_and_record(
        &mut self,
        nonce: &str,
        keep_until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Result<Seen, ReplayGuardError> {
        (**self).check_and_record(nonce, keep_until, now)
    }
}

/// A replay guard in memory, for one process: nonces are forgotten once their tokens
/// have expired (at the next call after `keep_until`), so it holds at most the tokens of
/// the last few minutes.
#[derive(Debug, Clone, Default)]
pub struct MemoryReplayGuard {
    seen: HashMap<String, OffsetDateTime>,
    next_sweep: Option<OffsetDateTime>,
}

impl MemoryReplayGuard {
    /// How many nonces it holds.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

impl ReplayGuard for MemoryReplayGuard {
    fn check_and_record(
        &mut self,
        nonce: &str,
        keep_until: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Result<Seen, ReplayGuardError> {
        // Sweep expired nonces at most when the earliest of them is due.
        if self.next_sweep.is_some_and(|at| now > at) {
            self.seen.retain(|_, until| *until >= now);
            self.next_sweep = self.seen.values().min().copied();
        }
        if let Some(until) = self.seen.get_mut(nonce) {
            *until = (*until).max(keep_until);
            return Ok(Seen::Before);
        }
        self.seen.insert(nonce.to_owned(), keep_until);
        self.next_sweep = Some(self.next_sweep.map_or(keep_until, |at| at.min(keep_until)));
        Ok(Seen::New)
    }
}

/// A reason a valid token does not authorize the transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Objection {
    /// Signed by a key of an environment the policy does not accept (a sandbox key in
    /// production), or of no environment.
    Environment {
        /// The signing key's id.
        kid: String,
        /// Its environment, if it names one.
        environment: Option<Environment>,
    },
    /// The verdict is a code this crate knows, and not `allow`.
    NotAllow(Verdict),
    /// The verdict is a code this crate does not know (from a later server): a denial.
    UnknownVerdict(String),
    /// The signed amount is not the one to be settled.
    Amount {
        /// In the token.
        signed: Amount,
        /// In the transaction.
        expected: Amount,
    },
    /// The amount to be settled is above the signed one, a maximum (an x402 `upto`
    /// payment, an ACP allowance).
    AboveMaximum {
        /// In the token: the maximum the decision was made on.
        signed: Amount,
        /// In the transaction: what is to be settled.
        expected: Amount,
    },
    /// The signed currency is not the one to be settled.
    Currency {
        /// In the token.
        signed: Currency,
        /// In the transaction.
        expected: Currency,
    },
    /// The signed recipient is not the one to be paid.
    Recipient {
        /// In the token.
        signed: Recipient,
        /// In the transaction.
        expected: Recipient,
    },
    /// A binding expected is absent from the token (`signed` `None`) or another one: the
    /// verdict was not made for this payment.
    Binding {
        /// The claim: `ap2_mandate`, `ap2_transaction`, `x402_payment`, `acp_allowance`
        /// or `acp_checkout_session`.
        claim: &'static str,
        /// In the token, if there.
        signed: Option<String>,
        /// Expected.
        expected: String,
    },
    /// The x402 payment expected is not this transaction's (its payTo, fiat asset or
    /// atomic amount).
    X402(Inconsistency),
    /// The ACP allowance expected does not allow this transaction (above its maximum,
    /// another currency or merchant, expired).
    Acp(AllowanceMismatch),
    /// The nonce was accepted before: this token was already used.
    Replay(Nonce),
    /// The counterparty requires proof that the verdict is in the issuer's log
    /// ([`Counterparty::require_log`]) and none came with it.
    NotLogged,
    /// The log entry that came with the verdict does not prove it is in the log.
    Log(LogError),
}

impl Objection {
    /// A stable code for this objection, in `snake_case`, distinct from every
    /// [`TokenError::code`]: what the language bindings (the npm and Python packages) put
    /// in their exceptions, so that a program can branch on it without reading the
    /// message. A code is never renamed or reused; a new variant gets a new one.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Environment { .. } => "wrong_environment",
            Self::NotAllow(_) => "not_allow",
            Self::UnknownVerdict(_) => "unknown_verdict",
            Self::Amount { .. } => "wrong_amount",
            Self::AboveMaximum { .. } => "above_maximum",
            Self::Currency { .. } => "wrong_currency",
            Self::Recipient { .. } => "wrong_recipient",
            Self::Binding { .. } => "wrong_binding",
            Self::X402(_) => "x402_mismatch",
            Self::Acp(_) => "acp_mismatch",
            Self::Replay(_) => "replay",
            Self::NotLogged => "not_logged",
            Self::Log(_) => "bad_log_proof",
        }
    }
}

impl fmt::Display for Objection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Environment {
                kid,
                environment: Some(Environment::Sandbox),
            } => write!(
                f,
                "signed with the sandbox key {kid}: a sandbox token authorizes no real payment"
            ),
            Self::Environment { kid, .. } => write!(
                f,
                "the key {kid:?} belongs to no accepted environment: only live-… keys sign verdicts that authorize payments"
            ),
            Self::NotAllow(verdict) => {
                write!(f, "the verdict is {verdict}, not allow: do not settle")
            }
            Self::UnknownVerdict(code) => write!(
                f,
                "the verdict is {code:?}, a code this verifier does not know: a denial, do not settle"
            ),
            Self::Amount { signed, expected } => write!(
                f,
                "amount {expected} does not match the signed amount {signed}"
            ),
            Self::AboveMaximum { signed, expected } => write!(
                f,
                "amount {expected} is above the signed maximum {signed}: settle at most {signed}"
            ),
            Self::Currency { signed, expected } => write!(
                f,
                "currency {expected} does not match the signed currency {signed}"
            ),
            Self::Recipient { signed, expected } => write!(
                f,
                "recipient {expected} does not match the signed recipient {signed}"
            ),
            Self::Binding {
                claim,
                signed: None,
                expected,
            } => write!(
                f,
                "the token has no {claim} claim, expected {expected}: it was not made for this payment"
            ),
            Self::Binding {
                claim,
                signed: Some(signed),
                expected,
            } => write!(
                f,
                "{claim} {expected} does not match the signed {claim} {signed}: the token was made for another payment"
            ),
            Self::X402(problem) => write!(f, "the x402 payment is not this transaction: {problem}"),
            Self::Acp(problem) => write!(
                f,
                "the ACP allowance does not allow this transaction: {problem}"
            ),
            Self::Replay(nonce) => write!(f, "nonce {nonce} was accepted before: a replay"),
            Self::NotLogged => write!(
                f,
                "no proof that the verdict is in the issuer's log came with it: ask for its log entry (the decision's `log`, once a checkpoint covers it)"
            ),
            Self::Log(problem) => {
                write!(f, "the verdict is not proven to be in the log: {problem}")
            }
        }
    }
}

/// Why [`Counterparty::check`] did not accept a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The token is not a valid verdict of this issuer: signature, algorithm, key,
    /// issuer, expiry or shape.
    #[error("invalid token: {0}")]
    Token(#[from] TokenError),
    /// A valid token that does not authorize this transaction: its claims (the signature
    /// held, so they are the issuer's) and every objection found.
    #[error("{}", join(objections))]
    Refused {
        /// The verified claims.
        claims: Box<VerdictClaims>,
        /// What is wrong with them, never empty.
        objections: Vec<Objection>,
    },
    /// The replay guard failed: the token was not accepted.
    #[error(transparent)]
    ReplayGuard(#[from] ReplayGuardError),
}

impl CheckError {
    /// The refusal's stable code: the token's [`TokenError::code`], the first
    /// [`Objection::code`] of a refused token (the objections come in the order of the
    /// check: environment, verdict, transaction, bindings, log, replay), or
    /// `replay_guard` when the guard failed. The language bindings carry it as their
    /// exceptions' `code`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Token(e) => e.code(),
            Self::Refused { objections, .. } => {
                objections.first().map_or("refused", Objection::code)
            }
            Self::ReplayGuard(_) => "replay_guard",
        }
    }
}

fn join(objections: &[Objection]) -> String {
    let texts: Vec<String> = objections.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// A verdict that passed every check: the claims and the key that signed them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedVerdict {
    /// The verified claims.
    pub claims: VerdictClaims,
    /// The signing key's id.
    pub kid: String,
    /// The signing key's environment.
    pub environment: Environment,
    /// The bindings the token carries that the check did not expect (and so did not
    /// check); empty when it checked all it carries (see [`ExpectedTransaction`]).
    pub unchecked: Bindings,
    /// The signed checkpoint of the log that holds the verdict, when a log entry was
    /// checked ([`Counterparty::check_logged`]): its origin names the log.
    pub log: Option<Checkpoint>,
}

/// A counterparty's verifier: the expected issuer, the environments it accepts and the
/// clock skew it allows. Cheap to build; keep one per issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counterparty {
    issuer: String,
    environments: EnvironmentPolicy,
    leeway_secs: i64,
    log_keys: Option<LogKeys>,
}

impl Counterparty {
    /// A verifier of `issuer`'s verdicts (the service's verdicts URL, compared exactly):
    /// live keys only, no clock skew allowed.
    pub fn new(issuer: impl Into<String>) -> Self {
        Self {
            issuer: issuer.into(),
            environments: EnvironmentPolicy::LiveOnly,
            leeway_secs: 0,
            log_keys: None,
        }
    }

    /// Requires every verdict to come with proof that it is in the issuer's log, checked
    /// with `keys` (the log keys of the issuer's JWK Set, [`LogKeys::from_jwks_json`]):
    /// [`Counterparty::check`] then refuses every token ([`Objection::NotLogged`]), and
    /// [`Counterparty::check_logged`] checks the entry that comes with it.
    #[must_use]
    pub fn require_log(mut self, keys: LogKeys) -> Self {
        self.log_keys = Some(keys);
        self
    }

    /// Accepts the environments of `policy` (sandbox keys only on a test system).
    #[must_use]
    pub fn environments(mut self, policy: EnvironmentPolicy) -> Self {
        self.environments = policy;
        self
    }

    /// Allows `secs` seconds of clock skew on `exp` and `iat` (negative counts as zero).
    #[must_use]
    pub fn leeway_secs(mut self, secs: i64) -> Self {
        self.leeway_secs = secs.max(0);
        self
    }

    /// The expected issuer.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The whole check (see the module doc): the token, its environment, `allow`, the
    /// transaction, then the replay guard, which records the nonce only when everything
    /// else holds.
    pub fn check<G: ReplayGuard + ?Sized>(
        &self,
        token: &str,
        jwks: &JwkSet,
        expected: &ExpectedTransaction,
        guard: &mut G,
        now: OffsetDateTime,
    ) -> Result<VerifiedVerdict, CheckError> {
        self.check_with_log(token, None, jwks, expected, guard, now)
    }

    /// [`Counterparty::check`], and that `log` (the decision's `log` member) proves the
    /// token is in the issuer's log: its checkpoint signed by a log key given to
    /// [`Counterparty::require_log`], its inclusion proof leading from the token to the
    /// checkpoint's root. Without `require_log` no log key is known, and the entry is
    /// refused.
    pub fn check_logged<G: ReplayGuard + ?Sized>(
        &self,
        token: &str,
        log: &LogEntry,
        jwks: &JwkSet,
        expected: &ExpectedTransaction,
        guard: &mut G,
        now: OffsetDateTime,
    ) -> Result<VerifiedVerdict, CheckError> {
        self.check_with_log(token, Some(log), jwks, expected, guard, now)
    }

    fn check_with_log<G: ReplayGuard + ?Sized>(
        &self,
        token: &str,
        log: Option<&LogEntry>,
        jwks: &JwkSet,
        expected: &ExpectedTransaction,
        guard: &mut G,
        now: OffsetDateTime,
    ) -> Result<VerifiedVerdict, CheckError> {
        let (claims, kid) = self.verify(token, jwks, now)?;
        let (environment, mut objections) = self.judge(token, &claims, &kid);
        objections.extend(expected.objections(&claims, now));
        let checkpoint = self.logged(token, log, &mut objections);
        let Some(environment) = environment.filter(|_| objections.is_empty()) else {
            return Err(refused(claims, objections));
        };
        let keep_until =
            OffsetDateTime::from_unix_timestamp(claims.exp.saturating_add(self.leeway_secs))
                .unwrap_or(now);
        match guard.check_and_record(claims.nonce.as_str(), keep_until, now)? {
            Seen::New => Ok(VerifiedVerdict {
                unchecked: expected.unchecked(&claims),
                claims,
                kid,
                environment,
                log: checkpoint,
            }),
            Seen::Before => {
                let nonce = claims.nonce.clone();
                Err(refused(claims, vec![Objection::Replay(nonce)]))
            }
        }
    }

    /// Every check but the transaction and the replay guard: the token, its environment
    /// and `allow`. **Never settle on this alone**; it is for tools that show a token.
    pub fn check_signature_only(
        &self,
        token: &str,
        jwks: &JwkSet,
        now: OffsetDateTime,
    ) -> Result<VerifiedVerdict, CheckError> {
        let (claims, kid) = self.verify(token, jwks, now)?;
        let (environment, objections) = self.judge(token, &claims, &kid);
        match environment.filter(|_| objections.is_empty()) {
            Some(environment) => Ok(VerifiedVerdict {
                unchecked: claims.bindings.clone(),
                claims,
                kid,
                environment,
                log: None,
            }),
            None => Err(refused(claims, objections)),
        }
    }

    /// The checkpoint that proves `token` is in the log, from `log` with the required log
    /// keys; an objection when the entry fails, or when none came and one is required.
    fn logged(
        &self,
        token: &str,
        log: Option<&LogEntry>,
        objections: &mut Vec<Objection>,
    ) -> Option<Checkpoint> {
        let Some(entry) = log else {
            if self.log_keys.is_some() {
                objections.push(Objection::NotLogged);
            }
            return None;
        };
        let no_keys = LogKeys::default();
        let keys = self.log_keys.as_ref().unwrap_or(&no_keys);
        entry
            .verify(token, keys)
            .map_err(|problem| objections.push(Objection::Log(problem)))
            .ok()
    }

    /// The signature and registered claims; the claims and the signing key's id.
    fn verify(
        &self,
        token: &str,
        jwks: &JwkSet,
        now: OffsetDateTime,
    ) -> Result<(VerdictClaims, String), CheckError> {
        let options = VerifyOptions {
            issuer: self.issuer.clone(),
            now,
            leeway_secs: self.leeway_secs,
        };
        let claims = verify_verdict(token, jwks, &options)?;
        // The header is under the signature: an accepted token's kid is the signer's.
        let kid = token_kid(token).unwrap_or_default();
        Ok((claims, kid))
    }

    /// The objections to verified claims that do not depend on the transaction, and the
    /// key's environment when it is an accepted one.
    fn judge(
        &self,
        token: &str,
        claims: &VerdictClaims,
        kid: &str,
    ) -> (Option<Environment>, Vec<Objection>) {
        let mut out = Vec::new();
        let environment = Environment::of_kid(kid);
        let accepted = environment.filter(|_| self.environments.accepts(environment));
        if accepted.is_none() {
            out.push(Objection::Environment {
                kid: kid.to_owned(),
                environment,
            });
        }
        match claims.verdict {
            Verdict::Allow => {}
            Verdict::Unknown => out.push(Objection::UnknownVerdict(
                claim_text(token, "verdict").unwrap_or_default(),
            )),
            other => out.push(Objection::NotAllow(other)),
        }
        (accepted, out)
    }
}

fn refused(claims: VerdictClaims, objections: Vec<Objection>) -> CheckError {
    CheckError::Refused {
        claims: Box::new(claims),
        objections,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::jws::{TokenKind, TokenPart};

    /// Every refusal's code is distinct, token errors and objections together, and
    /// snake_case: a program that branches on a code must not confuse two refusals.
    #[test]
    fn every_refusal_code_is_distinct_and_snake_case() {
        let amount = Amount::parse("1").unwrap_or_else(|_| unreachable!());
        let usd = Currency::parse("USD").unwrap_or_else(|_| unreachable!());
        let acme = Recipient::parse("vendor:acme").unwrap_or_else(|_| unreachable!());
        let tokens = [
            TokenError::Malformed(""),
            TokenError::UnsupportedAlgorithm(String::new()),
            TokenError::MissingKid,
            TokenError::UnknownKid(String::new()),
            TokenError::SignatureLength(0),
            TokenError::BadSignature,
            TokenError::HighS,
            TokenError::MalformedClaims(String::new()),
            TokenError::WrongIssuer(String::new()),
            TokenError::Expired { exp: 0 },
            TokenError::IssuedInFuture { iat: 0 },
            TokenError::NotAnObject(TokenPart::Claims),
            TokenError::DuplicateMember {
                part: TokenPart::Claims,
                member: String::new(),
            },
            TokenError::WrongKind {
                expected: TokenKind::Verdict,
                found: TokenKind::Event,
            },
        ];
        let objections = [
            Objection::Environment {
                kid: String::new(),
                environment: None,
            },
            Objection::NotAllow(Verdict::Review),
            Objection::UnknownVerdict(String::new()),
            Objection::Amount {
                signed: amount,
                expected: amount,
            },
            Objection::AboveMaximum {
                signed: amount,
                expected: amount,
            },
            Objection::Currency {
                signed: usd.clone(),
                expected: usd.clone(),
            },
            Objection::Recipient {
                signed: acme.clone(),
                expected: acme.clone(),
            },
            Objection::Binding {
                claim: "x402_payment",
                signed: None,
                expected: String::new(),
            },
            Objection::X402(Inconsistency::PayTo {
                pay_to: String::new(),
                recipient: acme,
            }),
            Objection::Acp(AllowanceMismatch::Currency {
                currency: usd.clone(),
                allowed: usd,
            }),
            Objection::Replay(Nonce::from_random([1; 16])),
            Objection::NotLogged,
            Objection::Log(LogError::NotIncluded {
                index: 0,
                size: 0,
                reason: String::new(),
            }),
        ];
        let codes: Vec<&str> = tokens
            .iter()
            .map(TokenError::code)
            .chain(objections.iter().map(Objection::code))
            .chain([CheckError::ReplayGuard(ReplayGuardError(String::new())).code()])
            .collect();
        let distinct: HashSet<&str> = codes.iter().copied().collect();
        assert_eq!(distinct.len(), codes.len(), "{codes:?}");
        for code in codes {
            assert!(
                code.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{code}"
            );
        }
    }
}
