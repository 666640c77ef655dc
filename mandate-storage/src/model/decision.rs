//! A stored decision: the signed claims plus what is stored besides (mode, reason,
//! supersedes, review, creation time), where its review stands when read, and its API
//! shape.

use mandate_core::{Bindings, DecisionId, Mode, VerdictClaims};
use mandate_protocol::tlog::LogHash;
use mandate_protocol::wire::{self, OpenedReview};
use mandate_protocol::{id::ReviewId, review::Review, review::ReviewStatus};
use serde::Serialize;
use serde_json::Value;
use std::borrow::Cow;
use time::OffsetDateTime;

use crate::clock::from_ms;

/// A decision as stored and returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The claims, exactly as signed.
    pub claims: VerdictClaims,
    /// Why, with the numbers involved.
    pub reason: Option<String>,
    /// The mode in force when it was made.
    pub mode: Mode,
    /// On a decision made by approving a review: the original decision.
    pub supersedes: Option<DecisionId>,
    /// The review this decision opened, if any.
    pub review: Option<ReviewId>,
    /// Creation time, unix ms.
    pub created_ms: i64,
    /// Whether it answers an agent's request (counts for velocity) or an approval.
    pub is_request: bool,
    /// On a decision read from the log that opened a review: where the review stands
    /// (`None` on a decision being made, whose answer carries the whole review).
    pub review_state: Option<ReviewState>,
    /// What its token is rebuilt from with the claims (see [`Decision::token`]); `None`
    /// on decisions stored before tokens were kept.
    pub signature: Option<TokenSignature>,
}

/// A decision's token as stored: the key id and the raw 64-byte ES256 signature. With the
/// claims (stored column by column) they give back the compact JWS that was answered,
/// byte for byte, at ~80 bytes a decision instead of the ~700 of the token itself
/// (docs/performance.md).
#[derive(Debug, Clone)]
pub struct TokenSignature {
    /// The `kid` of the key that signed it.
    pub kid: String,
    /// `r || s`.
    pub bytes: Vec<u8>,
    /// The decision log's leaf hash of the whole token (docs/audit.md), when known: made
    /// with the token, and stored with it on PostgreSQL, so that the log's worker of any
    /// process logs the decision without rebuilding its token.
    pub leaf: Option<LogHash>,
    /// The leaf's tag, when the signing process made one: HMAC-SHA256 of the leaf hash
    /// under a key derived from the signing key (the server's `signing::leaf_tags`). Stored
    /// with the row on PostgreSQL in place of the leaf hash, so that the log's worker of
    /// another process knows the token rebuilt from the row is the one answered.
    pub tag: Option<LogHash>,
}

/// Two signatures are the same when their key and bytes are: the leaf hash and its tag are
/// derived from the token, and a signature read back from the store may not carry them.
impl PartialEq for TokenSignature {
    fn eq(&self, other: &Self) -> bool {
        self.kid == other.kid && self.bytes == other.bytes
    }
}

impl Eq for TokenSignature {}

impl TokenSignature {
    /// The signature of `token`, made with the key `kid`; `None` if the token has no
    /// 64-byte signature (no signer here makes one).
    pub fn of(kid: &str, token: &str) -> Option<Self> {
        mandate_protocol::jws::token_signature(token).map(|raw| Self {
            kid: kid.to_owned(),
            bytes: raw.to_vec(),
            leaf: Some(mandate_protocol::tlog::leaf_hash(token.as_bytes())),
            tag: None,
        })
    }
}

/// A decision's bindings as both engines store them (the `bindings` column, migrations
/// sqlite 0012 / postgres 0006): their JSON, `{"x402_payment":"…"}` with only the claims
/// present, or `None` (NULL) when the verdict is bound to nothing.
pub fn bindings_column(claims: &VerdictClaims) -> Option<String> {
    let bindings = claims.bindings.clone();
    if bindings.is_empty() {
        return None;
    }
    serde_json::to_string(&bindings).ok()
}

/// `claims` with the bindings of a stored `bindings` column (see [`bindings_column`]);
/// `Err` for a column that does not read as bindings.
pub fn with_bindings_column(
    claims: VerdictClaims,
    column: Option<&str>,
) -> Result<VerdictClaims, serde_json::Error> {
    match column {
        Some(text) => Ok(claims.with_bindings(serde_json::from_str::<Bindings>(text)?)),
        None => Ok(claims),
    }
}

/// Where the review a stored decision opened stands, as read with the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewState {
    /// Pending, approved, denied or expired.
    pub status: ReviewStatus,
    /// When it expires (or expired) unresolved, unix ms.
    pub expires_ms: i64,
    /// Once approved: the fresh decision the approval made (its `resolution`).
    pub resolution: Option<DecisionId>,
    /// Once denied: the reason the person (or the withdrawing agent) gave, if any.
    pub reason: Option<String>,
    /// Whether the denial is the agent's withdrawal of its own review.
    pub withdrawn: bool,
    /// Once resolved (approved, denied or expired): when, unix ms.
    pub resolved_ms: Option<i64>,
}

/// The decision object's fields after the claims' (`mode` to `created_at`), in its order:
/// what the answer serializes after the signed claims' bytes it copies in
/// ([`Decision::answer_json`]). Borrowed from a [`wire::Decision`], the object's one
/// definition, and checked against it byte for byte by this module's tests.
#[derive(Serialize)]
struct DecisionTail<'v, 'a> {
    mode: Mode,
    reason: &'v Option<Cow<'a, str>>,
    supersedes: &'v Option<Cow<'a, DecisionId>>,
    review: &'v Option<OpenedReview<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    review_status: Option<ReviewStatus>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "mandate_protocol::timefmt::option"
    )]
    review_expires_at: Option<OffsetDateTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    review_resolution: &'v Option<Cow<'a, DecisionId>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    review_withdrawn: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    review_reason: &'v Option<Cow<'a, str>>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "mandate_protocol::timefmt::option"
    )]
    review_resolved_at: Option<OffsetDateTime>,
    #[serde(with = "mandate_protocol::timefmt")]
    created_at: OffsetDateTime,
}

impl<'v, 'a> DecisionTail<'v, 'a> {
    fn of(view: &'v wire::Decision<'a>) -> Self {
        DecisionTail {
            mode: view.mode,
            reason: &view.reason,
            supersedes: &view.supersedes,
            review: &view.review,
            review_status: view.review_status,
            review_expires_at: view.review_expires_at,
            review_resolution: &view.review_resolution,
            review_withdrawn: view.review_withdrawn,
            review_reason: &view.review_reason,
            review_resolved_at: view.review_resolved_at,
            created_at: view.created_at,
        }
    }
}

/// Whether JSON writes `text` between its quotes as it is: no quote, backslash or control
/// character. Written without early exit so that it compiles to a vector loop.
fn needs_no_escaping(text: &str) -> bool {
    text.bytes()
        .fold(true, |ok, b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'))
}

impl Decision {
    /// The answer's JSON, byte for byte what serializing [`Decision::answer`] gives.
    ///
    /// `signed_claims`, the claims' JSON exactly as signed (from the decision service's signing), holds
    /// every field from `iss` to `request` in the answer's order and form whenever the
    /// decision names its mandate (the token omits an absent one where the answer writes
    /// null), so it is copied in rather than serialized again; the fields after it
    /// (`mode` to `created_at`) are serialized on their own. Without it, or without a
    /// mandate, everything is serialized.
    ///
    /// The token (a compact JWS of ~1 KB: base64url and dots) is the answer's largest
    /// string and comes last, so it is appended as it is rather than passed through
    /// serde_json's escaping, which looks at every byte; the buffer is sized for the
    /// whole answer at once.
    pub fn answer_json(
        &self,
        token: &str,
        review: Option<&Review>,
        signed_claims: Option<&[u8]>,
    ) -> serde_json::Result<Vec<u8>> {
        let mut view = self.view();
        if let Some(review) = review {
            view.review = Some(OpenedReview::Review(Cow::Borrowed(review)));
        }
        let mut out = Vec::with_capacity(1536 + token.len());
        self.write_view(&mut out, &view, signed_claims)?;
        if needs_no_escaping(token) && out.pop() == Some(b'}') {
            out.extend_from_slice(b",\"verdict_token\":\"");
            out.extend_from_slice(token.as_bytes());
            out.extend_from_slice(b"\"}");
        } else {
            out.clear();
            view.verdict_token = Some(Some(Cow::Borrowed(token)));
            serde_json::to_writer(&mut out, &view)?;
        }
        Ok(out)
    }

    /// The decision object's JSON, byte for byte what serializing [`Decision::view`]
    /// gives; `signed_claims` as in [`Decision::answer_json`].
    pub fn view_json(&self, signed_claims: Option<&[u8]>) -> serde_json::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(1536);
        self.write_view(&mut out, &self.view(), signed_claims)?;
        Ok(out)
    }

    /// Writes `view` (of this decision) to `out`, copying the fields it shares with the
    /// signed claims from `signed_claims` when it can (see [`Decision::answer_json`]).
    fn write_view(
        &self,
        out: &mut Vec<u8>,
        view: &wire::Decision<'_>,
        signed_claims: Option<&[u8]>,
    ) -> serde_json::Result<()> {
        let shared = signed_claims
            .filter(|_| self.claims.mandate.is_some())
            .and_then(|json| json.strip_prefix(b"{")?.strip_suffix(b"}"));
        match shared {
            Some(fields) => {
                out.extend_from_slice(b"{\"id\":");
                serde_json::to_writer(&mut *out, &self.claims.jti)?;
                out.push(b',');
                out.extend_from_slice(fields);
                let start = out.len();
                serde_json::to_writer(&mut *out, &DecisionTail::of(view))?;
                // The tail's own braces: its opening one becomes the comma between.
                out[start] = b',';
            }
            None => serde_json::to_writer(&mut *out, view)?,
        }
        Ok(())
    }

    /// The decision object of the API, borrowed from this decision, ready to serialize:
    /// the review's id and state, no token.
    pub fn view(&self) -> wire::Decision<'_> {
        let c = &self.claims;
        let state = self.review_state.as_ref();
        wire::Decision {
            id: Cow::Borrowed(&c.jti),
            iss: Cow::Borrowed(&c.iss),
            jti: Cow::Borrowed(&c.jti),
            iat: c.iat,
            exp: c.exp,
            verdict: c.verdict,
            policy_verdict: c.policy_verdict,
            mandate: c.mandate.as_ref().map(Cow::Borrowed),
            policy_version: Cow::Borrowed(&c.policy_version),
            nonce: Cow::Borrowed(&c.nonce),
            request: Cow::Borrowed(&c.request),
            ap2_mandate: c.bindings.ap2_mandate.as_deref().map(Cow::Borrowed),
            ap2_transaction: c.bindings.ap2_transaction.as_deref().map(Cow::Borrowed),
            x402_payment: c.bindings.x402_payment.as_deref().map(Cow::Borrowed),
            acp_allowance: c.bindings.acp_allowance.as_deref().map(Cow::Borrowed),
            acp_checkout_session: c
                .bindings
                .acp_checkout_session
                .as_deref()
                .map(Cow::Borrowed),
            mode: self.mode,
            reason: self.reason.as_deref().map(Cow::Borrowed),
            supersedes: self.supersedes.as_ref().map(Cow::Borrowed),
            review: self
                .review
                .as_ref()
                .map(|id| OpenedReview::Id(Cow::Borrowed(id))),
            review_status: state.map(|r| r.status),
            review_expires_at: state.map(|r| from_ms(r.expires_ms)),
            review_resolution: state.and_then(|r| r.resolution.as_ref()).map(Cow::Borrowed),
            review_withdrawn: state.is_some_and(|r| r.withdrawn),
            review_reason: state.and_then(|r| r.reason.as_deref()).map(Cow::Borrowed),
            review_resolved_at: state.and_then(|r| r.resolved_ms).map(from_ms),
            created_at: from_ms(self.created_ms),
            log: None,
            verdict_token: None,
        }
    }

    /// The answer to the request (or approval) that made the decision, borrowed: with its
    /// token and the review it opened.
    pub fn answer<'a>(&'a self, token: &'a str, review: Option<&'a Review>) -> wire::Decision<'a> {
        let mut view = self.view();
        view.verdict_token = Some(Some(Cow::Borrowed(token)));
        if let Some(review) = review {
            view.review = Some(OpenedReview::Review(Cow::Borrowed(review)));
        }
        view
    }

    /// The decision object of the API as read from the log (a JSON value): with its
    /// `verdict_token`, rebuilt, or `null` for a decision stored before tokens were kept.
    pub fn to_json(&self) -> Value {
        let mut view = self.view();
        view.verdict_token = Some(self.token().map(Cow::Owned));
        serde_json::to_value(view).unwrap_or(Value::Null)
    }

    /// The token answered when this decision was made, rebuilt byte for byte from its
    /// claims and [`Decision::signature`]; `None` without a stored signature.
    pub fn token(&self) -> Option<String> {
        let signature = self.signature.as_ref()?;
        let payload = serde_json::to_vec(&self.claims).ok()?;
        mandate_protocol::jws::compact_token(&signature.kid, &payload, &signature.bytes).ok()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use mandate_core::{
        AgentId, Amount, AuthorizationRequest, Category, Currency, MandateId, Nonce, Recipient,
        Verdict,
    };
    use time::macros::datetime;

    use super::*;

    fn decision() -> Decision {
        Decision {
            claims: VerdictClaims {
                bindings: mandate_core::Bindings::default(),
                iss: "https://verdicts.example".into(),
                jti: DecisionId::parse("dec_one").unwrap(),
                iat: 1_795_000_000,
                exp: 1_795_000_300,
                verdict: Verdict::Review,
                policy_verdict: Verdict::Review,
                mandate: Some(MandateId::parse("mnd_one").unwrap()),
                policy_version: "pol_2026-11-22.1".into(),
                nonce: Nonce::parse("n_one").unwrap(),
                request: AuthorizationRequest {
                    agent: AgentId::parse("agt_buyer").unwrap(),
                    amount: Amount::parse("120.00").unwrap(),
                    currency: Currency::parse("USD").unwrap(),
                    recipient: Recipient::parse("vendor:acme").unwrap(),
                    category: Category::parse("software").unwrap(),
                },
            },
            reason: Some("amount \"120.00\" is above review_above 100".into()),
            mode: Mode::Enforce,
            supersedes: None,
            review: Some(ReviewId::parse("rev_one").unwrap()),
            created_ms: 1_795_000_000_123,
            is_request: true,
            review_state: None,
            signature: None,
        }
    }

    /// A decision bound to an AP2 mandate, its closed mandate and an x402 payment.
    fn bound() -> Decision {
        let mut d = decision();
        d.claims = d.claims.with_bindings(mandate_core::Bindings {
            ap2_mandate: Some("open-digest".into()),
            ap2_transaction: Some("tx-1".into()),
            x402_payment: Some("x402-digest".into()),
            ..Default::default()
        });
        d
    }

    /// The spliced answer is exactly serde's, for a real token, with or without the review
    /// object, with or without the signed claims' JSON, with or without a mandate, a
    /// reason or a supersedes, and for strings that do need escaping (which take serde's
    /// path).
    #[test]
    fn the_answer_is_byte_for_byte_what_serde_writes() {
        let d = decision();
        let mut no_mandate = decision();
        no_mandate.claims.mandate = None;
        no_mandate.claims.verdict = Verdict::DenyNoMandate;
        let mut escaped = decision();
        escaped.claims.iss = "https://v.example/\"q\"\u{1}/caf\u{e9}".into();
        escaped.reason = None;
        escaped.supersedes = Some(DecisionId::parse("dec_before").unwrap());
        escaped.review = None;
        let mut read = decision();
        read.review_state = Some(ReviewState {
            status: ReviewStatus::Pending,
            expires_ms: 1_795_086_400_123,
            resolution: None,
            reason: None,
            withdrawn: false,
            resolved_ms: None,
        });
        let mut bound_no_mandate = bound();
        bound_no_mandate.claims.mandate = None;
        let decisions = [
            decision(),
            no_mandate,
            escaped,
            read,
            bound(),
            bound_no_mandate,
        ];
        let review = Review::open(
            ReviewId::parse("rev_one").unwrap(),
            d.claims.jti.clone(),
            datetime!(2026-11-22 12:00 UTC),
        );
        let signer = mandate_core::P256Signer::from_secret_bytes("k1", &[7u8; 32]).unwrap();
        let token = mandate_core::sign_token(&signer, &d.claims).unwrap();
        assert!(needs_no_escaping(&token));
        for token in [
            token.as_str(),
            "",
            "a\"b",
            "back\\slash",
            "line\nbreak",
            "caf\u{e9}",
        ] {
            for review in [None, Some(&review)] {
                for d in &decisions {
                    let json = serde_json::to_vec(&d.claims).unwrap();
                    let serde = serde_json::to_vec(&d.answer(token, review)).unwrap();
                    for signed in [None, Some(json.as_slice())] {
                        let spliced = d.answer_json(token, review, signed).unwrap();
                        assert_eq!(
                            String::from_utf8(spliced).unwrap(),
                            String::from_utf8(serde.clone()).unwrap()
                        );
                        // The stored shape (the review's id, no token), as events carry it.
                        assert_eq!(
                            String::from_utf8(d.view_json(signed).unwrap()).unwrap(),
                            serde_json::to_string(&d.view()).unwrap()
                        );
                    }
                }
            }
        }
    }

    /// The answer's spliced bytes and the stored object read as their wire types
    /// (`mandate_protocol::wire`) and write back byte for byte: the type and this hand-made
    /// encoding can't drift apart.
    #[test]
    fn the_answer_and_the_object_round_trip_through_the_wire_types() {
        use mandate_protocol::wire;
        let d = decision();
        let mut no_mandate = decision();
        no_mandate.claims.mandate = None;
        no_mandate.claims.verdict = Verdict::DenyNoMandate;
        let mut approval = decision();
        approval.reason = None;
        approval.review = None;
        approval.supersedes = Some(DecisionId::parse("dec_before").unwrap());
        let mut read = decision();
        read.review_state = Some(ReviewState {
            status: ReviewStatus::Denied,
            expires_ms: 1_795_086_400_123,
            resolution: None,
            reason: Some("too \"much\" for a taxi".into()),
            withdrawn: false,
            resolved_ms: Some(1_795_000_060_000),
        });
        let review = Review::open(
            ReviewId::parse("rev_one").unwrap(),
            d.claims.jti.clone(),
            datetime!(2026-11-22 12:00 UTC),
        );
        let signer = mandate_core::P256Signer::from_secret_bytes("k1", &[7u8; 32]).unwrap();
        let token = mandate_core::sign_token(&signer, &d.claims).unwrap();
        // A decision read from the log with its review's state: the object only (an answer
        // is never made from a read).
        let text = serde_json::to_string(&read.to_json()).unwrap();
        let typed: wire::Decision = serde_json::from_str(&text).unwrap();
        assert_eq!(typed.review_status, Some(ReviewStatus::Denied));
        assert_eq!(
            typed.review_reason.as_deref(),
            Some("too \"much\" for a taxi")
        );
        assert_eq!(
            typed.review_resolved_at,
            Some(datetime!(2026-11-18 11:07:40 UTC))
        );
        let again = serde_json::to_string(&wire::to_value(&typed).unwrap()).unwrap();
        assert_eq!(again, text);
        let text = serde_json::to_string(&bound().to_json()).unwrap();
        let typed: wire::Decision = serde_json::from_str(&text).unwrap();
        assert_eq!(typed.x402_payment.as_deref(), Some("x402-digest"));
        for d in [decision(), no_mandate, approval, bound()] {
            let json = serde_json::to_vec(&d.claims).unwrap();
            for review in [None, Some(&review)] {
                for signed in [None, Some(json.as_slice())] {
                    let bytes = d.answer_json(&token, review, signed).unwrap();
                    let typed: wire::Decision = serde_json::from_slice(&bytes).unwrap();
                    assert_eq!(typed.token(), Some(token.as_str()));
                    assert_eq!(typed.opened_review(), review);
                    assert_eq!(
                        String::from_utf8(serde_json::to_vec(&typed).unwrap()).unwrap(),
                        String::from_utf8(bytes).unwrap()
                    );
                }
            }
            let text = serde_json::to_string(&d.to_json()).unwrap();
            let typed: wire::Decision = serde_json::from_str(&text).unwrap();
            let again = serde_json::to_string(&wire::to_value(&typed).unwrap()).unwrap();
            assert_eq!(again, text);
        }
    }

    #[test]
    fn only_quotes_backslashes_and_control_characters_need_escaping() {
        assert!(needs_no_escaping("eyJhbGciOiJFUzI1NiJ9.e30.sig-_/+é"));
        for bad in ["\"", "\\", "\n", "\u{1f}", "ok\u{0}"] {
            assert!(!needs_no_escaping(bad), "{bad:?}");
        }
    }
}
