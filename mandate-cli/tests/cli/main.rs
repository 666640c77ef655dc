//! CLI tests: the real `mandate` binary against a real server on 127.0.0.1 port 0, with a
//! fresh database and HOME/XDG directories in a temporary directory.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

/// AP2 SD-JWTs signed with real P-256 keys, as the server's tests make them.
use mandate_test_kit::ap2 as ap2_tokens;
/// The throwaway Citus cluster the server's tests use, for the audit's attacks on it.
use mandate_test_kit::citus;
/// The throwaway PostgreSQL the server's tests use, for the tests that run on it.
use mandate_test_kit::postgres;
mod support;

mod audit;
mod audit_citus;
mod audit_mirror;
mod audit_postgres;
mod config;
mod docs;
mod escrows;
mod export;
mod key_set_cache;
mod listen;
mod mandate_extensions;
mod resources;
mod simulate;
mod tamper;
mod tiles_interop;
mod verdicts;
mod verify;
mod verify_bindings;
mod verify_log;
mod webhooks;
mod witness;
mod witness_spec;

use support::run_in;

// Help and usage errors

#[test]
fn help_reads_well_and_usage_errors_exit_2() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| run_in(home.path(), args, &[], None);

    let help = run(&["--help"]);
    help.ok()
        .stdout_has("Exit codes:")
        .stdout_has("6  verify")
        .stdout_has("Global options:");
    for path in [
        &["login"][..],
        &["profiles"],
        &["agents", "create"],
        &["agents", "list"],
        &["agents", "get"],
        &["mandates", "create"],
        &["mandates", "list"],
        &["mandates", "get"],
        &["mandates", "revoke"],
        &["authorize"],
        &["reviews", "approve"],
        &["reviews", "deny"],
        &["enforcement", "get"],
        &["enforcement", "set"],
        &["decisions", "list"],
        &["decisions", "get"],
        &["verify"],
        &["jwks", "fetch"],
        &["simulate"],
        &["webhooks", "create"],
        &["webhooks", "list"],
        &["webhooks", "get"],
        &["webhooks", "delete"],
        &["webhooks", "ping"],
        &["events", "list"],
        &["events", "get"],
        &["escrows", "create"],
        &["escrows", "get"],
        &["escrows", "deliver"],
        &["escrows", "release"],
        &["escrows", "refund"],
        &["escrows", "dispute"],
        &["export", "decisions"],
        &["listen"],
        &["witness"],
        &["witness", "init"],
    ] {
        let mut args = path.to_vec();
        args.push("--help");
        let out = run(&args);
        out.ok().stdout_has("Usage: mandate");
    }

    // Missing subcommand, a bad amount, an out-of-range limit, conflicting flags.
    run(&["agents"]).code(2);
    run(&[
        "authorize",
        "--amount",
        "1e3",
        "--currency",
        "USD",
        "--recipient",
        "vendor:a",
        "--category",
        "x",
    ])
    .code(2)
    .stderr_has("plain decimal");
    run(&["decisions", "list", "--limit", "0"]).code(2);
    run(&["mandates", "create", "--file", "x.json", "--agent", "agt_a"]).code(2);
    run(&["enforcement", "set", "sometimes"]).code(2);
    // No key anywhere: a usage error before any request.
    run(&["agents", "list"]).code(2).stderr_has("no API key");
}

#[test]
fn each_subcommand_shows_only_the_network_options_it_uses() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| run_in(home.path(), args, &[], None);
    let help = |args: &[&str]| {
        let mut args = args.to_vec();
        args.push("--help");
        let out = run(&args);
        out.ok();
        out.stdout
    };
    // An option line of the help: the flag first, then its value or its text.
    let has = |text: &str, flag: &str| {
        let flag = format!("--{flag}");
        text.lines().any(|line| {
            line.trim_start()
                .strip_prefix(&flag)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '<']))
        })
    };
    // Offline: none of them.
    for path in [&["verify"][..], &["simulate"], &["profiles"]] {
        let text = help(path);
        for flag in ["api-key", "base-url", "profile", "timeout", "retries"] {
            assert!(!has(&text, flag), "{path:?} lists --{flag}:\n{text}");
        }
        assert!(has(&text, "json"), "{path:?}:\n{text}");
    }
    // Public URLs only: the HTTP options, no key.
    for path in [&["jwks", "fetch"][..], &["listen"]] {
        let text = help(path);
        assert!(
            has(&text, "timeout") && !has(&text, "api-key"),
            "{path:?}:\n{text}"
        );
    }
    // Stores settings: the key and URL, no HTTP options.
    let text = help(&["login"]);
    assert!(has(&text, "api-key") && !has(&text, "retries"), "{text}");
    // The API: all of them.
    let text = help(&["agents", "list"]);
    for flag in ["api-key", "base-url", "profile", "timeout", "retries"] {
        assert!(has(&text, flag), "agents list lacks --{flag}:\n{text}");
    }
    // Given anyway, an option that does nothing is refused rather than ignored.
    run(&[
        "verify",
        "x.y.z",
        "--signature-only",
        "--api-key",
        "sk_sandbox_x",
    ])
    .code(2)
    .stderr_has("mandate verify does not use --api-key");
    run(&[
        "--timeout",
        "5",
        "simulate",
        "--mandate",
        "m.json",
        "--decisions",
        "d.json",
    ])
    .code(2)
    .stderr_has("does not use --timeout");
}
