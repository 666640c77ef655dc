//! What `openapi.yaml` declares valid is what the server accepts, at the edges the
//! schemas state: amounts, cursors, webhook URLs. Also that the document declares the
//! `Idempotency-Replayed` header and describes the public host's endpoints as served.
//! `.ci/contract.py` holds every operation to the same rule with schemathesis's
//! positive-data check; these tests pin the edges down in the test suite.

use std::collections::BTreeSet;

use mandate_server::model::Env;
use mandate_server::routes::public::OPENAPI;
use regex::Regex;
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::spawn_app;

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The lines of the document under the mapping keys `keys` (from the top, two spaces a
/// level), the last key's own line included.
fn block(keys: &[&str]) -> String {
    let lines: Vec<&str> = OPENAPI.lines().collect();
    let (mut start, mut end) = (0, lines.len());
    for (depth, key) in keys.iter().enumerate() {
        let own = format!("{key}:");
        let at = (start..end)
            .find(|&i| {
                let line = lines[i];
                indent(line) == depth * 2
                    && (line.trim() == own || line.trim().starts_with(&format!("{own} ")))
            })
            .unwrap_or_else(|| panic!("openapi.yaml has no {}", keys[..=depth].join("/")));
        end = (at + 1..end)
            .find(|&i| !lines[i].trim().is_empty() && indent(lines[i]) <= depth * 2)
            .unwrap_or(end);
        start = at;
    }
    lines[start..end].join("\n")
}

/// The scalar value of the first `name:` inside `text`, unquoted.
fn scalar(text: &str, name: &str) -> String {
    let prefix = format!("{name}: ");
    let raw = text
        .lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"));
    if let Some(single) = raw.strip_prefix('\'') {
        single.strip_suffix('\'').unwrap().replace("''", "'")
    } else if let Some(double) = raw.strip_prefix('"') {
        double.strip_suffix('"').unwrap().replace("\\\\", "\\")
    } else {
        raw.to_owned()
    }
}

fn pattern(text: &str) -> Regex {
    Regex::new(&scalar(text, "pattern")).unwrap()
}

#[mandate_test_macros::on_each_engine]
async fn an_amount_is_valid_exactly_up_to_the_declared_maximum_and_decimal_places() {
    let amount = block(&["components", "schemas", "Amount"]);
    let nullable = block(&["components", "schemas", "NullableAmount"]);
    let maximum = scalar(&amount, "maximum");
    let step = scalar(&amount, "multipleOf");
    assert_eq!(scalar(&nullable, "maximum"), maximum);
    assert_eq!(scalar(&nullable, "multipleOf"), step);
    assert_eq!(scalar(&amount, "minimum"), "0");
    // The step is one unit in the last of 18 decimal places.
    assert_eq!(step, format!("0.{}1", "0".repeat(17)));
    // The maximum, written out plus one (its last digit is not a 9).
    let last = maximum.chars().last().unwrap().to_digit(10).unwrap();
    assert!(last < 9);
    let over = format!("{}{}", &maximum[..maximum.len() - 1], last + 1);

    let app = spawn_app().await;
    let org = &app.org.sandbox;
    app.agent(org, "edges").await;
    let mandate = |per_transaction: &str| {
        format!(
            r#"{{"agent": "agt_edges", "limits": {{"per_transaction": {per_transaction}, "currency": "USD"}},
                "categories": ["software"], "expires": "2099-12-31"}}"#
        )
    };
    let smallest = step.clone();
    let finer = format!("0.{}1", "0".repeat(18));
    for (value, accepted) in [
        ("0", true),
        (smallest.as_str(), true),
        (maximum.as_str(), true),
        (finer.as_str(), false),
        (over.as_str(), false),
    ] {
        let r = app.post_text(org, "/v1/mandates", &mandate(value)).await;
        if accepted {
            assert_eq!(r.status, 201, "{value}: {}", r.text);
            let echoed = r.body["limits"]["per_transaction"].to_string();
            assert_eq!(echoed, value);
        } else {
            let message = r.assert_error(400, "invalid_request");
            assert!(message.contains("too many digits"), "{value}: {message}");
        }
    }
}

#[mandate_test_macros::on_each_engine]
async fn only_a_cursor_of_the_declared_form_can_be_valid() {
    let cursor = block(&["components", "parameters", "Cursor"]);
    let declared = pattern(&cursor);
    let longest: usize = scalar(&cursor, "maxLength").parse().unwrap();
    let envelope = block(&["components", "schemas", "ListEnvelope"]);
    assert_eq!(scalar(&envelope, "pattern"), declared.as_str());

    let app = spawn_app().await;
    let org = &app.org.sandbox;
    app.agent(org, "one").await;
    app.agent(org, "two").await;
    let first = app.get(org, "/v1/agents?limit=1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    let issued = first.body["next_cursor"].as_str().unwrap().to_owned();
    assert!(declared.is_match(&issued), "{issued}");
    assert!(issued.len() <= longest);
    let second = app
        .get(org, &format!("/v1/agents?limit=1&cursor={issued}"))
        .await;
    assert_eq!(second.status, 200, "{}", second.text);

    // The forms the server refuses whatever their content are outside the declared form.
    for refused in ["", "cur_", "cur_.", "x", "cur_abc"] {
        assert!(!declared.is_match(refused), "{refused:?}");
        let r = app.get(org, &format!("/v1/agents?cursor={refused}")).await;
        assert_eq!(
            r.assert_error(400, "invalid_request"),
            "cursor expired or malformed"
        );
    }
}

#[mandate_test_macros::on_each_engine]
async fn a_webhook_url_is_valid_exactly_when_it_has_the_declared_form() {
    let url = block(&[
        "components",
        "schemas",
        "WebhookRequest",
        "properties",
        "url",
    ]);
    let declared = pattern(&url);
    assert_eq!(scalar(&url, "maxLength"), "2048");

    let accepted = [
        "https://hooks.example.com/mandate?x=1",
        "HTTPS://Hooks.Example.COM:8443/a#b",
        "https://a-b.c-d/e%20f?g=h&i=[j]",
        "https://1.example/",
        "https://93.184.216.34/hook",
        "https://8.8.8.8:65535",
        "https://172.32.0.1/",
        "https://100.128.0.1/",
        "https://192.0.1.1/",
        "http://127.0.0.1:9/hook",
        "HTTP://127.255.0.9",
        "http://localhost:1/",
        "http://[::1]/",
        "https://a.localhost/x",
    ];
    let refused = [
        "HTTP://0",
        "https://127.1/",
        "https://0x7f000001/",
        "https://2130706433/",
        "https://0177.0.0.1/",
        "https://127.0.0.1./",
        "https://a.0x1/",
        "https://a.123/",
        "http://hooks.example.com/",
        "http://10.0.0.1/",
        "https://10.0.0.1/",
        "https://169.254.169.254/latest",
        "https://100.64.0.1/",
        "https://172.16.0.1/",
        "https://192.168.1.1/",
        "https://192.0.0.1/",
        "https://198.18.0.1/",
        "https://224.0.0.1/",
        "https://0.0.0.0/",
        "https://[::]/",
        "https://[fd00:ec2::254]/",
        "https://user:pw@example.com/",
        "https://exa mple.com/",
        "https://example.com\\@127.0.0.1/",
        "https://example.com:65536/",
        "https://xn--a.com/",
        "https://198.49.118.35*",
        "https://a_b.example/",
        "https://ex%61mple.com/",
        "https://a..example/",
        "https://example.com./",
        "https://a-.example/",
        "https://a--b.example/",
        "https://a.1b/",
        "https://example.com:080/",
        "https://example.com:/",
        "https:///example.com/",
        "https://@example.com/",
        "https://b\u{fc}cher.example/",
        "https://example.com/caf\u{e9}",
        "ftp://example.com/",
        "example.com",
        "https://",
        "",
    ];
    // The forms the server takes that the pattern leaves out, as its description says: a
    // public IPv6 address, and an internationalized name in its xn-- form.
    let server_only = [
        "https://[2606:4700::1111]/",
        "https://xn--bcher-kva.example/",
    ];
    let app = spawn_app().await;
    let org = &app.org.sandbox;
    for (urls, server, pattern) in [
        (&accepted[..], true, true),
        (&refused[..], false, false),
        (&server_only[..], true, false),
    ] {
        for url in urls {
            let r = app
                .post(
                    org,
                    "/v1/webhooks",
                    json!({ "url": url, "events": ["ping"] }),
                )
                .await;
            assert_eq!(r.status == 201, server, "{url}: {}", r.text);
            assert_eq!(
                declared.is_match(url),
                pattern,
                "{url}: the declared pattern"
            );
        }
    }
}

/// The declared pattern takes an IPv4 address exactly when the server's URL rules do, for
/// every first and second part and each third part where a refused range starts or ends
/// (192.0.0/24, 192.0.2/24, 198.51.100/24, 203.0.113/24 turn on the third). The addresses a
/// server refuses and the pattern took were what schemathesis's positive-data check found.
#[test]
fn the_declared_webhook_pattern_takes_exactly_the_ipv4_addresses_the_server_takes() {
    let declared = pattern(&block(&[
        "components",
        "schemas",
        "WebhookRequest",
        "properties",
        "url",
    ]));
    let mut differ = Vec::new();
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            for c in [0u8, 1, 2, 3, 99, 100, 101, 112, 113, 114, 255] {
                let url = format!("https://{a}.{b}.{c}.7/hook");
                let server = mandate_server::ssrf::check_url(&url, Env::Sandbox).is_ok();
                if declared.is_match(&url) != server {
                    differ.push(format!("{url} (server takes it: {server})"));
                }
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} differ: {:?}",
        differ.len(),
        &differ[..differ.len().min(20)]
    );
}

#[test]
fn every_post_declares_idempotency_replayed_on_its_answers() {
    let header = block(&["components", "headers", "Idempotency-Replayed"]);
    assert!(header.contains(r#"enum: ["true"]"#), "{header}");
    let replayed = r##"$ref: "#/components/headers/Idempotency-Replayed""##;
    // The 4xx a handler gives are kept and replayed; 401 and 429 come before and are not.
    for name in [
        "BadRequest",
        "Forbidden",
        "NotFound",
        "Conflict",
        "EscrowMoved",
    ] {
        let response = block(&["components", "responses", name]);
        assert!(response.contains(replayed), "{name}");
    }
    for name in ["Unauthorized", "RateLimited", "ServerError"] {
        let response = block(&["components", "responses", name]);
        assert!(!response.contains(replayed), "{name}");
    }
    let paths = block(&["paths"]);
    let mut posts = 0;
    for path in paths
        .lines()
        .filter(|l| indent(l) == 2)
        .map(|l| l.trim().trim_end_matches(':'))
    {
        let item = block(&["paths", path]);
        if !item.lines().any(|l| indent(l) == 4 && l.trim() == "post:") {
            continue;
        }
        posts += 1;
        let responses = block(&["paths", path, "post", "responses"]);
        let success = responses
            .lines()
            .filter(|l| indent(l) == 8)
            .map(|l| l.trim().trim_end_matches(':').trim_matches('"'))
            .find(|status| status.starts_with('2'))
            .unwrap_or_else(|| panic!("POST {path} has no success"));
        let answer = block(&[
            "paths",
            path,
            "post",
            "responses",
            &format!("\"{success}\""),
        ]);
        assert!(
            answer.contains(replayed) || answer.contains("#/components/responses/EscrowMoved"),
            "POST {path} {success}"
        );
    }
    assert_eq!(posts, 14);
}

#[mandate_test_macros::on_each_engine]
async fn the_public_hosts_endpoints_are_described_beside_the_paths() {
    // Outside `paths` (the 29 operations), each with its own server.
    let paths = block(&["paths"]);
    assert!(!paths.contains("well-known"));
    let jwks = block(&["components", "pathItems", "JwkSet"]);
    let document = block(&["components", "pathItems", "OpenApiDocument"]);
    let redirect = block(&["components", "pathItems", "JwkSetRedirect"]);
    for item in [&jwks, &document, &redirect] {
        assert!(
            item.contains("servers:") && item.contains("security: []"),
            "{item}"
        );
    }
    assert!(jwks.contains("/.well-known/jwks.json") && jwks.contains(r#""200":"#));
    assert!(jwks.contains(r##"$ref: "#/components/schemas/JwkSet""##));
    assert!(jwks.contains(r#"enum: ["public, max-age=300"]"#));
    assert!(document.contains("/openapi.yaml") && document.contains("application/yaml:"));
    assert!(redirect.contains(r#""308":"#) && redirect.contains("Location:"));

    let app = spawn_app().await;
    // The served key set has exactly the members the document's `Jwk` requires, of the
    // declared forms.
    let jwk = block(&["components", "schemas", "Jwk"]);
    assert!(jwk.contains("additionalProperties: false"));
    let members: BTreeSet<String> = scalar(&jwk, "required")
        .trim_matches(['[', ']'])
        .split(", ")
        .map(str::to_owned)
        .collect();
    let kid = pattern(&block(&[
        "components",
        "schemas",
        "Jwk",
        "properties",
        "kid",
    ]));
    let x = pattern(&block(&["components", "schemas", "Jwk", "properties", "x"]));
    let r = app
        .send(
            Method::GET,
            None,
            &format!("{}/.well-known/jwks.json", app.public),
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("cache-control"), Some("public, max-age=300"));
    let keys = r.body["keys"].as_array().unwrap();
    assert!(!keys.is_empty());
    // The log keys are of the document's `LogJwk` (docs/audit.md): no `alg`.
    for key in keys.iter().filter(|k| k["use"] == "tlog-checkpoint") {
        let served: BTreeSet<String> = key.as_object().unwrap().keys().cloned().collect();
        let mut expected = members.clone();
        expected.remove("alg");
        assert_eq!(served, expected);
    }
    for key in keys.iter().filter(|k| k["use"] != "tlog-checkpoint") {
        let served: BTreeSet<String> = key.as_object().unwrap().keys().cloned().collect();
        assert_eq!(served, members);
        assert!(kid.is_match(key["kid"].as_str().unwrap()), "{key}");
        assert!(x.is_match(key["x"].as_str().unwrap()) && x.is_match(key["y"].as_str().unwrap()));
        assert_eq!(
            (&key["kty"], &key["crv"], &key["use"], &key["alg"]),
            (
                &json!("EC"),
                &json!("P-256"),
                &json!("sig"),
                &json!("ES256")
            )
        );
    }
    // The API host's one keyless answer, as described.
    let r = app
        .send(Method::GET, None, "/.well-known/jwks.json", None, &[])
        .await;
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("{}/.well-known/jwks.json", app.issuer()).as_str())
    );
    assert_eq!(r.body, Value::Null);
}

/// The declared x402 asset (its pattern, minus what its `not` excludes) takes a spelling
/// exactly when the server reads it as an asset, a fiat code Mandate does not know aside
/// (a rule about the value, not its shape). Valid spellings of every shape, each edited at
/// random many times over, probe the edges; a spelling the server refused and the pattern
/// took is what schemathesis's positive-data check found.
#[test]
fn the_declared_x402_asset_takes_exactly_the_spellings_the_server_reads() {
    let schema = block(&["components", "schemas", "X402Asset"]);
    let declared = pattern(&schema);
    let excluded: Vec<Regex> = schema
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- pattern: "))
        .map(|raw| Regex::new(&scalar(&format!("pattern: {raw}"), "pattern")).unwrap())
        .collect();
    assert_eq!(excluded.len(), 2, "{schema}");
    assert_eq!(scalar(&schema, "maxLength"), "512");
    let takes =
        |asset: &str| declared.is_match(asset) && !excluded.iter().any(|r| r.is_match(asset));
    let reads = |asset: &str| {
        let requirements = json!({
            "scheme": "exact", "network": "eip155:8453", "asset": asset,
            "amount": "1", "payTo": "0x0000000000000000000000000000000000000001",
        });
        match mandate_core::PaymentRequirements::from_json(&requirements, "x402") {
            Ok(_) => true,
            Err(e) => e
                .to_string()
                .contains("is not an ISO 4217 currency code Mandate knows"),
        }
    };
    let seeds = [
        "USD",
        " eur ",
        "iso4217:JPY",
        "ISO4217:  usd",
        "AAA",
        "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "0x2",
        "0x2::sui::SUI",
        "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
        "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t",
        "CCW67TSZV3SSS2HXMBQ5JFGCKJNXKZM7UQUWUZPUTHXSTZLEO7SJMI75",
        "GA5ZSEJYB37JRC5AVCIA5MOP4RHTM335X2KGX3IHOJAPP5RE34K4KZVN",
        "31566704",
        "0.0.456858",
        "keeta_aabszvnsiebutq7cdv5ydtkswz2pmzrbppuvqfbnnkhqlqjhfzkxrkk3qqzt4",
        "eip155:8453/erc20:0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "bip122:000000000019d6689c085ae165831e93/slip44:0",
        "swift:0/iso4217:EUR",
        "swift:0/iso4217:EUR/1",
        "cosmos:cosmoshub-4/slip44:118/a.b%2",
        "eip155:1/iso4217:usd",
    ];
    // Near misses of each shape, refused by both.
    for asset in [
        "iso4217:0/slip44:0",
        "ISO4217:eip155/erc20:0x1",
        "swift:0/iso4217:EU",
        "swift:0/iso4217:EURO/1",
        "swift:0/iso4217:E1R",
        "iso-4217:EUR",
        "EU R",
        "USDC",
        "978",
        "0x",
        "0x2::sui",
        "0.0",
        "keeta_short",
        "\u{ff25}\u{ff35}\u{ff32}",
        "EUR\u{200b}",
    ] {
        assert!(!takes(asset), "{asset:?}: the declared pattern takes it");
        assert!(!reads(asset), "{asset:?}: the server reads it");
    }
    // Edits draw from the characters every shape turns on.
    let pool: Vec<char> = "aAzZ09x:/._- %GCk4217iIsSoO\u{e9}\u{200b}\""
        .chars()
        .collect();
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |below: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % below as u64) as usize
    };
    let mut differ = Vec::new();
    let mut checked = 0;
    for seed in seeds {
        assert!(takes(seed) && reads(seed), "{seed}: a valid seed");
        for _ in 0..3_000 {
            let mut chars: Vec<char> = seed.chars().collect();
            for _ in 0..1 + next(3) {
                let at = next(chars.len() + 1);
                match next(4) {
                    0 if at < chars.len() => {
                        chars.remove(at);
                    }
                    1 if at < chars.len() => chars[at] = pool[next(pool.len())],
                    2 => chars.insert(at, chars.get(at).copied().unwrap_or('a')),
                    _ => chars.insert(at, pool[next(pool.len())]),
                }
            }
            let asset: String = chars.into_iter().collect();
            if asset.is_empty() {
                continue;
            }
            checked += 1;
            if takes(&asset) != reads(&asset) {
                differ.push(format!("{asset:?} (server reads it: {})", reads(&asset)));
            }
        }
    }
    assert!(checked > 50_000, "{checked}");
    assert!(
        differ.is_empty(),
        "{} differ: {:?}",
        differ.len(),
        &differ[..differ.len().min(20)]
    );
}
