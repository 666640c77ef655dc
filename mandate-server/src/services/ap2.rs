//! AP2 on the API (issue #36; docs/protocols.md): the `ap2` member of `POST /v1/mandates`
//! (an open payment mandate imported in place of the plain terms), the `source` of a
//! mandate read, and the `ap2` member of `POST /v1/authorizations` (the agent's closed
//! payment mandate for this payment). What a mandate means is `mandate_protocol::ap2`'s; this
//! module loads what it needs, compares, and names every refusal for the caller.

use mandate_core::{
    AgentId, AuthorizationRequest, ClosedMandate, Jwk, JwkSet, Mandate, MandateId, OpenMandate,
    verify_closed_mandate, verify_open_mandate,
};
use mandate_protocol::{ap2::read_stored_open_mandate, wire::MandateSource, wire::SpentBefore};
use serde_json::{Map, Value};
use time::OffsetDateTime;

use super::{EncodingError, wire_json};
use crate::decision::service::Credential;
use crate::model::Caller;
use crate::storage::ap2::{Ap2Source, NewImport};
use crate::storage::{StorageError, Store};

/// Why an `ap2` member was refused (each message says what to send instead), or could not
/// be checked.
#[derive(Debug, thiserror::Error)]
pub enum Ap2Error {
    /// `ap2` is not an object holding exactly `member`, a non-empty string.
    #[error("ap2 must be an object with one member, {member}: the AP2 SD-JWT as a string")]
    Shape {
        /// The member expected.
        member: &'static str,
    },
    /// `ap2` holds a member other than the one expected.
    #[error("ap2.{other} is not a member of ap2; only ap2.{member} is")]
    UnknownMember {
        /// The member given.
        other: String,
        /// The member expected.
        member: &'static str,
    },
    /// A member the open mandate sets was given beside it.
    #[error(
        "{0} is set by the AP2 open mandate in ap2.open_mandate; remove {0}, or send plain terms without ap2"
    )]
    SetByOpenMandate(&'static str),
    /// The organization trusts no issuer key to verify an open mandate against.
    #[error(
        "ap2.open_mandate: the organization trusts no AP2 issuer key; an operator adds the issuer's key with `mandate-server ap2-issuer add`"
    )]
    NoTrustedIssuer,
    /// The open mandate does not verify, or holds what cannot be enforced.
    #[error("ap2.open_mandate: {0}")]
    OpenMandate(#[source] mandate_core::Ap2Error),
    /// The closed mandate does not verify against the agent's open mandate.
    #[error("ap2.closed_mandate: {0}")]
    ClosedMandate(#[source] mandate_core::Ap2Error),
    /// The agent's current mandate was not imported from an open mandate.
    #[error(
        "ap2.closed_mandate: agent {agent}'s mandate {mandate} was not imported from an AP2 open mandate; a closed mandate is presented only under one (POST /v1/mandates with ap2.open_mandate), otherwise leave out ap2"
    )]
    NotImported {
        /// The agent.
        agent: AgentId,
        /// Its current mandate.
        mandate: MandateId,
    },
    /// The open mandate is in force in another organization or environment: one consent
    /// is spent in one place (docs/protocols.md). Where is not said: that is another
    /// tenant's business.
    #[error(
        "ap2.open_mandate: this open mandate is already in force elsewhere (another organization or environment); an open mandate is in force in one organization and environment only, so that each of its closed mandates is used once: import it where it was first imported, or ask the issuer for a mandate of your own"
    )]
    InForceElsewhere,
    /// The agent has no mandate.
    #[error(
        "ap2.closed_mandate: agent {0} has no mandate; import its AP2 open mandate first (POST /v1/mandates with ap2.open_mandate)"
    )]
    NoMandate(AgentId),
    /// The closed mandate pays another amount than the request asks.
    #[error(
        "ap2.closed_mandate pays {pays} and the request asks amount {asks}: a closed mandate authorizes exactly the payment it names; send its amount"
    )]
    Amount {
        /// The closed mandate's amount.
        pays: String,
        /// The request's.
        asks: String,
    },
    /// The closed mandate pays in another currency than the request's.
    #[error(
        "ap2.closed_mandate pays in {pays} and the request's currency is {asks}; send its currency"
    )]
    Currency {
        /// The closed mandate's currency.
        pays: String,
        /// The request's.
        asks: String,
    },
    /// The closed mandate pays another payee than the request's recipient.
    #[error(
        "ap2.closed_mandate pays {pays} and the request's recipient is {asks}; send its payee as the recipient, letter for letter"
    )]
    Payee {
        /// The closed mandate's payee.
        pays: String,
        /// The request's recipient.
        asks: String,
    },
    /// A stored AP2 issuer key no longer parses: the server's fault.
    #[error("stored AP2 issuer key {kid}: {problem}")]
    StoredIssuerKey {
        /// The key's id.
        kid: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The store failed (or holds an open mandate that no longer reads).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A mandate's source could not be encoded.
    #[error(transparent)]
    Encoding(#[from] EncodingError),
}

/// The members of a mandate body that an imported open mandate sets: giving one beside
/// `ap2` is refused rather than one of the two silently winning.
pub const SET_BY_OPEN_MANDATE: [&str; 4] = ["limits", "recipients", "expires", "not_before"];

/// The only member of `ap2` in `POST /v1/mandates`.
const OPEN_MEMBER: &str = "open_mandate";
/// The only member of `ap2` in `POST /v1/authorizations`.
const CLOSED_MEMBER: &str = "closed_mandate";

/// The SD-JWT text of the body's `ap2` member, which must be an object holding exactly
/// `member`, a non-empty string; `None` when the body has no `ap2`.
fn ap2_member(
    body: &mut Map<String, Value>,
    member: &'static str,
) -> Result<Option<String>, Ap2Error> {
    match body.remove("ap2") {
        Some(ap2) => member_text(ap2, member).map(Some),
        None => Ok(None),
    }
}

/// The SD-JWT text of an `ap2` member taken from a body: an object holding exactly
/// `member`, a non-empty string.
fn member_text(ap2: Value, member: &'static str) -> Result<String, Ap2Error> {
    let bad = || Ap2Error::Shape { member };
    let Value::Object(mut ap2) = ap2 else {
        return Err(bad());
    };
    let text = match ap2.remove(member) {
        // Non-empty, as openapi.yaml declares (`minLength: 1`); a string of spaces is no
        // SD-JWT, and verifying it says so under the member's name.
        Some(Value::String(text)) if !text.is_empty() => text,
        _ => return Err(bad()),
    };
    if let Some(other) = ap2.keys().next() {
        return Err(Ap2Error::UnknownMember {
            other: other.clone(),
            member,
        });
    }
    Ok(text)
}

/// The organization's trusted AP2 issuer keys as a JWK Set (a stored key that no longer
/// parses is the server's fault, never the caller's).
async fn trusted_issuers(store: &dyn Store, caller: &Caller) -> Result<JwkSet, Ap2Error> {
    let stored = store.ap2_issuers(&caller.org_id).await?;
    if stored.is_empty() {
        return Err(Ap2Error::NoTrustedIssuer);
    }
    let mut keys = Vec::with_capacity(stored.len());
    for issuer in stored {
        let unreadable = |problem: String| Ap2Error::StoredIssuerKey {
            kid: issuer.kid.clone(),
            problem,
        };
        let value: Value =
            serde_json::from_str(&issuer.jwk).map_err(|e| unreadable(e.to_string()))?;
        keys.push(Jwk::from_value(&value).map_err(|e| unreadable(e.to_string()))?);
    }
    Ok(JwkSet { keys })
}

/// For a `POST /v1/mandates` body with `ap2`: the open mandate verified against the
/// organization's trusted issuer keys at `now`, and the body made into plain terms (the
/// open mandate's terms with what the caller gave beside it: `agent`, `categories`, and
/// optionally `principal`, `review_above`, `escrow`), with the source to store. `None`
/// for a body without `ap2` (plain terms).
pub async fn import(
    store: &dyn Store,
    caller: &Caller,
    body: &Value,
    now: OffsetDateTime,
) -> Result<Option<(Value, Imported)>, Ap2Error> {
    let Some(object) = body.as_object() else {
        return Ok(None);
    };
    if !object.contains_key("ap2") {
        return Ok(None);
    }
    let mut terms = object.clone();
    let Some(sd_jwt) = ap2_member(&mut terms, OPEN_MEMBER)? else {
        return Ok(None);
    };
    if let Some(given) = SET_BY_OPEN_MANDATE.iter().find(|m| terms.contains_key(**m)) {
        return Err(Ap2Error::SetByOpenMandate(given));
    }
    let issuers = trusted_issuers(store, caller).await?;
    let open = verify_open_mandate(&sd_jwt, &issuers, now).map_err(Ap2Error::OpenMandate)?;
    terms.extend(open.terms());
    let imported = Imported {
        source: Ap2Source {
            open_mandate: mandate_protocol::ap2::sd_jwt(&open).to_owned(),
            digest: open.digest().to_owned(),
            spent_before: None,
        },
        consent_key: mandate_protocol::ap2::consent_key(&open).to_owned(),
    };
    Ok(Some((Value::Object(terms), imported)))
}

/// An open mandate verified for an import: what the mandate keeps of it, and the consent
/// key that binds it to one organization and environment (`storage::ap2::Ap2Import`).
#[derive(Debug, Clone)]
pub struct Imported {
    /// Stored with the mandate.
    pub source: Ap2Source,
    /// `OpenMandate::consent_key`.
    pub consent_key: String,
}

impl Imported {
    /// The import of `mandate`, made from this open mandate, for the store.
    pub fn of(self, mandate: &Mandate) -> NewImport {
        NewImport {
            mandate: mandate.clone(),
            source: self.source,
            consent_key: self.consent_key,
            locked: Vec::new(),
            consent_of,
        }
    }
}

/// The consent key of an open mandate stored with a mandate (verified when it was
/// imported, read again for its structure only); `None` if it no longer reads.
fn consent_of(sd_jwt: &str) -> Option<String> {
    read_stored_open_mandate(sd_jwt)
        .ok()
        .map(|open| mandate_protocol::ap2::consent_key(&open).to_owned())
}

/// The `source` member of a mandate imported from AP2: the SD-JWT, its digest and the
/// values bound into the verdicts rather than enforced as terms.
pub fn source_of(source: &Ap2Source) -> MandateSource {
    // Verified at import: read again for the bound values (structure only), and for the
    // digest of the issuer JWT as imported (a mandate imported before the digest was of
    // the exact bytes has a low-S digest stored).
    let open = read_stored_open_mandate(&source.open_mandate).ok();
    MandateSource {
        allowed_payment_instruments: open
            .as_ref()
            .and_then(|o| o.allowed_payment_instruments().map(<[Value]>::to_vec)),
        allowed_pisps: open
            .as_ref()
            .and_then(|o| o.allowed_pisps().map(<[Value]>::to_vec)),
        digest: open
            .as_ref()
            .map_or_else(|| source.digest.clone(), |o| o.digest().to_owned()),
        open_mandate: source.open_mandate.clone(),
        payment_reference: open
            .as_ref()
            .and_then(|o| o.payment_reference().map(str::to_owned)),
        spent_before: source.spent_before.map(|spent| SpentBefore {
            count: spent.lifetime.count(),
            total: spent.lifetime.total(),
        }),
        kind: "ap2".to_owned(),
    }
}

/// [`source_of`] as the JSON value a mandate's answer carries.
pub fn source_json(source: &Ap2Source) -> Result<Value, EncodingError> {
    wire_json(&source_of(source))
}

/// Adds `source` to those of the mandates (`(id, its JSON)`) imported from AP2.
pub async fn add_sources(
    store: &dyn Store,
    caller: &Caller,
    mandates: &mut [(MandateId, &mut Value)],
) -> Result<(), Ap2Error> {
    let ids: Vec<MandateId> = mandates.iter().map(|(id, _)| id.clone()).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let sources = store.ap2_sources(&caller.org_id, caller.env, &ids).await?;
    for (id, source) in sources {
        if let Some((_, value)) = mandates.iter_mut().find(|(m, _)| *m == id)
            && let Value::Object(object) = &mut **value
        {
            object.insert("source".into(), source_json(&source)?);
        }
    }
    Ok(())
}

/// A closed mandate verified for a request: what the decision carries.
#[derive(Debug)]
pub struct Presented {
    /// The single-use credential ([`ClosedMandate::credential_id`]) and the mandate it
    /// was checked against (the decision is made only under that one).
    pub credential: Credential,
    /// The open mandate's digest: the verdict's `ap2_mandate`.
    pub open_digest: String,
    /// The closed mandate's transaction id: the verdict's `ap2_transaction`.
    pub transaction_id: String,
}

/// The closed mandate's presentation in the `ap2` member taken from a
/// `POST /v1/authorizations` body (`{"closed_mandate": "<SD-JWT>"}`), or the 400 naming
/// what is wrong with its shape.
pub fn presentation(ap2: Value) -> Result<String, Ap2Error> {
    member_text(ap2, CLOSED_MEMBER)
}

/// Verifies `presentation` (the agent's AP2 closed payment mandate) against the open
/// mandate the agent's current mandate was imported from, and checks that it pays exactly
/// what `request` asks: amount, currency and recipient (each mismatch named).
pub async fn closed_mandate(
    store: &dyn Store,
    caller: &Caller,
    agent: &AgentId,
    request: &AuthorizationRequest,
    presentation: &str,
    now: OffsetDateTime,
) -> Result<Presented, Ap2Error> {
    let current = store
        .current_ap2_source(&caller.org_id, caller.env, agent)
        .await?;
    let (mandate_id, source) = match current {
        Some((id, Some(source))) => (id, source),
        Some((mandate, None)) => {
            return Err(Ap2Error::NotImported {
                agent: agent.clone(),
                mandate,
            });
        }
        None => return Err(Ap2Error::NoMandate(agent.clone())),
    };
    let open: OpenMandate = read_stored_open_mandate(&source.open_mandate)
        .map_err(|e| StorageError::Corrupt(format!("stored AP2 open mandate: {e}")))?;
    let closed: ClosedMandate =
        verify_closed_mandate(presentation, &open, now).map_err(Ap2Error::ClosedMandate)?;
    if closed.amount != request.amount.value() {
        return Err(Ap2Error::Amount {
            pays: closed.amount.to_string(),
            asks: request.amount.to_string(),
        });
    }
    if closed.currency != request.currency {
        return Err(Ap2Error::Currency {
            pays: closed.currency.to_string(),
            asks: request.currency.to_string(),
        });
    }
    // Exactly, as AP2's evaluator compares payee ids.
    if closed.payee != request.recipient.as_str() {
        return Err(Ap2Error::Payee {
            pays: closed.payee.to_string(),
            asks: request.recipient.to_string(),
        });
    }
    Ok(Presented {
        credential: Credential {
            id: mandate_protocol::ap2::credential_id(&closed),
            mandate: mandate_id,
        },
        open_digest: open.digest().to_owned(),
        transaction_id: closed.transaction_id,
    })
}
