//! The mandate extensions of issue #30 through the CLI: `mandates create` flags for every
//! new field (and `escrow.required_above`), `deny_recipient` as a denial's exit code, and
//! `simulate` naming the rule that changes a past decision.

use crate::support::start;

#[test]
fn create_takes_a_flag_for_every_new_field_and_deny_recipient_exits_4() {
    let env = start();
    let key = env.agent("buyer");
    let created = env.org(&[
        "mandates",
        "create",
        "--agent",
        "agt_buyer",
        "--per-transaction",
        "100",
        "--per-day",
        "200.50",
        "--per-week",
        "500",
        "--currency",
        "USD",
        "--category",
        "software",
        "--expires",
        "2099-12-31",
        "--allow-recipient",
        "vendor:aws*",
        "--allow-recipient",
        "vendor:acme",
        "--deny-recipient",
        "vendor:aws-gov*",
        "--escrow-required-above",
        "1000",
        "--json",
    ]);
    created.ok();
    let mandate = created.json();
    assert_eq!(mandate["limits"]["per_day"].to_string(), "200.50");
    assert_eq!(mandate["limits"]["per_week"], 500);
    assert_eq!(mandate["escrow"]["required_above"], 1000);
    assert_eq!(
        mandate["recipients"],
        serde_json::json!({"allow": ["vendor:aws*", "vendor:acme"], "deny": ["vendor:aws-gov*"]})
    );
    env.org(&["mandates", "list"])
        .ok()
        .stdout_has("PER DAY")
        .stdout_has("PER WEEK")
        .stdout_has("200.50");

    // A recipient on the deny list: the verdict is a denial, exit 4.
    let denied = env.with_key(
        &key,
        &[
            "authorize",
            "--amount",
            "1",
            "--currency",
            "USD",
            "--recipient",
            "vendor:aws-gov-east",
            "--category",
            "software",
            "--json",
        ],
    );
    denied.code(4);
    assert_eq!(denied.json()["verdict"], "deny_recipient");
    env.authorize(&key, "1", "USD", "software").ok();
    let listed = env.org(&["decisions", "list", "--verdict", "deny_recipient", "--json"]);
    listed.ok();
    assert_eq!(listed.json()["data"].as_array().unwrap().len(), 1);

    // A bad entry is a usage error naming the field, before anything is sent.
    env.org(&[
        "mandates",
        "create",
        "--agent",
        "agt_buyer",
        "--per-transaction",
        "100",
        "--currency",
        "USD",
        "--category",
        "software",
        "--expires",
        "2099-12-31",
        "--deny-recipient",
        "aws",
    ])
    .code(2)
    .stderr_has("recipients.deny[0] must be a recipient");
}

#[test]
fn simulate_shows_which_decisions_a_window_or_a_list_would_change() {
    let env = start();
    let key = env.standard_agent("buyer");
    for amount in ["40", "30", "20"] {
        let out = env.authorize(&key, amount, "USD", "software");
        assert_eq!(out.json()["verdict"], "allow", "{}", out.stdout);
    }
    let dump = env.org(&["decisions", "list", "--all", "--json"]);
    dump.ok();
    let dump_path = env.write("decisions.json", &dump.stdout);

    // 60 a day: the 30 would bring the day to 70 and is denied; the 20 then fits (60).
    let daily = env.write(
        "daily.json",
        r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "per_day": 60,
            "currency": "USD"}, "categories": ["software"], "expires": "2099-12-31"}"#,
    );
    let out = env.offline(&[
        "simulate",
        "--mandate",
        &daily,
        "--decisions",
        &dump_path,
        "--json",
    ]);
    out.ok();
    let report = out.json();
    assert_eq!(report["changed"], 1, "{report:#}");
    let rows = report["decisions"].as_array().unwrap();
    assert_eq!(rows[0]["after"]["rule"], "limits.per_day", "{report:#}");
    assert_eq!(
        rows[0]["after"]["reason"],
        "amount 30 would bring today's spend to 70, over the per_day limit 60"
    );

    // A deny list that takes the recipient: every decision changes, by recipients.deny.
    let listed = env.write(
        "listed.json",
        r#"{"agent": "agt_buyer", "limits": {"per_transaction": 100, "currency": "USD"},
            "categories": ["software"], "expires": "2099-12-31",
            "recipients": {"deny": ["vendor:ac*"]}}"#,
    );
    let out = env.offline(&[
        "simulate",
        "--mandate",
        &listed,
        "--decisions",
        &dump_path,
        "--json",
    ]);
    out.ok();
    let report = out.json();
    assert_eq!(report["changed"], 3, "{report:#}");
    for row in report["decisions"].as_array().unwrap() {
        assert_eq!(row["after"]["verdict"], "deny_recipient");
        assert_eq!(row["after"]["rule"], "recipients.deny");
    }
    let summary = report["summary"].as_array().unwrap();
    let recipient = summary
        .iter()
        .find(|c| c["verdict"] == "deny_recipient")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(
        (recipient["before"].clone(), recipient["after"].clone()),
        (0.into(), 3.into())
    );
    env.offline(&["simulate", "--mandate", &listed, "--decisions", &dump_path])
        .ok()
        .stdout_has("deny_recipient")
        .stdout_has("is denied by mandate");
}
