//! Signatures: any valid claims sign and verify, and the high-S twin of a signature is
//! refused.

use super::*;

fn arbitrary_verdict() -> impl Strategy<Value = VerdictClaims> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        0i64..4_000_000_000,
        0u64..10_000_000_000,
        0u32..3,
        "[a-z0-9][a-z0-9_-]{0,20}",
    )
        .prop_map(|(jti, nonce, iat, cents, scale, agent)| {
            let mut claims = verdict(iat, 0);
            claims.jti = DecisionId::from_random(jti);
            claims.nonce = Nonce::from_random(nonce);
            claims.request.agent = AgentId::parse(&format!("agt_{agent}")).unwrap();
            let amount = rust_decimal::Decimal::new(i64::try_from(cents).unwrap(), scale);
            claims.request.amount = Amount::from_decimal(amount).unwrap();
            claims
        })
}

fn valid_secret() -> impl Strategy<Value = [u8; 32]> {
    any::<[u8; 32]>().prop_filter("a scalar in 1..n", |bytes| {
        P256Signer::from_secret_bytes("k", bytes).is_ok()
    })
}

proptest! {
    #[test]
    fn every_signed_verdict_verifies(secret in valid_secret(), claims in arbitrary_verdict()) {
        let key = P256Signer::from_secret_bytes("sandbox-1", &secret).unwrap();
        let token = sign_token(&key, &claims).unwrap();
        let back = verify_verdict(&token, &set(&[&key]), &at(claims.iat));
        prop_assert_eq!(back, Ok(claims));
    }

    #[test]
    fn changing_any_byte_breaks_the_token(
        claims in arbitrary_verdict(),
        position in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
    ) {
        let key = signer("sandbox-1", 3);
        let jwks = set(&[&key]);
        let token = sign_token(&key, &claims).unwrap();
        let mut bytes = token.clone().into_bytes();
        let index = position.index(bytes.len());
        prop_assume!(bytes[index] != replacement);
        bytes[index] = replacement;
        // A byte that breaks UTF-8 becomes U+FFFD: still a different token.
        let tampered = String::from_utf8_lossy(&bytes).into_owned();
        prop_assert_ne!(&tampered, &token);
        prop_assert!(verify_verdict(&tampered, &jwks, &at(claims.iat)).is_err());
    }
}

/// The order of P-256, big-endian.
const ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// `n - s`, big-endian, for `0 < s < n`.
fn negate(s: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let mut d = i16::from(ORDER[i]) - i16::from(s[i]) - borrow;
        borrow = i16::from(d < 0);
        if d < 0 {
            d += 256;
        }
        out[i] = u8::try_from(d).unwrap();
    }
    out
}

/// The twin `(r, n - s)` of a valid signature verifies in plain ECDSA, but is refused: a
/// verdict has one token text. The signer only ever emits the low twin.
#[test]
fn the_high_s_twin_of_a_signature_is_refused() {
    let jwks_for = |key: &P256Signer| set(&[key]);
    let mut checked = 0;
    for seed in 0..16u8 {
        let key = signer("live-1", seed.wrapping_add(20));
        let jwks = jwks_for(&key);
        let token = sign_token(&key, &verdict(IAT, seed)).unwrap();
        let (input, signature) = token.rsplit_once('.').unwrap();
        let raw = URL_SAFE_NO_PAD.decode(signature).unwrap();
        // Low S: s <= (n - 1) / 2, so its twin n - s is above it.
        let twin_s = negate(&raw[32..]);
        assert!(
            twin_s[..] > raw[32..],
            "the signer emitted a high-S signature"
        );
        let mut twin = raw[..32].to_vec();
        twin.extend(twin_s);
        let twin = format!("{input}.{}", b64(twin));
        assert_eq!(verify_verdict(&token, &jwks, &at(IAT)).map(|_| ()), Ok(()));
        assert_eq!(
            verify_verdict(&twin, &jwks, &at(IAT)),
            Err(TokenError::HighS)
        );
        // A high S that is nobody's twin is a plain bad signature.
        let mut other = raw[..32].to_vec();
        other.extend(negate(&raw[32..]));
        other[0] ^= 1;
        let other = format!("{input}.{}", b64(other));
        assert_eq!(
            verify_verdict(&other, &jwks, &at(IAT)),
            Err(TokenError::BadSignature)
        );
        checked += 1;
    }
    assert_eq!(checked, 16);
}
