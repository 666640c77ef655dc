//! Every old decision as the release exported it, and its token still verifying; the
//! export mark continuing (the README's checks 2 and 3).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mandate_core::{JwkSet, VerifyOptions, verify_verdict};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::fixture::{Export, Fixture};
use crate::server::Server;

/// Members a decision's read gained after the release (#50 item 2): a resolved review's
/// decision now also carries when it was resolved and the reviewer's reason. The export
/// line of the new build is the release's with these inserted, byte for byte otherwise.
const ADDED_SINCE_THE_RELEASE: &[&str] = &["review_reason", "review_resolved_at"];

/// `GET /v1/exports/decisions[?after=…]` of `export`'s organization and environment, its
/// lines.
pub async fn export_lines(server: &Server, export: &Export, after: Option<&str>) -> Vec<String> {
    let path = match after {
        Some(id) => format!("/v1/exports/decisions?after={id}"),
        None => "/v1/exports/decisions".to_owned(),
    };
    let r = server.get(&export.key, &path).await;
    assert_eq!(r.status, 200, "{} GET {path}: {}", export.name, r.text);
    r.text.lines().map(str::to_owned).collect()
}

/// The `id` of an export line.
pub fn id_of(line: &str) -> String {
    let value: Value = serde_json::from_str(line).expect("an export line is JSON");
    value["id"].as_str().expect("an id").to_owned()
}

/// The export answers each old decision as the release did, in the release's order: its
/// line byte for byte, once [`ADDED_SINCE_THE_RELEASE`] members are taken out (a pending
/// review may read as expired once its 24 hours have passed). Every token verifies against
/// the JWK Set the release published, and against the server's for a key it still
/// publishes.
pub async fn assert_old_lines(server: &Server, fixture: &Fixture, export: &Export) {
    let published = JwkSet::from_json(server.jwks().await.to_string().as_bytes()).unwrap();
    let released = JwkSet::from_json(fixture.jwks.to_string().as_bytes()).unwrap();
    let now = OffsetDateTime::now_utc();
    settle_expired_reviews(server, export, now).await;
    let lines = export_lines(server, export, None).await;
    assert_eq!(
        lines.len(),
        export.lines.len(),
        "{}: the export has {} decisions, the release exported {}",
        export.name,
        lines.len(),
        export.lines.len()
    );
    for (old, new) in export.lines.iter().zip(&lines) {
        assert_eq!(
            without_added(new),
            as_now(old, now),
            "{}: an old decision's export line changed",
            export.name
        );
        let token = token_of(old);
        verify_old(&token, &released, &id_of(old));
        if published.find(&kid_of(&token)).is_some() {
            verify_old(&token, &published, &id_of(old));
        }
    }
}

/// `line` without the members [`ADDED_SINCE_THE_RELEASE`], each checked to belong to a
/// resolved review's decision.
fn without_added(line: &str) -> String {
    let value: Value = serde_json::from_str(line).unwrap();
    let mut text = without_log(line);
    for member in ADDED_SINCE_THE_RELEASE {
        let Some(added) = value.get(*member) else {
            continue;
        };
        assert!(
            ["approved", "denied", "expired"].contains(&value["review_status"].as_str().unwrap()),
            "{member} on a decision whose review is not resolved: {line}"
        );
        let fragment = format!(",\"{member}\":{added}");
        assert_eq!(text.matches(&fragment).count(), 1, "{fragment} in {line}");
        text = text.replacen(&fragment, "", 1);
    }
    text
}

/// `line` without its `log` member (the decision log's entry, added since the release: `null`
/// until a checkpoint covers the decision, then its index, checkpoint and proof), cut out of
/// the text where it stands so that the rest is compared byte for byte.
fn without_log(line: &str) -> String {
    const MEMBER: &str = ",\"log\":";
    let Some(start) = line.find(MEMBER) else {
        return line.to_owned();
    };
    let rest = &line[start + MEMBER.len()..];
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    values
        .next()
        .expect("the log member's value")
        .expect("JSON");
    let end = start + MEMBER.len() + values.byte_offset();
    assert_eq!(line.matches(MEMBER).count(), 1, "one log member in {line}");
    format!("{}{}", &line[..start], &line[end..])
}

/// The release's `line` as the export reads at `now`: a review pending then is expired
/// once its `review_expires_at` has passed (the new server's timers expire it at start).
fn as_now(line: &str, now: OffsetDateTime) -> String {
    let value: Value = serde_json::from_str(line).unwrap();
    match review_expiry(&value) {
        Some(expires) if value["review_status"] == "pending" && expires <= now => line.replacen(
            "\"review_status\":\"pending\"",
            "\"review_status\":\"expired\"",
            1,
        ),
        _ => line.to_owned(),
    }
}

/// Waits (up to 30 s) until every review the release left pending and whose 24 hours have
/// passed by `now` reads as expired: the new server's timers expire it after its start.
async fn settle_expired_reviews(server: &Server, export: &Export, now: OffsetDateTime) {
    for line in &export.lines {
        let value: Value = serde_json::from_str(line).unwrap();
        if value["review_status"] != "pending" || review_expiry(&value).is_none_or(|at| at > now) {
            continue;
        }
        let path = format!("/v1/decisions/{}", id_of(line));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let r = server.get(&export.key, &path).await;
            assert_eq!(r.status, 200, "GET {path}: {}", r.text);
            if r.body["review_status"] == "expired" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the review of {path}, past its 24 hours, is still {}",
                r.body["review_status"]
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// When a decision's review expires, if it opened one.
pub fn review_expiry(decision: &Value) -> Option<OffsetDateTime> {
    decision["review_expires_at"]
        .as_str()
        .map(|at| OffsetDateTime::parse(at, &Rfc3339).expect("review_expires_at is RFC 3339"))
}

/// The `verdict_token` of an export line.
pub fn token_of(line: &str) -> String {
    let value: Value = serde_json::from_str(line).unwrap();
    value["verdict_token"].as_str().expect("a token").to_owned()
}

/// The `kid` of a token's header.
pub fn kid_of(token: &str) -> String {
    part(token, 0)["kid"].as_str().expect("a kid").to_owned()
}

/// Part `n` of a compact JWS, decoded (no verification).
fn part(token: &str, n: usize) -> Value {
    let segment = token.split('.').nth(n).expect("a compact JWS");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(segment).expect("base64url")).unwrap()
}

/// Verifies an old verdict token (expired five minutes after it was made: checked at its
/// own `iat`) against `jwks`, for decision `id`, issued by the issuer it names.
fn verify_old(token: &str, jwks: &JwkSet, id: &str) {
    let claims = part(token, 1);
    let options = VerifyOptions {
        issuer: claims["iss"].as_str().unwrap().to_owned(),
        now: OffsetDateTime::from_unix_timestamp(claims["iat"].as_i64().unwrap()).unwrap(),
        leeway_secs: 0,
    };
    let verified = verify_verdict(token, jwks, &options)
        .unwrap_or_else(|e| panic!("the token of {id} does not verify: {e}"));
    assert_eq!(verified.jti.as_str(), id);
}

/// Verifies a token the new server just signed against its JWK Set, now, by key `kid`;
/// returns its claims' decision id.
pub fn verify_new(token: &str, published: &Value, kid: &str) -> String {
    assert_eq!(kid_of(token), kid, "a new decision signed by another key");
    let jwks = JwkSet::from_json(published.to_string().as_bytes()).unwrap();
    let claims = part(token, 1);
    let options = VerifyOptions {
        issuer: claims["iss"].as_str().unwrap().to_owned(),
        now: OffsetDateTime::now_utc(),
        leeway_secs: 5,
    };
    let verified = verify_verdict(token, &jwks, &options)
        .unwrap_or_else(|e| panic!("a new verdict token does not verify: {e}"));
    verified.jti.as_str().to_owned()
}

/// `after=` the export mark answers exactly the decisions made after it, in order (before
/// anything is made on the new build).
pub async fn assert_mark(server: &Server, export: &Export) {
    let after: Vec<String> = export_lines(server, export, export.after.as_deref())
        .await
        .iter()
        .map(|l| id_of(l))
        .collect();
    assert_eq!(
        after, export.then,
        "{}: after={:?} is not what followed the mark",
        export.name, export.after
    );
}

/// The key the release signed `export`'s last decision with: the environment's current
/// signing key, which the new build must still hold (sealed under the key-encryption key).
pub fn current_kid(export: &Export) -> String {
    kid_of(&token_of(export.lines.last().expect("an export line")))
}
