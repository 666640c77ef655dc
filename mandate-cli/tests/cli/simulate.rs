//! `simulate`: replaying exported decisions through a draft mandate.

use serde_json::Value;

use crate::support::start;

const STANDARD_DRAFT: &str = r#"{"agent": "agt_buyer", "principal": "role:cfo",
    "limits": {"per_transaction": 100, "per_month": 150, "currency": "USD"},
    "categories": ["software", "travel"], "review_above": 50, "expires": "2099-12-31"}"#;

#[test]
fn simulate_reproduces_the_servers_verdicts_and_shows_a_tighter_drafts_changes() {
    let env = start();
    let key = env.standard_agent("buyer");
    let other = env.standard_agent("other");
    env.authorize(&other, "1", "USD", "software").ok();

    // A mix of every outcome, inside one velocity window.
    let expect = |amount: &str, currency: &str, category: &str, verdict: &str| {
        let out = env.authorize(&key, amount, currency, category);
        assert_eq!(out.json()["verdict"], verdict, "{amount} {category}");
        out
    };
    expect("40", "USD", "software", "allow");
    let review = expect("60", "USD", "software", "review");
    let review_id = review.json()["review"]["id"].as_str().unwrap().to_owned();
    env.org(&["reviews", "approve", &review_id]).ok(); // month to date: 100
    expect("60", "USD", "travel", "deny_limit"); // 160 > 150 a month
    expect("10", "USD", "food", "deny_category");
    expect("5", "EUR", "software", "deny_limit");
    expect("120", "USD", "software", "deny_limit");
    for _ in 0..4 {
        expect("1", "USD", "software", "allow"); // requests 7 to 10
    }
    expect("1", "USD", "software", "deny_velocity");
    expect("1", "USD", "travel", "deny_velocity");

    let dump = env.org(&["decisions", "list", "--all", "--limit", "3", "--json"]);
    dump.ok();
    let dump_path = env.write("decisions.json", &dump.stdout);
    let draft = env.write("same.json", STANDARD_DRAFT);

    // The unchanged mandate reproduces every verdict.
    let same = env.offline(&[
        "simulate",
        "--mandate",
        &draft,
        "--decisions",
        &dump_path,
        "--json",
    ]);
    same.ok();
    let report = same.json();
    assert_eq!(report["replayed"], 13, "{report:#}");
    assert_eq!(report["changed"], 0, "{report:#}");
    assert_eq!(report["skipped_other_agents"], 1);
    let velocity = report["summary"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["verdict"] == "deny_velocity")
        .unwrap();
    assert_eq!(
        (velocity["before"].clone(), velocity["after"].clone()),
        (2.into(), 2.into())
    );

    // The same decisions as NDJSON, oldest first (as an export gives them).
    let mut lines: Vec<String> = report_lines(&dump.json());
    lines.reverse();
    let ndjson = env.write("decisions.ndjson", &(lines.join("\n") + "\n"));
    let same = env.offline(&["simulate", "--mandate", &draft, "--decisions", &ndjson]);
    same.ok()
        .stdout_has("13 decisions replayed against the draft for agt_buyer, 0 changed");

    // A tighter draft: 50 per transaction, no review, food allowed.
    let tighter = env.write(
        "tighter.json",
        r#"{"agent": "agt_buyer", "limits": {"per_transaction": 50, "per_month": 150,
            "currency": "USD"}, "categories": ["software", "travel", "food"],
            "expires": "2099-12-31"}"#,
    );
    let changed = env.offline(&[
        "simulate",
        "--mandate",
        &tighter,
        "--decisions",
        &dump_path,
        "--json",
    ]);
    changed.ok();
    let report = changed.json();
    let rows = report["decisions"].as_array().unwrap();
    let find = |amount: &str, category: &str| {
        rows.iter()
            .find(|r| {
                serde_json::to_string(&r["amount"]).unwrap() == amount
                    && r["category"] == category
                    && r["approval_of"].is_null()
            })
            .unwrap_or_else(|| panic!("no change for {amount} {category}: {report:#}"))
    };
    // The review is now over the per-transaction cap; its approval never happens.
    assert_eq!(find("60", "software")["after"]["verdict"], "deny_limit");
    let approval = rows.iter().find(|r| r["approval_of"].is_string()).unwrap();
    assert!(approval["after"].is_null());
    assert_eq!(find("10", "food")["after"]["verdict"], "allow");
    assert!(report["changed"].as_u64().unwrap() >= 3);

    let table = env.offline(&["simulate", "--mandate", &tighter, "--decisions", &dump_path]);
    table
        .ok()
        .stdout_has("→")
        .stdout_has("(no review)")
        .stdout_has("VERDICT")
        .stdout_has("POLICY AFTER");

    // An invalid draft and an unreadable dump are usage errors.
    let bad = env.write("bad.json", r#"{"agent": "agt_buyer"}"#);
    env.offline(&["simulate", "--mandate", &bad, "--decisions", &dump_path])
        .code(2)
        .stderr_has("limits is required");
    let junk = env.write("junk.ndjson", &format!("{}\nnot json\n", lines[0]));
    env.offline(&["simulate", "--mandate", &draft, "--decisions", &junk])
        .code(2)
        .stderr_has("line 2");
}

fn report_lines(dump: &Value) -> Vec<String> {
    dump["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::to_string)
        .collect()
}
