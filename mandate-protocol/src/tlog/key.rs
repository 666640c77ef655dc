//! The log key: ECDSA P-256 signed-note signatures (signature type `0x02` of
//! c2sp.org/signed-note), published in the JWK Set.
//!
//! Signed notes define one ECDSA type, `0x02`, "as implemented by
//! github.com/transparency-dev/witness" and used by Sigstore's Rekor: the signature is the
//! ASN.1 DER `ECDSA-Sig-Value` over SHA-256 of the note's text, and the key id is the first
//! four bytes of SHA-256 of the public key's DER `SubjectPublicKeyInfo` (the key name is
//! not hashed in). It is the curve and hash of the service's verdict keys, so the log key
//! is made, sealed at rest, rotated and signed with by the same machinery (the core's
//! [`Signer`] trait); only the encoding differs (DER here, `r || s` in a JWS).
//!
//! In the JWK Set a log key is an EC P-256 JWK with `"use": "tlog-checkpoint"` and no
//! `alg`: a JWT verifier that reads `use` skips it (this crate's [`crate::jwk::JwkSet`] does),
//! and no JWS `alg` is claimed for it (some JOSE libraries refuse a whole set over an `alg`
//! they do not know). Its `kid` (`log-<n>`) names no environment, so even a verifier that
//! picked it by `kid` would find no verdict signed by it.
//!
//! By convention the key's name in a checkpoint's signature line is the checkpoint's
//! origin, as c2sp.org/tlog-checkpoint recommends; [`LogKeys::verify`] counts only
//! signatures under the origin's name by a key of the set, and ignores any other.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use serde::{Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::checkpoint::{Checkpoint, CheckpointError};
use super::note::{NoteSignature, SignedNote, is_valid_key_name};
use crate::jwk::{Jwk, JwkError};
use crate::jws::Signer;

/// The JWK `use` of a log key.
pub(crate) const LOG_KEY_USE: &str = "tlog-checkpoint";

/// The signed-note signature type of ECDSA (c2sp.org/signed-note).
pub(crate) const SIGNATURE_TYPE_ECDSA: u8 = 0x02;

/// The DER of a P-256 `SubjectPublicKeyInfo` up to the uncompressed point: SEQUENCE {
/// SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING { 0x04 || x || y } }.
const SPKI_P256_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A log's public key, as published in the JWK Set under `kid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogKey {
    kid: String,
    key: VerifyingKey,
    key_id: u32,
}

impl LogKey {
    /// The log key `key`, published under `kid`.
    pub fn new(kid: impl Into<String>, key: &VerifyingKey) -> Self {
        let key_id = key_id(&spki(key));
        Self {
            kid: kid.into(),
            key: *key,
            key_id,
        }
    }

    /// The public half of the log key `signer` holds, under the signer's `kid`.
    pub fn of_signer(signer: &dyn Signer) -> Self {
        let jwk = signer.public_jwk();
        Self::new(signer.kid(), jwk.verifying_key())
    }

    /// Reads a C2SP verifier key, `<name>+<hex key id>+<base64(0x02 || SPKI DER)>` (how Go's
    /// `sumdb/note` tools and witnesses are configured), checking that the key id is the
    /// key's. The key's `kid` is its name. `None` when it is not an ECDSA P-256 verifier key.
    pub fn from_verifier_key(vkey: &str) -> Option<(String, Self)> {
        let mut parts = vkey.splitn(3, '+');
        let (name, id, key) = (parts.next()?, parts.next()?, parts.next()?);
        let bytes = STANDARD.decode(key).ok()?;
        let (&kind, der) = bytes.split_first()?;
        let point = der.strip_prefix(&SPKI_P256_PREFIX)?;
        let key = VerifyingKey::from_sec1_bytes(point).ok()?;
        let log_key = Self::new(name, &key);
        let valid = is_valid_key_name(name)
            && kind == SIGNATURE_TYPE_ECDSA
            && point.len() == 65
            && id.len() == 8
            && u32::from_str_radix(id, 16).ok() == Some(log_key.key_id);
        valid.then(|| (name.to_owned(), log_key))
    }

    /// The key id of its signatures: the first four bytes of SHA-256 of its SPKI DER.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// Its `kid` in the JWK Set.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key.
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The C2SP verifier key of this key under `name` (a log's origin): what a Go
    /// `sumdb/note` verifier or a witness is configured with to check its checkpoints.
    pub fn verifier_key(&self, name: &str) -> String {
        let mut bytes = vec![SIGNATURE_TYPE_ECDSA];
        bytes.extend_from_slice(&spki(&self.key));
        format!("{name}+{:08x}+{}", self.key_id, STANDARD.encode(bytes))
    }

    /// Checks the signatures of `note` by this key under the key name `name`: each must
    /// verify ([`CheckpointError::BadSignature`] otherwise); whether there was one. Lines
    /// of other names or key ids are not this key's and are ignored, even when one of the
    /// two matches (c2sp.org/signed-note).
    pub fn verify_note(&self, note: &SignedNote, name: &str) -> Result<bool, CheckpointError> {
        let mut signed = false;
        for signature in note.signatures() {
            if signature.name() != name || signature.key_id() != self.key_id {
                continue;
            }
            if !self.verifies(note.text(), signature.signature()) {
                return Err(CheckpointError::BadSignature {
                    kid: self.kid.clone(),
                    name: name.to_owned(),
                });
            }
            signed = true;
        }
        Ok(signed)
    }

    /// Whether `signature` (DER) is this key's over `text`. High-S signatures are accepted,
    /// as Go's `ecdsa.VerifyASN1` does: a checkpoint is told by its text, not its signature.
    fn verifies(&self, text: &str, signature: &[u8]) -> bool {
        Signature::from_der(signature)
            .is_ok_and(|signature| self.key.verify(text.as_bytes(), &signature).is_ok())
    }
}

impl Serialize for LogKey {
    /// The JWK: `{"kty":"EC","crv":"P-256","x":…,"y":…,"kid":…,"use":"tlog-checkpoint"}`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut value = serde_json::to_value(Jwk::from_verifying_key(self.kid.clone(), &self.key))
            .map_err(serde::ser::Error::custom)?;
        if let Value::Object(members) = &mut value {
            members.remove("alg");
            members.insert("use".to_owned(), Value::from(LOG_KEY_USE));
        }
        value.serialize(serializer)
    }
}

/// The log keys of a JWK Set: what checkpoints are verified with.
///
/// ```
/// use mandate_protocol::{jws::P256Signer, tlog::{self, LogKeys}};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The service's log key (its secret drawn by the caller; fixed here).
/// let signer = P256Signer::from_secret_bytes("log-1", &[9; 32])?;
/// let origin = "verdicts.example.com/log/org_4Fq2/live";
/// let checkpoint = tlog::checkpoint(origin, 1, tlog::leaf_hash(b"a.b.c"))?;
/// let note = tlog::sign_checkpoint(&checkpoint, &signer)?;
///
/// // The JWK Set publishes it beside the verdict keys; a reader takes the log keys.
/// let jwks = serde_json::json!({ "keys": [tlog::LogKey::of_signer(&signer)] });
/// let keys = LogKeys::from_jwks_json(jwks.to_string().as_bytes())?;
/// assert_eq!(keys.verify(&note)?, checkpoint);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogKeys {
    keys: Vec<LogKey>,
}

impl LogKeys {
    /// A set of these keys.
    pub(crate) fn new(keys: Vec<LogKey>) -> Self {
        Self { keys }
    }

    /// The log keys of a JWK Set's JSON: its members with `"use": "tlog-checkpoint"`, each
    /// read as strictly as a verdict key ([`Jwk::from_value`]: EC P-256, 32-byte
    /// coordinates on the curve, no private member, no `alg` but `ES256`). Every other
    /// member is skipped. A set with no log key gives an empty set (a service that has not
    /// made one yet); verifying with it fails.
    pub fn from_jwks_json(bytes: &[u8]) -> Result<Self, JwkError> {
        let set: Value =
            serde_json::from_slice(bytes).map_err(|e| JwkError::Json(e.to_string()))?;
        let members = set
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| JwkError::Json("a jwk set needs a keys array".to_owned()))?;
        let mut keys: Vec<LogKey> = Vec::new();
        for member in members {
            if member.get("use").and_then(Value::as_str) != Some(LOG_KEY_USE) {
                continue;
            }
            // Read as a verdict key would be, the `use` aside.
            let mut as_verdict_key = member.clone();
            as_verdict_key["use"] = Value::from("sig");
            let jwk = Jwk::from_value(&as_verdict_key)?;
            if keys.iter().any(|k| k.kid == jwk.kid()) {
                return Err(JwkError::DuplicateKid(jwk.kid().to_owned()));
            }
            keys.push(LogKey::new(jwk.kid(), jwk.verifying_key()));
        }
        Ok(Self { keys })
    }

    /// The keys.
    pub(crate) fn keys(&self) -> &[LogKey] {
        &self.keys
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Reads a signed checkpoint and checks its signatures: every signature whose key name
    /// is the checkpoint's origin and whose key id is one of these keys' must verify, and
    /// at least one must be there. Other signatures (a witness's cosignature, a key of
    /// another service) are ignored, as c2sp.org/signed-note requires.
    pub fn verify(&self, note: &str) -> Result<Checkpoint, CheckpointError> {
        let note = SignedNote::parse(note)?;
        let checkpoint = Checkpoint::parse(note.text())?;
        let mut signed = false;
        for key in &self.keys {
            signed |= key.verify_note(&note, checkpoint.origin())?;
        }
        if signed {
            Ok(checkpoint)
        } else {
            Err(CheckpointError::NoKnownSignature {
                origin: checkpoint.origin().to_owned(),
            })
        }
    }
}

/// Signs `checkpoint` with the log key `signer` as a signed note, under the checkpoint's
/// origin as key name: the text, a blank line and one signature line.
pub fn sign_checkpoint(
    checkpoint: &Checkpoint,
    signer: &dyn Signer,
) -> Result<String, CheckpointError> {
    let text = checkpoint.to_string();
    let origin = checkpoint.origin();
    if !is_valid_key_name(origin) {
        return Err(CheckpointError::OriginNotKeyName(origin.to_owned()));
    }
    let raw = signer.sign(text.as_bytes())?;
    let signature =
        Signature::from_slice(&raw).map_err(|e| crate::jws::SignError::Backend(e.to_string()))?;
    let der = signature.to_der().as_bytes().to_vec();
    let key_id = LogKey::of_signer(signer).key_id;
    let line = NoteSignature::new(origin, key_id, der)?;
    Ok(SignedNote::new(text, vec![line])?.to_string())
}

fn spki(key: &VerifyingKey) -> Vec<u8> {
    let mut der = SPKI_P256_PREFIX.to_vec();
    der.extend_from_slice(key.to_sec1_point(false).as_bytes());
    der
}

fn key_id(spki: &[u8]) -> u32 {
    let digest = Sha256::digest(spki);
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}
