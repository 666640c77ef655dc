//! Signing keys at rest, sealed under the operator's key-encryption key (KEK).
//!
//! The engines store a signing key's secret as opaque bytes (`StoredKey::secret`); this
//! module makes and opens them. With a KEK, a key is stored as
//! `"mk1" ‖ KEK id (4 bytes) ‖ nonce (12 bytes, random) ‖ AES-256-GCM(secret) ‖ tag (16)`,
//! 67 bytes, under a key derived from the KEK. The associated data binds the header, the
//! environment and the kid, so a sealed key copied onto another kid does not open. The KEK
//! id (the first bytes of a SHA-256 of the KEK) tells "sealed under another KEK" apart
//! from "damaged". Without a KEK (allowed with SQLite only), a key is stored as its 32 raw
//! bytes, as databases made before this module hold them; 32 bytes are never a sealed key,
//! so both forms are told apart by their length.
//!
//! The KEK comes from `MANDATE_KEY_ENCRYPTION_KEY` or the file of
//! `--key-encryption-key-file` (the standard base64 of 32 random bytes); during a KEK
//! rotation, the previous KEK (`MANDATE_PREVIOUS_KEY_ENCRYPTION_KEY`,
//! `--previous-key-encryption-key-file`) still opens the keys sealed under it. No message
//! of this module shows a key, sealed or not.
//!
//! Longer than most files on purpose: the sealed format, the KEK's sources and the
//! start-up and rotation steps that use them are one security boundary, read in one place.

use std::ffi::OsString;
use std::path::Path;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hmac;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

use crate::clock::fill_random;
use crate::model::Env;
use crate::storage::StorageError;
use crate::storage::admin::{AdminStore, SecretChange};
use crate::storage::keys::StoredKey;

/// The variable holding the KEK.
pub const KEK_VAR: &str = "MANDATE_KEY_ENCRYPTION_KEY";
/// The flag naming a file that holds the KEK.
pub const KEK_FILE_FLAG: &str = "--key-encryption-key-file";
/// The variable holding the previous KEK, during a rotation.
pub const PREVIOUS_KEK_VAR: &str = "MANDATE_PREVIOUS_KEY_ENCRYPTION_KEY";
/// The flag naming a file that holds the previous KEK, during a rotation.
pub const PREVIOUS_KEK_FILE_FLAG: &str = "--previous-key-encryption-key-file";

/// The first bytes of a sealed key: the format's version.
const MAGIC: &[u8; 3] = b"mk1";
/// Bytes of the KEK id in a sealed key's header.
const KEK_ID_LEN: usize = 4;
const HEADER_LEN: usize = MAGIC.len() + KEK_ID_LEN;
/// A P-256 secret scalar.
const SECRET_LEN: usize = 32;
const TAG_LEN: usize = 16;
/// The length of a sealed key.
pub const SEALED_LEN: usize = HEADER_LEN + NONCE_LEN + SECRET_LEN + TAG_LEN;

/// What the sealing key is derived for, so the KEK derives no other key like it.
const SEAL_CONTEXT: &[u8] = b"mandate signing key at rest v1\0";
/// What the key authenticating backups is derived for.
const BACKUP_CONTEXT: &[u8] = b"mandate backup authentication v1\0";
/// What the KEK id is a hash of, besides the KEK.
const ID_CONTEXT: &[u8] = b"mandate key-encryption key id v1\0";
/// The start of every sealed signing key's associated data.
const AAD_CONTEXT: &[u8] = b"mandate signing key v1\0";
/// The start of every sealed log key's associated data: a sealed log key stored as a
/// signing key (or the reverse) does not open.
const LOG_AAD_CONTEXT: &[u8] = b"mandate log key at rest v1\0";

/// What a sealed key is for, bound into what seals it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// A verdict and event signing key (`signing_keys`).
    Signing,
    /// A log key, which signs the decision log's checkpoints (`log_keys`).
    Log,
}

impl KeyUse {
    fn context(self) -> &'static [u8] {
        match self {
            KeyUse::Signing => AAD_CONTEXT,
            KeyUse::Log => LOG_AAD_CONTEXT,
        }
    }
}

/// How many times a re-seal is tried again when the keys changed while it was made.
const RESEAL_ATTEMPTS: usize = 5;

/// A KEK's public handle: the first 4 bytes of SHA-256(context ‖ KEK), printed in hex.
/// It names which KEK sealed a key without telling anything of the KEK.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KekId([u8; KEK_ID_LEN]);

impl std::fmt::Display for KekId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl KekId {
    /// Its 4 bytes, as stored in front of what a KEK made.
    pub(crate) fn to_bytes(self) -> [u8; KEK_ID_LEN] {
        self.0
    }

    /// The id of these 4 bytes.
    pub(crate) fn from_bytes(bytes: [u8; KEK_ID_LEN]) -> Self {
        Self(bytes)
    }
}

impl std::fmt::Debug for KekId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KekId({self})")
    }
}

/// A signing key's 32-byte secret scalar, wiped when dropped. Never printed.
#[derive(Clone)]
pub struct SigningSecret([u8; SECRET_LEN]);

impl SigningSecret {
    /// Wraps raw bytes.
    pub fn new(bytes: [u8; SECRET_LEN]) -> Self {
        Self(bytes)
    }

    /// The raw scalar, to build a signer from (and for tests that look for it on disk).
    pub fn expose(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }
}

impl Drop for SigningSecret {
    fn drop(&mut self) {
        // Best effort: the scalar does not outlive its use in this process's memory.
        self.0.fill(0);
    }
}

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(..)")
    }
}

/// A key-encryption key: kept only as the AES-256 key derived from it, and its id.
#[derive(Clone)]
pub struct Kek {
    seal_key: [u8; 32],
    id: KekId,
}

impl Drop for Kek {
    fn drop(&mut self) {
        self.seal_key.fill(0);
    }
}

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kek({})", self.id)
    }
}

impl Kek {
    /// The KEK of 32 raw bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        let key = hmac::Key::new(hmac::HMAC_SHA256, bytes);
        let tag = hmac::sign(&key, SEAL_CONTEXT);
        let mut seal_key = [0u8; 32];
        seal_key.copy_from_slice(tag.as_ref());
        let digest = Sha256::new()
            .chain_update(ID_CONTEXT)
            .chain_update(bytes)
            .finalize();
        let mut id = [0u8; KEK_ID_LEN];
        id.copy_from_slice(&digest[..KEK_ID_LEN]);
        Self {
            seal_key,
            id: KekId(id),
        }
    }

    /// The KEK written as `text` (standard base64 of 32 bytes; surrounding whitespace, such
    /// as a file's trailing newline, is ignored). `origin` names where it came from, for
    /// the error; the error never shows the text.
    pub fn from_base64(text: &[u8], origin: &str) -> Result<Self, AtRestError> {
        let text = text.trim_ascii();
        if text.is_empty() {
            return Err(AtRestError::KekEmpty {
                origin: origin.to_owned(),
            });
        }
        let mut decoded = STANDARD
            .decode(text)
            .map_err(|_| AtRestError::KekNotBase64 {
                origin: origin.to_owned(),
            })?;
        let kek = match <&[u8; 32]>::try_from(decoded.as_slice()) {
            Ok(bytes) => Ok(Self::from_bytes(bytes)),
            Err(_) => Err(AtRestError::KekLength {
                origin: origin.to_owned(),
                len: decoded.len(),
            }),
        };
        decoded.fill(0);
        kek
    }

    /// The KEK in the file at `path` (see [`Kek::from_base64`]). `flag` names the flag
    /// that gave the path. A file that other users can read is taken, with a warning in
    /// the log: secrets mounted by container platforms are often mode 0644 in a container
    /// that runs the service alone, and refusing them would leave such deployments with no
    /// way but the variable.
    pub fn from_file(path: &Path, flag: &str) -> Result<Self, AtRestError> {
        let origin = format!("{flag} {}", path.display());
        let mut text = std::fs::read(path).map_err(|e| AtRestError::KekFile {
            origin: origin.clone(),
            reason: e.to_string(),
        })?;
        #[cfg(unix)]
        if let Ok(meta) = std::fs::metadata(path) {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    "the key-encryption key file {} can be read by other users (mode {mode:03o}): \
                     make it readable by the service's user only (chmod 600)",
                    path.display()
                );
            }
        }
        let kek = Self::from_base64(&text, &origin);
        text.fill(0);
        kek
    }

    /// This KEK's id.
    pub fn id(&self) -> KekId {
        self.id
    }

    /// A key derived from this KEK for `context` (HMAC-SHA256 of the context under the
    /// sealing key): one per use, so that no use's key is another's.
    pub(crate) fn derive(&self, context: &[u8]) -> [u8; 32] {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.seal_key);
        let mut out = [0u8; 32];
        out.copy_from_slice(hmac::sign(&key, context).as_ref());
        out
    }

    fn aead(&self) -> LessSafeKey {
        // A 32-byte key is always accepted by AES-256-GCM.
        #[allow(clippy::expect_used)]
        let unbound = UnboundKey::new(&AES_256_GCM, &self.seal_key).expect("a 32-byte AES key");
        LessSafeKey::new(unbound)
    }

    /// Seals `secret` for `kid` of `env`.
    fn seal(
        &self,
        kid: &str,
        env: Env,
        secret: &SigningSecret,
        usage: KeyUse,
    ) -> Result<Vec<u8>, AtRestError> {
        let mut out = Vec::with_capacity(SEALED_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.id.0);
        let mut nonce = [0u8; NONCE_LEN];
        fill_random(&mut nonce);
        let aad = aad(usage, &out, kid, env);
        out.extend_from_slice(&nonce);
        let mut in_out = secret.0.to_vec();
        let sealed = self.aead().seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut in_out,
        );
        if sealed.is_err() {
            in_out.fill(0);
            return Err(AtRestError::Seal {
                kid: kid.to_owned(),
            });
        }
        out.extend_from_slice(&in_out);
        Ok(out)
    }

    /// Opens a sealed key (`stored` is a whole sealed key whose header names this KEK).
    fn open(
        &self,
        kid: &str,
        env: Env,
        stored: &[u8],
        usage: KeyUse,
    ) -> Result<SigningSecret, AtRestError> {
        let damaged = || AtRestError::Damaged {
            kid: kid.to_owned(),
            kek: self.id,
        };
        let (header, rest) = stored.split_at(HEADER_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| damaged())?;
        let mut in_out = sealed.to_vec();
        let opened =
            self.aead()
                .open_in_place(nonce, Aad::from(aad(usage, header, kid, env)), &mut in_out);
        let secret = match opened {
            Ok(plain) => <[u8; SECRET_LEN]>::try_from(&*plain)
                .map(SigningSecret)
                .map_err(|_| damaged()),
            Err(_) => Err(damaged()),
        };
        in_out.fill(0);
        secret
    }
}

/// The associated data of a sealed key: what it is, its header, its environment and kid.
fn aad(usage: KeyUse, header: &[u8], kid: &str, env: Env) -> Vec<u8> {
    let context = usage.context();
    let mut aad = Vec::with_capacity(context.len() + header.len() + 16 + kid.len());
    aad.extend_from_slice(context);
    aad.extend_from_slice(header);
    aad.extend_from_slice(env.as_str().as_bytes());
    aad.push(0);
    aad.extend_from_slice(kid.as_bytes());
    aad
}

/// The form of a stored secret.
enum Form<'a> {
    /// The 32 raw bytes (no KEK, or a database from before encryption at rest).
    Plain(&'a [u8; SECRET_LEN]),
    /// Sealed under the KEK of this id.
    Sealed(KekId),
    /// Neither.
    Unknown,
}

fn form(stored: &[u8]) -> Form<'_> {
    if let Ok(plain) = <&[u8; SECRET_LEN]>::try_from(stored) {
        return Form::Plain(plain);
    }
    if stored.len() == SEALED_LEN && stored.starts_with(MAGIC) {
        let mut id = [0u8; KEK_ID_LEN];
        id.copy_from_slice(&stored[MAGIC.len()..HEADER_LEN]);
        return Form::Sealed(KekId(id));
    }
    Form::Unknown
}

/// Whether `stored` is a sealed key (and not the raw 32 bytes of one).
pub fn is_sealed(stored: &[u8]) -> bool {
    matches!(form(stored), Form::Sealed(_))
}

/// The KEK sealing new keys (none: they are stored in plaintext, SQLite only), and the
/// previous one, which still opens keys sealed under it during a rotation.
#[derive(Clone, Debug, Default)]
pub struct KeyEncryption {
    current: Option<Kek>,
    previous: Option<Kek>,
}

/// Where the operator gave the KEKs: the variables' values and the flags' files.
#[derive(Debug, Default)]
pub struct KekSources<'a> {
    /// `MANDATE_KEY_ENCRYPTION_KEY`.
    pub var: Option<OsString>,
    /// `--key-encryption-key-file`.
    pub file: Option<&'a Path>,
    /// `MANDATE_PREVIOUS_KEY_ENCRYPTION_KEY`.
    pub previous_var: Option<OsString>,
    /// `--previous-key-encryption-key-file`.
    pub previous_file: Option<&'a Path>,
}

impl KekSources<'_> {
    /// With the variables read from the process's environment.
    pub fn with_environment(mut self) -> Self {
        self.var = std::env::var_os(KEK_VAR);
        self.previous_var = std::env::var_os(PREVIOUS_KEK_VAR);
        self
    }
}

/// One KEK from a variable or a file, refusing both.
fn one_kek(
    var: Option<&OsString>,
    var_name: &str,
    file: Option<&Path>,
    flag: &str,
) -> Result<Option<Kek>, AtRestError> {
    match (var, file) {
        (Some(_), Some(_)) => Err(AtRestError::KekTwice {
            var: var_name.to_owned(),
            flag: flag.to_owned(),
        }),
        (Some(value), None) => Kek::from_base64(value.as_encoded_bytes(), var_name).map(Some),
        (None, Some(path)) => Kek::from_file(path, flag).map(Some),
        (None, None) => Ok(None),
    }
}

impl KeyEncryption {
    /// No KEK: keys stored in plaintext (SQLite only).
    pub fn none() -> Self {
        Self::default()
    }

    /// `current` seals; `previous`, if any, still opens.
    pub fn new(current: Kek, previous: Option<Kek>) -> Self {
        Self {
            current: Some(current),
            previous,
        }
    }

    /// The KEKs the operator gave (see [`KekSources`]).
    pub fn from_sources(sources: &KekSources<'_>) -> Result<Self, AtRestError> {
        let current = one_kek(sources.var.as_ref(), KEK_VAR, sources.file, KEK_FILE_FLAG)?;
        let previous = one_kek(
            sources.previous_var.as_ref(),
            PREVIOUS_KEK_VAR,
            sources.previous_file,
            PREVIOUS_KEK_FILE_FLAG,
        )?;
        if current.is_none() && previous.is_some() {
            return Err(AtRestError::PreviousAlone);
        }
        Ok(Self { current, previous })
    }

    /// Whether new keys are sealed (a current KEK is given).
    pub fn is_enabled(&self) -> bool {
        self.current.is_some()
    }

    /// The keys that authenticate backups: derived from the current KEK (which makes new
    /// ones) and the previous one (whose backups still verify). None without a KEK.
    pub fn backup_keys(&self) -> Vec<[u8; 32]> {
        self.keks().map(|kek| kek.derive(BACKUP_CONTEXT)).collect()
    }

    /// The keys derived for `context` from the current KEK and the previous one (in that
    /// order), each with its KEK's id. None without a KEK.
    pub(crate) fn derived_keys(&self, context: &[u8]) -> Vec<(KekId, [u8; 32])> {
        self.keks()
            .map(|kek| (kek.id, kek.derive(context)))
            .collect()
    }

    /// The current KEK's id.
    pub fn current_id(&self) -> Option<KekId> {
        self.current.as_ref().map(Kek::id)
    }

    fn keks(&self) -> impl Iterator<Item = &Kek> + Clone {
        self.current.iter().chain(self.previous.iter())
    }

    /// The stored form of `secret` as the key `kid` of `env`: sealed under the current KEK,
    /// or its raw bytes without one.
    pub fn seal(
        &self,
        kid: &str,
        env: Env,
        secret: &SigningSecret,
    ) -> Result<Vec<u8>, AtRestError> {
        match &self.current {
            Some(kek) => kek.seal(kid, env, secret, KeyUse::Signing),
            None => Ok(secret.0.to_vec()),
        }
    }

    /// The secret of a stored key: opened with the KEK that sealed it, or, without a KEK,
    /// taken as it is if stored in plaintext. With a KEK a plaintext key is refused: only
    /// the KEK's holder can have stored it sealed, anyone with write access to the
    /// database (or a backup) plaintext.
    pub fn open(&self, key: &StoredKey) -> Result<SigningSecret, AtRestError> {
        if self.current.is_some() && matches!(form(&key.secret), Form::Plain(_)) {
            return Err(AtRestError::PlaintextWithKek {
                kid: key.kid.clone(),
            });
        }
        open_with(self.keks(), key, KeyUse::Signing)
    }

    /// [`KeyEncryption::seal`] for a log key: sealed so that it opens as a log key only.
    pub fn seal_log_key(
        &self,
        kid: &str,
        env: Env,
        secret: &SigningSecret,
    ) -> Result<Vec<u8>, AtRestError> {
        match &self.current {
            Some(kek) => kek.seal(kid, env, secret, KeyUse::Log),
            None => Ok(secret.0.to_vec()),
        }
    }

    /// [`KeyEncryption::open`] for a log key.
    pub fn open_log_key(&self, key: &StoredKey) -> Result<SigningSecret, AtRestError> {
        if self.current.is_some() && matches!(form(&key.secret), Form::Plain(_)) {
            return Err(AtRestError::PlaintextWithKek {
                kid: key.kid.clone(),
            });
        }
        open_with(self.keks(), key, KeyUse::Log)
    }
}

/// Opens `key` with whichever of `keks` sealed it.
fn open_with<'a>(
    keks: impl Iterator<Item = &'a Kek> + Clone,
    key: &StoredKey,
    usage: KeyUse,
) -> Result<SigningSecret, AtRestError> {
    match form(&key.secret) {
        Form::Plain(bytes) => Ok(SigningSecret(*bytes)),
        Form::Sealed(id) => match keks.clone().find(|k| k.id == id) {
            Some(kek) => kek.open(&key.kid, key.env, &key.secret, usage),
            None => {
                let given: Vec<String> = keks.map(|k| k.id.to_string()).collect();
                if given.is_empty() {
                    Err(AtRestError::KekMissing {
                        kid: key.kid.clone(),
                    })
                } else {
                    Err(AtRestError::WrongKek {
                        kid: key.kid.clone(),
                        sealed_under: id,
                        given: given.join(", "),
                    })
                }
            }
        },
        Form::Unknown => Err(AtRestError::Unreadable {
            kid: key.kid.clone(),
            len: key.secret.len(),
        }),
    }
}

/// Whether the database `db` (the `--db` value) must keep its signing keys encrypted: a
/// PostgreSQL URL (`postgres://` or `postgresql://`) must, a SQLite file need not. The one
/// place where this is decided.
pub fn key_encryption_required(db: &str) -> bool {
    let lower = |prefix: &str| {
        db.get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    lower("postgres://") || lower("postgresql://")
}

/// Refuses to go on with the database `db` when it needs a KEK and none is given; checked
/// before the database is reached.
pub fn check_required(db: &str, keys: &KeyEncryption) -> Result<(), AtRestError> {
    if key_encryption_required(db) && !keys.is_enabled() {
        return Err(AtRestError::KekRequired);
    }
    Ok(())
}

/// What [`prepare`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Signing keys stored.
    pub keys: usize,
    /// The KEKs the stored keys are sealed under, each once, in the order first found.
    pub sealed_under: Vec<KekId>,
    /// Keys in plaintext (no KEK given).
    pub plaintext: usize,
}

/// Before a process uses the signing keys: checks that every stored key (retired ones
/// too) opens with the KEKs given. With a KEK, a key stored in plaintext is refused, not
/// sealed: a plaintext row in a database whose keys are sealed is one written by someone
/// without the KEK (database or backup write access), and would otherwise be published.
/// Sealing plaintext keys is an operator's explicit command ([`seal_plaintext`],
/// `mandate-server seal-signing-keys`).
pub fn prepare(store: &dyn AdminStore, keys: &KeyEncryption) -> Result<Prepared, AtRestError> {
    let stored = store.all_signing_keys()?;
    let mut sealed_under = Vec::new();
    for key in &stored {
        keys.open(key)?;
        if let Form::Sealed(id) = form(&key.secret)
            && !sealed_under.contains(&id)
        {
            sealed_under.push(id);
        }
    }
    Ok(Prepared {
        keys: stored.len(),
        sealed_under,
        plaintext: if keys.is_enabled() { 0 } else { stored.len() },
    })
}

/// Seals every signing key stored in plaintext under the current KEK, in one transaction
/// (`mandate-server seal-signing-keys`): how a database made without a KEK is encrypted.
/// Returns how many keys there are and how many were sealed now.
pub fn seal_plaintext(
    store: &dyn AdminStore,
    keys: &KeyEncryption,
) -> Result<(usize, usize), AtRestError> {
    let Some(kek) = &keys.current else {
        return Err(AtRestError::KekRequired);
    };
    reseal(store, |key| {
        let secret = open_with(keys.keks(), key, KeyUse::Signing)?;
        match form(&key.secret) {
            Form::Plain(_) => Ok(Some(kek.seal(
                &key.kid,
                key.env,
                &secret,
                KeyUse::Signing,
            )?)),
            _ => Ok(None),
        }
    })
}

/// What [`rotate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotated {
    /// Signing keys stored.
    pub keys: usize,
    /// Keys sealed under the new KEK now.
    pub resealed: usize,
    /// The new KEK's id.
    pub new_id: KekId,
}

/// Re-seals every stored signing key under `new`, in one transaction. Keys are opened with
/// `old` (the current KEK and the previous one, if given), or taken as they are if stored
/// in plaintext; keys sealed under `new` already are left alone, so running it again
/// changes nothing.
pub fn rotate(
    store: &dyn AdminStore,
    old: &KeyEncryption,
    new: &Kek,
) -> Result<Rotated, AtRestError> {
    if old.current_id() == Some(new.id) {
        return Err(AtRestError::NewIsCurrent { kek: new.id });
    }
    let keks = || std::iter::once(new).chain(old.keks());
    reseal(store, |key| match form(&key.secret) {
        Form::Sealed(id) if id == new.id => Ok(None),
        _ => {
            let secret = open_with(keks(), key, KeyUse::Signing)?;
            Ok(Some(new.seal(
                &key.kid,
                key.env,
                &secret,
                KeyUse::Signing,
            )?))
        }
    })
    .map(|(count, changed)| Rotated {
        keys: count,
        resealed: changed,
        new_id: new.id,
    })
}

/// The stored form of the log key `key` sealed under `new` (`None`: it is already): opened
/// with `new` or the KEKs of `old`, or taken as it is if stored in plaintext. What
/// [`rotate`] and [`seal_plaintext`] do to signing keys, for the log keys
/// (`signing::log_keys::reseal`).
pub fn reseal_log_key(
    old: &KeyEncryption,
    new: &Kek,
    key: &StoredKey,
) -> Result<Option<Vec<u8>>, AtRestError> {
    if let Form::Sealed(id) = form(&key.secret)
        && id == new.id
    {
        return Ok(None);
    }
    let keks = std::iter::once(new).chain(old.keks());
    let secret = open_with(keks, key, KeyUse::Log)?;
    Ok(Some(new.seal(&key.kid, key.env, &secret, KeyUse::Log)?))
}

/// The current KEK, which seals new keys.
pub fn current_kek(keys: &KeyEncryption) -> Option<&Kek> {
    keys.current.as_ref()
}

/// Reads every stored key, makes what `change` says of each (`None`: as it is) and
/// replaces them in one transaction, again if the keys changed in between. Returns how many
/// keys there are and how many changed.
fn reseal(
    store: &dyn AdminStore,
    change: impl Fn(&StoredKey) -> Result<Option<Vec<u8>>, AtRestError>,
) -> Result<(usize, usize), AtRestError> {
    for _ in 0..RESEAL_ATTEMPTS {
        let stored = store.all_signing_keys()?;
        let mut changes = Vec::with_capacity(stored.len());
        let mut changed = 0;
        for key in &stored {
            let to = match change(key)? {
                Some(to) => {
                    changed += 1;
                    to
                }
                None => key.secret.clone(),
            };
            changes.push(SecretChange {
                kid: key.kid.clone(),
                from: key.secret.clone(),
                to,
            });
        }
        if changed == 0 {
            return Ok((stored.len(), 0));
        }
        if store.replace_signing_key_secrets(&changes)? {
            return Ok((stored.len(), changed));
        }
    }
    Err(AtRestError::KeysKeptChanging)
}

/// A signing key, or a KEK, could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AtRestError {
    /// A KEK variable or file is empty.
    #[error(
        "{origin} is empty: it must hold a key-encryption key, the standard base64 of 32 random bytes (for example from `openssl rand -base64 32`)"
    )]
    KekEmpty {
        /// The variable, or the flag and file.
        origin: String,
    },
    /// A KEK is not base64.
    #[error(
        "{origin} is not standard base64: a key-encryption key is the standard base64 of 32 random bytes (for example from `openssl rand -base64 32`)"
    )]
    KekNotBase64 {
        /// The variable, or the flag and file.
        origin: String,
    },
    /// A KEK is not 32 bytes.
    #[error(
        "{origin} decodes to {len} bytes: a key-encryption key is 32 random bytes in standard base64 (for example from `openssl rand -base64 32`)"
    )]
    KekLength {
        /// The variable, or the flag and file.
        origin: String,
        /// The decoded length.
        len: usize,
    },
    /// A KEK file could not be read.
    #[error("cannot read the key-encryption key file ({origin}): {reason}")]
    KekFile {
        /// The flag and file.
        origin: String,
        /// Why.
        reason: String,
    },
    /// A KEK is given both by variable and by file.
    #[error("the key-encryption key is given twice ({var} and {flag}): give one of them")]
    KekTwice {
        /// The variable.
        var: String,
        /// The flag.
        flag: String,
    },
    /// A previous KEK without a current one.
    #[error(
        "a previous key-encryption key ({PREVIOUS_KEK_VAR} or {PREVIOUS_KEK_FILE_FLAG}) is only taken with a current one ({KEK_VAR} or {KEK_FILE_FLAG})"
    )]
    PreviousAlone,
    /// The database needs a KEK and none is given.
    #[error(
        "a PostgreSQL database keeps its signing keys encrypted, and no key-encryption key is given: set {KEK_VAR} to the standard base64 of 32 random bytes (for example from `openssl rand -base64 32`), or give a file holding it with {KEK_FILE_FLAG} PATH"
    )]
    KekRequired,
    /// A key is sealed and no KEK is given.
    #[error(
        "signing key {kid} is encrypted at rest and no key-encryption key is given: set {KEK_VAR} or {KEK_FILE_FLAG} to the key-encryption key it was sealed with"
    )]
    KekMissing {
        /// The key.
        kid: String,
    },
    /// A key is sealed under another KEK than those given.
    #[error(
        "signing key {kid} is sealed under key-encryption key {sealed_under}, and the key-encryption key given ({given}) does not match: give the one it was sealed with ({KEK_VAR} or {KEK_FILE_FLAG}; during a rotation, the previous one as {PREVIOUS_KEK_VAR} or {PREVIOUS_KEK_FILE_FLAG})"
    )]
    WrongKek {
        /// The key.
        kid: String,
        /// The id in its header.
        sealed_under: KekId,
        /// The ids of the KEKs given.
        given: String,
    },
    /// A key stored in plaintext where a KEK is given.
    #[error(
        "signing key {kid} is stored in plaintext, and a key-encryption key is given: only sealed signing keys are used then. If an operator stored it without the key-encryption key, seal it with `mandate-server seal-signing-keys --db …` (with the key-encryption key); otherwise someone with write access to the database put it there: delete it and find out how"
    )]
    PlaintextWithKek {
        /// The key.
        kid: String,
    },
    /// A sealed key does not open under the KEK its header names.
    #[error(
        "signing key {kid} does not open under key-encryption key {kek}: its stored bytes were changed, or belong to another key"
    )]
    Damaged {
        /// The key.
        kid: String,
        /// The KEK its header names.
        kek: KekId,
    },
    /// A stored key is neither sealed nor 32 raw bytes.
    #[error("signing key {kid} is stored in a form this server does not know ({len} bytes)")]
    Unreadable {
        /// The key.
        kid: String,
        /// Its stored length.
        len: usize,
    },
    /// The cipher refused to seal (it does not with a 32-byte key).
    #[error("signing key {kid} could not be sealed")]
    Seal {
        /// The key.
        kid: String,
    },
    /// A re-seal kept finding the keys changed by another process.
    #[error(
        "the signing keys kept changing while they were being sealed (another process rotating them?): run it again"
    )]
    KeysKeptChanging,
    /// The new KEK of a rotation is the current one.
    #[error(
        "the new key-encryption key ({kek}) is the one given as current: give the current one with {KEK_VAR} or {KEK_FILE_FLAG}, and the new one with --new-key-file"
    )]
    NewIsCurrent {
        /// Its id.
        kek: KekId,
    },
    /// The opened (or plaintext) bytes are not a P-256 key.
    #[error("signing key {kid} is not a valid P-256 key")]
    InvalidKey {
        /// The key.
        kid: String,
    },
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

#[cfg(test)]
mod tests;
