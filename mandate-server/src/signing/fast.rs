//! ES256 signing through aws-lc-rs, behind the core's `Signer` trait.
//!
//! aws-lc-rs signs faster than RustCrypto's p256 (docs/performance.md), and signing is on
//! every authorization. The token format is the core's: this signer only produces the
//! 64-byte r||s for the signing input, and its public JWK is derived by the core from the
//! same secret, so tokens verify with the core's p256 verifier (tested below).
//!
//! Signatures on a busy server do not run aws-lc's signing at all: they finish a
//! presignature made ahead in idle time, or in a batch by the signing thread when there
//! was none ([`crate::signing::presign`]); aws-lc signs whole only if making one failed.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use mandate_core::{Jwk, P256Signer, SignError, Signer};
use p256::elliptic_curve::zeroize::Zeroize;
use p256::{FieldBytes, NonZeroScalar};

use crate::signing::presign::{Pool, Presignature};

/// Draws from aws-lc's random generator once, so that it is seeded now.
///
/// aws-lc seeds the generator that every signature draws its nonce from at the process's
/// first draw, from CPU jitter (its FIPS entropy source), which takes far longer than a
/// signature. [`crate::serve::start`] calls this before it listens, so that the first
/// authorization after a start does not wait for it.
pub fn seed_random() -> Result<(), SignError> {
    let mut byte = [0u8; 1];
    aws_lc_rs::rand::fill(&mut byte)
        .map_err(|_| SignError::Backend("aws-lc could not seed its random generator".into()))
}

/// An aws-lc-rs ES256 signer for one key.
pub struct AwsLcSigner {
    kid: String,
    key_pair: EcdsaKeyPair,
    /// The same secret as a scalar, for finishing presigned signatures.
    secret: NonZeroScalar,
    public: Jwk,
    rng: SystemRandom,
}

impl std::fmt::Debug for AwsLcSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsLcSigner")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl AwsLcSigner {
    /// Builds a signer from a 32-byte P-256 secret scalar.
    pub fn from_secret_bytes(kid: impl Into<String>, secret: &[u8]) -> Result<Self, SignError> {
        let kid = kid.into();
        // The core validates the scalar and derives the public key.
        let reference = P256Signer::from_secret_bytes(kid.clone(), secret)?;
        let public = reference.public_jwk();
        let point = public.verifying_key().to_sec1_point(false);
        let key_pair = EcdsaKeyPair::from_private_key_and_public_key(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            secret,
            point.as_bytes(),
        )
        .map_err(|e| SignError::Backend(e.to_string()))?;
        let secret = <[u8; 32]>::try_from(secret)
            .ok()
            .and_then(|bytes| Option::from(NonZeroScalar::from_repr(FieldBytes::from(bytes))))
            .ok_or_else(|| SignError::Backend("the secret is not a P-256 scalar".into()))?;
        Ok(Self {
            kid,
            key_pair,
            secret,
            public,
            rng: SystemRandom::new(),
        })
    }
}

impl Drop for AwsLcSigner {
    /// The key ring is rebuilt every few seconds: no copy of the scalar stays behind in
    /// freed memory (aws-lc wipes its own when `key_pair` is freed).
    fn drop(&mut self) {
        self.secret.zeroize();
    }
}

impl AwsLcSigner {
    /// Signs with `presignature` if there is one (and it does not come out degenerate),
    /// else the whole way with a nonce aws-lc draws now.
    fn sign_from(
        &self,
        presignature: Option<Presignature>,
        signing_input: &[u8],
    ) -> Result<[u8; 64], SignError> {
        if let Some(signature) = presignature.and_then(|pre| pre.sign(&self.secret, signing_input))
        {
            return Ok(signature);
        }
        let signature = self
            .key_pair
            .sign(&self.rng, signing_input)
            .map_err(|e| SignError::Backend(e.to_string()))?;
        // aws-lc emits either twin (r, s) or (r, n - s); the core accepts only low S.
        let signature = p256::ecdsa::Signature::from_slice(signature.as_ref())
            .map_err(|_| SignError::Backend("signature is not 64 bytes of r || s".into()))?;
        Ok(signature.normalize_s().to_bytes().into())
    }
}

impl Signer for AwsLcSigner {
    fn kid(&self) -> &str {
        &self.kid
    }

    /// Finishes a presignature (under a microsecond) from the process's pool, or from a
    /// batch this thread makes when the pool has none; see [`crate::signing::presign`].
    fn sign(&self, signing_input: &[u8]) -> Result<[u8; 64], SignError> {
        self.sign_from(Pool::global().take_or_make(), signing_input)
    }

    fn public_jwk(&self) -> Jwk {
        self.public.clone()
    }
}

/// Whether `signature` (`r || s`) of `message` verifies against `jwk`, with aws-lc: the
/// arithmetic that [`mandate_protocol::jws::verify_verdict_with`] asks of it for the
/// decision log's worker, which verifies every token it did not sign itself (docs/audit.md)
/// faster than RustCrypto's p256. The form checks (64 bytes, low S) are the core's.
pub fn verify_es256(jwk: &Jwk, message: &[u8], signature: &[u8]) -> bool {
    let point = jwk.verifying_key().to_sec1_point(false);
    aws_lc_rs::signature::UnparsedPublicKey::new(
        &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
        point.as_bytes(),
    )
    .verify(message, signature)
    .is_ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use mandate_core::{JwkSet, VerifyOptions, sign_token, verify_event};
    use mandate_protocol::jws::verify_es256;
    use serde_json::json;

    const SECRET: [u8; 32] = [7; 32];

    fn event(jti: &str) -> serde_json::Value {
        json!({"iss": "https://v.example", "jti": jti, "iat": 1000, "exp": 1300, "type": "ping", "data": {}})
    }

    #[test]
    fn tokens_from_each_backend_verify_with_the_other() {
        let fast = AwsLcSigner::from_secret_bytes("k-1", &SECRET).unwrap();
        let portable = P256Signer::from_secret_bytes("k-1", &SECRET).unwrap();
        assert_eq!(fast.public_jwk(), portable.public_jwk());
        let options = VerifyOptions {
            issuer: "https://v.example".into(),
            now: time::OffsetDateTime::from_unix_timestamp(1000).unwrap(),
            leeway_secs: 0,
        };
        // Signed by aws-lc-rs, verified by the core (p256) against the key set.
        let set = JwkSet {
            keys: vec![portable.public_jwk()],
        };
        let token = sign_token(&fast, &event("evt_a")).unwrap();
        assert_eq!(
            verify_event(&token, &set, &options).unwrap().jti.as_str(),
            "evt_a"
        );
        // Signed by p256, verified by aws-lc-rs.
        let token = sign_token(&portable, &event("evt_b")).unwrap();
        let (input, signature) = token.rsplit_once('.').unwrap();
        let signature =
            base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, signature)
                .unwrap();
        let public = portable.public_jwk().verifying_key().to_sec1_point(false);
        let verifier = aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
            public.as_bytes(),
        );
        verifier.verify(input.as_bytes(), &signature).unwrap();
        // And aws-lc-rs signatures pass the core's raw verifier used for Wycheproof.
        for i in 0..50u8 {
            let message = [i; 40];
            let sig = fast.sign(&message).unwrap();
            assert!(verify_es256(&portable.public_jwk(), &message, &sig));
        }
    }

    /// The log worker's aws-lc verification accepts exactly what the core's does: this
    /// key, this message, these bytes.
    #[test]
    fn aws_lc_verification_accepts_only_the_signed_message_under_its_key() {
        let fast = AwsLcSigner::from_secret_bytes("k-1", &SECRET).unwrap();
        let jwk = fast.public_jwk();
        let other = P256Signer::from_secret_bytes("k-2", &[9; 32])
            .unwrap()
            .public_jwk();
        for i in 0..20u8 {
            let message = [i; 40];
            let signature = fast.sign(&message).unwrap().to_vec();
            assert!(verify_es256(&jwk, &message, &signature));
            assert!(super::verify_es256(&jwk, &message, &signature));
            assert!(!super::verify_es256(&jwk, &[i ^ 1; 40], &signature));
            assert!(!super::verify_es256(&other, &message, &signature));
            let mut flipped = signature.clone();
            flipped[63] ^= 1;
            assert!(!super::verify_es256(&jwk, &message, &flipped));
        }
    }

    /// Both paths of `sign_from` (a presignature, none) give low-S signatures that the
    /// core's p256 verifier and aws-lc's verifier accept, for this key and this message
    /// only.
    #[test]
    fn presigned_and_whole_signatures_verify_with_both_backends() {
        let fast = AwsLcSigner::from_secret_bytes("k-1", &SECRET).unwrap();
        let jwk = fast.public_jwk();
        let other = P256Signer::from_secret_bytes("k-2", &[9; 32])
            .unwrap()
            .public_jwk();
        let point = jwk.verifying_key().to_sec1_point(false);
        let aws = aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
            point.as_bytes(),
        );
        let presignatures = crate::signing::presign::compute(64).unwrap();
        let mut paths = presignatures.into_iter().map(Some).collect::<Vec<_>>();
        paths.extend((0..64).map(|_| None));
        for (i, pre) in paths.into_iter().enumerate() {
            let message = format!("eyJhbGciOiJFUzI1NiJ9.claims-{i}");
            let sig = fast.sign_from(pre, message.as_bytes()).unwrap();
            // Low S on both paths (issue #40 item 9): half of raw ECDSA signatures are
            // high, and the core refuses those.
            let parsed = p256::ecdsa::Signature::from_slice(&sig).unwrap();
            assert_eq!(parsed.normalize_s(), parsed, "path {i} emitted a high S");
            assert!(verify_es256(&jwk, message.as_bytes(), &sig), "path {i}");
            aws.verify(message.as_bytes(), &sig).unwrap();
            assert!(!verify_es256(&other, message.as_bytes(), &sig));
            assert!(aws.verify(b"another message", &sig).is_err());
        }
    }

    #[test]
    fn refuses_a_bad_secret() {
        assert!(AwsLcSigner::from_secret_bytes("k", &[0u8; 32]).is_err());
        assert!(AwsLcSigner::from_secret_bytes("k", &[1u8; 31]).is_err());
    }

    /// The aws-lc-rs backend agrees with Wycheproof, as the core's verifier does: every
    /// "valid" P-256 P1363 vector verifies and every "invalid" one does not.
    #[test]
    fn aws_lc_rs_agrees_with_wycheproof() {
        // Vendored in the repository's `testdata/`; the package directory is the one
        // `cargo test` gives the running test, so a binary built in another checkout still
        // reads this one's files.
        let path = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(
                || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
                std::path::PathBuf::from,
            )
            .join("../testdata/wycheproof/ecdsa_secp256r1_sha256_p1363_test.json");
        let file: serde_json::Value = serde_json::from_slice(
            &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        let hex = |t: &str| -> Vec<u8> {
            (0..t.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
                .collect()
        };
        let mut checked = 0;
        for group in file["testGroups"].as_array().unwrap() {
            let key = hex(group["publicKey"]["uncompressed"].as_str().unwrap());
            let verifier = aws_lc_rs::signature::UnparsedPublicKey::new(
                &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
                key,
            );
            for case in group["tests"].as_array().unwrap() {
                let ok = verifier
                    .verify(
                        &hex(case["msg"].as_str().unwrap()),
                        &hex(case["sig"].as_str().unwrap()),
                    )
                    .is_ok();
                match case["result"].as_str().unwrap() {
                    "valid" => assert!(ok, "tcId {} must verify", case["tcId"]),
                    "invalid" => assert!(!ok, "tcId {} must not verify", case["tcId"]),
                    _ => {}
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 262);
    }
}
