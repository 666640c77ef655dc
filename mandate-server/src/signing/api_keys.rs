//! API key rows bound to the operator's key-encryption key (KEK).
//!
//! API keys are stored as SHA-256 hashes, so anyone who can write to the database (or to a
//! backup) could plant a row for a key of their own making, or widen a row's reach (another
//! organization, environment, class or agent). With a KEK, each row carries a binding:
//! `"kb1" ‖ KEK id (4 bytes) ‖ HMAC-SHA256(key, row)`, the key derived from the KEK for
//! this use alone (not the key sealing signing keys, nor the one authenticating backups),
//! over the row's hash, organization, environment, class and agent. Authentication
//! ([`crate::http::auth`]) refuses a row whose binding is missing or does not verify under
//! the current or the previous KEK, exactly as an unknown key. Without a KEK rows are not
//! bound and nothing is checked.
//!
//! What is not bound: a key's request rate (a throttle an operator sets without the KEK;
//! raising it in the database gives a key more requests, never more reach) and its
//! revocation, which removes the binding: a revoked row set back in the database is
//! refused as unbound.
//!
//! Rows written before binding existed, or without the KEK, are bound only by an
//! operator's explicit command (`mandate-server bind-api-keys`, [`bind_unbound`]), never
//! as a side effect of starting; `rotate-key-encryption-key` binds the rows again under
//! the new KEK ([`rebind`]).

use aws_lc_rs::hmac;

use crate::model::{Env, KeyClass};
use crate::signing::at_rest::{AtRestError, Kek, KekId, KeyEncryption};
use crate::storage::admin::AdminStore;
use crate::storage::keys::{BindingChange, CallerRow, StoredApiKey, fingerprint};

/// What the binding key is derived for, so the KEK derives no other key like it.
const CONTEXT: &[u8] = b"mandate api key binding v1\0";
/// The first bytes of a binding: the format's version.
const MAGIC: &[u8; 3] = b"kb1";
/// The start of every binding's message.
const MESSAGE_CONTEXT: &[u8] = b"mandate api key row v1\0";
/// How many times a binding pass is tried again when the keys changed while it was made.
const ATTEMPTS: usize = 5;

/// What a binding vouches for: an API key row's identity and authority.
#[derive(Debug, Clone, Copy)]
pub struct KeyAuthority<'a> {
    /// SHA-256 of the key.
    pub hash: &'a [u8; 32],
    /// Its organization.
    pub org_id: &'a str,
    /// Its environment.
    pub env: Env,
    /// Its class.
    pub class: KeyClass,
    /// Its agent, for an agent key.
    pub agent: Option<&'a str>,
}

impl<'a> KeyAuthority<'a> {
    /// The authority of a row as authentication reads it.
    pub fn of_caller(row: &'a CallerRow) -> Self {
        Self {
            hash: &row.key_hash,
            org_id: &row.org_id,
            env: row.env,
            class: row.class,
            agent: row.agent.as_ref().map(|a| a.as_str()),
        }
    }

    /// The authority of a row as operator commands read it.
    pub fn of_stored(row: &'a StoredApiKey) -> Self {
        Self {
            hash: &row.hash,
            org_id: &row.org_id,
            env: row.env,
            class: row.class,
            agent: row.agent.as_deref(),
        }
    }

    /// The bytes the MAC is over: each field length-prefixed, so no two rows share them.
    fn message(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(MESSAGE_CONTEXT);
        let mut field = |bytes: &[u8]| {
            out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            out.extend_from_slice(bytes);
        };
        field(self.hash);
        field(self.org_id.as_bytes());
        field(self.env.as_str().as_bytes());
        field(self.class.as_str().as_bytes());
        match self.agent {
            Some(agent) => {
                field(b"agent");
                field(agent.as_bytes());
            }
            None => field(b"no agent"),
        }
        out
    }
}

/// How a row's binding reads under the KEKs given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// No KEK is given: rows are not checked.
    Unchecked,
    /// Made by the KEK of this id (the current or the previous one) for exactly this row.
    Valid(KekId),
    /// The row has none.
    Missing,
    /// The row has one, made for another row or by a KEK not given.
    Invalid,
}

impl Binding {
    /// Whether a key with this binding may authenticate.
    pub fn admits(self) -> bool {
        matches!(self, Self::Unchecked | Self::Valid(_))
    }
}

/// One derived binding key, wiped when dropped.
#[derive(Clone)]
struct BindingKey {
    id: KekId,
    key: [u8; 32],
}

impl Drop for BindingKey {
    fn drop(&mut self) {
        self.key.fill(0);
    }
}

impl BindingKey {
    fn mac(&self, authority: &KeyAuthority<'_>) -> Vec<u8> {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.key);
        let tag = hmac::sign(&key, &authority.message());
        let mut out = Vec::with_capacity(MAGIC.len() + 4 + 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.id.to_bytes());
        out.extend_from_slice(tag.as_ref());
        out
    }

    fn verifies(&self, authority: &KeyAuthority<'_>, tag: &[u8]) -> bool {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.key);
        hmac::verify(&key, &authority.message(), tag).is_ok()
    }
}

/// Makes and checks bindings with the keys derived from the KEKs given: the current one
/// binds, the current and the previous one (during a rotation's rollout) verify.
#[derive(Clone, Default)]
pub struct KeyBinder {
    keys: Vec<BindingKey>,
}

impl std::fmt::Debug for KeyBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<String> = self.keys.iter().map(|k| k.id.to_string()).collect();
        write!(f, "KeyBinder({})", ids.join(", "))
    }
}

impl KeyBinder {
    /// The binder of `keys` (none without a KEK: rows are then neither bound nor checked).
    pub fn new(keys: &KeyEncryption) -> Self {
        Self {
            keys: keys
                .derived_keys(CONTEXT)
                .into_iter()
                .map(|(id, key)| BindingKey { id, key })
                .collect(),
        }
    }

    fn of_kek(kek: &Kek) -> BindingKey {
        BindingKey {
            id: kek.id(),
            key: kek.derive(CONTEXT),
        }
    }

    /// Whether rows are bound and checked (a KEK is given).
    pub fn is_enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The binding of a new row under the current KEK; `None` without one.
    pub fn bind(&self, authority: &KeyAuthority<'_>) -> Option<Vec<u8>> {
        self.keys.first().map(|key| key.mac(authority))
    }

    /// How `binding` reads for the row `authority`.
    pub fn check(&self, authority: &KeyAuthority<'_>, binding: Option<&[u8]>) -> Binding {
        if self.keys.is_empty() {
            return Binding::Unchecked;
        }
        check_with(self.keys.iter(), authority, binding)
    }
}

fn check_with<'a>(
    keys: impl Iterator<Item = &'a BindingKey>,
    authority: &KeyAuthority<'_>,
    binding: Option<&[u8]>,
) -> Binding {
    let Some(binding) = binding else {
        return Binding::Missing;
    };
    let Some(rest) = binding.strip_prefix(MAGIC.as_slice()) else {
        return Binding::Invalid;
    };
    let (Some(id), Some(tag)) = (rest.get(..4), rest.get(4..)) else {
        return Binding::Invalid;
    };
    let mut id_bytes = [0u8; 4];
    id_bytes.copy_from_slice(id);
    let id = KekId::from_bytes(id_bytes);
    for key in keys {
        if key.id == id && key.verifies(authority, tag) {
            return Binding::Valid(id);
        }
    }
    Binding::Invalid
}

/// What a binding pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// Unrevoked API keys stored.
    pub keys: usize,
    /// Keys bound now.
    pub bound: usize,
    /// Each key bound now, for the operator to check: fingerprint, organization,
    /// environment, class and agent.
    pub described: Vec<String>,
    /// Fingerprints of the keys left refused: their binding is not one the KEKs given made
    /// for them (edited rows, or bound under a KEK not given).
    pub refused: Vec<String>,
}

/// Binds every unrevoked API key row that has no binding under the current KEK, in one
/// transaction (`mandate-server bind-api-keys`): how the keys of a database made before
/// binding, or without a KEK, become usable with one. Rows with a binding that does not
/// verify are left as they are and named. Each row bound is described by its fingerprint,
/// organization, environment, class and agent, for the operator to check.
pub fn bind_unbound(store: &dyn AdminStore, keys: &KeyEncryption) -> Result<Bound, AtRestError> {
    let binder = KeyBinder::new(keys);
    let Some(current) = binder.keys.first() else {
        return Err(AtRestError::KekRequired);
    };
    pass(store, |row| {
        let authority = KeyAuthority::of_stored(row);
        match binder.check(&authority, row.binding.as_deref()) {
            Binding::Missing => Step::Bind(current.mac(&authority)),
            Binding::Invalid => Step::Refused,
            Binding::Valid(_) | Binding::Unchecked => Step::Keep,
        }
    })
}

/// Binds every unrevoked API key row again under `new`, in one transaction
/// (`rotate-key-encryption-key`): rows bound under the KEKs of `old` (or `new` already)
/// are bound under `new`; rows without a valid binding stay refused, and are named.
pub fn rebind(
    store: &dyn AdminStore,
    old: &KeyEncryption,
    new: &Kek,
) -> Result<Bound, AtRestError> {
    let new_key = KeyBinder::of_kek(new);
    let old_keys = KeyBinder::new(old);
    pass(store, |row| {
        let authority = KeyAuthority::of_stored(row);
        let binding = row.binding.as_deref();
        let keys = std::iter::once(&new_key).chain(old_keys.keys.iter());
        match check_with(keys, &authority, binding) {
            Binding::Valid(id) if id == new.id() => Step::Keep,
            Binding::Valid(_) => Step::Bind(new_key.mac(&authority)),
            _ => Step::Refused,
        }
    })
}

/// How many unrevoked API key rows `keys` refuses (missing or invalid bindings): said at
/// start, so that an operator upgrading with a KEK knows to run `bind-api-keys`.
pub fn refused_rows(store: &dyn AdminStore, keys: &KeyEncryption) -> Result<usize, AtRestError> {
    let binder = KeyBinder::new(keys);
    if !binder.is_enabled() {
        return Ok(0);
    }
    Ok(store
        .all_api_keys()?
        .iter()
        .filter(|row| {
            !binder
                .check(&KeyAuthority::of_stored(row), row.binding.as_deref())
                .admits()
        })
        .count())
}

enum Step {
    Keep,
    Bind(Vec<u8>),
    Refused,
}

/// Reads every unrevoked row, makes what `step` says of each and stores the new bindings
/// in one transaction, again if the rows changed in between.
fn pass(
    store: &dyn AdminStore,
    step: impl Fn(&StoredApiKey) -> Step,
) -> Result<Bound, AtRestError> {
    for _ in 0..ATTEMPTS {
        let rows = store.all_api_keys()?;
        let mut changes = Vec::new();
        let mut refused = Vec::new();
        for row in &rows {
            match step(row) {
                Step::Keep => {}
                Step::Bind(to) => changes.push(BindingChange {
                    hash: row.hash,
                    from: row.binding.clone(),
                    to,
                }),
                Step::Refused => refused.push(fingerprint(&row.hash)),
            }
        }
        if changes.is_empty() || store.replace_api_key_bindings(&changes)? {
            let described = changes
                .iter()
                .filter_map(|change| rows.iter().find(|r| r.hash == change.hash))
                .map(|row| {
                    format!(
                        "API key {} bound: organization {}, {}, {} key{}",
                        fingerprint(&row.hash),
                        row.org_id,
                        row.env.as_str(),
                        row.class.as_str(),
                        row.agent
                            .as_deref()
                            .map(|a| format!(" of {a}"))
                            .unwrap_or_default()
                    )
                })
                .collect();
            return Ok(Bound {
                keys: rows.len(),
                bound: changes.len(),
                described,
                refused,
            });
        }
    }
    Err(AtRestError::KeysKeptChanging)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn keys(current: u8, previous: Option<u8>) -> KeyEncryption {
        KeyEncryption::new(
            Kek::from_bytes(&[current; 32]),
            previous.map(|p| Kek::from_bytes(&[p; 32])),
        )
    }

    const HASH: [u8; 32] = [7; 32];

    fn row(org: &'static str, agent: Option<&'static str>) -> KeyAuthority<'static> {
        KeyAuthority {
            hash: &HASH,
            org_id: org,
            env: Env::Live,
            class: if agent.is_some() {
                KeyClass::Agent
            } else {
                KeyClass::Org
            },
            agent,
        }
    }

    #[test]
    fn a_binding_verifies_only_for_its_row_and_the_kek_that_made_it() {
        let binder = KeyBinder::new(&keys(1, None));
        let org = row("org_a", None);
        let binding = binder.bind(&org).unwrap();
        assert_eq!(binding.len(), 39);
        assert!(binder.check(&org, Some(&binding)).admits());
        assert_eq!(binder.check(&org, None), Binding::Missing);
        // Any field changed: another row.
        let mut other_hash = org;
        let hash = [8; 32];
        other_hash.hash = &hash;
        let mut sandbox = org;
        sandbox.env = Env::Sandbox;
        let mut agent_class = org;
        agent_class.class = KeyClass::Agent;
        for edited in [
            row("org_b", None),
            row("org_a", Some("agt_x")),
            other_hash,
            sandbox,
            agent_class,
        ] {
            assert_eq!(binder.check(&edited, Some(&binding)), Binding::Invalid);
        }
        // A flipped byte, a truncation, another KEK.
        let mut flipped = binding.clone();
        flipped[20] ^= 1;
        assert_eq!(binder.check(&org, Some(&flipped)), Binding::Invalid);
        assert_eq!(binder.check(&org, Some(&binding[..10])), Binding::Invalid);
        let other = KeyBinder::new(&keys(2, None));
        assert_eq!(other.check(&org, Some(&binding)), Binding::Invalid);
        // During a rollout the previous KEK's bindings still verify; new ones are the new
        // KEK's.
        let rollout = KeyBinder::new(&keys(2, Some(1)));
        assert!(rollout.check(&org, Some(&binding)).admits());
        assert_ne!(rollout.bind(&org).unwrap(), binding);
        // Without a KEK nothing is bound or checked.
        let none = KeyBinder::new(&KeyEncryption::none());
        assert_eq!(none.bind(&org), None);
        assert_eq!(none.check(&org, None), Binding::Unchecked);
    }

    #[test]
    fn the_binding_key_is_not_the_backup_key() {
        let keys = keys(1, None);
        let binding = KeyBinder::new(&keys).keys[0].key;
        assert!(!keys.backup_keys().contains(&binding));
    }
}
