//! `serve --witness URL=VKEY` / `MANDATE_WITNESSES`: a value that cannot name a witness
//! stops the real binary at start, saying what is wrong (the submission itself is tested
//! end to end, with real `mandate witness` processes, in mandate-cli's tests/cli/witness.rs).

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::binary;

/// A verifier key of a witness (Ed25519, `cosignature/v1`).
fn vkey() -> String {
    mandate_protocol::tlog::WitnessSigner::from_seed("w1.example/witness", [7; 32])
        .unwrap()
        .witness_key()
        .to_string()
}

/// `serve` on a fresh database with `args` and `env`: whether it exited at start (within
/// 20 s; a server still running is killed) with success, and its stderr.
fn serve(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary())
        .args([
            "serve",
            "--api-addr",
            "127.0.0.1:0",
            "--public-addr",
            "127.0.0.1:0",
        ])
        .arg("--db")
        .arg(dir.path().join("m.db"))
        .args(args)
        .env_remove("MANDATE_KEY_ENCRYPTION_KEY")
        .env_remove("MANDATE_WITNESSES")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("serve {args:?} {env:?} started instead of stopping at start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.success(), stderr)
}

#[test]
fn a_witness_that_cannot_be_one_stops_the_start_with_what_is_wrong() {
    let vkey = vkey();
    let log_key = "v.example/log/org_1/live+0a1b2c3d+AjBZ";
    for (value, says) in [
        (
            "https://w1.example".to_owned(),
            "is not <URL>=<verifier key>",
        ),
        (
            format!("ftp://w1.example={vkey}"),
            "must be http:// or https://",
        ),
        (
            format!("https://w1.example/?k={vkey}"),
            "must have no query or fragment",
        ),
        (
            format!("https://w1.example={log_key}"),
            "the witness at https://w1.example/",
        ),
        (
            format!("https://w1.example={vkey},https://w2.example={vkey}"),
            "named twice",
        ),
    ] {
        let (ok, stderr) = serve(&[], &[("MANDATE_WITNESSES", &value)]);
        assert!(!ok && stderr.contains(says), "{value}: {stderr}");
        assert!(stderr.contains("--witness"), "{value}: {stderr}");
    }
    // The flag says the same as the variable; a password in the URL is never repeated.
    let (ok, stderr) = serve(&["--witness", "https://u:hunter2@w1.example=w+0+A"], &[]);
    assert!(
        !ok && stderr.contains("the witness at https://w1.example/"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
