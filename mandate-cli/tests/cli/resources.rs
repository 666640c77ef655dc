//! The resource subcommands: agents, mandates and decisions, and what a network failure
//! looks like.

use crate::support::{closed_port_url, start};

// Agents

#[test]
fn agents_create_list_get_and_errors() {
    let env = start();
    let created = env.org(&["agents", "create", "buyer"]);
    created
        .ok()
        .stdout_has("agt_buyer")
        .stdout_has("agent_key")
        .stdout_has("ak_sandbox_")
        .stderr_has("shown only this once");

    let list = env.org(&["agents", "list"]);
    list.ok().stdout_has("ID").stdout_has("agt_buyer");
    let list = env.org(&["agents", "list", "--json"]);
    list.ok();
    let page = list.json();
    assert_eq!(page["data"][0]["id"], "agt_buyer");
    assert_eq!(page["has_more"], false);

    let got = env.org(&["agents", "get", "agt_buyer", "--json"]);
    got.ok();
    assert_eq!(got.json()["name"], "buyer");
    assert!(got.json().get("agent_key").is_none());

    // A taken name: the server's code, message and request id; exit 1.
    env.org(&["agents", "create", "buyer"])
        .code(1)
        .stderr_has("name_taken (HTTP 409)")
        .stderr_has("request id: req_");
    // With --json the envelope is printed as it came.
    let missing = env.org(&["agents", "get", "agt_nobody", "--json"]);
    missing.code(1);
    assert_eq!(missing.json()["error"]["code"], "not_found");
    assert!(
        missing.json()["error"]["request_id"]
            .as_str()
            .unwrap()
            .starts_with("req_")
    );
    // A bad name never reaches the server.
    env.org(&["agents", "create", "Bad Name"]).code(2);
}

// Mandates

#[test]
fn mandates_create_from_flags_and_file_list_get_revoke_and_errors() {
    let env = start();
    let agent_key = env.agent("buyer");

    let created = env.org(&[
        "mandates",
        "create",
        "--agent",
        "agt_buyer",
        "--per-transaction",
        "100.10",
        "--currency",
        "USD",
        "--category",
        "software",
        "--expires",
        "2099-12-31",
        "--principal",
        "role:cfo",
        "--json",
    ]);
    created.ok();
    let first = created.json();
    assert_eq!(first["limits"]["per_transaction"].to_string(), "100.10");
    assert_eq!(first["principal"], "role:cfo");
    let first_id = first["id"].as_str().unwrap().to_owned();

    let draft = env.write(
        "draft.json",
        r#"{"agent": "agt_buyer", "limits": {"per_transaction": 250.00, "per_month": 1000,
            "currency": "EUR"}, "categories": ["travel"], "review_above": 99.5,
            "expires": "2099-06-30"}"#,
    );
    let from_file = env.org(&["mandates", "create", "--file", &draft]);
    from_file.ok();
    assert_eq!(from_file.field("limits.per_transaction"), "250.00");
    assert_eq!(from_file.field("review_above"), "99.5");
    let second_id = env
        .org(&["mandates", "list", "--status", "active", "--json"])
        .json()["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let superseded = env.org(&[
        "mandates",
        "list",
        "--agent",
        "agt_buyer",
        "--status",
        "superseded",
        "--json",
    ]);
    superseded.ok();
    assert_eq!(superseded.json()["data"][0]["id"], first_id.as_str());
    env.org(&["mandates", "list"])
        .ok()
        .stdout_has("PER TX")
        .stdout_has(&second_id);
    let got = env.org(&["mandates", "get", &second_id]);
    assert_eq!(got.ok().field("status"), "active");

    let revoked = env.org(&["mandates", "revoke", &second_id, "--json"]);
    revoked.ok();
    assert_eq!(revoked.json()["status"], "revoked");
    // The agent's next request is denied with deny_revoked (exit 4).
    let denied = env.authorize(&agent_key, "1", "EUR", "travel");
    denied.code(4);
    assert_eq!(denied.json()["verdict"], "deny_revoked");

    // Revoking twice: the server refuses, exit 1.
    env.org(&["mandates", "revoke", &second_id])
        .code(1)
        .stderr_has("invalid_request")
        .stderr_has("request id: req_");
    // A draft missing limits.currency is refused before sending, naming the field.
    let bad = env.write(
        "bad.json",
        r#"{"agent": "agt_buyer", "limits": {"per_transaction": 1}, "categories": ["x"],
            "expires": "2099-01-01"}"#,
    );
    env.org(&["mandates", "create", "--file", &bad])
        .code(2)
        .stderr_has("limits.currency is required");
    // An agent key may not write mandates: 403 from the server.
    env.with_key(&agent_key, &["mandates", "create", "--file", &draft])
        .code(1)
        .stderr_has("forbidden");
}

// Decisions

#[test]
fn decisions_list_walks_pages_filters_and_gets() {
    let env = start();
    let key = env.standard_agent("buyer");
    for (amount, category) in [
        ("1", "software"),
        ("2", "software"),
        ("3", "food"),
        ("4", "travel"),
        ("60", "travel"),
    ] {
        env.authorize(&key, amount, "USD", category);
    }

    let page = env.org(&["decisions", "list", "--limit", "2"]);
    page.ok()
        .stdout_has("VERDICT")
        .stderr_has("more results")
        .stderr_has("--cursor cur_");
    assert_eq!(page.stdout.lines().count(), 3);

    let all = env.org(&["decisions", "list", "--all", "--limit", "2", "--json"]);
    all.ok();
    let all = all.json();
    let data = all["data"].as_array().unwrap();
    assert_eq!(data.len(), 5);
    assert_eq!(all["has_more"], false);
    assert!(all.get("next_cursor").is_none());
    // Newest first, as the server lists them.
    assert_eq!(data[0]["request"]["amount"].to_string(), "60");
    // Progress goes to stderr only on a terminal: not here.
    assert!(
        !env.org(&["decisions", "list", "--all", "--limit", "2"])
            .stderr
            .contains("fetched")
    );

    let denied = env.org(&["decisions", "list", "--verdict", "deny_category", "--json"]);
    assert_eq!(denied.json()["data"].as_array().unwrap().len(), 1);
    let reviews = env.org(&[
        "decisions",
        "list",
        "--policy-verdict",
        "review",
        "--agent",
        "agt_buyer",
        "--json",
    ]);
    assert_eq!(reviews.json()["data"].as_array().unwrap().len(), 1);

    // A denied review reads as denied in the table, not as one still open.
    let review = data[0]["review"].as_str().unwrap();
    env.org(&["reviews", "deny", review, "--reason", "not this trip"])
        .ok();
    let table = env.org(&["decisions", "list"]);
    table.ok();
    let rows: Vec<&str> = table.stdout.lines().collect();
    assert!(rows[0].trim_end().ends_with("REVIEW"), "{}", table.stdout);
    assert!(rows[1].trim_end().ends_with("  denied"), "{}", table.stdout);
    assert!(
        rows[2..].iter().all(|r| r.trim_end().ends_with("  -")),
        "{}",
        table.stdout
    );
    let denied = env.org(&["decisions", "list", "--review-status", "denied", "--json"]);
    assert_eq!(denied.json()["data"][0]["id"], data[0]["id"]);
    env.org(&["decisions", "list", "--review-status", "maybe"])
        .code(2);

    let id = data[2]["id"].as_str().unwrap();
    let got = env.org(&["decisions", "get", id]);
    got.ok().stdout_has(id);
    assert_eq!(got.field("request.category"), "food");

    env.org(&["decisions", "get", "dec_nosuchdecision"])
        .code(1)
        .stderr_has("not_found (HTTP 404)")
        .stderr_has("request id: req_");
}

// Network errors

#[test]
fn an_unreachable_service_exits_3_and_says_how_to_retry_a_post() {
    let env = start();
    let url = closed_port_url();
    env.run(
        &["--retries", "0", "agents", "list"],
        &[
            ("MANDATE_BASE_URL", &url),
            ("MANDATE_API_KEY", &env.org_key),
        ],
    )
    .code(3)
    .stderr_has("cannot reach");
    env.run(
        &["--retries", "0", "agents", "create", "buyer"],
        &[
            ("MANDATE_BASE_URL", &url),
            ("MANDATE_API_KEY", &env.org_key),
        ],
    )
    .code(3)
    .stderr_has("--idempotency-key idem_");
    // Plain http to another machine is refused before anything is sent.
    env.run(
        &["agents", "list"],
        &[
            ("MANDATE_BASE_URL", "http://api.example.com"),
            ("MANDATE_API_KEY", &env.org_key),
        ],
    )
    .code(2)
    .stderr_has("refusing plain http");
}
