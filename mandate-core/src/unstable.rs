//! What Mandate's own server, CLI and benchmarks use of this crate beyond the embedding API
//! at the crate root. These items change with the server and carry no stability promise:
//! an embedder should not need them (docs/embedding.md says what is stable), and one that
//! does should say so in an issue, so the item can join the root deliberately.
//!
//! The modules are named after the core's own, each holding what the server needs of it:
//! the API's wire types, the state machines the server drives (reviews, escrows, webhook
//! deliveries, idempotency, escrow funding), the remaining budget of a mandate, the parts
//! of the transparency log an issuer keeps, and the low-level helpers the server's hot path
//! calls.

/// What the server computes from an ACP allowance: the verdict's claims, its single use,
/// and whether a request is the allowance.
pub mod acp {
    use time::OffsetDateTime;

    use crate::acp::{Allowance, AllowanceMismatch};
    use crate::amount::Amount;
    use crate::names::{Currency, Recipient};

    /// `checkout_session_id`: the verdict's `acp_checkout_session` claim.
    pub fn checkout_session_id(allowance: &Allowance) -> &str {
        allowance.checkout_session_id()
    }

    /// The single-use credential id of a `one_time` allowance: `acp_` and the base64url
    /// SHA-256 of its `checkout_session_id` (one checkout session is paid once).
    pub fn credential_id(allowance: &Allowance) -> String {
        allowance.credential_id()
    }

    /// The allowance's RFC 8785 (JCS) canonical JSON, `max_amount` an integer.
    pub fn canonical_json(allowance: &Allowance) -> String {
        allowance.canonical_json()
    }

    /// The verdict's `acp_allowance` claim: the base64url (no padding) SHA-256 of
    /// [`canonical_json`].
    pub fn digest(allowance: &Allowance) -> String {
        allowance.digest()
    }

    /// Whether a request of `amount`, `currency` and `recipient`, decided at `now`, is
    /// exactly the allowance (its maximum, currency and merchant, before `expires_at`):
    /// the first mismatch, in that order.
    pub fn check_request(
        allowance: &Allowance,
        amount: Amount,
        currency: &Currency,
        recipient: &Recipient,
        now: OffsetDateTime,
    ) -> Result<(), AllowanceMismatch> {
        allowance.check_request(amount, currency, recipient, now)
    }
}

/// Reading exact amounts from JSON numbers.
pub mod amount {
    pub use crate::amount::amount_from_json;
}

/// AP2's time rules and currency exponents, as the verifiers apply them, and an open
/// mandate read back from storage.
pub mod ap2 {
    pub use crate::ap2::{
        CLOSED_MAX_AGE_SECS, LEEWAY_SECS, minor_unit_exponent, read_stored_open_mandate,
    };
    use crate::ap2::{ClosedMandate, OpenMandate};

    /// The single-use credential id of a closed mandate: `ap2_` and the base64url SHA-256
    /// of its open mandate's [`consent_key`] followed by the transaction id.
    pub fn credential_id(closed: &ClosedMandate) -> String {
        closed.credential_id()
    }

    /// The name of the consent an open mandate carries, free of signature malleability
    /// (the digest of its issuer JWT with a low-S signature): where a service keeps each
    /// open mandate in force in one place.
    pub fn consent_key(open: &OpenMandate) -> &str {
        open.consent_key()
    }

    /// The open mandate's SD-JWT as read, to store ([`read_stored_open_mandate`] reads it
    /// back).
    pub fn sd_jwt(open: &OpenMandate) -> &str {
        open.sd_jwt()
    }
}

/// How long a signed webhook event attempt stays valid.
pub mod claims {
    pub use crate::claims::EVENT_LIFETIME_SECS;
}

/// What a mandate still allows at a moment, limit by limit (`remaining` on mandate reads).
pub mod budget {
    pub use crate::budget::*;
}

/// Event types and the webhook retry schedule as pure decisions.
pub mod delivery {
    pub use crate::delivery::*;
}

/// The escrow state machine as one pure transition function.
pub mod escrow {
    pub use crate::escrow::*;
}

/// Reading a JSON body field by field, each error naming the field: the helpers the core's
/// own `from_json` readers use, for the server's routes to read their bodies in the same
/// words.
pub mod fields {
    pub use crate::field::{check_fields, invalid, object, present, required, string};
}

/// Which decision may fund which escrow.
pub mod funding {
    pub use crate::funding::*;
}

/// The parts of an agent's history: the velocity window and the spend to date by period.
pub mod history {
    use crate::history::AgentHistory;
    pub use crate::history::{
        LifetimeToDate, MonthToDate, PeriodToDate, SpendToDate, VELOCITY_LIMIT, VELOCITY_WINDOW_MS,
        VelocityWindow, day_of, week_of,
    };

    /// The agent's recent requests.
    pub fn velocity(history: &AgentHistory) -> &VelocityWindow {
        &history.velocity
    }

    /// The agent's recent requests, to rebuild them from stored decisions.
    pub fn velocity_mut(history: &mut AgentHistory) -> &mut VelocityWindow {
        &mut history.velocity
    }

    /// The current mandate's allowed spend by period.
    pub fn spend(history: &AgentHistory) -> &SpendToDate {
        &history.spend
    }

    /// The current mandate's allowed spend by period, to rebuild it from stored decisions.
    pub fn spend_mut(history: &mut AgentHistory) -> &mut SpendToDate {
        &mut history.spend
    }
}

/// The identifiers of the server's own objects, and the base32 their bodies are written in.
pub mod id {
    use crate::id::AgentId;
    pub use crate::id::{EscrowId, RequestId, ReviewId, WebhookId, base32};
    use crate::names::AgentName;

    /// The id of the agent with this name.
    pub fn agent_id_for(name: &AgentName) -> AgentId {
        AgentId::for_name(name)
    }
}

/// What to do with a request given what is stored under its idempotency key.
pub mod idempotency {
    pub use crate::idempotency::*;
}

/// Compact JWS below `sign_token` and `verify_verdict`: a token signed from its payload
/// bytes, taken apart into its signature and rebuilt byte for byte.
pub mod jws {
    pub use crate::jws::{TokenKind, compact_token, sign_payload, token_signature, verify_es256};
}

/// Reading an authorization's body with its protocol members, evaluating a request that
/// presents a single-use credential, and a review's approval.
pub mod policy {
    use crate::policy::Evaluation;
    pub use crate::policy::{AuthorizationBody, SingleUse, evaluate_approval, evaluate_presenting};

    /// Whether a decision accepts (and so uses up) the single-use credential presented
    /// with its request: its verdict is `allow` or `review` and the credential was not
    /// accepted before. The owner stores the use with the decision, in one transaction.
    pub fn accepts(evaluation: &Evaluation, presented: Option<&SingleUse>) -> bool {
        evaluation.accepts(presented)
    }

    /// Whether a review should be opened: only when `review` is the returned verdict.
    pub fn opens_review(evaluation: &Evaluation) -> bool {
        evaluation.opens_review()
    }
}

/// The `YYYY-MM-DD` dates of mandate bodies, and what a mandate's limits need kept.
pub mod mandate {
    use crate::mandate::Limits;
    pub use crate::mandate::{format_date, parse_date};

    /// Whether a limit counts over the mandate's whole life (`total` or `count.total`):
    /// then deciding needs every allow since the mandate was created.
    pub fn counts_lifetime(limits: &Limits) -> bool {
        limits.counts_lifetime()
    }
}

/// The human-review state machine.
pub mod review {
    pub use crate::review::*;
}

/// The one timestamp format on the wire (RFC 3339 in UTC, whole seconds).
pub mod timefmt {
    pub use crate::timefmt::*;
}

/// The transparency log as its issuer keeps it and its auditor follows it: the tree's
/// right edge, proof plans and their verification, C2SP tiles, signed notes, checkpoint
/// signing, and the auditor's state.
pub mod tlog {
    pub use crate::tlog::{
        AuditError, AuditLeaf, AuditState, LogHash, LogKey, NodeId, NoteSignature, ProofError,
        ProofPlan, SignedNote, TILE_HEIGHT, TILE_WIDTH, TileId, TreeEdge, hashes_from_tiles,
        sign_checkpoint, tiles_of, verify_consistency, verify_inclusion,
    };
    use crate::tlog::{Checkpoint, CheckpointError, LogEntry, LogKeys};

    /// The checkpoint of the log `origin` at `size` leaves with root `root`; refused when
    /// the origin is empty or holds a control character (a newline among them).
    pub fn checkpoint(
        origin: impl Into<String>,
        size: u64,
        root: LogHash,
    ) -> Result<Checkpoint, CheckpointError> {
        Checkpoint::new(origin, size, root)
    }

    /// A checkpoint with one more extension line (non-empty, no control character).
    pub fn with_extension(
        checkpoint: Checkpoint,
        line: impl Into<String>,
    ) -> Result<Checkpoint, CheckpointError> {
        checkpoint.with_extension(line)
    }

    /// The hash of a leaf: SHA-256(0x00 || data).
    pub fn leaf_hash(data: &[u8]) -> LogHash {
        LogHash::leaf(data)
    }

    /// The hash of an interior node: SHA-256(0x01 || left || right).
    pub fn node_hash(left: &LogHash, right: &LogHash) -> LogHash {
        LogHash::node(left, right)
    }

    /// The root of the empty tree: SHA-256 of no bytes.
    pub fn empty_root() -> LogHash {
        LogHash::empty()
    }

    /// A checkpoint's tree root.
    pub fn root_of(checkpoint: &Checkpoint) -> &LogHash {
        checkpoint.root()
    }

    /// A verdict's entry in the log: its leaf `index`, the signed checkpoint's text and
    /// the inclusion proof (what a decision read carries as `log`).
    pub fn log_entry(index: u64, checkpoint: String, inclusion_proof: Vec<LogHash>) -> LogEntry {
        LogEntry::new(index, checkpoint, inclusion_proof)
    }

    /// A set of these log keys.
    pub fn log_keys(keys: Vec<LogKey>) -> LogKeys {
        LogKeys::new(keys)
    }

    /// The keys of a set.
    pub fn keys_of(keys: &LogKeys) -> &[LogKey] {
        keys.keys()
    }
}

/// What the server computes from x402 payment requirements: the verdict's claim, and what
/// in them disagrees with a request.
pub mod x402 {
    use crate::amount::Amount;
    use crate::names::{Currency, Recipient};
    use crate::x402::{Inconsistency, PaymentRequirements};

    /// The canonical JSON of the five bound members (`amount`, `asset`, `network`,
    /// `payTo`, `scheme`, sorted, no whitespace).
    pub fn canonical_json(requirements: &PaymentRequirements) -> String {
        requirements.canonical_json()
    }

    /// The `x402_payment` claim of a verdict for this payment: base64url (no padding)
    /// SHA-256 of [`canonical_json`].
    pub fn digest(requirements: &PaymentRequirements) -> String {
        requirements.digest()
    }

    pub use crate::x402::{ListedAssets, MAX_DECIMALS};

    /// The decimals of the requirements' asset where they are known: an ISO 4217
    /// currency's minor units, or those `listed` gives the token on the requirements'
    /// network (or on every network); `None` otherwise.
    pub fn known_decimals(
        listed: &ListedAssets,
        requirements: &PaymentRequirements,
    ) -> Option<u32> {
        listed.decimals(&requirements.network, &requirements.asset)
    }

    /// Whether the asset is fiat: an ISO 4217 code in one of x402's spellings, which the
    /// request's currency must then be.
    pub fn is_fiat(requirements: &PaymentRequirements) -> bool {
        requirements.is_fiat()
    }

    /// Whether the scheme is `upto`: the amount is a maximum.
    pub fn is_upto(requirements: &PaymentRequirements) -> bool {
        requirements.is_upto()
    }

    /// What in the payment disagrees with a request of `amount`, `currency` and
    /// `recipient` (with the asset's `decimals`, the atomic amount too).
    pub fn consistency(
        requirements: &PaymentRequirements,
        amount: Amount,
        currency: &Currency,
        recipient: &Recipient,
        decimals: Option<u32>,
    ) -> Vec<Inconsistency> {
        requirements.consistency(amount, currency, recipient, decimals)
    }
}

/// The request and response bodies of the HTTP API, and its error and list envelopes: the
/// server answers through them, the CLI reads through them.
pub mod wire {
    pub use crate::wire::*;
}
