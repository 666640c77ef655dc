//! `export decisions`: streaming the audit export to a file, replaying it with `simulate`,
//! filters, stdout, and errors that leave no file behind.

use serde_json::Value;

use crate::support::{Env, closed_port_url, start};

const STANDARD_DRAFT: &str = r#"{"agent": "agt_buyer", "principal": "role:cfo",
    "limits": {"per_transaction": 100, "per_month": 150, "currency": "USD"},
    "categories": ["software", "travel"], "review_above": 50, "expires": "2099-12-31"}"#;

/// The lines of an NDJSON file, each parsed.
fn read_ndjson(text: &str) -> Vec<Value> {
    assert!(text.is_empty() || text.ends_with('\n'), "{text}");
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The names in the home directory that look like an unfinished export.
fn partial_files(env: &Env) -> Vec<String> {
    std::fs::read_dir(env.home.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".partial"))
        .collect()
}

/// A mix of outcomes for agt_buyer (and one allow for agt_other): 7 decisions.
fn some_decisions(env: &Env) -> String {
    let key = env.standard_agent("buyer");
    let other = env.standard_agent("other");
    env.authorize(&other, "1", "USD", "software").ok();
    env.authorize(&key, "40.10", "USD", "software").ok();
    let review = env.authorize(&key, "60", "USD", "software");
    review.code(5);
    let review_id = review.json()["review"]["id"].as_str().unwrap().to_owned();
    env.org(&["reviews", "approve", &review_id]).ok();
    env.authorize(&key, "60", "USD", "travel").code(4); // over 150 a month
    env.authorize(&key, "10", "USD", "food").code(4);
    env.authorize(&key, "120", "USD", "software").code(4);
    key
}

#[test]
fn export_to_a_file_replays_with_zero_changes_and_filters() {
    let env = start();
    let key = some_decisions(&env);
    let file = env.path("decisions.ndjson");
    let file_text = file.display().to_string();

    let out = env.org(&["export", "decisions", "--output", &file_text]);
    out.ok()
        .stdout_has("7 decisions (")
        .stdout_has(&format!("exported to {file_text}"));
    // stderr is not a terminal here: no progress line.
    assert!(!out.stderr.contains('\r'), "{:?}", out.stderr);
    let text = std::fs::read_to_string(&file).unwrap();
    let lines = read_ndjson(&text);
    assert_eq!(lines.len(), 7);
    assert!(
        out.stdout.contains(&format!("({} bytes", text.len())),
        "{}",
        out.stdout
    );
    assert!(partial_files(&env).is_empty());

    // The decision objects of the API, oldest first, amounts with their digits.
    let list = env.org(&["decisions", "list", "--all", "--json"]);
    list.ok();
    let mut listed: Vec<Value> = list.json()["data"].as_array().unwrap().clone();
    listed.reverse();
    // Each read proves against the log's newest checkpoint, which grows between the two
    // reads: the decisions are compared without their `log`.
    let without_log = |values: &[Value]| -> Vec<Value> {
        let mut values = values.to_vec();
        for value in &mut values {
            value.as_object_mut().unwrap().remove("log");
        }
        values
    };
    assert_eq!(without_log(&lines), without_log(&listed));
    assert!(text.contains(r#""amount":40.10"#), "{text}");

    // The unchanged mandate replays the export with zero changes.
    let draft = env.write("same.json", STANDARD_DRAFT);
    let same = env.offline(&[
        "simulate",
        "--mandate",
        &draft,
        "--decisions",
        &file_text,
        "--json",
    ]);
    same.ok();
    let report = same.json();
    assert_eq!(report["replayed"], 6, "{report:#}");
    assert_eq!(report["changed"], 0, "{report:#}");
    assert_eq!(report["skipped_other_agents"], 1);

    // --json: the summary as an object.
    let summary = env.org(&["export", "decisions", "--output", &file_text, "--json"]);
    summary.ok();
    let summary = summary.json();
    assert_eq!(summary["decisions"], 7);
    // The file written again (its lines' proofs may be against a newer checkpoint).
    let again = std::fs::read_to_string(&file).unwrap();
    assert_eq!(summary["bytes"], again.len());

    // Filters.
    let export = |name: &str, filter: &[&str]| {
        let path = env.path(name).display().to_string();
        let mut args = vec!["export", "decisions", "--output", &path];
        args.extend_from_slice(filter);
        env.org(&args).ok();
        read_ndjson(&std::fs::read_to_string(&path).unwrap())
    };
    let allowed = export("allow.ndjson", &["--verdict", "allow"]);
    assert_eq!(allowed.len(), 3); // agt_other's, the 40.10, the approval
    assert!(allowed.iter().all(|d| d["verdict"] == "allow"));
    let limited = export("limit.ndjson", &["--policy-verdict", "deny_limit"]);
    assert_eq!(limited.len(), 2);
    let other = export("other.ndjson", &["--agent", "agt_other"]);
    assert_eq!(other.len(), 1);
    assert_eq!(other[0]["request"]["agent"], "agt_other");
    let both = export(
        "both.ndjson",
        &["--agent", "agt_buyer", "--verdict", "deny_category"],
    );
    assert_eq!(both.len(), 1);
    assert_eq!(both[0]["request"]["category"], "food");
    let none = export("none.ndjson", &["--agent", "agt_nobody"]);
    assert!(none.is_empty());
    // --after: what was committed after the decision named, the rest of the log.
    let fifth = lines[4]["id"].as_str().unwrap();
    let rest = export("rest.ndjson", &["--after", fifth]);
    assert_eq!(without_log(&rest), without_log(&lines[5..]));
    let last = lines[6]["id"].as_str().unwrap();
    assert!(export("caught-up.ndjson", &["--after", last]).is_empty());

    // An agent key exports its own decisions only.
    let own = env.path("own.ndjson").display().to_string();
    env.with_key(&key, &["export", "decisions", "-o", &own])
        .ok()
        .stdout_has("6 decisions");

    // To stdout: the NDJSON alone on stdout, the summary on stderr.
    let piped = env.org(&["export", "decisions", "--output", "-"]);
    piped.ok().stderr_has("7 decisions (");
    assert_eq!(
        without_log(&read_ndjson(&piped.stdout)),
        without_log(&lines)
    );
    let replayed = env.run_stdin(
        &["simulate", "--mandate", &draft, "--decisions", "-"],
        &[],
        &piped.stdout,
    );
    replayed
        .ok()
        .stdout_has("6 decisions replayed against the draft for agt_buyer, 0 changed");
    assert!(partial_files(&env).is_empty());
}

#[test]
fn export_errors_leave_the_output_untouched() {
    let env = start();
    some_decisions(&env);
    let file = env.path("decisions.ndjson");
    let file_text = file.display().to_string();
    std::fs::write(&file, "kept\n").unwrap();

    // An invalid verdict filter is refused before any request, like `decisions list`'s.
    env.org(&[
        "export",
        "decisions",
        "--verdict",
        "maybe",
        "--output",
        &file_text,
    ])
    .code(2)
    .stderr_has("invalid value 'maybe' for '--verdict <VERDICT>': must be one of");
    env.org(&["decisions", "list", "--verdict", "maybe"])
        .code(2);
    // The API's error: printed with its request id, exit 1, the file untouched.
    env.with_key(
        "sk_sandbox_notarealkey",
        &["export", "decisions", "--output", &file_text],
    )
    .code(1)
    .stderr_has("unauthorized (HTTP 401)")
    .stderr_has("request id: req_");
    // The service unreachable: exit 3.
    env.run(
        &["export", "decisions", "--output", &file_text],
        &[
            ("MANDATE_BASE_URL", &closed_port_url()),
            ("MANDATE_API_KEY", &env.org_key),
            ("MANDATE_RETRIES", "0"),
        ],
    )
    .code(3)
    .stderr_has("cannot reach");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept\n");
    assert!(partial_files(&env).is_empty());

    // Where the file cannot go, and no --output at all.
    let home = env.home.path().display().to_string();
    env.org(&["export", "decisions", "--output", &home])
        .code(2)
        .stderr_has("is a directory");
    let missing = env.path("missing/out.ndjson").display().to_string();
    env.org(&["export", "decisions", "--output", &missing])
        .code(2)
        .stderr_has("cannot write");
    env.org(&["export", "decisions"])
        .code(2)
        .stderr_has("--output");
}

#[test]
fn an_export_cut_off_midway_exits_3_and_writes_nothing() {
    use std::io::{Read as _, Write as _};

    // A stand-in for a server that fails after the first chunk: it sends one chunk of a
    // chunked NDJSON body, then closes the connection without the final chunk.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut head = [0u8; 4096];
        let _ = conn.read(&mut head).unwrap();
        let line = "{\"id\":\"dec_1\"}\n";
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\n\
             transfer-encoding: chunked\r\n\r\n{:x}\r\n{line}\r\n",
            line.len()
        );
        conn.write_all(answer.as_bytes()).unwrap();
    });

    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("decisions.ndjson");
    std::fs::write(&file, "kept\n").unwrap();
    let out = crate::support::run_in(
        home.path(),
        &[
            "export",
            "decisions",
            "--output",
            &file.display().to_string(),
        ],
        &[
            ("MANDATE_BASE_URL", &base),
            ("MANDATE_API_KEY", "sk_sandbox_test"),
            ("MANDATE_RETRIES", "0"),
        ],
        None,
    );
    server.join().unwrap();
    out.code(3)
        .stderr_has("the export was cut off after 1 decision (15 bytes): ")
        .stderr_has("was not written");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept\n");
    let names: Vec<String> = std::fs::read_dir(home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["decisions.ndjson"]);
}
