//! What a person does in the console, checked in the page and through the API.

use mandate_core::{JwkSet, VerifyOptions, verify_verdict};
use serde_json::{Value, json};

use crate::webdriver::{Browser, ENTER, TAB};
use crate::{Console, ONE_AT_A_TIME};

/// The text that would run script if it were ever written as markup.
const HOSTILE: &str = "<img src=x onerror=alert(1)>";

/// Signs in with `key` and waits for the first screen.
async fn sign_in(b: &Browser, key: &str) {
    b.type_into("#key", key).await;
    b.click("#sign-in-form button[type=submit]").await;
    b.wait_for("#env-badge").await;
    b.wait_for("#screen h1").await;
}

/// Nothing ran that the page did not mean to run: no alert is open, no `img` element
/// exists, and the browser logged no policy violation or uncaught error.
async fn nothing_executed(b: &Browser) {
    assert_eq!(b.alert_text().await, None, "an alert was opened");
    let images = b
        .js("return document.querySelectorAll('img').length;", vec![])
        .await;
    assert_eq!(images, 0, "an img element was made from data");
    for entry in b.log().await {
        let message = entry["message"].as_str().unwrap_or_default();
        assert!(
            !message.contains("Content Security Policy") && !message.contains("Uncaught"),
            "the browser logged: {message}"
        );
    }
}

/// Where the key is: exactly in sessionStorage, nowhere else the page can reach.
async fn key_only_in_session_storage(b: &Browser, key: &str) {
    let seen = b
        .js(
            "return {session: sessionStorage.getItem('mandate-console.key'), \
                     sessionCount: sessionStorage.length, local: localStorage.length, \
                     cookie: document.cookie, url: location.href, title: document.title, \
                     text: document.body.innerText, \
                     inputs: [...document.querySelectorAll('input, textarea')].map(i => i.value)};",
            vec![],
        )
        .await;
    assert_eq!(seen["session"], key);
    assert_eq!(seen["sessionCount"], 1);
    assert_eq!(seen["local"], 0, "localStorage holds something");
    assert_eq!(seen["cookie"], "");
    for place in ["url", "title", "text"] {
        assert!(
            !seen[place].as_str().unwrap().contains(key),
            "the key is in the page's {place}"
        );
    }
    assert!(
        !seen["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v.as_str().unwrap().contains(key)),
        "the key is left in a field"
    );
}

/// The JWK Set the server publishes.
async fn jwks(console: &Console) -> JwkSet {
    let bytes = console
        .http
        .get(format!("{}/.well-known/jwks.json", console.public))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    JwkSet::from_json(&bytes).unwrap()
}

#[tokio::test]
async fn a_person_approves_and_denies_reviews_that_arrive_while_the_page_is_open() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start("reviews").await else {
        return;
    };
    let console = Console::start().await;
    assert_eq!(
        console.ask("49.99", "vendor:acme", "software").await["verdict"],
        "allow"
    );

    b.goto(&console.url()).await;
    b.viewport(1280, 800).await;
    b.wait_for("#key").await;
    b.screenshot("sign-in").await;
    // An agent key is refused in words, before it is sent anywhere.
    b.type_into("#key", &console.agent).await;
    b.click("#sign-in-form button[type=submit]").await;
    b.wait_text("#sign-in-error", "agent key").await;
    sign_in(&b, &console.sandbox).await;
    assert_eq!(b.text("#env-badge").await, "SANDBOX");
    assert!(b.text("#who").await.contains("acme"));
    assert!(b.find("#env-banner").await.is_some());
    b.wait_text("#no-reviews", "No reviews are waiting").await;
    key_only_in_session_storage(&b, &console.sandbox).await;

    // A review made while the page is open appears without a reload.
    let asked = console.ask("350", "vendor:airline", "travel").await;
    assert_eq!(asked["verdict"], "review", "{asked}");
    let original = asked["id"].as_str().unwrap().to_owned();
    let review = asked["review"]["id"].as_str().unwrap().to_owned();
    let card = format!("li[data-decision='{original}']");
    let text = b.text(&card).await;
    for shown in [
        "350 USD to vendor:airline",
        "agt_shopper",
        "travel",
        "amount 350 is above review_above 200 and needs a human review",
        "500 USD a transaction",
        "2000 USD a month",
        "review above 200 USD",
        "49.99 USD of 2000 USD this month",
        "23 h",
    ] {
        assert!(text.contains(shown), "{shown:?} not in the card: {text}");
    }
    b.screenshot("reviews").await;

    // Approve behind a confirmation that repeats amount and recipient.
    b.click(&format!("button[data-action='approve-{review}']"))
        .await;
    let dialog = b.text("#confirm").await;
    assert!(
        dialog.contains("Approve 350 USD to vendor:airline?"),
        "{dialog}"
    );
    assert_eq!(b.focused_id().await, "confirm-cancel");
    b.screenshot("confirm-approve").await;
    b.click("#confirm-ok").await;
    let outcome = b
        .wait_text(
            "#review-result .outcome h2",
            "Approved: 350 USD to vendor:airline",
        )
        .await;
    assert!(!outcome.contains("but"), "{outcome}");
    assert_eq!(b.text("#review-result .badge").await, "allow");
    let token = b
        .js(
            "return document.getElementById('fresh-token').value;",
            vec![],
        )
        .await
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(token.split('.').count(), 3, "{token}");
    // The card left the list.
    b.wait_text("#no-reviews", "No reviews are waiting").await;

    // Verify the fresh token in the page: it says what it checked.
    b.click("#verify-fresh").await;
    let checks = b
        .wait_text("#verification", "Valid: every check passed.")
        .await;
    for checked in [
        "Passed: Algorithm",
        "ES256",
        "Passed: Key id",
        "sandbox-",
        "Passed: Signature",
        "Passed: Issuer",
        "Passed: Expiry",
        "Passed: Decision",
    ] {
        assert!(checks.contains(checked), "{checked:?} not in: {checks}");
    }
    b.scroll_to("#review-result .outcome").await;
    b.screenshot("approved").await;

    // Through the API: the review is approved, the fresh decision supersedes the original,
    // and the token the page showed is that decision's, valid against the JWK Set.
    let read = console
        .call(
            "GET",
            &console.sandbox,
            &format!("/v1/decisions/{original}"),
            None,
        )
        .await;
    assert_eq!(read["review_status"], "approved", "{read}");
    let options = VerifyOptions {
        issuer: console.running.state.verdicts_url.clone(),
        now: time::OffsetDateTime::now_utc(),
        leeway_secs: 0,
    };
    let claims = verify_verdict(&token, &jwks(&console).await, &options).unwrap();
    assert_eq!(claims.verdict.as_str(), "allow");
    let fresh = console
        .call(
            "GET",
            &console.sandbox,
            &format!("/v1/decisions/{}", claims.jti),
            None,
        )
        .await;
    assert_eq!(fresh["supersedes"], original.as_str());

    // Deny with a reason, by keyboard alone; the reason is shown as text, nothing runs.
    let asked = console.ask("300", "vendor:hotel", "travel").await;
    let denied = asked["id"].as_str().unwrap().to_owned();
    let review = asked["review"]["id"].as_str().unwrap().to_owned();
    let deny = format!("button[data-action='deny-{review}']");
    b.wait_for(&deny).await;
    b.js(
        "document.querySelector(arguments[0]).focus();",
        vec![json!(deny)],
    )
    .await;
    b.keys(ENTER).await;
    b.wait_for("#confirm-reason").await;
    assert!(
        b.text("#confirm")
            .await
            .contains("Deny 300 USD to vendor:hotel?")
    );
    assert_eq!(b.focused_id().await, "confirm-reason");
    let reason = format!("{HOSTILE} over budget");
    b.keys(&reason).await;
    b.keys(TAB).await;
    assert_eq!(b.focused_id().await, "confirm-cancel");
    b.keys(TAB).await;
    assert_eq!(b.focused_id().await, "confirm-ok");
    b.keys(ENTER).await;
    b.wait_text(
        "#review-result .outcome h2",
        "Denied: 300 USD to vendor:hotel",
    )
    .await;
    let shown = b.text("#review-result .outcome").await;
    assert!(shown.contains(&reason), "{shown}");
    nothing_executed(&b).await;
    let read = console
        .call(
            "GET",
            &console.sandbox,
            &format!("/v1/decisions/{denied}"),
            None,
        )
        .await;
    assert_eq!(read["review_status"], "denied", "{read}");
    let events = console
        .call(
            "GET",
            &console.sandbox,
            "/v1/events?type=decision.resolved",
            None,
        )
        .await;
    assert!(
        events["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["data"]["id"] == review.as_str() && e["data"]["reason"] == reason.as_str()),
        "{events}"
    );

    // Decisions: the list with a filter, and the fresh decision's detail, whose token
    // (received in this tab) verifies; an altered token does not.
    b.goto(&format!("{}#decisions", console.url())).await;
    b.wait_for("#decision-table tbody tr").await;
    b.screenshot("decisions").await;
    b.js(
        "const s = document.getElementById('filter-verdict'); s.value = 'review';",
        vec![],
    )
    .await;
    b.click("#decision-filters button[type=submit]").await;
    b.wait_text(".count-line", "2 decisions shown").await;
    let verdicts = b
        .js(
            "return [...document.querySelectorAll('#decision-table tbody .badge')].map(e => e.textContent);",
            vec![],
        )
        .await;
    assert_eq!(verdicts, json!(["review", "review"]));
    // Each row says where its review stands: one approved, one denied, neither pending.
    let statuses = b
        .js(
            "return [...document.querySelectorAll('#decision-table tbody td.review-status')].map(e => e.textContent).sort();",
            vec![],
        )
        .await;
    assert_eq!(statuses, json!(["approved", "denied"]));
    // Times are shown in UTC, the zone named.
    let first_time = b.text("#decision-table tbody time").await;
    assert!(first_time.ends_with(" UTC"), "{first_time}");
    // The detail shows the token this tab received for the decision.
    b.goto(&format!("{}#decisions/{}", console.url(), claims.jti))
        .await;
    b.wait_text("#screen h1", claims.jti.as_str()).await;
    let shown = b
        .js("return document.getElementById('token').value;", vec![])
        .await;
    assert_eq!(shown, token.as_str());
    b.click("#verify").await;
    b.wait_text("#verification", "Valid: every check passed.")
        .await;
    b.scroll_to("#verification").await;
    b.screenshot("decision").await;
    // One character inside the signature, not the last: the last of 86 base64url
    // characters carries only 2 bits, so changing it may leave the bytes unchanged.
    let mut altered = token.clone().into_bytes();
    let at = altered.len() - 10;
    altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    b.type_into("#token", &altered).await;
    b.click("#verify").await;
    let checks = b.wait_text("#verification", "Not valid").await;
    assert!(checks.contains("Failed: Signature"), "{checks}");
    // The signature's last character with a low bit set that carries no data: the same
    // bytes to a lenient decoder, refused by a strict one (as mandate-core decodes).
    b.type_into("#token", &token).await;
    b.click("#verify").await;
    b.wait_text("#verification", "Valid: every check passed.")
        .await;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut padded = token.clone().into_bytes();
    let last = padded.pop().unwrap();
    let value = ALPHABET.iter().position(|c| *c == last).unwrap();
    padded.push(ALPHABET[value ^ 1]);
    let padded = String::from_utf8(padded).unwrap();
    b.type_into("#token", &padded).await;
    b.click("#verify").await;
    let checks = b.wait_text("#verification", "Not valid").await;
    assert!(checks.contains("Failed: Signature"), "{checks}");
    // The original decision, which this tab never received, shows its own token as the API
    // reads it back: signed by this server and this decision's, a review (no authorization
    // to pay), and it links to the fresh decision its approval made.
    b.goto(&format!("{}#decisions/{original}", console.url()))
        .await;
    b.wait_text("#screen h1", &original).await;
    let stored = b
        .js("return document.getElementById('token').value;", vec![])
        .await;
    let stored = stored.as_str().unwrap_or_default().to_owned();
    assert_eq!(stored.split('.').count(), 3, "{stored}");
    assert_ne!(stored, token);
    b.click("#verify").await;
    let checks = b.wait_text("#verification", "Not valid").await;
    assert!(checks.contains("Passed: Signature"), "{checks}");
    assert!(checks.contains("Passed: Decision"), "{checks}");
    assert!(checks.contains("Failed: Verdict"), "{checks}");
    let resolution = b
        .js(
            "return document.getElementById('resolution').textContent;",
            vec![],
        )
        .await;
    assert_eq!(resolution, json!(claims.jti.as_str()));
    // The token of another decision is refused as not this decision's.
    b.type_into("#token", &token).await;
    b.click("#verify").await;
    let checks = b.wait_text("#verification", "Not valid").await;
    assert!(checks.contains("Failed: Decision"), "{checks}");
    assert!(checks.contains("Passed: Signature"), "{checks}");

    // At phone width nothing spills sideways.
    console.ask("250", "vendor:rail", "travel").await;
    b.viewport(390, 844).await;
    b.goto(&format!("{}#reviews", console.url())).await;
    b.wait_for("#review-list li").await;
    let overflow = b
        .js(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
            vec![],
        )
        .await;
    assert_eq!(overflow, 0, "the page is wider than a phone");
    b.screenshot("phone").await;
    b.viewport(1280, 800).await;

    // Signing out forgets the key.
    b.click("#sign-out").await;
    b.wait_for("#key").await;
    let left = b
        .js(
            "return sessionStorage.length + localStorage.length + document.cookie.length;",
            vec![],
        )
        .await;
    assert_eq!(left, 0);
    nothing_executed(&b).await;
    b.quit().await;
}

#[tokio::test]
async fn a_person_revokes_a_mandate_and_switches_enforcement_in_sandbox_and_live() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start("mandates and enforcement").await else {
        return;
    };
    let console = Console::start().await;
    b.goto(&console.url()).await;
    b.viewport(1280, 800).await;
    sign_in(&b, &console.sandbox).await;

    // Agents and mandates: lists and details; revoke behind a confirmation.
    b.click("nav a[href='#agents']").await;
    b.click("a[href='#agents/agt_shopper']").await;
    b.wait_text("#screen h1", "Agent agt_shopper").await;
    b.click("nav a[href='#mandates']").await;
    b.wait_text("#screen h1", "Mandates").await;
    let mandate = b
        .js(
            "return document.querySelector('tr[data-mandate]').dataset.mandate;",
            vec![],
        )
        .await
        .as_str()
        .unwrap()
        .to_owned();
    b.click(&format!("a[href='#mandates/{mandate}']")).await;
    assert_eq!(b.text("#mandate-status").await, "active");
    b.click("#revoke").await;
    let dialog = b.text("#confirm").await;
    assert!(
        dialog.contains(&format!(
            "Revoke {mandate} of agt_shopper in the sandbox environment?"
        )) && dialog.contains("deny_revoked"),
        "{dialog}"
    );
    b.click("#confirm-ok").await;
    b.wait_text("#mandate-status", "revoked").await;
    let read = console
        .call(
            "GET",
            &console.sandbox,
            &format!("/v1/mandates/{mandate}"),
            None,
        )
        .await;
    assert_eq!(read["status"], "revoked");
    assert_eq!(
        console.ask("10", "vendor:acme", "software").await["verdict"],
        "deny_revoked"
    );

    // Enforcement: the mode and since when; a switch naming environment and consequence.
    b.click("nav a[href='#enforcement']").await;
    assert_eq!(b.text("#mode").await, "enforce");
    b.click("#switch-mode").await;
    let dialog = b.text("#confirm").await;
    assert!(
        dialog.contains("Switch the SANDBOX environment of acme from enforce to observe?")
            && dialog.contains("nothing is blocked"),
        "{dialog}"
    );
    b.click("#confirm-ok").await;
    b.wait_text("#mode", "observe").await;
    let mode = console
        .call("GET", &console.sandbox, "/v1/enforcement", None)
        .await;
    assert_eq!(mode["mode"], "observe", "{mode}");
    // Cancelling changes nothing.
    b.click("#switch-mode").await;
    b.click("#confirm-cancel").await;
    assert_eq!(b.text("#mode").await, "observe");

    // The live environment is marked unmistakably.
    b.click("#sign-out").await;
    sign_in(&b, &console.live).await;
    assert_eq!(b.text("#env-badge").await, "LIVE");
    assert!(b.text("#env-banner").await.contains("LIVE environment"));
    let live = b
        .js("return document.body.classList.contains('live');", vec![])
        .await;
    assert_eq!(live, Value::Bool(true));
    b.click("nav a[href='#enforcement']").await;
    assert_eq!(b.text("#mode").await, "observe");
    b.click("#switch-mode").await;
    assert!(
        b.text("#confirm")
            .await
            .contains("Switch the LIVE environment of acme from observe to enforce?")
    );
    b.screenshot("live-enforcement").await;
    b.click("#confirm-ok").await;
    b.wait_text("#mode", "enforce").await;
    let mode = console
        .call("GET", &console.live, "/v1/enforcement", None)
        .await;
    assert_eq!(mode["mode"], "enforce");
    key_only_in_session_storage(&b, &console.live).await;
    nothing_executed(&b).await;
    b.quit().await;
}

#[tokio::test]
async fn hostile_text_is_shown_as_text_and_nothing_runs() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(b) = Browser::start("hostile text").await else {
        return;
    };
    let console = Console::start().await;
    // Such a recipient never gets in: the API refuses it at the edge.
    let refused = console
        .ask("1", &format!("vendor:{HOSTILE}"), "software")
        .await;
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("recipient")
    );

    b.goto(&console.url()).await;
    sign_in(&b, &console.sandbox).await;
    // A crafted link: the id comes back in the server's error message, shown as words
    // with the request id.
    let link = format!(
        "{}#decisions/{}",
        console.url(),
        HOSTILE.replace(' ', "%20")
    );
    b.goto(&link).await;
    let notice = b.wait_text("#notice", "no decision with id").await;
    assert!(
        notice.contains(&format!("no decision with id {HOSTILE}")),
        "{notice}"
    );
    assert!(notice.contains("HTTP 404, not_found") && notice.contains("Request id: req_"));
    nothing_executed(&b).await;
    // A filter typed by a person: sent as a query value, never markup.
    b.goto(&format!("{}#decisions", console.url())).await;
    b.type_into("#filter-agent", HOSTILE).await;
    b.click("#decision-filters button[type=submit]").await;
    b.wait_text(".count-line", "No decision matches").await;
    nothing_executed(&b).await;

    // Defence in depth: even markup put into the page by script runs no inline handler.
    let ran = b
        .js(
            "document.body.insertAdjacentHTML('beforeend', '<img id=probe src=x onerror=\"window.pwned = 1\">'); \
             return new Promise(done => setTimeout(() => { document.getElementById('probe').remove(); done(window.pwned === 1); }, 300));",
            vec![],
        )
        .await;
    assert_eq!(ran, Value::Bool(false), "an inline handler ran");
    b.quit().await;
}
