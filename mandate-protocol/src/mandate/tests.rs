//! Tests of `mandate`: reading drafts field by field, and a mandate's status at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use serde_json::{Value, json};
use time::macros::datetime;

fn body() -> Value {
    // Parsed from text: the json! macro would read 100.10 as an f64 literal.
    serde_json::from_str(
        r#"{
                "agent": "agt_buyer",
                "principal": "role:cfo",
                "limits": {"per_transaction": 100.10, "per_month": 1000, "currency": "USD"},
                "categories": ["software", "travel"],
                "review_above": 50,
                "expires": "2026-12-31",
                "escrow": {"required_above": 500}
            }"#,
    )
    .unwrap()
}

fn error_for(edit: impl FnOnce(&mut Value)) -> String {
    let mut value = body();
    edit(&mut value);
    MandateDraft::from_json(&value).unwrap_err().to_string()
}

#[test]
fn a_full_body_parses_exactly() {
    let draft = MandateDraft::from_json(&body()).unwrap();
    assert_eq!(draft.limits.per_transaction.to_string(), "100.10");
    assert_eq!(draft.categories.len(), 2);
    assert_eq!(format_date(draft.expires), "2026-12-31");
    assert_eq!(draft.escrow.unwrap().required_above.to_string(), "500");
}

#[test]
fn errors_name_the_field() {
    assert_eq!(
        error_for(|v| {
            v["limits"].as_object_mut().unwrap().remove("currency");
        }),
        "limits.currency is required"
    );
    assert_eq!(error_for(|v| v["foo"] = json!(1)), "unknown field foo");
    assert_eq!(
        error_for(|v| v["limits"]["daily"] = json!(1)),
        "unknown field limits.daily"
    );
    assert_eq!(
        error_for(|v| v["id"] = json!("mnd_x")),
        "id is read-only and cannot be set"
    );
    assert_eq!(
        error_for(|v| v["status"] = json!("active")),
        "status is read-only and cannot be set"
    );
    assert_eq!(
        error_for(|v| v["categories"] = json!([])),
        "categories must not be empty"
    );
    assert_eq!(
        error_for(|v| v["limits"]["per_transaction"] = json!("100")),
        "limits.per_transaction must be a plain decimal number such as 12.50"
    );
    assert_eq!(
        error_for(|v| v["limits"]["per_transaction"] = json!(-1)),
        "limits.per_transaction must be >= 0"
    );
    assert_eq!(
        error_for(|v| v["limits"]["currency"] = json!("usd")),
        "limits.currency must be three upper-case letters, for example USD"
    );
    assert_eq!(
        error_for(|v| v["expires"] = json!("2026-13-01")),
        "expires must be a date, YYYY-MM-DD"
    );
    assert_eq!(
        error_for(|v| v["agent"] = json!("buyer")),
        "agent must be an agent id, agt_<name>"
    );
    assert_eq!(
        error_for(|v| {
            v.as_object_mut().unwrap().remove("expires");
        }),
        "expires is required"
    );
    assert_eq!(
        error_for(|v| v["escrow"] = json!({"required_above": 1, "x": 2})),
        "unknown field escrow.x"
    );
    assert_eq!(
        MandateDraft::from_json(&json!([])).unwrap_err(),
        FieldError::NotAnObject
    );
}

#[test]
fn a_past_expiry_is_refused() {
    let draft = MandateDraft::from_json(&body()).unwrap();
    assert!(
        draft
            .check_not_expired_at(datetime!(2026-12-31 23:59 UTC))
            .is_ok()
    );
    assert_eq!(
        draft
            .check_not_expired_at(datetime!(2027-01-01 0:00 UTC))
            .unwrap_err()
            .to_string(),
        "expires must be today or later (2027-01-01 UTC)"
    );
}

#[test]
fn optional_fields_may_be_absent() {
    let draft = MandateDraft::from_json(&json!({
        "agent": "agt_a",
        "limits": {"per_transaction": 5, "currency": "EUR"},
        "categories": ["x", "x"],
        "expires": "2027-01-01"
    }))
    .unwrap();
    assert_eq!(draft.categories.len(), 1);
    assert!(draft.principal.is_none() && draft.review_above.is_none());
}

#[test]
fn expiry_is_inclusive_of_the_last_day_utc() {
    let mandate = Mandate {
        id: MandateId::from_random([0; 16]),
        terms: MandateDraft::from_json(&body()).unwrap(),
        status: MandateStatus::Active,
        created_at: datetime!(2026-11-01 0:00 UTC),
    };
    assert!(!mandate.is_expired_at(datetime!(2026-12-31 23:59:59 UTC)));
    assert!(mandate.is_expired_at(datetime!(2027-01-01 0:00 UTC)));
    assert_eq!(
        mandate.status_at(datetime!(2027-01-01 0:00 UTC)),
        MandateStatus::Expired
    );
    let json = crate::wire::mandate_json(&mandate, datetime!(2026-12-01 0:00 UTC));
    assert_eq!(json["status"], "active");
    assert_eq!(json["limits"]["per_transaction"].to_string(), "100.10");
    assert_eq!(json["created_at"], "2026-11-01T00:00:00Z");
}
