//! What an embedder stores, it reads back the same: `MandateDraft`, `Mandate` and
//! `AgentHistory` survive a serde (JSON) round trip, the stored draft is the API's mandate
//! body (so `from_json` reads it to the same draft), and a history read back decides the
//! next request as the original would. Formats: docs/embedding.md.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use mandate_core::{AgentHistory, Amount, Mandate, MandateDraft, MandateId, MandateStatus};
use mandate_protocol::history::VELOCITY_LIMIT;
use proptest::prelude::*;
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

fn amount_text() -> impl Strategy<Value = String> {
    (1u64..100_000_000, 0u32..3).prop_map(|(units, scale)| match scale {
        0 => units.to_string(),
        _ => format!(
            "{}.{:0width$}",
            units / 100,
            units % 100,
            width = scale as usize
        )
        .trim_end_matches('.')
        .to_owned(),
    })
}

/// A mandate body the API accepts, with every optional part present or not.
fn body() -> impl Strategy<Value = String> {
    (
        amount_text(),
        prop::option::of(amount_text()),
        prop::option::of(amount_text()),
        prop::option::of((1u64..50, prop::option::of(1u64..500))),
        prop::sample::subsequence(vec!["software", "travel", "data", "food"], 1..4),
        prop::option::of(amount_text()),
        prop::option::of(1u32..28),
        prop::option::of(amount_text()),
        prop::option::of(prop::sample::subsequence(
            vec!["vendor:acme", "vendor:*", "shop:blue"],
            1..3,
        )),
        prop::bool::ANY,
    )
        .prop_map(
            |(
                per_tx,
                per_month,
                total,
                count,
                categories,
                review,
                start,
                escrow,
                allow,
                principal,
            )| {
                let mut body = format!(
                    r#"{{"agent": "agt_buyer", "categories": {}, "expires": "2027-06-30",
                        "limits": {{"per_transaction": {per_tx}, "currency": "USD""#,
                    serde_json::to_string(&categories).unwrap()
                );
                if let Some(m) = per_month {
                    body.push_str(&format!(r#", "per_month": {m}"#));
                }
                if let Some(t) = total {
                    body.push_str(&format!(r#", "total": {t}"#));
                }
                if let Some((day, all)) = count {
                    body.push_str(&format!(r#", "count": {{"per_day": {day}"#));
                    if let Some(all) = all {
                        body.push_str(&format!(r#", "total": {all}"#));
                    }
                    body.push('}');
                }
                body.push('}');
                if let Some(r) = review {
                    body.push_str(&format!(r#", "review_above": {r}"#));
                }
                if let Some(day) = start {
                    body.push_str(&format!(r#", "not_before": "2026-12-{day:02}""#));
                }
                if let Some(e) = escrow {
                    body.push_str(&format!(r#", "escrow": {{"required_above": {e}}}"#));
                }
                if let Some(allow) = allow {
                    body.push_str(&format!(
                        r#", "recipients": {{"allow": {}, "deny": ["vendor:evil"]}}"#,
                        serde_json::to_string(&allow).unwrap()
                    ));
                }
                if principal {
                    body.push_str(r#", "principal": "user:alice""#);
                }
                body.push('}');
                body
            },
        )
}

fn at_nanos(nanos: i128) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_stored_draft_and_mandate_read_back_the_same(
        body in body(),
        id in any::<[u8; 16]>(),
        status in prop::sample::select(vec![MandateStatus::Active, MandateStatus::Revoked, MandateStatus::Superseded]),
        created in 1_700_000_000_000_000_000i128..1_900_000_000_000_000_000,
    ) {
        let parsed: Value = serde_json::from_str(&body).unwrap();
        let draft = MandateDraft::from_json(&parsed);
        prop_assume!(draft.is_ok());
        let draft = draft.unwrap();

        let stored = serde_json::to_string(&draft).unwrap();
        prop_assert_eq!(&serde_json::from_str::<MandateDraft>(&stored).unwrap(), &draft);
        // The stored form is the API's body: from_json reads it to the same draft.
        let as_body: Value = serde_json::from_str(&stored).unwrap();
        prop_assert_eq!(&MandateDraft::from_json(&as_body).unwrap(), &draft, "{}", stored);

        let mandate = Mandate { id: MandateId::from_random(id), terms: draft, status, created_at: at_nanos(created) };
        let stored = serde_json::to_string(&mandate).unwrap();
        prop_assert_eq!(serde_json::from_str::<Mandate>(&stored).unwrap(), mandate);
    }

    #[test]
    fn a_stored_history_reads_back_the_same_and_decides_the_same(
        steps in prop::collection::vec((0i64..20_000, amount_text()), 0..40),
        probe in 0i64..120_000,
    ) {
        let mut history = AgentHistory::default();
        let mut now = at_nanos(1_795_348_800_123_000_000);
        for (wait_ms, amount) in &steps {
            now += Duration::milliseconds(*wait_ms);
            mandate_protocol::history::velocity_mut(&mut history).record(now);
            mandate_protocol::history::spend_mut(&mut history).add(Amount::parse(amount).unwrap(), now);
        }
        let stored = serde_json::to_string(&history).unwrap();
        let read: AgentHistory = serde_json::from_str(&stored).unwrap();
        prop_assert_eq!(read, history);
        let later = now + Duration::milliseconds(probe);
        prop_assert_eq!(mandate_protocol::history::velocity(&read).is_exceeded_at(later), mandate_protocol::history::velocity(&history).is_exceeded_at(later));
        prop_assert_eq!(mandate_protocol::history::velocity(&read).count_at(later), mandate_protocol::history::velocity(&history).count_at(later));
        prop_assert_eq!(read.spent_at(later), history.spent_at(later));
        // The velocity window is stored oldest first, at most VELOCITY_LIMIT times.
        let value: Value = serde_json::from_str(&stored).unwrap();
        let times: Vec<i64> = serde_json::from_value(value["velocity"].clone()).unwrap();
        prop_assert_eq!(times.len(), steps.len().min(VELOCITY_LIMIT));
        prop_assert!(times.windows(2).all(|w| w[0] <= w[1]), "{:?}", times);
    }
}

#[test]
fn a_stored_history_with_too_many_times_or_unknown_fields_is_refused() {
    let eleven: Vec<i64> = (0..11).collect();
    let err = serde_json::from_value::<AgentHistory>(json!({
        "velocity": eleven,
        "spend": serde_json::to_value(mandate_protocol::history::spend(&AgentHistory::default())).unwrap(),
    }))
    .unwrap_err();
    assert!(err.to_string().contains("at most 10"), "{err}");
    let mut value = serde_json::to_value(AgentHistory::default()).unwrap();
    value["extra"] = json!(1);
    assert!(serde_json::from_value::<AgentHistory>(value).is_err());
}

#[test]
fn a_stored_mandate_keeps_its_documented_shape() {
    let body: Value = serde_json::from_str(
        r#"{"agent": "agt_buyer", "categories": ["software"], "expires": "2027-06-30",
            "limits": {"per_transaction": 100.50, "currency": "USD"}}"#,
    )
    .unwrap();
    let mandate = Mandate {
        id: MandateId::from_random([1; 16]),
        terms: MandateDraft::from_json(&body).unwrap(),
        status: MandateStatus::Active,
        created_at: at_nanos(1_795_348_800_250_000_000),
    };
    let stored = serde_json::to_value(&mandate).unwrap();
    assert_eq!(stored["created_at"], "2026-11-22T12:00:00.25Z", "{stored}");
    assert_eq!(stored["status"], "active");
    assert_eq!(stored["terms"]["expires"], "2027-06-30");
    assert_eq!(
        stored["terms"]["limits"]["per_transaction"].to_string(),
        "100.50"
    );
    assert!(stored["terms"].get("not_before").is_none(), "{stored}");
}
