//! Public keys as JSON Web Keys (RFC 7517): the set a counterparty fetches to check a token.
//!
//! Only one kind of key is used here: an EC P-256 public key for ES256 signatures.
//! [`Jwk::from_value`] parses one key strictly: a wrong `kty`, `crv`, `alg` or `use`, a
//! coordinate that is not exactly 32 bytes, a point off the curve or a private member `d`
//! are each a typed [`JwkError`]. A JWK Set may also carry keys of other types, as RFC 7517
//! allows: [`JwkSet::from_json`] skips a member whose `kty`, `crv`, `alg` or `use` it
//! cannot use (an Ed25519 or RSA key, a P-384 key), and refuses the set only when no usable
//! key is left, or when a member that claims to be a P-256 key is broken, carries `d`, or
//! shares its `kid` with another. Members this module does not read are ignored.
//! Serialization never writes a private member.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::VerifyingKey;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The JOSE algorithm of every key and token: ECDSA on P-256 with SHA-256.
pub(crate) const ES256: &str = "ES256";

/// Why a JWK or a JWK Set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JwkError {
    /// The bytes are not JSON of the shape `{"keys": [{...}, ...]}`.
    #[error("not a jwk set: {0}")]
    Json(String),
    /// A required member is absent (or null).
    #[error("jwk has no {0} member")]
    MissingMember(&'static str),
    /// `kty` is not `"EC"`.
    #[error("jwk kty must be \"EC\", found {0}")]
    UnsupportedKeyType(String),
    /// `crv` is not `"P-256"`.
    #[error("jwk crv must be \"P-256\", found {0}")]
    UnsupportedCurve(String),
    /// `alg` is present and is not `"ES256"`.
    #[error("jwk alg must be \"ES256\", found {0}")]
    UnsupportedAlgorithm(String),
    /// `use` is present and is not `"sig"`.
    #[error("jwk use must be \"sig\", found {0}")]
    UnsupportedUse(String),
    /// `kid` is not a non-empty string.
    #[error("jwk kid must be a non-empty string")]
    BadKid,
    /// A coordinate is not exactly 32 bytes of base64url without padding.
    #[error("jwk {0} must be exactly 32 bytes of base64url without padding")]
    BadCoordinate(&'static str),
    /// The coordinates do not name a point of P-256 (or name the point at infinity).
    #[error("jwk x and y are not a point on the p-256 curve")]
    NotOnCurve,
    /// The key carries the private scalar `d`: a key set must hold public keys only.
    #[error("jwk carries a private key member d")]
    PrivateKey,
    /// Two keys of the set share one `kid`, so a token's key could not be chosen.
    #[error("jwk set has two keys with kid {0:?}")]
    DuplicateKid(String),
    /// The set holds no EC P-256 ES256 signing key: it is empty, or every member is of a
    /// type, curve, algorithm or use this crate cannot use (holds how many were skipped).
    #[error("jwk set has no usable key: {0} member(s) skipped, none an EC P-256 ES256 signing key")]
    NoUsableKey(usize),
}

impl JwkError {
    /// Whether the error says only that the key is of a kind this crate does not use (its
    /// `kty`, `crv`, `alg` or `use`): such a member of a set is skipped, not refused.
    pub(crate) fn is_unsupported_kind(&self) -> bool {
        matches!(
            self,
            Self::UnsupportedKeyType(_)
                | Self::UnsupportedCurve(_)
                | Self::UnsupportedAlgorithm(_)
                | Self::UnsupportedUse(_)
        )
    }
}

/// An EC P-256 public key for ES256 signatures, named by its `kid`.
///
/// Serialized as `{"kty":"EC","crv":"P-256","x":…,"y":…,"kid":…,"use":"sig","alg":"ES256"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jwk {
    kid: String,
    key: VerifyingKey,
    x: [u8; 32],
    y: [u8; 32],
}

impl Jwk {
    /// The JWK of a P-256 public key, published under `kid`.
    pub fn from_verifying_key(kid: impl Into<String>, key: &VerifyingKey) -> Self {
        let point = key.to_sec1_point(false);
        let mut x = [0u8; 32];
        let mut y = [0u8; 32];
        // An uncompressed point is 0x04 || x || y; the identity has no VerifyingKey.
        if let Some(bytes) = point.as_bytes().get(1..65) {
            let (xs, ys) = bytes.split_at(32);
            x.copy_from_slice(xs);
            y.copy_from_slice(ys);
        }
        Self {
            kid: kid.into(),
            key: *key,
            x,
            y,
        }
    }

    /// The key id that tokens name in their `kid` header.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key, ready to verify signatures.
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// Parses one JWK from a JSON value, strictly (see the module doc).
    pub fn from_value(value: &Value) -> Result<Self, JwkError> {
        let member = value
            .as_object()
            .ok_or_else(|| JwkError::Json("a jwk must be a json object".to_owned()))?;
        let get = |name: &'static str| member.get(name).filter(|v| !v.is_null());
        if member.contains_key("d") {
            return Err(JwkError::PrivateKey);
        }
        let kty = get("kty").ok_or(JwkError::MissingMember("kty"))?;
        if kty.as_str() != Some("EC") {
            return Err(JwkError::UnsupportedKeyType(shown(kty)));
        }
        let crv = get("crv").ok_or(JwkError::MissingMember("crv"))?;
        if crv.as_str() != Some("P-256") {
            return Err(JwkError::UnsupportedCurve(shown(crv)));
        }
        if let Some(alg) = get("alg")
            && alg.as_str() != Some(ES256)
        {
            return Err(JwkError::UnsupportedAlgorithm(shown(alg)));
        }
        if let Some(key_use) = get("use")
            && key_use.as_str() != Some("sig")
        {
            return Err(JwkError::UnsupportedUse(shown(key_use)));
        }
        let kid = match get("kid") {
            None => return Err(JwkError::MissingMember("kid")),
            Some(Value::String(kid)) if !kid.is_empty() => kid.clone(),
            Some(_) => return Err(JwkError::BadKid),
        };
        let x = coordinate(get("x"), "x")?;
        let y = coordinate(get("y"), "y")?;
        let mut sec1 = [0u8; 65];
        sec1[0] = 0x04;
        sec1[1..33].copy_from_slice(&x);
        sec1[33..].copy_from_slice(&y);
        let key = VerifyingKey::from_sec1_bytes(&sec1).map_err(|_| JwkError::NotOnCurve)?;
        Ok(Self { kid, key, x, y })
    }
}

/// A JSON value as text for an error message, cut to 64 characters.
fn shown(value: &Value) -> String {
    value.to_string().chars().take(64).collect()
}

fn coordinate(value: Option<&Value>, name: &'static str) -> Result<[u8; 32], JwkError> {
    let text = value
        .ok_or(JwkError::MissingMember(name))?
        .as_str()
        .ok_or(JwkError::BadCoordinate(name))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| JwkError::BadCoordinate(name))?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| JwkError::BadCoordinate(name))
}

#[derive(Serialize)]
struct JwkWire<'a> {
    kty: &'static str,
    crv: &'static str,
    x: String,
    y: String,
    kid: &'a str,
    #[serde(rename = "use")]
    key_use: &'static str,
    alg: &'static str,
}

impl Serialize for Jwk {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        JwkWire {
            kty: "EC",
            crv: "P-256",
            x: URL_SAFE_NO_PAD.encode(self.x),
            y: URL_SAFE_NO_PAD.encode(self.y),
            kid: &self.kid,
            key_use: "sig",
            alg: ES256,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Jwk {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Jwk::from_value(&value).map_err(serde::de::Error::custom)
    }
}

/// A JWK Set: the public keys that verify tokens, as served at
/// `{verdicts_url}/.well-known/jwks.json`. During a rotation it holds the outgoing and the
/// incoming key together.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct JwkSet {
    /// The keys, each with its own `kid`. Parsing refuses two keys with one `kid`; if a set
    /// built in code has duplicates anyway, [`JwkSet::find`] returns the first.
    pub keys: Vec<Jwk>,
}

/// The outer shape of a set; `Value` keeps each key for the strict parse. A duplicate
/// `keys` member is refused by serde.
#[derive(Deserialize)]
struct JwkSetWire {
    keys: Vec<Value>,
}

impl JwkSet {
    /// Parses a JWK Set from JSON bytes. Members of a kind this crate cannot use are
    /// skipped (see the module doc); every other member must be a valid ES256 public key,
    /// and at least one must be.
    pub fn from_json(bytes: &[u8]) -> Result<Self, JwkError> {
        let wire: JwkSetWire =
            serde_json::from_slice(bytes).map_err(|e| JwkError::Json(e.to_string()))?;
        Self::from_wire(wire)
    }

    fn from_wire(wire: JwkSetWire) -> Result<Self, JwkError> {
        let mut keys: Vec<Jwk> = Vec::with_capacity(wire.keys.len());
        let mut skipped = 0;
        for value in &wire.keys {
            let jwk = match Jwk::from_value(value) {
                Ok(jwk) => jwk,
                Err(e) if e.is_unsupported_kind() => {
                    skipped += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if keys.iter().any(|k| k.kid == jwk.kid) {
                return Err(JwkError::DuplicateKid(jwk.kid));
            }
            keys.push(jwk);
        }
        if keys.is_empty() {
            return Err(JwkError::NoUsableKey(skipped));
        }
        Ok(Self { keys })
    }

    /// The key with this `kid`, if the set holds one.
    pub fn find(&self, kid: &str) -> Option<&Jwk> {
        self.keys.iter().find(|k| k.kid == kid)
    }
}

impl<'de> Deserialize<'de> for JwkSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = JwkSetWire::deserialize(deserializer)?;
        Self::from_wire(wire).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use p256::ecdsa::SigningKey;
    use serde_json::json;

    fn key(byte: u8) -> VerifyingKey {
        *SigningKey::from_slice(&[byte; 32]).unwrap().verifying_key()
    }

    fn good() -> Value {
        serde_json::to_value(Jwk::from_verifying_key("live-1", &key(1))).unwrap()
    }

    /// One key parsed strictly, and the same key as the only member of a set: the set
    /// refuses it with the same error, or skips it when it is of a kind not used here.
    fn parse_one(value: Value) -> Result<Jwk, JwkError> {
        let alone = Jwk::from_value(&value);
        let in_set = JwkSet::from_json(json!({ "keys": [value] }).to_string().as_bytes())
            .map(|mut set| set.keys.remove(0));
        match &alone {
            Err(e) if e.is_unsupported_kind() => assert_eq!(in_set, Err(JwkError::NoUsableKey(1))),
            _ => assert_eq!(in_set, alone),
        }
        alone
    }

    #[test]
    fn serializes_the_public_members_only() {
        let value = good();
        let object = value.as_object().unwrap();
        let mut names: Vec<&str> = object.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["alg", "crv", "kid", "kty", "use", "x", "y"]);
        assert_eq!(value["kty"], "EC");
        assert_eq!(value["crv"], "P-256");
        assert_eq!(value["use"], "sig");
        assert_eq!(value["alg"], "ES256");
        assert_eq!(value["x"].as_str().unwrap().len(), 43);
        assert_eq!(value["y"].as_str().unwrap().len(), 43);
    }

    #[test]
    fn round_trips() {
        let jwk = Jwk::from_verifying_key("live-1", &key(1));
        let set = JwkSet {
            keys: vec![jwk.clone(), Jwk::from_verifying_key("live-2", &key(2))],
        };
        let text = serde_json::to_vec(&set).unwrap();
        let back = JwkSet::from_json(&text).unwrap();
        assert_eq!(back, set);
        assert_eq!(back.find("live-1"), Some(&jwk));
        assert_eq!(back.find("live-3"), None);
        assert_eq!(back.find("live-1").unwrap().verifying_key(), &key(1));
        let via_serde: JwkSet = serde_json::from_slice(&text).unwrap();
        assert_eq!(via_serde, set);
    }

    #[test]
    fn alg_and_use_may_be_absent() {
        let mut value = good();
        value.as_object_mut().unwrap().remove("alg");
        value.as_object_mut().unwrap().remove("use");
        value["key_ops"] = json!(["verify"]);
        assert!(parse_one(value).is_ok());
    }

    #[test]
    fn refuses_each_wrong_member() {
        let cases: Vec<(&str, Value, JwkError)> = vec![
            (
                "kty",
                json!("RSA"),
                JwkError::UnsupportedKeyType("\"RSA\"".into()),
            ),
            ("kty", json!(1), JwkError::UnsupportedKeyType("1".into())),
            (
                "crv",
                json!("P-384"),
                JwkError::UnsupportedCurve("\"P-384\"".into()),
            ),
            (
                "crv",
                json!("secp256k1"),
                JwkError::UnsupportedCurve("\"secp256k1\"".into()),
            ),
            (
                "alg",
                json!("ES384"),
                JwkError::UnsupportedAlgorithm("\"ES384\"".into()),
            ),
            (
                "alg",
                json!("none"),
                JwkError::UnsupportedAlgorithm("\"none\"".into()),
            ),
            (
                "use",
                json!("enc"),
                JwkError::UnsupportedUse("\"enc\"".into()),
            ),
            ("kid", json!(""), JwkError::BadKid),
            ("kid", json!(7), JwkError::BadKid),
            ("kid", Value::Null, JwkError::MissingMember("kid")),
            ("d", json!("AAAA"), JwkError::PrivateKey),
            ("d", Value::Null, JwkError::PrivateKey),
            ("x", json!("AAAA"), JwkError::BadCoordinate("x")),
            ("y", json!(12), JwkError::BadCoordinate("y")),
            (
                "x",
                json!(format!("{}=", "A".repeat(43))),
                JwkError::BadCoordinate("x"),
            ),
            ("x", json!("A".repeat(44)), JwkError::BadCoordinate("x")),
            (
                "y",
                json!(URL_SAFE_NO_PAD.encode([0u8; 33])),
                JwkError::BadCoordinate("y"),
            ),
            (
                "y",
                json!(URL_SAFE_NO_PAD.encode([0u8; 32])),
                JwkError::NotOnCurve,
            ),
        ];
        for (name, replacement, expected) in cases {
            let mut value = good();
            value[name] = replacement.clone();
            assert_eq!(parse_one(value), Err(expected), "{name} = {replacement}");
        }
        for name in ["kty", "crv", "x", "y"] {
            let mut value = good();
            value.as_object_mut().unwrap().remove(name);
            assert_eq!(parse_one(value), Err(JwkError::MissingMember(name)));
        }
    }

    #[test]
    fn refuses_a_point_off_the_curve() {
        let mut value = good();
        let mut y = URL_SAFE_NO_PAD
            .decode(value["y"].as_str().unwrap())
            .unwrap();
        y[31] ^= 1;
        value["y"] = json!(URL_SAFE_NO_PAD.encode(y));
        assert_eq!(parse_one(value), Err(JwkError::NotOnCurve));
    }

    #[test]
    fn refuses_bad_sets() {
        assert!(matches!(JwkSet::from_json(b"[]"), Err(JwkError::Json(_))));
        assert!(matches!(JwkSet::from_json(b"{}"), Err(JwkError::Json(_))));
        assert!(matches!(
            JwkSet::from_json(b"{\"keys\": [1]}"),
            Err(JwkError::Json(_))
        ));
        let twice = json!({ "keys": [good(), good()] }).to_string();
        assert_eq!(
            JwkSet::from_json(twice.as_bytes()),
            Err(JwkError::DuplicateKid("live-1".into()))
        );
        let doubled = format!("{{\"keys\":[],\"keys\":[{}]}}", good());
        assert!(matches!(
            JwkSet::from_json(doubled.as_bytes()),
            Err(JwkError::Json(_))
        ));
        assert_eq!(
            JwkSet::from_json(b"{\"keys\":[]}"),
            Err(JwkError::NoUsableKey(0))
        );
    }

    #[test]
    fn members_of_other_kinds_are_skipped() {
        let ed25519 = json!({"kty": "OKP", "crv": "Ed25519", "kid": "ed-1",
            "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        let rsa = json!({"kty": "RSA", "kid": "rsa-1", "alg": "RS256", "e": "AQAB", "n": "AA"});
        let p384 = json!({"kty": "EC", "crv": "P-384", "kid": "p384", "x": "AA", "y": "AA"});
        let mut encryption = good();
        encryption["use"] = json!("enc");
        encryption["kid"] = json!("enc-1");
        let mut es512 = good();
        es512["alg"] = json!("ES512");
        es512["kid"] = json!("es512");
        let set = json!({ "keys": [ed25519, rsa, good(), p384, encryption, es512] });
        let parsed = JwkSet::from_json(set.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.keys.len(), 1);
        assert_eq!(parsed.keys[0].kid(), "live-1");
        // Only foreign keys: a clear error, not an empty set.
        let foreign =
            json!({ "keys": [ed25519_only(), {"kty": "RSA", "kid": "r", "e": "AQAB", "n": "AA"}] });
        assert_eq!(
            JwkSet::from_json(foreign.to_string().as_bytes()),
            Err(JwkError::NoUsableKey(2))
        );
        // A broken P-256 key or a private one still refuses the whole set.
        let mut broken = good();
        broken["kid"] = json!("live-2");
        broken["x"] = json!("AAAA");
        let set = json!({ "keys": [good(), broken] });
        assert_eq!(
            JwkSet::from_json(set.to_string().as_bytes()),
            Err(JwkError::BadCoordinate("x"))
        );
        let private_rsa = json!({"kty": "RSA", "kid": "r", "d": "AA"});
        let set = json!({ "keys": [good(), private_rsa] });
        assert_eq!(
            JwkSet::from_json(set.to_string().as_bytes()),
            Err(JwkError::PrivateKey)
        );
    }

    fn ed25519_only() -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "kid": "ed-1", "x": "AA"})
    }
}
