//! Hostile tokens, each refused with the variant that names what is wrong with it:
//! algorithms, kids, issuers, times, signatures, the compact form and the claims.

use super::*;

#[test]
fn algorithms_other_than_es256_are_refused() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let claims = b64(verdict_json(IAT).to_string());

    for alg in ["none", "noNE", "None", "NONE"] {
        let header = b64(json!({"alg": alg, "typ": "JWT", "kid": "live-1"}).to_string());
        for token in [format!("{header}.{claims}."), format!("{header}.{claims}")] {
            let result = verify_verdict(&token, &jwks, &at(IAT));
            assert!(
                matches!(
                    result,
                    Err(TokenError::UnsupportedAlgorithm(_) | TokenError::Malformed(_))
                ),
                "{alg}: {result:?}"
            );
        }
        assert_eq!(
            verify_verdict(&format!("{header}.{claims}."), &jwks, &at(IAT)),
            Err(TokenError::UnsupportedAlgorithm(format!("\"{alg}\"")))
        );
    }

    // HS256 keyed with the public JWK's JSON: the classic algorithm-confusion attack.
    let secret = serde_json::to_vec(&key.public_jwk()).unwrap();
    for hs_header in [
        json!({"alg": "HS256", "typ": "JWT", "kid": "live-1"}),
        json!({"alg": "HS256", "typ": "JWT"}),
    ] {
        let input = format!("{}.{claims}", b64(hs_header.to_string()));
        let mut mac = Hmac::<Sha256>::new_from_slice(&secret).unwrap();
        mac.update(input.as_bytes());
        let token = format!("{input}.{}", b64(mac.finalize().into_bytes()));
        assert_eq!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::UnsupportedAlgorithm("\"HS256\"".to_owned()))
        );
    }

    for alg in [
        json!("ES384"),
        json!("es256"),
        json!("ES256 "),
        json!(["ES256"]),
    ] {
        let token = forge(
            &key,
            &json!({"alg": alg, "kid": "live-1"}),
            &verdict_json(IAT),
        );
        assert!(matches!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::UnsupportedAlgorithm(_))
        ));
    }
    let token = forge(&key, &json!({"kid": "live-1"}), &verdict_json(IAT));
    assert!(matches!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::UnsupportedAlgorithm(_))
    ));
}

#[test]
fn the_kid_must_name_a_key_of_the_set() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let claims = verdict_json(IAT);

    let token = forge(&key, &es256_header("live-9"), &claims);
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::UnknownKid("live-9".to_owned()))
    );
    let token = forge(&key, &json!({"alg": "ES256", "typ": "JWT"}), &claims);
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::MissingKid)
    );
    let token = forge(&key, &json!({"alg": "ES256", "kid": 1}), &claims);
    assert!(matches!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::Malformed(_))
    ));

    // Same kid, another key: the signature is what decides.
    let impostor = signer("live-1", 7);
    let token = sign_token(&impostor, &verdict(IAT, 1)).unwrap();
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn the_issuer_must_match() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let mut claims = verdict(IAT, 1);
    claims.iss = "https://evil.example".to_owned();
    let token = sign_token(&key, &claims).unwrap();
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::WrongIssuer("https://evil.example".to_owned()))
    );
    let mut claims = verdict_json(IAT);
    claims["iss"] = json!(format!("{ISS}/"));
    let token = forge(&key, &es256_header("live-1"), &claims);
    assert!(matches!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::WrongIssuer(_))
    ));
}

#[test]
fn expiry_boundaries() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let claims = verdict(IAT, 1);
    let exp = claims.exp;
    let token = sign_token(&key, &claims).unwrap();

    assert!(verify_verdict(&token, &jwks, &at(exp - 1)).is_ok());
    assert_eq!(
        verify_verdict(&token, &jwks, &at(exp)),
        Err(TokenError::Expired { exp })
    );
    assert_eq!(
        verify_verdict(&token, &jwks, &at(exp + 1000)),
        Err(TokenError::Expired { exp })
    );

    let lenient = |now| VerifyOptions {
        leeway_secs: 30,
        ..at(now)
    };
    assert!(verify_verdict(&token, &jwks, &lenient(exp + 29)).is_ok());
    assert_eq!(
        verify_verdict(&token, &jwks, &lenient(exp + 30)),
        Err(TokenError::Expired { exp })
    );
}

#[test]
fn time_claims_must_be_integers() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let exp = IAT + 300;
    for (name, value) in [
        ("exp", json!(exp.to_string())),
        ("exp", json!(exp as f64 + 0.5)),
        ("exp", json!(format!("{exp}.0").parse::<Value>().unwrap())),
        ("exp", Value::Null),
        ("iat", json!(IAT.to_string())),
        ("iat", json!(null)),
    ] {
        let mut claims = verdict_json(IAT);
        claims[name] = value.clone();
        let token = forge(&key, &es256_header("live-1"), &claims);
        assert!(
            matches!(
                verify_verdict(&token, &jwks, &at(IAT)),
                Err(TokenError::MalformedClaims(_))
            ),
            "{name} = {value}"
        );
    }
    let mut claims = verdict_json(IAT);
    claims.as_object_mut().unwrap().remove("exp");
    let token = forge(&key, &es256_header("live-1"), &claims);
    assert!(matches!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::MalformedClaims(_))
    ));
}

#[test]
fn a_token_issued_in_the_future_is_refused() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let token = sign_token(&key, &verdict(IAT + 10, 1)).unwrap();
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::IssuedInFuture { iat: IAT + 10 })
    );
    assert!(verify_verdict(&token, &jwks, &at(IAT + 10)).is_ok());
    let lenient = VerifyOptions {
        leeway_secs: 10,
        ..at(IAT)
    };
    assert!(verify_verdict(&token, &jwks, &lenient).is_ok());
}

#[test]
fn signatures_must_be_raw_64_bytes_and_valid() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let token = sign_token(&key, &verdict(IAT, 1)).unwrap();
    let (input, signature) = token.rsplit_once('.').unwrap();
    let raw: [u8; 64] = URL_SAFE_NO_PAD
        .decode(signature)
        .unwrap()
        .try_into()
        .unwrap();

    let der = der(&raw);
    assert!(der.len() > 64 && der[0] == 0x30);
    let der_token = format!("{input}.{}", b64(&der));
    assert_eq!(
        verify_verdict(&der_token, &jwks, &at(IAT)),
        Err(TokenError::SignatureLength(der.len()))
    );

    let zero = format!("{input}.{}", b64([0u8; 64]));
    assert_eq!(
        verify_verdict(&zero, &jwks, &at(IAT)),
        Err(TokenError::BadSignature)
    );
    let short = format!("{input}.{}", b64(&raw[..63]));
    assert_eq!(
        verify_verdict(&short, &jwks, &at(IAT)),
        Err(TokenError::SignatureLength(63))
    );
    let empty = format!("{input}.");
    assert_eq!(
        verify_verdict(&empty, &jwks, &at(IAT)),
        Err(TokenError::SignatureLength(0))
    );
    // Swapping r and s keeps the length and breaks the signature.
    let mut swapped = raw;
    swapped.rotate_left(32);
    let swapped = format!("{input}.{}", b64(swapped));
    assert_eq!(
        verify_verdict(&swapped, &jwks, &at(IAT)),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn the_compact_form_is_strict() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let token = sign_token(&key, &verdict(IAT, 1)).unwrap();
    assert!(verify_verdict(&token, &jwks, &at(IAT)).is_ok());
    let (header, rest) = token.split_once('.').unwrap();
    let (claims, signature) = rest.split_once('.').unwrap();

    let malformed = [
        format!("{token}garbage"),
        format!("{token}="),
        format!("{token}=="),
        format!("{token} "),
        format!("{token}\n"),
        format!(" {token}"),
        format!("{token}.{signature}"),
        format!("{token}."),
        format!("{header}.{claims}"),
        format!("{header}.{claims}.{signature}.x.y"),
        format!("{header}=.{claims}.{signature}"),
        format!("{header}.{claims}=.{signature}"),
        token.replace('-', "+").replace('_', "/"),
        String::new(),
        "..".to_owned(),
        "a.b.c".to_owned(),
    ];
    for bad in malformed {
        if bad == token {
            continue;
        }
        let result = verify_verdict(&bad, &jwks, &at(IAT));
        assert!(
            matches!(
                result,
                Err(TokenError::Malformed(_) | TokenError::SignatureLength(_))
            ),
            "{bad:?}: {result:?}"
        );
    }

    let not_json = format!("{}.{claims}.{signature}", b64("{alg:ES256}"));
    assert!(matches!(
        verify_verdict(&not_json, &jwks, &at(IAT)),
        Err(TokenError::Malformed(_))
    ));
    let crit = forge(
        &key,
        &json!({"alg": "ES256", "kid": "live-1", "crit": ["exp"]}),
        &verdict_json(IAT),
    );
    assert!(matches!(
        verify_verdict(&crit, &jwks, &at(IAT)),
        Err(TokenError::Malformed(_))
    ));
}

#[test]
fn claims_must_be_well_formed() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    // A claim this crate does not know is ignored (a later server may add it), and the
    // known ones still read.
    let mut extra = verdict_json(IAT);
    extra["admin"] = json!(true);
    extra["request"]["binding"] = json!({"kind": "ap2"});
    let token = forge(&key, &es256_header("live-1"), &extra);
    assert_eq!(verify_verdict(&token, &jwks, &at(IAT)), Ok(verdict(IAT, 1)));
    // A known claim of the wrong type is refused.
    let mut version_as_number = verdict_json(IAT);
    version_as_number["policy_version"] = json!(7);
    let mut verdict_as_number = verdict_json(IAT);
    verdict_as_number["verdict"] = json!(1);
    let mut amount_as_text = verdict_json(IAT);
    amount_as_text["request"]["amount"] = json!("100.10");
    let mut no_jti = verdict_json(IAT);
    no_jti.as_object_mut().unwrap().remove("jti");
    let mut review_jti = verdict_json(IAT);
    review_jti["jti"] = json!("rev_abc");
    for claims in [
        version_as_number,
        verdict_as_number,
        amount_as_text,
        no_jti,
        review_jti,
    ] {
        let token = forge(&key, &es256_header("live-1"), &claims);
        assert!(
            matches!(
                verify_verdict(&token, &jwks, &at(IAT)),
                Err(TokenError::MalformedClaims(_))
            ),
            "{claims}"
        );
    }
    // Claims that are not an object are refused as such, however their elements line up.
    // In the claims' own order, the array a derived reader would take by position.
    let fields = [
        "iss",
        "jti",
        "iat",
        "exp",
        "verdict",
        "policy_verdict",
        "mandate",
        "policy_version",
        "nonce",
        "request",
    ];
    let whole = verdict_json(IAT);
    let by_position: Vec<Value> = fields.iter().map(|f| whole[*f].clone()).collect();
    for claims in [
        json!([1, 2]),
        Value::Array(by_position),
        json!("x"),
        json!(7),
    ] {
        let token = forge(&key, &es256_header("live-1"), &claims);
        assert_eq!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::NotAnObject(TokenPart::Claims)),
            "{claims}"
        );
    }
    // A duplicated claim is refused rather than resolved silently.
    let doubled = format!(
        "{},\"iss\":\"{ISS}\"}}",
        verdict_json(IAT).to_string().trim_end_matches('}')
    );
    let input = format!(
        "{}.{}",
        b64(es256_header("live-1").to_string()),
        b64(doubled)
    );
    let token = format!("{input}.{}", b64(key.sign(input.as_bytes()).unwrap()));
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::DuplicateMember {
            part: TokenPart::Claims,
            member: "iss".to_owned()
        })
    );
}

/// A token whose header and claims are given as text, properly signed by `signer`.
fn forge_text(signer: &dyn Signer, header: &str, claims: &str) -> String {
    let input = format!("{}.{}", b64(header), b64(claims));
    let signature = signer.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", b64(signature))
}

#[test]
fn a_header_must_be_an_object_with_each_member_once() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let claims = verdict_json(IAT).to_string();
    // By position these would read as alg, kid and no crit.
    for header in [
        r#"["ES256", "live-1", null]"#,
        r#"["ES256"]"#,
        "\"ES256\"",
        "1",
    ] {
        let token = forge_text(&key, header, &claims);
        assert_eq!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::NotAnObject(TokenPart::Header)),
            "{header}"
        );
    }
    for (header, member) in [
        (
            r#"{"alg":"ES256","typ":"JWT","kid":"live-1","kid":"live-2"}"#,
            "kid",
        ),
        (
            r#"{"alg":"none","alg":"ES256","typ":"JWT","kid":"live-1"}"#,
            "alg",
        ),
        (
            r#"{"alg":"ES256","typ":"JWT","typ":"JWS","kid":"live-1"}"#,
            "typ",
        ),
        (
            r#"{"alg":"ES256","typ":"JWT","kid":"live-1","x":{"a":1,"a":2}}"#,
            "x.a",
        ),
    ] {
        let token = forge_text(&key, header, &claims);
        assert_eq!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::DuplicateMember {
                part: TokenPart::Header,
                member: member.to_owned()
            }),
            "{header}"
        );
    }
    // The same header once each verifies.
    let token = forge_text(
        &key,
        r#"{"alg":"ES256","typ":"JWT","kid":"live-1"}"#,
        &claims,
    );
    assert!(verify_verdict(&token, &jwks, &at(IAT)).is_ok());
}

#[test]
fn a_member_repeated_deep_in_the_claims_is_refused() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let header = es256_header("live-1").to_string();
    // In a verdict's request: the amount a counterparty settles.
    let verdict = verdict_json(IAT).to_string();
    let doubled = verdict.replace(r#""amount":100.10"#, r#""amount":100.10,"amount":1"#);
    assert_ne!(doubled, verdict);
    assert_eq!(
        verify_verdict(&forge_text(&key, &header, &doubled), &jwks, &at(IAT)),
        Err(TokenError::DuplicateMember {
            part: TokenPart::Claims,
            member: "request.amount".to_owned()
        })
    );
    // In an event's data, which is free-form.
    let event = serde_json::to_string(&event(IAT)).unwrap();
    let doubled = event.replace(
        r#""status":"revoked""#,
        r#""status":"active","status":"revoked""#,
    );
    assert_ne!(doubled, event);
    assert_eq!(
        verify_event(&forge_text(&key, &header, &doubled), &jwks, &at(IAT)),
        Err(TokenError::DuplicateMember {
            part: TokenPart::Claims,
            member: "data.status".to_owned()
        })
    );
    assert!(verify_event(&forge_text(&key, &header, &event), &jwks, &at(IAT)).is_ok());
}

#[test]
fn verdicts_and_events_are_not_interchangeable() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let event_token = sign_token(&key, &event(IAT)).unwrap();
    assert_eq!(
        verify_verdict(&event_token, &jwks, &at(IAT)),
        Err(TokenError::WrongKind {
            expected: TokenKind::Verdict,
            found: TokenKind::Event,
        })
    );
    let verdict_token = sign_token(&key, &verdict(IAT, 1)).unwrap();
    assert_eq!(
        verify_event(&verdict_token, &jwks, &at(IAT)),
        Err(TokenError::WrongKind {
            expected: TokenKind::Event,
            found: TokenKind::Verdict,
        })
    );
}
