//! The published contract (`openapi.yaml`) and the router agree, in both directions: the
//! document, the routers' source and the running server are each compared with the one
//! table of operations, `mandate_server::routes::ROUTES` (29 operations across 23 paths).
//! Adding a route without documenting it, or documenting one that is not served, fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use mandate_server::routes::ROUTES;
use mandate_server::routes::public::OPENAPI;
use reqwest::Method;

use crate::helpers::spawn_app;

type Ops = BTreeSet<(String, String)>;

const METHODS: [&str; 8] = [
    "get", "post", "put", "patch", "delete", "head", "options", "trace",
];

fn table() -> Ops {
    ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect()
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The operations of the document with their status codes: a strict reader of the block
/// layout of `paths:` (two spaces a level). Anything it does not expect fails the test,
/// so it cannot silently miss an operation (`.ci/run` also validates the document).
fn document() -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut ops = BTreeMap::new();
    let mut in_paths = false;
    let (mut path, mut op): (Option<String>, Option<(String, String)>) = (None, None);
    let mut in_responses = false;
    for (n, line) in OPENAPI.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let depth = indent(line);
        if depth == 0 {
            in_paths = trimmed == "paths:";
            continue;
        }
        if !in_paths {
            continue;
        }
        let key = trimmed.strip_suffix(':');
        match depth {
            2 => {
                let key = key.unwrap_or_else(|| panic!("line {}: expected a path", n + 1));
                assert!(key.starts_with("/v1/"), "line {}: path {key}", n + 1);
                path = Some(key.to_owned());
                op = None;
            }
            4 => {
                let key = key.unwrap_or_else(|| panic!("line {}: expected a method", n + 1));
                if METHODS.contains(&key) {
                    let current = (key.to_uppercase(), path.clone().unwrap());
                    assert!(
                        ops.insert(current.clone(), BTreeSet::new()).is_none(),
                        "{current:?} twice"
                    );
                    op = Some(current);
                } else {
                    assert!(
                        ["summary", "description", "parameters"].contains(&key),
                        "line {}: unexpected {key} in a path item",
                        n + 1
                    );
                    op = None;
                }
                in_responses = false;
            }
            6 => in_responses = trimmed == "responses:",
            8 if in_responses => {
                let status = key
                    .unwrap_or_else(|| panic!("line {}: expected a status", n + 1))
                    .trim_matches('"');
                if let Some(op) = &op {
                    ops.get_mut(op).unwrap().insert(status.to_owned());
                }
            }
            _ => {}
        }
    }
    ops
}

/// The routes written in the routers' source: every `.route("PATH", METHOD(h)...)` under
/// `src/routes/` (the public host's, `public.rs`, `console.rs` and `tiles.rs`, aside).
fn source_routes() -> Ops {
    // The checkout being tested (at run time), not the build's.
    let package: PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let dir = package.join("src/routes");
    let mut ops = Ops::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().path();
        if ["public.rs", "console.rs", "tiles.rs"]
            .contains(&file.file_name().unwrap().to_str().unwrap())
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(".route(") {
            rest = rest[at + ".route(".len()..].trim_start();
            let literal = rest
                .strip_prefix('"')
                .expect("a path literal after .route(");
            let end = literal.find('"').unwrap();
            let path = &literal[..end];
            // The method router: up to the parenthesis that closes `.route(`.
            let after = &literal[end + 1..];
            let mut depth = 1;
            let close = after
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map(|(i, _)| i)
                .unwrap();
            let expr = &after[..close];
            let mut found = false;
            for method in METHODS {
                let call = format!("{method}(");
                let mut from = 0;
                while let Some(i) = expr[from..].find(&call) {
                    let at = from + i;
                    let before = expr[..at].chars().last();
                    if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                        ops.insert((method.to_uppercase(), path.to_owned()));
                        found = true;
                    }
                    from = at + call.len();
                }
            }
            assert!(found, "no method for {path} in {}", file.display());
            rest = &after[close..];
        }
    }
    ops
}

fn success(op: &(String, String)) -> &'static str {
    let (method, path) = (op.0.as_str(), op.1.as_str());
    let creates = [
        "/v1/agents",
        "/v1/mandates",
        "/v1/authorizations",
        "/v1/reviews/{id}/approve",
        "/v1/webhooks",
        "/v1/escrows",
    ];
    match (method, path) {
        ("POST", "/v1/webhooks/{id}/ping") => "202",
        ("DELETE", "/v1/mandates/{id}") => "400",
        ("POST", p) if creates.contains(&p) => "201",
        _ => "200",
    }
}

#[test]
fn the_table_has_the_29_operations_across_23_paths() {
    let ops = table();
    assert_eq!(ops.len(), ROUTES.len(), "a route is listed twice");
    assert_eq!(ops.len(), 29);
    let paths: BTreeSet<_> = ops.iter().map(|(_, p)| p.clone()).collect();
    assert_eq!(paths.len(), 23);
}

#[test]
fn the_document_describes_exactly_the_table() {
    let documented: Ops = document().into_keys().collect();
    let table = table();
    let undocumented: Vec<_> = table.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&table).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not documented: {undocumented:?}; documented but not served: {unserved:?}"
    );
}

#[test]
fn the_routers_source_declares_exactly_the_table() {
    let declared = source_routes();
    let table = table();
    let unlisted: Vec<_> = declared.difference(&table).collect();
    let missing: Vec<_> = table.difference(&declared).collect();
    assert!(
        unlisted.is_empty() && missing.is_empty(),
        "routed but not in ROUTES: {unlisted:?}; in ROUTES but not routed: {missing:?}"
    );
}

#[test]
fn the_document_gives_each_operation_its_success_code_and_the_errors() {
    for (op, statuses) in document() {
        let expected = success(&op);
        let successes: Vec<_> = statuses.iter().filter(|s| s.starts_with('2')).collect();
        if expected == "400" {
            assert!(successes.is_empty(), "{op:?}: {statuses:?}");
        } else {
            assert_eq!(successes, [expected], "{op:?}");
        }
        for always in ["401", "429", "5XX"] {
            assert!(statuses.contains(always), "{op:?} lacks {always}");
        }
        if op.0 == "POST" {
            for code in ["400", "409"] {
                assert!(statuses.contains(code), "{op:?} lacks {code}");
            }
        }
    }
}

#[mandate_test_macros::on_each_engine]
async fn the_running_server_serves_every_operation_and_no_other_method() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let fallback = "no such path; see the API reference for the paths under /v1";
    let unsupported = "this method is not supported on this path";
    let mut by_path: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (method, path) in ROUTES {
        by_path.entry(path).or_default().insert(method);
    }
    for (path, methods) in by_path {
        let url = path.replace("{id}", "x_probe");
        // The key's request rate counts on the injected clock: a fresh second per path.
        app.advance(1);
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let r = app
                .send(
                    Method::from_bytes(method.as_bytes()).unwrap(),
                    Some(&org),
                    &url,
                    None,
                    &[],
                )
                .await;
            let message = r.body["error"]["message"].as_str().unwrap_or_default();
            if methods.contains(method) {
                assert_ne!(message, fallback, "{method} {path} is not routed");
                assert_ne!(message, unsupported, "{method} {path} is not routed");
            } else {
                assert_eq!(
                    (r.status, message),
                    (400, unsupported),
                    "{method} {path} answers something"
                );
            }
        }
    }
}

#[mandate_test_macros::on_each_engine]
async fn the_public_host_serves_the_document() {
    let app = spawn_app().await;
    let r = app
        .send(
            Method::GET,
            None,
            &format!("{}/openapi.yaml", app.public),
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/yaml"));
    assert!(
        r.header("x-request-id")
            .is_some_and(|id| id.starts_with("req_"))
    );
    assert_eq!(r.text, OPENAPI);
    assert!(r.text.starts_with("openapi: 3.1."));
    // The API host does not serve it: anonymous there is 401, like every path.
    let r = app
        .send(Method::GET, None, "/openapi.yaml", None, &[])
        .await;
    r.assert_error(401, "unauthorized");
}
