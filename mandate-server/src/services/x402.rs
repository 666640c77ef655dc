//! The `x402` member of `POST /v1/authorizations`: the x402 payment a request is for, read
//! and checked against the request, bound to the verdict as its `x402_payment` claim.

use mandate_core::{AuthorizationRequest, FieldError, Inconsistency, PaymentRequirements};
use mandate_protocol::field::invalid;
use mandate_protocol::x402::{ListedAssets, consistency, digest, known_decimals};
use serde_json::Value;

/// The `x402_payment` claim for the `x402` member taken from a request's body (`None` for
/// a null one), or the 400 naming what in it is malformed or not the request's payment.
///
/// The member is an x402 v2 PaymentRequirements, or a PaymentPayload whose `accepted`
/// requirements are read; the claim is given once it is consistent with the request
/// (recipient `vendor:<payTo>`, a fiat asset the currency, and, where the asset's decimals
/// are known, an ISO 4217 currency's minor units or those the operator lists in `listed`,
/// the atomic amount the request's amount: for `upto`, the maximum, which is what is
/// decided; elsewhere the verifier, who knows its asset, compares it: docs/protocols.md).
pub fn payment(
    x402: &Value,
    request: &AuthorizationRequest,
    listed: &ListedAssets,
) -> Result<Option<String>, FieldError> {
    if x402.is_null() {
        return Ok(None);
    }
    let payment = PaymentRequirements::from_json(x402, "x402")?;
    let refused = consistency(
        &payment,
        request.amount,
        &request.currency,
        &request.recipient,
        known_decimals(listed, &payment),
    );
    if let Some(first) = refused.first() {
        return Err(inconsistent(x402, first));
    }
    Ok(Some(digest(&payment)))
}

/// The 400 for an x402 payment that is not the request's, naming the x402 member.
fn inconsistent(x402: &Value, problem: &Inconsistency) -> FieldError {
    let base = if x402.get("accepted").is_some() {
        "x402.accepted"
    } else {
        "x402"
    };
    let member = match problem {
        Inconsistency::PayTo { .. } => "payTo",
        Inconsistency::Asset { .. } | Inconsistency::Spelling { .. } => "asset",
        _ => "amount",
    };
    invalid(
        &format!("{base}.{member}"),
        format!("does not match the request: {problem}"),
    )
}
