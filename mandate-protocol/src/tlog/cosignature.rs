//! Witness cosignatures (c2sp.org/tlog-cosignature, the Ed25519 `cosignature/v1` type):
//! made by a witness over a checkpoint it checked, and required k of n by a verifier.
//!
//! A witness is named (a schema-less URL, e.g. `witness.example.com/w1`) and holds an
//! Ed25519 key. Having checked that a checkpoint extends the last one it saw of that log, it
//! signs
//!
//! ```text
//! cosignature/v1
//! time <POSIX seconds>
//! <the checkpoint's text, with its final newline>
//! ```
//!
//! and answers with a signed-note line `— <name> base64(key id || timestamp || signature)`:
//! the 4-byte key id, the timestamp as 8 bytes big-endian, the 64-byte signature. The key id
//! is the first four bytes of SHA-256(name || "\n" || 0x04 || public key); the witness is
//! published as the verifier key `<name>+<hex key id>+base64(0x04 || public key)`.
//!
//! A verifier is configured with a [`WitnessPolicy`]: the verifier keys of the witnesses
//! it trusts and how many of them must have cosigned. Lines of other keys are ignored, as
//! c2sp.org/signed-note requires; a line under a trusted name and key id that does not
//! verify makes the note malformed and is refused. Nothing here reads a clock: the
//! timestamp comes in as an argument, and a cosignature's timestamp is reported, not judged.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use super::checkpoint::{Checkpoint, CheckpointError};
use super::note::{NoteError, NoteSignature, SignedNote, is_valid_key_name};

/// The signed-note signature type of an Ed25519 `cosignature/v1` (c2sp.org/signed-note).
const SIGNATURE_TYPE_COSIGNATURE_V1: u8 = 0x04;

/// The largest timestamp a cosignature may carry: 2^63 - 1 (c2sp.org/tlog-cosignature).
const MAX_TIMESTAMP: u64 = i64::MAX as u64;

/// A cosignature's bytes after the key id: the timestamp and the signature.
const COSIGNATURE_LEN: usize = 8 + 64;

/// Why a witness key, a cosignature or a witness policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CosignatureError {
    /// A verifier key is not three parts joined by `+`.
    #[error("witness key {0:?} is not <name>+<8 hex digits key id>+<base64 key>")]
    VerifierKeyParts(String),
    /// The name of a witness is empty or holds a space or a `+`.
    #[error("witness name {0:?} must be non-empty, without spaces or '+'")]
    BadName(String),
    /// The key id of a verifier key is not 8 lower- or upper-case hex digits.
    #[error("the key id {id:?} of witness key {name:?} is not 8 hex digits")]
    VerifierKeyId {
        /// The witness's name.
        name: String,
        /// The key id as given.
        id: String,
    },
    /// The key of a verifier key is not standard base64 of a type byte and 32 bytes.
    #[error("the key of witness key {0:?} is not standard base64 of a type byte and 32 bytes")]
    VerifierKeyEncoding(String),
    /// The verifier key is of another signature type than `0x04`.
    #[error(
        "witness key {name:?} is of signature type 0x{found:02x}, not 0x04 (an ed25519 cosignature/v1 key): a log's own key cannot witness"
    )]
    VerifierKeyType {
        /// The witness's name.
        name: String,
        /// The type byte given.
        found: u8,
    },
    /// The 32 bytes are not an Ed25519 public key.
    #[error("the key of witness key {0:?} is not an ed25519 public key")]
    VerifierKeyPoint(String),
    /// The key id given is not the one of the name and key.
    #[error(
        "the key id {given:08x} of witness key {name:?} is not its key's ({computed:08x}): the name or the key was altered"
    )]
    KeyIdMismatch {
        /// The witness's name.
        name: String,
        /// The key id given.
        given: u32,
        /// The key id of the name and key.
        computed: u32,
    },
    /// A cosignature's timestamp is above 2^63 - 1.
    #[error("a cosignature's timestamp must be at most 2^63 - 1 seconds, not {0}")]
    Timestamp(u64),
    /// A policy names no witness, or requires none or more than it names.
    #[error("a witness policy needs 1 to {witnesses} cosignatures required, not {required}")]
    Threshold {
        /// The cosignatures required.
        required: usize,
        /// The witnesses named.
        witnesses: usize,
    },
    /// A policy names one witness twice (by name and key id, or by key: a cosignature/v1
    /// does not sign the witness's name, so one key under two names is one witness).
    #[error("witness {0:?} is named twice in the policy (same name or same key)")]
    DuplicateWitness(String),
    /// The signed-note envelope or the checkpoint in it is malformed.
    #[error("{0}")]
    Checkpoint(#[from] CheckpointError),
    /// A line under a trusted witness's name and key id does not verify.
    #[error(
        "the cosignature of witness {0:?} does not verify: the checkpoint or the cosignature was altered"
    )]
    BadCosignature(String),
    /// Fewer trusted witnesses cosigned than required.
    #[error(
        "the checkpoint carries valid cosignatures of {found} of the {witnesses} witnesses, {required} required; missing: {}",
        missing.join(", ")
    )]
    TooFew {
        /// The witnesses whose cosignature is there and valid.
        found: usize,
        /// The cosignatures required.
        required: usize,
        /// The witnesses named.
        witnesses: usize,
        /// The names of the witnesses that did not cosign.
        missing: Vec<String>,
    },
}

impl From<NoteError> for CosignatureError {
    fn from(e: NoteError) -> Self {
        Self::Checkpoint(CheckpointError::Note(e))
    }
}

/// A witness's public key under its name: what verifiers are configured with.
#[derive(Clone, PartialEq, Eq)]
pub struct WitnessKey {
    name: String,
    key: VerifyingKey,
    key_id: u32,
}

impl WitnessKey {
    fn new(name: String, key: VerifyingKey) -> Self {
        let key_id = key_id(&name, &key);
        Self { name, key, key_id }
    }

    /// Reads a C2SP verifier key of type `0x04`, `<name>+<hex key id>+base64(0x04 || 32-byte
    /// Ed25519 key)`, checking that the key id is the name's and key's.
    pub fn from_verifier_key(vkey: &str) -> Result<Self, CosignatureError> {
        let mut parts = vkey.splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(CosignatureError::VerifierKeyParts(shown(vkey)));
        };
        if !is_valid_key_name(name) {
            return Err(CosignatureError::BadName(shown(name)));
        }
        let given = (id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(id, 16).ok())
            .flatten()
            .ok_or_else(|| CosignatureError::VerifierKeyId {
                name: name.to_owned(),
                id: shown(id),
            })?;
        let bytes = STANDARD
            .decode(key)
            .map_err(|_| CosignatureError::VerifierKeyEncoding(name.to_owned()))?;
        let (&kind, point) = bytes
            .split_first()
            .ok_or_else(|| CosignatureError::VerifierKeyEncoding(name.to_owned()))?;
        if kind != SIGNATURE_TYPE_COSIGNATURE_V1 {
            return Err(CosignatureError::VerifierKeyType {
                name: name.to_owned(),
                found: kind,
            });
        }
        let point: &[u8; 32] = point
            .try_into()
            .map_err(|_| CosignatureError::VerifierKeyEncoding(name.to_owned()))?;
        let key = VerifyingKey::from_bytes(point)
            .map_err(|_| CosignatureError::VerifierKeyPoint(name.to_owned()))?;
        let witness = Self::new(name.to_owned(), key);
        if witness.key_id != given {
            return Err(CosignatureError::KeyIdMismatch {
                name: witness.name,
                given,
                computed: witness.key_id,
            });
        }
        Ok(witness)
    }

    /// The witness's name: the key name of its cosignature lines.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id of its cosignature lines.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// Its cosignature in `note`: the timestamp of its line, `None` when no line is under
    /// its name and key id; an error when that line does not verify over the note's text.
    fn cosignature_in(&self, note: &SignedNote) -> Result<Option<u64>, CosignatureError> {
        let Some(line) = note
            .signatures()
            .iter()
            .find(|s| s.name() == self.name && s.key_id() == self.key_id)
        else {
            return Ok(None);
        };
        let bad = || CosignatureError::BadCosignature(self.name.clone());
        let bytes: &[u8; COSIGNATURE_LEN] = line.signature().try_into().map_err(|_| bad())?;
        let (timestamp, signature) = bytes.split_at(8);
        let timestamp = u64::from_be_bytes(timestamp.try_into().map_err(|_| bad())?);
        if timestamp > MAX_TIMESTAMP {
            return Err(bad());
        }
        let signature = Signature::from_bytes(signature.try_into().map_err(|_| bad())?);
        // Strict verification: no small-order key and a canonical signature, as Go's
        // crypto/ed25519 accepts only canonical encodings of S.
        self.key
            .verify_strict(&signed_message(timestamp, note.text()), &signature)
            .map_err(|_| bad())?;
        Ok(Some(timestamp))
    }
}

impl fmt::Display for WitnessKey {
    /// The C2SP verifier key, `<name>+<hex key id>+base64(0x04 || key)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = vec![SIGNATURE_TYPE_COSIGNATURE_V1];
        bytes.extend_from_slice(self.key.as_bytes());
        write!(
            f,
            "{}+{:08x}+{}",
            self.name,
            self.key_id,
            STANDARD.encode(bytes)
        )
    }
}

impl fmt::Debug for WitnessKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WitnessKey({self})")
    }
}

/// A witness's signing key under its name: what cosigns checkpoints.
///
/// ```
/// use mandate_protocol::tlog::{self, WitnessPolicy, WitnessSigner};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The witness's seed comes from the caller (drawn once, kept in a file); fixed here.
/// let witness = WitnessSigner::from_seed("witness.example.com/w1", [7; 32])?;
/// let checkpoint = tlog::checkpoint("example.com/log", 1, tlog::leaf_hash(b"a"))?;
/// let line = witness.cosign(&checkpoint, 1_700_000_000)?;
///
/// // A log's note, cosigned: the witness's line after the log's own.
/// let note = format!("{checkpoint}\n— example.com/log AAAAAAE=\n{line}\n");
/// let policy = WitnessPolicy::new(vec![witness.witness_key()], 1)?;
/// let cosigned = policy.check(&note)?;
/// assert_eq!(cosigned[0].timestamp(), 1_700_000_000);
/// # Ok(())
/// # }
/// ```
pub struct WitnessSigner {
    name: String,
    key: SigningKey,
}

impl WitnessSigner {
    /// The witness `name` whose Ed25519 key is made from the 32-byte `seed` (RFC 8032's
    /// private key); refused when the name is not a valid key name.
    pub fn from_seed(name: impl Into<String>, seed: [u8; 32]) -> Result<Self, CosignatureError> {
        let name = name.into();
        if !is_valid_key_name(&name) {
            return Err(CosignatureError::BadName(shown(&name)));
        }
        Ok(Self {
            name,
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// The witness's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The public half, under the witness's name: its verifier key is what verifiers are
    /// given.
    pub fn witness_key(&self) -> WitnessKey {
        WitnessKey::new(self.name.clone(), self.key.verifying_key())
    }

    /// The cosignature/v1 of `checkpoint` at `timestamp` (POSIX seconds, at most
    /// 2^63 - 1): the signature line to append to the checkpoint's note.
    pub fn cosign(
        &self,
        checkpoint: &Checkpoint,
        timestamp: u64,
    ) -> Result<NoteSignature, CosignatureError> {
        if timestamp > MAX_TIMESTAMP {
            return Err(CosignatureError::Timestamp(timestamp));
        }
        let signature = self
            .key
            .sign(&signed_message(timestamp, &checkpoint.to_string()));
        let mut bytes = Vec::with_capacity(COSIGNATURE_LEN);
        bytes.extend_from_slice(&timestamp.to_be_bytes());
        bytes.extend_from_slice(&signature.to_bytes());
        let key_id = key_id(&self.name, &self.key.verifying_key());
        Ok(NoteSignature::new(self.name.clone(), key_id, bytes)?)
    }
}

impl fmt::Debug for WitnessSigner {
    /// The name and the verifier key, never the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WitnessSigner({})", self.witness_key())
    }
}

/// A valid cosignature found on a checkpoint: which witness, and when it cosigned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessCosignature {
    name: String,
    timestamp: u64,
}

impl WitnessCosignature {
    /// The witness's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// When it cosigned, in POSIX seconds, as it says.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }
}

/// Which witnesses a verifier trusts, and how many of them must have cosigned a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessPolicy {
    witnesses: Vec<WitnessKey>,
    required: usize,
}

impl WitnessPolicy {
    /// `required` of `witnesses` (1 to their number); refused when a witness is named twice,
    /// by name and key id or by key.
    pub fn new(witnesses: Vec<WitnessKey>, required: usize) -> Result<Self, CosignatureError> {
        if required == 0 || required > witnesses.len() {
            return Err(CosignatureError::Threshold {
                required,
                witnesses: witnesses.len(),
            });
        }
        for (i, witness) in witnesses.iter().enumerate() {
            let twice = witnesses[..i].iter().any(|w| {
                (w.name == witness.name && w.key_id == witness.key_id) || w.key == witness.key
            });
            if twice {
                return Err(CosignatureError::DuplicateWitness(witness.name.clone()));
            }
        }
        Ok(Self {
            witnesses,
            required,
        })
    }

    /// The witnesses trusted.
    pub fn witnesses(&self) -> &[WitnessKey] {
        &self.witnesses
    }

    /// How many of them must have cosigned.
    pub fn required(&self) -> usize {
        self.required
    }

    /// Checks the cosignatures of the signed checkpoint `note` (the log's own signature is
    /// checked apart, by [`crate::tlog::LogKeys::verify`]): the valid cosignatures of the
    /// trusted witnesses, in the policy's order, when there are at least as many as
    /// required. Lines of other keys are ignored; a line of a trusted witness that does not
    /// verify is refused ([`CosignatureError::BadCosignature`]).
    pub fn check(&self, note: &str) -> Result<Vec<WitnessCosignature>, CosignatureError> {
        let note = SignedNote::parse(note)?;
        Checkpoint::parse(note.text())?;
        let mut found = Vec::new();
        let mut missing = Vec::new();
        for witness in &self.witnesses {
            match witness.cosignature_in(&note)? {
                Some(timestamp) => found.push(WitnessCosignature {
                    name: witness.name.clone(),
                    timestamp,
                }),
                None => missing.push(witness.name.clone()),
            }
        }
        if found.len() < self.required {
            return Err(CosignatureError::TooFew {
                found: found.len(),
                required: self.required,
                witnesses: self.witnesses.len(),
                missing,
            });
        }
        Ok(found)
    }
}

/// What a cosignature/v1 signs: the header line, the time line, then the checkpoint's text.
fn signed_message(timestamp: u64, text: &str) -> Vec<u8> {
    format!("cosignature/v1\ntime {timestamp}\n{text}").into_bytes()
}

/// The first 4 bytes of `SHA-256(name || "\n" || 0x04 || key)`, big-endian.
fn key_id(name: &str, key: &VerifyingKey) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update([b'\n', SIGNATURE_TYPE_COSIGNATURE_V1]);
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// Text from the caller shown in an error: at most 80 characters.
fn shown(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;
