//! Project Wycheproof ECDSA P-256 / SHA-256 vectors (IEEE P1363, i.e. raw `r || s`) run
//! through the same key parsing and signature check as the token path.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mandate_core::{Jwk, JwkSet};
use mandate_protocol::jws::verify_es256;
use serde::Deserialize;

/// The vectors, vendored in the repository's `testdata/` (Apache-2.0, licence beside them).
const VECTORS: &str = "../testdata/wycheproof/ecdsa_secp256r1_sha256_p1363_test.json";

/// The vectors' path from the package directory that `cargo test` gives the running test
/// (the one this binary was built in otherwise), so that a test binary built in another
/// checkout still reads this checkout's files.
fn vectors_path() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            std::path::PathBuf::from,
        )
        .join(VECTORS)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    algorithm: String,
    number_of_tests: usize,
    test_groups: Vec<Group>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Group {
    #[serde(rename = "type")]
    group_type: String,
    sha: String,
    public_key: PublicKey,
    tests: Vec<Case>,
}

#[derive(Deserialize)]
struct PublicKey {
    curve: String,
    uncompressed: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Case {
    tc_id: u32,
    comment: String,
    msg: String,
    sig: String,
    result: Expected,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum Expected {
    Valid,
    Invalid,
    Acceptable,
}

fn hex(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2), "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The group's key as a JWK, through the same strict JSON parser a verifier uses.
fn jwk_of(uncompressed: &[u8]) -> Option<Jwk> {
    let (&prefix, coordinates) = uncompressed.split_first()?;
    if prefix != 0x04 || coordinates.len() != 64 {
        return None;
    }
    let (x, y) = coordinates.split_at(32);
    let set = serde_json::json!({"keys": [{
        "kty": "EC",
        "crv": "P-256",
        "x": URL_SAFE_NO_PAD.encode(x),
        "y": URL_SAFE_NO_PAD.encode(y),
        "kid": "wycheproof",
        "use": "sig",
        "alg": "ES256",
    }]});
    let mut set = JwkSet::from_json(set.to_string().as_bytes()).ok()?;
    set.keys.pop()
}

/// Half the order of P-256, rounded down: `s` above it is "high".
const HALF_ORDER: [u8; 32] = [
    0x7f, 0xff, 0xff, 0xff, 0x80, 0x00, 0x00, 0x00, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xde, 0x73, 0x7d, 0x56, 0xd3, 0x8b, 0xcf, 0x42, 0x79, 0xdc, 0xe5, 0x61, 0x7e, 0x31, 0x92, 0xa8,
];

#[test]
fn wycheproof_ecdsa_p256_sha256_p1363() {
    let path = vectors_path();
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: File = serde_json::from_slice(&text).unwrap();
    assert_eq!(file.algorithm, "ECDSA");

    let mut total = 0;
    let mut verified = 0;
    let mut high_s_refused = 0;
    let mut failures = Vec::new();
    for group in &file.test_groups {
        assert_eq!(group.group_type, "EcdsaP1363Verify");
        assert_eq!(group.sha, "SHA-256");
        assert_eq!(group.public_key.curve, "secp256r1");
        let jwk = jwk_of(&hex(&group.public_key.uncompressed));
        for case in &group.tests {
            total += 1;
            let accepted = match &jwk {
                Some(jwk) => verify_es256(jwk, &hex(&case.msg), &hex(&case.sig)),
                None => false,
            };
            verified += usize::from(accepted);
            let sig = hex(&case.sig);
            // Valid in ECDSA, but the verifier accepts only low-S signatures (the high-S
            // twin (r, n - s) of a signature is refused): such a vector must be refused.
            let high_s = sig.len() == 64 && sig[32..] > HALF_ORDER[..];
            high_s_refused += usize::from(high_s && case.result == Expected::Valid && !accepted);
            let ok = match case.result {
                Expected::Valid if high_s => !accepted,
                Expected::Valid => accepted,
                Expected::Invalid => !accepted,
                Expected::Acceptable => true,
            };
            if !ok {
                failures.push(format!(
                    "tcId {} ({}): expected {:?}, accepted = {accepted}, key usable = {}",
                    case.tc_id,
                    case.comment,
                    case.result,
                    jwk.is_some()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(total, 262);
    assert_eq!(total, file.number_of_tests);
    assert!(verified > 0);
    assert!(
        high_s_refused > 0,
        "the vectors hold valid high-S signatures"
    );
}
