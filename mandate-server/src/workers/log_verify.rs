//! Verify before append: the checkpoint worker ([`super::checkpoint`]) logs a decision only
//! once its token, rebuilt from the decision's row, verifies (docs/audit.md).
//!
//! Only the decisions whose token this process did not keep in memory are verified here:
//! one this process's decision service answered and handed over
//! ([`Answered`](crate::model::leaves::Answered)) is appended as it was signed.
//!
//! A token rebuilt from a row whose leaf tag checks ([`crate::signing::leaf_tags`]: made
//! by the process that answered it, with a key derived from the signing key) is the token
//! answered. Otherwise it verifies when its ES256 signature verifies against one of the
//! service's verdict keys (current or retired, however long ago: `KeyRing::verdict_keys`),
//! it is a verdict of the decision it was read for (`jti`), and, when the row holds a leaf
//! hash (rows of earlier releases), it is that leaf's. A row changed after its decision
//! was signed (an amount, a recipient, a verdict) rebuilds a token whose tag does not check
//! and whose signature does not verify, or that is not the one answered, and is refused:
//! the log stops before it, logged and counted each round, until an operator restores it.

use mandate_core::{DecisionId, JwkSet, VerifyOptions};
use mandate_protocol::jws::verify_verdict_with;
use mandate_protocol::tlog::{self, LogHash};

use crate::signing::leaf_tags::LeafTagKeys;
use time::OffsetDateTime;

/// Why a decision's token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Its row does not rebuild a token (stored before tokens were kept, or emptied).
    #[error("its row holds no token")]
    NoToken,
    /// Its signature does not verify against the service's verdict keys.
    #[error("its token does not verify against the service's verdict keys: {0}")]
    Signature(String),
    /// It verifies, but as another decision's token.
    #[error("its token is decision {0}'s")]
    OtherDecision(String),
    /// It verifies, but is not the token answered: its row was changed.
    #[error(
        "its row rebuilds a token other than the one answered (leaf hash {found}; the row's leaf tag or hash {answered})"
    )]
    NotAnswered {
        /// The leaf hash of the token rebuilt.
        found: LogHash,
        /// The leaf tag or hash stored with the row.
        answered: LogHash,
    },
}

/// The claims read before verifying: the issuer and the issue time the token names, so
/// that a token is verified as of when it was signed (it expired since) and under the
/// verdicts URL it was issued from.
#[derive(serde::Deserialize)]
struct Stated {
    iss: String,
    iat: i64,
}

fn stated(token: &str) -> Result<Stated, Refused> {
    use base64::Engine as _;
    let malformed = |why: &str| Refused::Signature(format!("malformed token: {why}"));
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| malformed("no claims"))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| malformed("claims not base64url"))?;
    serde_json::from_slice(&bytes).map_err(|_| malformed("no iss or iat"))
}

/// The kid in `token`'s header, read without any check (the tag or the signature checks
/// it after).
fn kid_of(token: &str) -> Option<String> {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    struct Header {
        kid: String,
    }
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.split('.').next()?)
        .ok()?;
    serde_json::from_slice::<Header>(&header)
        .ok()
        .map(|h| h.kid)
}

/// The leaf hash of decision `id`'s `token`, if it is the token answered: `stored` (what
/// the row holds beside it: the leaf's tag, or on rows of earlier releases its hash) is
/// its tag under its key's tag key in `tags`, or else its signature verifies against
/// `keys` and `stored`, when there is one, is its leaf hash.
pub fn verify(
    id: &DecisionId,
    token: Option<&str>,
    stored: Option<LogHash>,
    keys: &JwkSet,
    tags: &LeafTagKeys,
) -> Result<LogHash, Refused> {
    let token = token.ok_or(Refused::NoToken)?;
    let found = tlog::leaf_hash(token.as_bytes());
    if let Some(stored) = stored {
        let key = kid_of(token).and_then(|kid| tags.get(&kid));
        if key.is_some_and(|key| key.checks(&found, &stored)) {
            return Ok(found);
        }
    }
    let stated = stated(token)?;
    let options = VerifyOptions {
        issuer: stated.iss,
        now: OffsetDateTime::from_unix_timestamp(stated.iat)
            .map_err(|_| Refused::Signature(format!("iat {} out of range", stated.iat)))?,
        leeway_secs: 0,
    };
    // The core's checks, with aws-lc's arithmetic (faster than p256's).
    let claims = verify_verdict_with(token, keys, &options, &crate::signing::fast::verify_es256)
        .map_err(|e| Refused::Signature(e.to_string()))?;
    if claims.jti != *id {
        return Err(Refused::OtherDecision(claims.jti.to_string()));
    }
    match stored {
        Some(answered) if answered != found => Err(Refused::NotAnswered { found, answered }),
        _ => Ok(found),
    }
}

/// A decision to verify: its id, its token as rebuilt from its row (`None`: stored before
/// tokens were kept) and the leaf tag or hash stored with the row, if any.
pub type Job = (DecisionId, Option<String>, Option<LogHash>);

/// What verifying a [`Job`] gave: its leaf hash and token, `None` for a decision without a
/// token (the worker leaves it out before the log's first leaf and stops the log after it).
pub type Checked = Result<Option<(LogHash, String)>, Refused>;

/// Verifies `jobs` in order, up to and including the first refused (the log waits there:
/// those after it are not verified).
pub fn verify_run(jobs: Vec<Job>, keys: &JwkSet, tags: &LeafTagKeys) -> Vec<Checked> {
    let mut checked = Vec::with_capacity(jobs.len());
    for (id, token, answered) in jobs {
        let result = match token {
            None => Ok(None),
            Some(token) => {
                verify(&id, Some(&token), answered, keys, tags).map(|leaf| Some((leaf, token)))
            }
        };
        let refused = result.is_err();
        checked.push(result);
        if refused {
            break;
        }
    }
    checked
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mandate_core::{P256Signer, Signer, sign_token};
    use mandate_protocol::amount::Amount;
    use mandate_protocol::claims::{Bindings, VerdictClaims};
    use mandate_protocol::id::{AgentId, Nonce};
    use mandate_protocol::names::{Category, Currency, Recipient};
    use mandate_protocol::policy::{AuthorizationRequest, Verdict};

    fn id(n: u32) -> DecisionId {
        DecisionId::parse(&format!("dec_{n:026}")).unwrap()
    }

    fn claims(id: &DecisionId, amount: &str) -> VerdictClaims {
        VerdictClaims {
            bindings: Bindings::default(),
            iss: "https://verdicts.example".into(),
            jti: id.clone(),
            iat: 1_700_000_000,
            exp: 1_700_000_300,
            verdict: Verdict::Allow,
            policy_verdict: Verdict::Allow,
            mandate: None,
            policy_version: "pol_2026-11-22.1".into(),
            nonce: Nonce::parse("n_one").unwrap(),
            request: AuthorizationRequest {
                agent: AgentId::parse("agt_buyer").unwrap(),
                amount: Amount::parse(amount).unwrap(),
                currency: Currency::parse("USD").unwrap(),
                recipient: Recipient::parse("vendor:acme").unwrap(),
                category: Category::parse("software").unwrap(),
            },
        }
    }

    fn no_tags() -> LeafTagKeys {
        LeafTagKeys::new()
    }

    fn signer(kid: &str, byte: u8) -> P256Signer {
        P256Signer::from_secret_bytes(kid, &[byte; 32]).unwrap()
    }

    #[test]
    fn a_token_verifies_long_expired_only_as_its_decisions_and_as_answered() {
        let key = signer("k1", 7);
        let keys = JwkSet {
            keys: vec![key.public_jwk()],
        };
        let token = sign_token(&key, &claims(&id(1), "10.00")).unwrap();
        let leaf = tlog::leaf_hash(token.as_bytes());
        assert_eq!(
            verify(&id(1), Some(&token), None, &keys, &no_tags()),
            Ok(leaf)
        );
        assert_eq!(
            verify(&id(1), Some(&token), Some(leaf), &keys, &no_tags()),
            Ok(leaf)
        );
        let other = tlog::leaf_hash(b"another token");
        assert_eq!(
            verify(&id(1), Some(&token), Some(other), &keys, &no_tags()),
            Err(Refused::NotAnswered {
                found: leaf,
                answered: other
            })
        );
        assert!(matches!(
            verify(&id(2), Some(&token), None, &keys, &no_tags()),
            Err(Refused::OtherDecision(_))
        ));
    }

    #[test]
    fn a_run_stops_at_its_first_refusal() {
        let key = signer("k1", 7);
        let keys = JwkSet {
            keys: vec![key.public_jwk()],
        };
        let token = |n: u32| sign_token(&key, &claims(&id(n), "1.00")).unwrap();
        let jobs = vec![
            (id(1), Some(token(1)), None),
            (id(2), None, None),
            (id(3), Some(token(4)), None),
            (id(4), Some(token(4)), None),
        ];
        let checked = verify_run(jobs, &keys, &no_tags());
        assert_eq!(checked.len(), 3, "nothing after the refusal is verified");
        assert!(matches!(checked[0], Ok(Some(_))));
        assert_eq!(checked[1], Ok(None));
        assert!(matches!(checked[2], Err(Refused::OtherDecision(_))));
    }

    #[test]
    fn a_changed_payload_or_an_unknown_key_is_refused() {
        let key = signer("k1", 7);
        let keys = JwkSet {
            keys: vec![key.public_jwk()],
        };
        let token = sign_token(&key, &claims(&id(1), "10.00")).unwrap();
        let changed = sign_token(&key, &claims(&id(1), "99.00")).unwrap();
        // The original's header and signature around the changed claims.
        let parts: Vec<&str> = token.split('.').collect();
        let payload = changed.split('.').nth(1).unwrap();
        let forged = format!("{}.{payload}.{}", parts[0], parts[2]);
        assert!(matches!(
            verify(&id(1), Some(&forged), None, &keys, &no_tags()),
            Err(Refused::Signature(_))
        ));
        let unknown = sign_token(&signer("k2", 9), &claims(&id(1), "10.00")).unwrap();
        assert!(matches!(
            verify(&id(1), Some(&unknown), None, &keys, &no_tags()),
            Err(Refused::Signature(_))
        ));
        assert_eq!(
            verify(&id(1), None, None, &keys, &no_tags()),
            Err(Refused::NoToken)
        );
    }

    /// A row's leaf tag stands for the signature: a token whose tag checks under its kid's
    /// tag key is appended without its signature being verified, and one whose tag does
    /// not check is verified by its signature.
    #[test]
    fn a_tag_that_checks_stands_for_the_signature_one_that_does_not_is_refused() {
        use crate::signing::leaf_tags::LeafTagKey;
        let key = signer("k1", 7);
        let keys = JwkSet {
            keys: vec![key.public_jwk()],
        };
        let tags = LeafTagKeys::from([("k1".to_owned(), LeafTagKey::derive(&[7; 32]))]);
        let token = sign_token(&key, &claims(&id(1), "10.00")).unwrap();
        let leaf = tlog::leaf_hash(token.as_bytes());
        let tag = tags["k1"].tag(&leaf);
        assert_eq!(
            verify(&id(1), Some(&token), Some(tag), &keys, &tags),
            Ok(leaf)
        );
        // The tag alone vouches for the token: no key in the set, still appended.
        let none = JwkSet { keys: vec![] };
        assert_eq!(
            verify(&id(1), Some(&token), Some(tag), &none, &tags),
            Ok(leaf)
        );
        // A changed row: its tag does not check, its signature does not verify.
        let changed = sign_token(&key, &claims(&id(1), "99.00")).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        let payload = changed.split('.').nth(1).unwrap();
        let forged = format!("{}.{payload}.{}", parts[0], parts[2]);
        assert!(matches!(
            verify(&id(1), Some(&forged), Some(tag), &keys, &tags),
            Err(Refused::Signature(_))
        ));
        // A tag made under another key does not check; the signature then decides, and the
        // row's value is neither this token's tag nor its hash.
        let foreign = LeafTagKey::derive(&[8; 32]).tag(&leaf);
        assert_eq!(
            verify(&id(1), Some(&token), Some(foreign), &keys, &tags),
            Err(Refused::NotAnswered {
                found: leaf,
                answered: foreign
            })
        );
    }
}
