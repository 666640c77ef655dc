//! The list conventions on /v1/decisions, /v1/agents and /v1/mandates: `limit`, signed
//! cursors bound to the list, the filters and the key, and the envelope.
//!
//! The clock is frozen, so the per-key rate (100 a second) and the velocity rule (10
//! authorizations per agent in 60 seconds) are respected by moving it explicitly.

use std::collections::HashSet;

use serde_json::Value;

use crate::helpers::{Resp, TestApp, spawn_app, standard_mandate};

const LIMIT_MESSAGE: &str = "limit must be an integer between 1 and 100";
const CURSOR_MESSAGE: &str = "cursor expired or malformed";

/// Makes `n` decisions for the agent with key `agent`, in batches of 10 that the velocity
/// rule allows; returns their ids, oldest first.
pub async fn make_decisions(app: &TestApp, agent: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        if i > 0 && i % 10 == 0 {
            app.advance(61);
        }
        let r = app.authorize(agent, "1", "software").await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.body["verdict"], "allow", "{}", r.text);
        ids.push(r.body["id"].as_str().unwrap().to_owned());
    }
    app.advance(61);
    ids
}

fn ids(r: &Resp) -> Vec<String> {
    r.body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {}", r.text))
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect()
}

fn cursor(r: &Resp) -> String {
    let cursor = r.body["next_cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("no next_cursor: {}", r.text))
        .to_owned();
    assert!(cursor.starts_with("cur_"), "{cursor}");
    cursor
}

/// `path` with `query` appended after `?` or `&`.
fn with(path: &str, query: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}{query}")
}

/// Walks a whole list; returns the pages.
async fn walk(app: &TestApp, key: &str, path: &str) -> Vec<Resp> {
    let mut pages = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let url = match &next {
            None => path.to_owned(),
            Some(c) => with(path, &format!("cursor={c}")),
        };
        let r = app.get(key, &url).await;
        assert_eq!(r.status, 200, "{url}: {}", r.text);
        let more = r.body["has_more"].as_bool().unwrap();
        next = more.then(|| cursor(&r));
        pages.push(r);
        if !more {
            return pages;
        }
        assert!(pages.len() < 20, "runaway walk");
    }
}

#[mandate_test_macros::on_each_engine]
async fn limit_defaults_to_20_and_anything_but_1_to_100_is_400() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    for i in 0..25 {
        app.agent(&org, &format!("a{i:02}")).await;
    }
    app.advance(2);
    let r = app.get(&org, "/v1/agents").await;
    assert_eq!(ids(&r).len(), 20);
    assert_eq!(r.body["has_more"], true);
    for (limit, expected) in [("1", 1), ("25", 25), ("100", 25)] {
        let r = app.get(&org, &format!("/v1/agents?limit={limit}")).await;
        assert_eq!(r.status, 200, "{limit}: {}", r.text);
        assert_eq!(ids(&r).len(), expected, "{limit}");
    }
    // Exactly the page size: no more.
    let r = app.get(&org, "/v1/agents?limit=25").await;
    assert_eq!(r.body["has_more"], false);
    assert!(r.body.get("next_cursor").is_none(), "{}", r.text);

    for path in ["/v1/decisions", "/v1/agents", "/v1/mandates"] {
        for limit in [
            "0",
            "101",
            "1.5",
            "abc",
            "-1",
            "",
            "1e1",
            "+5",
            "%201",
            "20abc",
            "99999999999999999999",
        ] {
            let r = app.get(&org, &format!("{path}?limit={limit}")).await;
            assert_eq!(
                r.assert_error(400, "invalid_request"),
                LIMIT_MESSAGE,
                "{path}?limit={limit}"
            );
        }
        app.advance(1);
        let r = app.get(&org, &format!("{path}?limit=5&limit=6")).await;
        r.assert_error(400, "invalid_request");
    }
}

#[mandate_test_macros::on_each_engine]
async fn a_walk_of_45_decisions_gives_20_20_5_newest_first() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "walker").await;
    let made = make_decisions(&app, &agent, 45).await;

    let pages = walk(&app, &org, "/v1/decisions").await;
    let sizes: Vec<_> = pages.iter().map(|p| ids(p).len()).collect();
    assert_eq!(sizes, [20, 20, 5]);
    let more: Vec<_> = pages.iter().map(|p| p.body["has_more"].clone()).collect();
    assert_eq!(more, [true, true, false]);
    assert!(pages[0].body["next_cursor"].is_string());
    assert!(pages[1].body["next_cursor"].is_string());
    // The key is absent on the last page, not null.
    let last = pages[2].body.as_object().unwrap();
    assert!(!last.contains_key("next_cursor"), "{}", pages[2].text);
    let mut keys: Vec<_> = last.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["data", "has_more"]);

    let walked: Vec<String> = pages.iter().flat_map(ids).collect();
    let unique: HashSet<_> = walked.iter().collect();
    assert_eq!(unique.len(), 45, "duplicates in the walk");
    let mut newest_first = made.clone();
    newest_first.reverse();
    assert_eq!(walked, newest_first);

    // The same walk with an agent key sees the same decisions.
    let pages = walk(&app, &agent, "/v1/decisions?limit=20").await;
    let walked_by_agent: Vec<String> = pages.iter().flat_map(ids).collect();
    assert_eq!(walked_by_agent, newest_first);

    // Changing the page size mid-walk is fine: limit is not a filter.
    let first = app.get(&org, "/v1/decisions?limit=20").await;
    let c = cursor(&first);
    let second = app
        .get(&org, &format!("/v1/decisions?limit=30&cursor={c}"))
        .await;
    assert_eq!(second.status, 200, "{}", second.text);
    assert_eq!(ids(&second), newest_first[20..45]);
    assert_eq!(second.body["has_more"], false);

    // The same walk over agents and mandates.
    for i in 0..44 {
        app.agent(&org, &format!("b{i:02}")).await;
        if i % 40 == 39 {
            app.advance(2);
        }
    }
    app.advance(2);
    let pages = walk(&app, &org, "/v1/agents").await;
    let sizes: Vec<_> = pages.iter().map(|p| ids(p).len()).collect();
    assert_eq!(sizes, [20, 20, 5]);
    let agents: Vec<String> = pages.iter().flat_map(ids).collect();
    assert_eq!(agents.first().unwrap(), "agt_b43");
    assert_eq!(agents.last().unwrap(), "agt_walker");
    assert_eq!(agents.iter().collect::<HashSet<_>>().len(), 45);

    let empty = app.get(&org, "/v1/mandates?agent=agt_b00").await;
    assert_eq!(empty.body["data"], Value::Array(vec![]));
    assert_eq!(empty.body["has_more"], false);
    assert!(empty.body.get("next_cursor").is_none());
}

#[mandate_test_macros::on_each_engine]
async fn edited_truncated_invented_and_expired_cursors_are_the_same_400() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "cursed").await;
    make_decisions(&app, &agent, 5).await;
    let first = app.get(&org, "/v1/decisions?limit=2").await;
    let good = cursor(&first);
    let ok = app
        .get(&org, &format!("/v1/decisions?limit=2&cursor={good}"))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);

    let flip = |at: usize| {
        let mut chars: Vec<char> = good.chars().collect();
        chars[at] = if chars[at] == 'A' { 'B' } else { 'A' };
        chars.into_iter().collect::<String>()
    };
    let dot = good.rfind('.').unwrap();
    let bad = [
        flip(8),
        flip(dot - 3),
        flip(dot + 3),
        flip(good.len() - 2),
        good[..good.len() - 5].to_owned(),
        good[..dot].to_owned(),
        good[..20].to_owned(),
        format!("{good}A"),
        good.replacen("cur_", "cur", 1),
        good.replacen("cur_", "xyz_", 1),
        "cur_abc".to_owned(),
        "cur_".to_owned(),
        "cur_abc.def".to_owned(),
        String::new(),
        "x".repeat(2000),
    ];
    for (i, cursor) in bad.iter().enumerate() {
        if i % 40 == 39 {
            app.advance(2);
        }
        let r = app
            .get(&org, &format!("/v1/decisions?limit=2&cursor={cursor}"))
            .await;
        assert_eq!(
            r.assert_error(400, "invalid_request"),
            CURSOR_MESSAGE,
            "cursor {cursor:?}"
        );
    }

    // Good for 24 hours, then expired with the same message.
    app.advance(24 * 3600 - 1);
    let r = app
        .get(&org, &format!("/v1/decisions?limit=2&cursor={good}"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    app.advance(2);
    let r = app
        .get(&org, &format!("/v1/decisions?limit=2&cursor={good}"))
        .await;
    assert_eq!(r.assert_error(400, "invalid_request"), CURSOR_MESSAGE);
}

#[mandate_test_macros::on_each_engine]
async fn a_cursor_is_bound_to_its_list_filters_and_key() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let alice = app.standard_agent(&org, "alice").await;
    let bob = app.standard_agent(&org, "bob").await;
    make_decisions(&app, &alice, 5).await;
    make_decisions(&app, &bob, 5).await;

    // Org key, filtered by agent.
    let first = app.get(&org, "/v1/decisions?agent=agt_alice&limit=2").await;
    let c = cursor(&first);
    let same = app
        .get(
            &org,
            &format!("/v1/decisions?agent=agt_alice&limit=2&cursor={c}"),
        )
        .await;
    assert_eq!(same.status, 200, "{}", same.text);
    let changed = [
        format!("/v1/decisions?agent=agt_bob&limit=2&cursor={c}"),
        format!("/v1/decisions?limit=2&cursor={c}"),
        format!("/v1/decisions?agent=agt_alice&verdict=allow&limit=2&cursor={c}"),
        format!("/v1/decisions?agent=agt_alice&policy_verdict=allow&cursor={c}"),
        format!("/v1/agents?cursor={c}"),
        format!("/v1/mandates?agent=agt_alice&cursor={c}"),
    ];
    for path in &changed {
        let message = app
            .get(&org, path)
            .await
            .assert_error(400, "invalid_request");
        assert!(message.contains("cursor"), "{path}: {message}");
    }

    // An organization key's cursor does not work with an agent key, nor the reverse.
    let org_first = app.get(&org, "/v1/decisions?limit=2").await;
    let org_cursor = cursor(&org_first);
    app.get(
        &alice,
        &format!("/v1/decisions?limit=2&cursor={org_cursor}"),
    )
    .await
    .assert_error(400, "invalid_request");
    let agent_first = app.get(&alice, "/v1/decisions?limit=2").await;
    let agent_cursor = cursor(&agent_first);
    app.get(
        &org,
        &format!("/v1/decisions?limit=2&cursor={agent_cursor}"),
    )
    .await
    .assert_error(400, "invalid_request");
    // ...nor with another agent's key, the live key, or another organization's key.
    app.get(
        &bob,
        &format!("/v1/decisions?limit=2&cursor={agent_cursor}"),
    )
    .await
    .assert_error(400, "invalid_request");
    app.get(
        &app.org.live,
        &format!("/v1/decisions?limit=2&cursor={org_cursor}"),
    )
    .await
    .assert_error(400, "invalid_request");
    let other = app.onboard("other").await;
    app.get(
        &other.sandbox,
        &format!("/v1/decisions?limit=2&cursor={org_cursor}"),
    )
    .await
    .assert_error(400, "invalid_request");
    // The genuine uses still work.
    let next = app
        .get(
            &alice,
            &format!("/v1/decisions?limit=2&cursor={agent_cursor}"),
        )
        .await;
    assert_eq!(next.status, 200, "{}", next.text);
    assert_eq!(ids(&next).len(), 2);
    let next = app
        .get(&org, &format!("/v1/decisions?limit=2&cursor={org_cursor}"))
        .await;
    assert_eq!(next.status, 200, "{}", next.text);

    // The mandates list binds its filters too.
    app.mandate(&org, &standard_mandate("alice")).await;
    let m = app.get(&org, "/v1/mandates?agent=agt_alice&limit=1").await;
    let mc = cursor(&m);
    app.get(
        &org,
        &format!("/v1/mandates?agent=agt_alice&status=active&limit=1&cursor={mc}"),
    )
    .await
    .assert_error(400, "invalid_request");
    let ok = app
        .get(
            &org,
            &format!("/v1/mandates?agent=agt_alice&limit=1&cursor={mc}"),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.body["data"][0]["status"], "superseded");
}

#[mandate_test_macros::on_each_engine]
async fn unknown_query_parameters_are_400() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    for path in [
        "/v1/decisions?page=2",
        "/v1/decisions?status=active",
        "/v1/decisions?Limit=5",
        "/v1/agents?agent=agt_x",
        "/v1/agents?name=x",
        "/v1/mandates?verdict=allow",
        "/v1/mandates?offset=10",
    ] {
        let r = app.get(&org, path).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(
            message.contains("unknown query parameter"),
            "{path}: {message}"
        );
    }
}

/// The message of a row of docs/api.md's table of list mistakes (§6), as the guide prints
/// it between backquotes.
fn documented_message(mistake: &str) -> String {
    let guide = std::fs::read_to_string(
        std::path::Path::new(
            &std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../docs/api.md"),
    )
    .unwrap();
    let row = guide
        .lines()
        .find(|l| l.starts_with(&format!("| {mistake} |")))
        .unwrap_or_else(|| panic!("docs/api.md has no row for {mistake}"));
    let cell = row.rsplit('|').nth(1).unwrap().trim();
    cell.trim_matches('`').to_owned()
}

#[mandate_test_macros::on_each_engine]
async fn the_api_guide_gives_the_messages_the_server_sends() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    for (mistake, path) in [
        ("unknown parameter", "/v1/decisions?sort=newest"),
        ("a parameter twice", "/v1/decisions?limit=1&limit=2"),
    ] {
        let message = app
            .get(&org, path)
            .await
            .assert_error(400, "invalid_request");
        assert_eq!(message, documented_message(mistake), "{path}");
    }
    // A denial for want of a mandate carries `mandate: null`, as the guide's table of a
    // decision's fields says.
    let agent = app.agent(&org, "unbound").await;
    let r = app
        .post(
            &agent,
            "/v1/authorizations",
            serde_json::json!({"amount": 1, "currency": "USD", "recipient": "vendor:a", "category": "software"}),
        )
        .await;
    assert_eq!(r.body["verdict"], "deny_no_mandate", "{}", r.text);
    assert_eq!(r.body.get("mandate"), Some(&Value::Null), "{}", r.text);
    let documented = documented_message("`mandate`");
    assert!(
        documented.ends_with("`null` for `deny_no_mandate"),
        "{documented}"
    );
}
