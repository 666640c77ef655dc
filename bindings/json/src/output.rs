//! The answer as JSON: the claims with the amount as a decimal string (a JavaScript or
//! Python reader would make a JSON number a float), the key and the unchecked bindings.

use mandate_core::{Bindings, VerdictClaims, VerifiedVerdict};
use serde_json::{Map, Value, json};

/// `{"claims", "kid", "environment", "unchecked"}` of a verified verdict.
pub(crate) fn verified(verified: &VerifiedVerdict) -> Value {
    json!({
        "claims": claims(&verified.claims),
        "kid": verified.kid,
        "environment": verified.environment.as_str(),
        "unchecked": bindings(&verified.unchecked),
    })
}

/// The claims as signed, but for `request.amount`, which is its exact decimal text.
pub(crate) fn claims(claims: &VerdictClaims) -> Value {
    let request = &claims.request;
    let mut out = json!({
        "iss": claims.iss,
        "jti": claims.jti.as_str(),
        "iat": claims.iat,
        "exp": claims.exp,
        "verdict": claims.verdict.as_str(),
        "policy_verdict": claims.policy_verdict.as_str(),
        "policy_version": claims.policy_version,
        "nonce": claims.nonce.as_str(),
        "request": {
            "agent": request.agent.as_str(),
            "amount": request.amount.to_string(),
            "currency": request.currency.as_str(),
            "recipient": request.recipient.as_str(),
            "category": request.category.as_str(),
        },
    });
    if let (Some(mandate), Value::Object(map)) = (&claims.mandate, &mut out) {
        map.insert("mandate".into(), mandate.as_str().into());
    }
    if let (Value::Object(map), Value::Object(bound)) = (&mut out, bindings(&claims.bindings)) {
        map.extend(bound);
    }
    out
}

/// The bindings present, each under its claim's name.
fn bindings(bindings: &Bindings) -> Value {
    let mut map = Map::new();
    let present = [
        ("ap2_mandate", &bindings.ap2_mandate),
        ("ap2_transaction", &bindings.ap2_transaction),
        ("x402_payment", &bindings.x402_payment),
        ("acp_allowance", &bindings.acp_allowance),
        ("acp_checkout_session", &bindings.acp_checkout_session),
    ];
    for (name, value) in present {
        if let Some(value) = value {
            map.insert(name.to_owned(), value.clone().into());
        }
    }
    Value::Object(map)
}
