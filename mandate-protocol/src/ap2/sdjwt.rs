//! Compact SD-JWT (RFC 9901) parsing, ES256 signatures and disclosure resolution.

use std::collections::{HashMap, HashSet};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use super::Ap2Error;

/// The one `_sd_alg` accepted (also the default when absent, RFC 9901 §4.1.1).
const SD_ALG: &str = "sha-256";

/// base64url (no padding) of the SHA-256 of `text`'s bytes: AP2's digests and hashes.
pub(crate) fn b64_sha256(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}

/// An SD-JWT split at its `~`s.
pub(crate) struct Compact<'a> {
    /// The issuer-signed JWT.
    pub(crate) issuer_jwt: &'a str,
    /// The disclosures, in order.
    pub(crate) disclosures: Vec<&'a str>,
}

impl Compact<'_> {
    /// The SD-JWT without key-binding JWT, ending in `~`: what `sd_hash` covers.
    pub(crate) fn sd_jwt(&self) -> String {
        let mut text = String::from(self.issuer_jwt);
        text.push('~');
        for disclosure in &self.disclosures {
            text.push_str(disclosure);
            text.push('~');
        }
        text
    }
}

/// Splits `<issuer-jwt>~<disclosure>~...~`. A trailing key-binding JWT is refused: AP2
/// carries key binding in a separate chained token (`~~`), never as a trailing KB-JWT.
pub(crate) fn split<'a>(token: &'a str, what: &'static str) -> Result<Compact<'a>, Ap2Error> {
    let malformed = |problem: &str| Ap2Error::Malformed(format!("the {what} {problem}"));
    let body = token.trim();
    let Some(body) = body.strip_suffix('~') else {
        return Err(malformed(
            "must be a compact SD-JWT ending in ~ (<issuer-jwt>~<disclosure>~...~), without a trailing key-binding JWT",
        ));
    };
    let mut parts = body.split('~');
    let issuer_jwt = parts.next().unwrap_or_default();
    if issuer_jwt.is_empty() {
        return Err(malformed("has an empty issuer JWT"));
    }
    let disclosures: Vec<&str> = parts.collect();
    if disclosures.iter().any(|d| d.is_empty()) {
        return Err(malformed("has an empty disclosure (two ~ in a row)"));
    }
    Ok(Compact {
        issuer_jwt,
        disclosures,
    })
}

/// A compact JWS decoded, not yet verified.
pub(crate) struct Jwt<'a> {
    /// The protected header.
    pub(crate) header: Map<String, Value>,
    /// The payload.
    pub(crate) payload: Map<String, Value>,
    /// `header.payload`, what the signature covers.
    pub(crate) signing_input: &'a str,
    /// `header.payload.signature`, as given.
    pub(crate) text: &'a str,
    /// The signature bytes.
    pub(crate) signature: Vec<u8>,
}

/// Decodes `header.payload.signature`, requiring `alg` ES256 before anything else.
pub(crate) fn decode_jwt<'a>(jwt: &'a str, what: &'static str) -> Result<Jwt<'a>, Ap2Error> {
    let malformed = |problem: String| Ap2Error::Malformed(format!("the {what}'s JWT {problem}"));
    let mut parts = jwt.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed("must be header.payload.signature".to_owned()));
    };
    let object = |segment: &str, name: &str| -> Result<Map<String, Value>, Ap2Error> {
        let bytes = URL_SAFE_NO_PAD
            .decode(segment)
            .map_err(|_| malformed(format!("{name} is not base64url without padding")))?;
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(malformed(format!("{name} is not a JSON object"))),
        }
    };
    let header = object(h, "header")?;
    match header.get("alg") {
        Some(Value::String(alg)) if alg == "ES256" => {}
        Some(Value::String(alg)) => {
            return Err(Ap2Error::UnsupportedAlgorithm {
                token: what,
                alg: alg.clone(),
            });
        }
        other => {
            return Err(Ap2Error::UnsupportedAlgorithm {
                token: what,
                alg: other.map(Value::to_string).unwrap_or_default(),
            });
        }
    }
    if header.contains_key("crit") {
        return Err(malformed(
            "header carries crit, whose extensions are not understood".to_owned(),
        ));
    }
    let payload = object(p, "payload")?;
    let signature = URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| malformed("signature is not base64url without padding".to_owned()))?;
    Ok(Jwt {
        header,
        payload,
        signing_input: &jwt[..h.len() + 1 + p.len()],
        text: jwt,
        signature,
    })
}

impl Jwt<'_> {
    /// Whether the signature is a valid ES256 signature of the signing input under `key`.
    /// Either twin `(r, s)` / `(r, n - s)` is accepted (see the module doc of `ap2`).
    pub(crate) fn verifies_with(&self, key: &VerifyingKey) -> bool {
        if self.signature.len() != 64 {
            return false;
        }
        match Signature::from_slice(&self.signature) {
            Ok(signature) => {
                let signature = signature.normalize_s();
                key.verify(self.signing_input.as_bytes(), &signature)
                    .is_ok()
            }
            Err(_) => false,
        }
    }

    /// The digest of this JWT: the base64url SHA-256 of `header.payload.signature`
    /// exactly as given, high-S or low-S signature alike (AP2's `issuer_jwt_hash`).
    pub(crate) fn digest(&self) -> String {
        b64_sha256(self.text)
    }

    /// The name of what this JWT states, whatever ECDSA twin of its signature it carries:
    /// the base64url SHA-256 of `header.payload.signature` with the signature in its low-S
    /// form. The two twins `(r, s)`, `(r, n - s)` of one signature (both valid) have two
    /// digests and one consent key, so a twin cannot pass for another consent.
    pub(crate) fn consent_key(&self) -> String {
        let low = Signature::from_slice(&self.signature)
            .ok()
            .filter(|_| self.signature.len() == 64)
            .map(|signature| signature.normalize_s().to_bytes().to_vec())
            .unwrap_or_else(|| self.signature.clone());
        b64_sha256(&format!(
            "{}.{}",
            self.signing_input,
            URL_SAFE_NO_PAD.encode(low)
        ))
    }

    /// The header's `kid`, if it is a string.
    pub(crate) fn kid(&self) -> Option<&str> {
        self.header.get("kid").and_then(Value::as_str)
    }
}

/// Resolves the disclosures into `payload` (RFC 9901 §7.1): every `_sd` digest and array
/// element `{"...": digest}` that names a disclosure is replaced by its claim or element,
/// recursively; digests naming none (decoys) vanish with `_sd` and `_sd_alg`. Refuses an
/// unsupported `_sd_alg`, a malformed, repeated or unreferenced disclosure, a repeated
/// digest, and a disclosed name that already exists (or is `_sd` or `...`).
///
/// Also returns where digests without a disclosure were (withheld claims or decoys, which
/// cannot be told apart): `path._sd` for an object member, `path[]` for an array element,
/// the path naming members and `[]` for array elements (`delegate_payload[].constraints[]`).
pub(crate) fn resolve(
    mut payload: Map<String, Value>,
    disclosures: &[&str],
    token: &'static str,
) -> Result<(Map<String, Value>, Vec<String>), Ap2Error> {
    match payload.remove("_sd_alg") {
        None => {}
        Some(Value::String(alg)) if alg == SD_ALG => {}
        Some(other) => {
            return Err(Ap2Error::UnsupportedSdAlg(
                other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned),
            ));
        }
    }
    let mut by_digest: HashMap<String, (usize, Vec<Value>)> = HashMap::new();
    let mut seen = HashSet::new();
    for (index, disclosure) in disclosures.iter().enumerate() {
        if !seen.insert(*disclosure) {
            return Err(Ap2Error::Duplicate {
                token,
                what: format!("disclosure {index}"),
            });
        }
        let bad = |problem: &str| Ap2Error::BadDisclosure {
            token,
            index,
            problem: problem.to_owned(),
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(disclosure)
            .map_err(|_| bad("not base64url without padding"))?;
        let array = match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Array(array)) if matches!(array.len(), 2 | 3) => array,
            _ => return Err(bad("not a JSON array [salt, name, value] or [salt, value]")),
        };
        if !array.first().is_some_and(Value::is_string) {
            return Err(bad("its salt is not a string"));
        }
        by_digest.insert(b64_sha256(disclosure), (index, array));
    }
    let mut state = Resolution {
        token,
        by_digest,
        used: vec![false; disclosures.len()],
        digests: HashSet::new(),
        path: Vec::new(),
        withheld: Vec::new(),
    };
    state.object(&mut payload)?;
    if let Some(index) = state.used.iter().position(|used| !used) {
        return Err(Ap2Error::UnreferencedDisclosure { token, index });
    }
    Ok((payload, state.withheld))
}

struct Resolution {
    token: &'static str,
    by_digest: HashMap<String, (usize, Vec<Value>)>,
    used: Vec<bool>,
    digests: HashSet<String>,
    /// Where the walk is: member names, `[]` for array elements.
    path: Vec<String>,
    /// Digests without a disclosure, by path.
    withheld: Vec<String>,
}

impl Resolution {
    /// Takes the disclosure named by `digest`, if any, after checking the digest is new.
    fn take(&mut self, digest: &str) -> Result<Option<(usize, Vec<Value>)>, Ap2Error> {
        if !self.digests.insert(digest.to_owned()) {
            return Err(Ap2Error::Duplicate {
                token: self.token,
                what: format!("digest {digest}"),
            });
        }
        match self.by_digest.remove(digest) {
            Some((index, array)) => {
                self.used[index] = true;
                Ok(Some((index, array)))
            }
            None => Ok(None),
        }
    }

    fn here(&self, last: &str) -> String {
        let mut text = String::new();
        for part in &self.path {
            if !text.is_empty() && part != "[]" {
                text.push('.');
            }
            text.push_str(part);
        }
        if !last.is_empty() {
            if !text.is_empty() {
                text.push('.');
            }
            text.push_str(last);
        }
        text
    }

    fn bad(&self, index: usize, problem: &str) -> Ap2Error {
        Ap2Error::BadDisclosure {
            token: self.token,
            index,
            problem: problem.to_owned(),
        }
    }

    fn object(&mut self, object: &mut Map<String, Value>) -> Result<(), Ap2Error> {
        // Plain members first, then the disclosed ones (whose values are resolved as
        // they are inserted).
        for (name, value) in object.iter_mut() {
            self.path.push(name.clone());
            let done = self.value(value);
            self.path.pop();
            done?;
        }
        let Some(sd) = object.remove("_sd") else {
            return Ok(());
        };
        let Value::Array(digests) = sd else {
            return Err(Ap2Error::Malformed(format!(
                "the {}'s _sd is not an array of digests",
                self.token
            )));
        };
        for digest in digests {
            let Value::String(digest) = digest else {
                return Err(Ap2Error::Malformed(format!(
                    "the {}'s _sd holds a digest that is not a string",
                    self.token
                )));
            };
            let Some((index, mut array)) = self.take(&digest)? else {
                let at = self.here("_sd");
                self.withheld.push(at);
                continue;
            };
            if array.len() != 3 {
                return Err(self.bad(
                    index,
                    "is referenced from _sd but is not [salt, name, value]",
                ));
            }
            let mut value = array.pop().unwrap_or(Value::Null);
            let name = match array.pop() {
                Some(Value::String(name)) => name,
                _ => return Err(self.bad(index, "its claim name is not a string")),
            };
            if name == "_sd" || name == "..." || object.contains_key(&name) {
                return Err(self.bad(
                    index,
                    &format!("discloses {name:?}, which the object already has or may not have"),
                ));
            }
            self.path.push(name.clone());
            let done = self.value(&mut value);
            self.path.pop();
            done?;
            object.insert(name, value);
        }
        Ok(())
    }

    fn value(&mut self, value: &mut Value) -> Result<(), Ap2Error> {
        match value {
            Value::Object(object) => self.object(object),
            Value::Array(items) => {
                self.path.push("[]".to_owned());
                let done = self.array(items);
                self.path.pop();
                done
            }
            _ => Ok(()),
        }
    }

    /// The elements of an array (the path ends in `[]`): `{"...": digest}` replaced by
    /// its disclosed element, or dropped (and recorded) when none is disclosed.
    fn array(&mut self, items: &mut Vec<Value>) -> Result<(), Ap2Error> {
        let mut kept = Vec::with_capacity(items.len());
        for mut item in std::mem::take(items) {
            let digest = match &item {
                Value::Object(object) if object.len() == 1 => {
                    object.get("...").and_then(Value::as_str).map(str::to_owned)
                }
                _ => None,
            };
            let Some(digest) = digest else {
                self.value(&mut item)?;
                kept.push(item);
                continue;
            };
            match self.take(&digest)? {
                Some((index, mut array)) => {
                    if array.len() != 2 {
                        return Err(self.bad(
                            index,
                            "is referenced from an array element but is not [salt, value]",
                        ));
                    }
                    let mut element = array.pop().unwrap_or(Value::Null);
                    self.value(&mut element)?;
                    kept.push(element);
                }
                None => {
                    let at = self.here("");
                    self.withheld.push(at);
                }
            }
        }
        *items = kept;
        Ok(())
    }
}

/// A JSON object of claims.
pub(crate) type Claims = Map<String, Value>;

/// The mandate a resolved payload carries: its one `delegate_payload` element (AP2's
/// SDK wraps every mandate so), or the payload itself when it has no `delegate_payload`.
pub(crate) fn delegate(
    mut payload: Map<String, Value>,
    token: &'static str,
) -> Result<(Claims, Claims), Ap2Error> {
    match payload.remove("delegate_payload") {
        None => Ok((payload.clone(), payload)),
        Some(Value::Array(items)) => {
            let mut objects = items.into_iter().filter_map(|item| match item {
                Value::Object(object) => Some(object),
                _ => None,
            });
            match (objects.next(), objects.next()) {
                (Some(item), None) => Ok((payload, item)),
                _ => Err(Ap2Error::InvalidClaim {
                    token,
                    claim: "delegate_payload".to_owned(),
                    problem: "must disclose exactly one mandate object".to_owned(),
                }),
            }
        }
        Some(_) => Err(Ap2Error::InvalidClaim {
            token,
            claim: "delegate_payload".to_owned(),
            problem: "must be an array".to_owned(),
        }),
    }
}

/// Reads an integer time claim (`iat`, `exp`), if present, from `object`.
pub(crate) fn time_claim(
    object: &Map<String, Value>,
    claim: &str,
    token: &'static str,
) -> Result<Option<i64>, Ap2Error> {
    match object.get(claim) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| Ap2Error::InvalidClaim {
                token,
                claim: claim.to_owned(),
                problem: "must be a whole number of unix seconds".to_owned(),
            }),
    }
}
