//! `webhooks` and `events`: registering endpoints and reading the event log.

use crate::support::{closed_port_url, start};

#[test]
fn webhooks_create_list_get_ping_delete_and_errors() {
    let env = start();
    // Nothing listens there; deliveries fail and retry in the background, which is fine.
    let url = format!("{}/hooks", closed_port_url());

    let created = env.org(&[
        "webhooks",
        "create",
        "--url",
        &url,
        "--event",
        "ping",
        "--event",
        "mandate.revoked",
        "--idempotency-key",
        "test-create-hook",
    ]);
    created.ok();
    let id = created.field("webhook");
    assert!(id.starts_with("whk_"), "{id}");
    assert_eq!(created.field("events"), "ping,mandate.revoked");
    assert_eq!(created.field("status"), "active");
    // The same key again: the stored result, not a second endpoint.
    let again = env.org(&[
        "webhooks",
        "create",
        "--url",
        &url,
        "--event",
        "ping",
        "--event",
        "mandate.revoked",
        "--idempotency-key",
        "test-create-hook",
        "--json",
    ]);
    again.ok().stderr_has("replayed");
    assert_eq!(again.json()["webhook"], id.as_str());

    env.org(&["webhooks", "list"])
        .ok()
        .stdout_has("EVENTS")
        .stdout_has(&id)
        .stdout_has("ping,mandate.revoked");
    let list = env.org(&["webhooks", "list", "--json"]);
    list.ok();
    let page = list.json();
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    assert_eq!(page["data"][0]["url"], url.as_str());

    let got = env.org(&["webhooks", "get", &id, "--json"]);
    got.ok();
    assert_eq!(got.json()["url"], url.as_str());

    let ping = env.org(&["webhooks", "ping", &id]);
    ping.ok().stderr_has("mandate events get evt_");
    let event = ping.field("event");
    assert!(event.starts_with("evt_"), "{event}");
    let read = env.org(&["events", "get", &event]);
    read.ok();
    assert_eq!(read.field("type"), "ping");
    assert_eq!(read.field("data.webhook"), id);
    // Then its deliveries, one row per endpoint: where each stands.
    read.stdout_has("WEBHOOK")
        .stdout_has("LAST STATUS")
        .stdout_has("NEXT ATTEMPT");
    let row = read
        .stdout
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("no delivery row:\n{}", read.stdout));
    assert!(
        ["pending", "delivered", "failed"]
            .iter()
            .any(|s| row.split_whitespace().nth(1) == Some(s)),
        "{row}"
    );
    let read = env.org(&["events", "get", &event, "--json"]);
    assert_eq!(read.json()["deliveries"][0]["webhook"], id.as_str());

    let deleted = env.org(&["webhooks", "delete", &id, "--json"]);
    deleted.ok();
    assert_eq!(deleted.json()["status"], "deleted");
    env.org(&["webhooks", "get", &id])
        .code(1)
        .stderr_has("not_found (HTTP 404)")
        .stderr_has("request id: req_");
    env.org(&["webhooks", "list"]).ok().stdout_has("(none)");

    // One error each.
    env.org(&["webhooks", "delete", &id])
        .code(1)
        .stderr_has("not_found (HTTP 404)");
    env.org(&["webhooks", "ping", &id])
        .code(1)
        .stderr_has("not_found (HTTP 404)");
    // Plain http, even to this machine, is refused in live.
    env.with_key(
        &env.live_key,
        &["webhooks", "create", "--url", &url, "--event", "ping"],
    )
    .code(1)
    .stderr_has("invalid_request (HTTP 400): url");
    // And in the sandbox to another machine.
    env.org(&[
        "webhooks",
        "create",
        "--url",
        "http://hooks.example.com/",
        "--event",
        "ping",
    ])
    .code(1)
    .stderr_has("invalid_request (HTTP 400): url");
    // An agent key may not manage webhooks.
    let agent = env.agent("buyer");
    env.with_key(&agent, &["webhooks", "list"])
        .code(1)
        .stderr_has("forbidden (HTTP 403)");
    env.with_key(
        &agent,
        &["webhooks", "create", "--url", &url, "--event", "ping"],
    )
    .code(1)
    .stderr_has("forbidden (HTTP 403)");
    // Usage errors never reach the server.
    env.org(&["webhooks", "create", "--url", &url])
        .code(2)
        .stderr_has("--event");
    env.org(&[
        "webhooks",
        "create",
        "--url",
        &url,
        "--event",
        "mandate.deleted",
    ])
    .code(2)
    .stderr_has("mandate.revoked");
    env.org(&["webhooks", "get", "hook_1"]).code(2);
}

#[test]
fn events_list_filters_walks_pages_and_gets() {
    let env = start();
    let key = env.standard_agent("buyer");
    // A review opens (decision.review_pending); the mandate is revoked (mandate.revoked).
    env.authorize(&key, "60", "USD", "software").code(5);
    let mandate = env
        .org(&["mandates", "list", "--status", "active", "--json"])
        .json()["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    env.org(&["mandates", "revoke", &mandate]).ok();

    let table = env.org(&["events", "list"]);
    table
        .ok()
        .stdout_has("SUBJECT")
        .stdout_has("mandate.revoked")
        .stdout_has("decision.review_pending")
        .stdout_has(&mandate);
    // Newest first.
    let revoked_at = table.stdout.find("mandate.revoked").unwrap();
    let pending_at = table.stdout.find("decision.review_pending").unwrap();
    assert!(revoked_at < pending_at, "{}", table.stdout);

    let revoked = env.org(&["events", "list", "--type", "mandate.revoked", "--json"]);
    revoked.ok();
    let data = revoked.json()["data"].as_array().unwrap().clone();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["data"]["id"], mandate.as_str());
    assert_eq!(data[0]["data"]["status"], "revoked");

    let page = env.org(&["events", "list", "--limit", "1"]);
    page.ok().stderr_has("--cursor cur_");
    let all = env.org(&["events", "list", "--all", "--limit", "1", "--json"]);
    all.ok();
    let all = all.json();
    assert_eq!(all["data"].as_array().unwrap().len(), 2);
    assert_eq!(all["has_more"], false);

    let id = data[0]["id"].as_str().unwrap();
    let got = env.org(&["events", "get", id]);
    got.ok();
    assert_eq!(got.field("type"), "mandate.revoked");
    assert_eq!(got.field("data.id"), mandate);
    let got = env.org(&["events", "get", id, "--json"]);
    assert_eq!(got.json()["data"]["limits"]["per_month"].to_string(), "150");

    // One error each.
    env.org(&["events", "get", "evt_nosuchevent"])
        .code(1)
        .stderr_has("not_found (HTTP 404)");
    env.org(&["events", "list", "--type", "mandate.deleted"])
        .code(2)
        .stderr_has("mandate.revoked");
    env.with_key(&key, &["events", "list"])
        .code(1)
        .stderr_has("forbidden (HTTP 403)");
}
