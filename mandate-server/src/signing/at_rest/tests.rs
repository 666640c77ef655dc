//! Tests of `signing::at_rest`: sealing, opening, rotating and binding signing keys under the key-encryption key.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn kek(byte: u8) -> Kek {
    Kek::from_bytes(&[byte; 32])
}

fn stored(kid: &str, env: Env, secret: Vec<u8>) -> StoredKey {
    StoredKey {
        kid: kid.into(),
        env,
        secret,
        retired_ms: None,
    }
}

const SECRET: [u8; 32] = [0x5a; 32];

#[test]
fn a_sealed_key_opens_only_with_its_kek_kid_and_environment() {
    let keys = KeyEncryption::new(kek(1), None);
    let secret = SigningSecret::new(SECRET);
    let sealed = keys.seal("live-1", Env::Live, &secret).unwrap();
    assert_eq!(sealed.len(), SEALED_LEN);
    assert!(sealed.starts_with(b"mk1"));
    assert!(is_sealed(&sealed));
    assert!(!sealed.windows(32).any(|w| w == SECRET));
    let opened = keys
        .open(&stored("live-1", Env::Live, sealed.clone()))
        .unwrap();
    assert_eq!(opened.expose(), &SECRET);
    // Two seals differ (a fresh nonce each).
    assert_ne!(keys.seal("live-1", Env::Live, &secret).unwrap(), sealed);

    // Another KEK: told apart from damage, naming both ids.
    let other = KeyEncryption::new(kek(2), None);
    match other.open(&stored("live-1", Env::Live, sealed.clone())) {
        Err(AtRestError::WrongKek {
            kid,
            sealed_under,
            given,
        }) => {
            assert_eq!(kid, "live-1");
            assert_eq!(sealed_under, kek(1).id());
            assert_eq!(given, kek(2).id().to_string());
        }
        other => panic!("{other:?}"),
    }
    // No KEK at all.
    match KeyEncryption::none().open(&stored("live-1", Env::Live, sealed.clone())) {
        Err(AtRestError::KekMissing { kid }) => assert_eq!(kid, "live-1"),
        other => panic!("{other:?}"),
    }
    // The same bytes moved to another kid or environment do not open.
    for (kid, env) in [("live-2", Env::Live), ("live-1", Env::Sandbox)] {
        match keys.open(&stored(kid, env, sealed.clone())) {
            Err(AtRestError::Damaged { kid: k, kek: id }) => {
                assert_eq!(k, kid);
                assert_eq!(id, kek(1).id());
            }
            other => panic!("{kid} {env:?}: {other:?}"),
        }
    }
    // A changed byte past the header is damage; in the KEK id, another KEK; in the
    // version, a form not known.
    for i in 0..sealed.len() {
        let mut bad = sealed.clone();
        bad[i] ^= 1;
        let result = keys.open(&stored("live-1", Env::Live, bad));
        match (i, result) {
            (0..3, Err(AtRestError::Unreadable { len, .. })) => assert_eq!(len, SEALED_LEN),
            (3..7, Err(AtRestError::WrongKek { .. })) => {}
            (7.., Err(AtRestError::Damaged { .. })) => {}
            (i, other) => panic!("byte {i}: {other:?}"),
        }
    }
    // A cut, or a longer value.
    let mut long = sealed.clone();
    long.push(0);
    for bad in [sealed[..40].to_vec(), long] {
        assert!(matches!(
            keys.open(&stored("live-1", Env::Live, bad)),
            Err(AtRestError::Unreadable { .. })
        ));
    }
}

#[test]
fn the_previous_kek_still_opens_and_plaintext_keys_are_recognised() {
    let old = KeyEncryption::new(kek(1), None);
    let sealed = old
        .seal("sandbox-3", Env::Sandbox, &SigningSecret::new(SECRET))
        .unwrap();
    let rolling = KeyEncryption::new(kek(2), Some(kek(1)));
    let opened = rolling
        .open(&stored("sandbox-3", Env::Sandbox, sealed))
        .unwrap();
    assert_eq!(opened.expose(), &SECRET);
    // New keys are sealed under the current KEK.
    let new = rolling
        .seal("sandbox-4", Env::Sandbox, &SigningSecret::new(SECRET))
        .unwrap();
    assert!(
        KeyEncryption::new(kek(2), None)
            .open(&stored("sandbox-4", Env::Sandbox, new))
            .is_ok()
    );
    // Without a KEK a key is stored as its raw bytes, and read back; with a KEK a key in
    // plaintext is refused (anyone with write access to the database can store one).
    let plain = KeyEncryption::none()
        .seal("sandbox-1", Env::Sandbox, &SigningSecret::new(SECRET))
        .unwrap();
    assert_eq!(plain, SECRET);
    let opened = KeyEncryption::none()
        .open(&stored("sandbox-1", Env::Sandbox, plain.clone()))
        .unwrap();
    assert_eq!(opened.expose(), &SECRET);
    assert!(matches!(
        rolling.open(&stored("sandbox-1", Env::Sandbox, plain.clone())),
        Err(AtRestError::PlaintextWithKek { kid }) if kid == "sandbox-1"
    ));
}

#[test]
fn a_kek_is_parsed_with_errors_that_never_show_it() {
    let good = STANDARD.encode([7u8; 32]);
    let parsed = Kek::from_base64(format!("{good}\n").as_bytes(), KEK_VAR).unwrap();
    assert_eq!(parsed.id(), Kek::from_bytes(&[7u8; 32]).id());
    assert_eq!(format!("{parsed:?}"), format!("Kek({})", parsed.id()));

    let short = STANDARD.encode([7u8; 31]);
    let cases: [(&str, &str); 4] = [
        ("", "is empty"),
        ("  \n", "is empty"),
        ("not base64 at all!!", "is not standard base64"),
        (&short, "decodes to 31 bytes"),
    ];
    for (text, says) in cases {
        let error = Kek::from_base64(text.as_bytes(), KEK_VAR)
            .unwrap_err()
            .to_string();
        assert!(error.starts_with(KEK_VAR), "{error}");
        assert!(error.contains(says), "{error}");
        if !text.trim().is_empty() {
            assert!(!error.contains(text.trim()), "{error}");
        }
    }
    // URL-safe base64 of a key with '-' or '_' is refused (the format is standard).
    let url_safe = base64::engine::general_purpose::URL_SAFE.encode([0xfb; 32]);
    assert!(url_safe.contains('-') || url_safe.contains('_'));
    let error = Kek::from_base64(url_safe.as_bytes(), KEK_VAR).unwrap_err();
    assert!(!error.to_string().contains(&url_safe));
}

#[test]
fn the_sources_give_one_kek_each() {
    let value = OsString::from(STANDARD.encode([9u8; 32]));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kek");
    std::fs::write(&file, format!("{}\n", STANDARD.encode([8u8; 32]))).unwrap();

    let keys = KeyEncryption::from_sources(&KekSources {
        var: Some(value.clone()),
        previous_file: Some(&file),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(keys.current_id(), Some(kek(9).id()));
    assert_eq!(keys.previous.as_ref().map(Kek::id), Some(kek(8).id()));

    let twice = KeyEncryption::from_sources(&KekSources {
        var: Some(value.clone()),
        file: Some(&file),
        ..Default::default()
    })
    .unwrap_err();
    assert!(matches!(twice, AtRestError::KekTwice { .. }), "{twice}");
    let alone = KeyEncryption::from_sources(&KekSources {
        previous_var: Some(value),
        ..Default::default()
    })
    .unwrap_err();
    assert!(matches!(alone, AtRestError::PreviousAlone), "{alone}");
    let missing = dir.path().join("absent");
    let error = KeyEncryption::from_sources(&KekSources {
        file: Some(&missing),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("absent") && error.contains(KEK_FILE_FLAG),
        "{error}"
    );
    assert!(
        !KeyEncryption::from_sources(&KekSources::default())
            .unwrap()
            .is_enabled()
    );
}

#[test]
fn postgresql_urls_require_a_kek() {
    for db in [
        "postgres://u:p@localhost/mandate",
        "postgresql://localhost/mandate",
        "POSTGRES://localhost/m",
    ] {
        assert!(key_encryption_required(db), "{db}");
        let error = check_required(db, &KeyEncryption::none())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(KEK_VAR) && error.contains(KEK_FILE_FLAG),
            "{error}"
        );
        // The URL (and its password) is not repeated.
        assert!(!error.contains("localhost"), "{error}");
        check_required(db, &KeyEncryption::new(kek(1), None)).unwrap();
    }
    for db in [
        "./mandate.sqlite",
        "/var/lib/mandate/state",
        "postgres",
        "pg",
    ] {
        assert!(!key_encryption_required(db), "{db}");
        check_required(db, &KeyEncryption::none()).unwrap();
    }
}
