use super::*;
use crate::jws::P256Signer;
use crate::tlog::{self, LogKey, LogKeys};

/// A checkpoint of a public log (Google's staging CT log `arche2025h1`), as served with
/// the cosignatures of four public witnesses, each checked with Python's `cryptography`
/// before it was written here. The log's own lines (types 0x05 and 0x01) are of keys this
/// test does not know.
const PUBLIC_NOTE: &str = "arche2025h1.staging.ct.transparency.dev
1432088532
U7WM79jrzyhGZ5/GUBTpM7NzwdyfFx61t3RovgcC4Ro=

— arche2025h1.staging.ct.transparency.dev zTM8sQAAAZ5W0WdjBAMARjBEAiBjW5IQf9pvsYLfQFX6hoGREPMHbdQ3urbllzalApkptQIgIpwtEroeW2BXaHAI4kJXFbon5Ch9MNL5zRNZ55lvGt0=
— arche2025h1.staging.ct.transparency.dev ui8GwCF1+kWqZrxGdhj4aX3gcw7XUlXQQabg/27lefwhUkzbC3NygNI75MdhL1bfTW9g8Ei59RA23oHP7Ry1k3ZFWwQ=
— transparency.dev/DEV:witness-little-garden 2AQqhwAAAABqEiEgzgFIqqhbUoDwjMWE6UP8nd8/KYTzwZ2rhIgcqoXHAwVkjZr4AscylP3v7sEodkRAErumC2q44vdgJY096st5BQ==
— witness1.smartit.nu/witness1 pIyCDwAAAABqEiEghIp82KWebrw7/oHQwlTAm3g2RKS4+eebl8eO0WH+/iEcxZ75W3u5hNI7TOQtmJbqmNWVuE0tgh0XwzdZsDsUAQ==
— remora.n621.de 2net5wAAAABqEiEgPlfF3V06o0Y+fHM+J5J9s27wgxxcOVSpZ/2g/KSiXCg9DEZI+aVCIobWX9sXTynk5XeU/zZ0WBxtqB0DrAWfBw==
— witness.stagemole.eu Z/euoAAAAABqEiEgw0i+7g2ENfDAWHmtRzCfKTHSDwYDJA2NmKeGi9Y8FtEyOUvVr+AJmIY/2TUFucgKi7lI7cUiOvKFYe/TmN9DAg==
";

/// The published verifier keys of the four witnesses of [`PUBLIC_NOTE`].
const PUBLIC_WITNESSES: [&str; 4] = [
    "transparency.dev/DEV:witness-little-garden+d8042a87+BCtusOxINQNUTN5Oj8HObRkh2yHf/MwYaGX4CPdiVEPM",
    "witness1.smartit.nu/witness1+a48c820f+BPSFWg9G6KPiO7QPryYO5Xq4oYJJ+kAvLKLSimDhoxMO",
    "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2",
    "witness.stagemole.eu+67f7aea0+BEqSG3yu9YrmcM3BHvQYTxwFj3uSWakQepafafpUqklv",
];

/// A public witness that did not cosign [`PUBLIC_NOTE`].
const OTHER_WITNESS: &str =
    "witness.navigli.sunlight.geomys.org+a3e00fe2+BNy/co4C1Hn1p+INwJrfUlgz7W55dSZReusH/GhUhJ/G";

/// When the four witnesses cosigned [`PUBLIC_NOTE`].
const PUBLIC_TIME: u64 = 1_779_573_024;

const ROOT: &str = "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=";

fn keys(vkeys: &[&str]) -> Vec<WitnessKey> {
    vkeys
        .iter()
        .map(|k| WitnessKey::from_verifier_key(k).unwrap())
        .collect()
}

fn witness(name: &str, seed: u8) -> WitnessSigner {
    WitnessSigner::from_seed(name, [seed; 32]).unwrap()
}

/// A checkpoint of `size` leaves signed by a log key, as the service signs it.
fn logged(size: u64) -> (Checkpoint, String, LogKeys) {
    let log = P256Signer::from_secret_bytes("log-1", &[9; 32]).unwrap();
    let root = tlog::leaf_hash(&size.to_be_bytes());
    let checkpoint = tlog::checkpoint("verdicts.example.com/log/org_1/live", size, root).unwrap();
    let note = tlog::sign_checkpoint(&checkpoint, &log).unwrap();
    (
        checkpoint,
        note,
        tlog::log_keys(vec![LogKey::of_signer(&log)]),
    )
}

/// `note` with these cosignature lines appended.
fn cosigned(note: &str, lines: &[NoteSignature]) -> String {
    let mut note = note.to_owned();
    for line in lines {
        note.push_str(&format!("{line}\n"));
    }
    note
}

#[test]
fn a_vector_of_pythons_cryptography_is_made_byte_for_byte() {
    // Seed 00 01 … 1f, the body and time of the specification's example, signed with
    // Python's `cryptography` (Ed25519 signatures are deterministic).
    let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
    let witness = WitnessSigner::from_seed("witness.example.com/w1", seed).unwrap();
    assert_eq!(
        witness.witness_key().to_string(),
        "witness.example.com/w1+a0059f11+BAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
    );
    let checkpoint =
        Checkpoint::parse(&format!("example.com/behind-the-sofa\n20852163\n{ROOT}\n")).unwrap();
    let line = witness.cosign(&checkpoint, 1_679_315_147).unwrap();
    assert_eq!(
        line.to_string(),
        "— witness.example.com/w1 oAWfEQAAAABkGFDLBuRDazBLVac2NE+Y+IjbjQOcXLfF9CSDZVUIoS83rE1nFZsVE8YiWV6Ngr7lV8H6bdoBQGP/l73euDMQ9k+bBQ=="
    );
    assert_eq!(line.key_id(), 0xa005_9f11);
}

#[test]
fn a_public_checkpoint_cosigned_by_four_public_witnesses_verifies() {
    let policy = WitnessPolicy::new(keys(&PUBLIC_WITNESSES), 4).unwrap();
    let found = policy.check(PUBLIC_NOTE).unwrap();
    let names: Vec<&str> = found.iter().map(WitnessCosignature::name).collect();
    assert_eq!(
        names,
        [
            "transparency.dev/DEV:witness-little-garden",
            "witness1.smartit.nu/witness1",
            "remora.n621.de",
            "witness.stagemole.eu"
        ]
    );
    assert!(found.iter().all(|c| c.timestamp() == PUBLIC_TIME));

    // A fifth witness that did not cosign: 4 of 5 hold, 5 of 5 do not, and it is named.
    let mut five = PUBLIC_WITNESSES.to_vec();
    five.push(OTHER_WITNESS);
    assert_eq!(
        WitnessPolicy::new(keys(&five), 4)
            .unwrap()
            .check(PUBLIC_NOTE)
            .unwrap()
            .len(),
        4
    );
    let refused = WitnessPolicy::new(keys(&five), 5)
        .unwrap()
        .check(PUBLIC_NOTE)
        .unwrap_err();
    assert_eq!(
        refused,
        CosignatureError::TooFew {
            found: 4,
            required: 5,
            witnesses: 5,
            missing: vec!["witness.navigli.sunlight.geomys.org".into()],
        }
    );
    assert_eq!(
        refused.to_string(),
        "the checkpoint carries valid cosignatures of 4 of the 5 witnesses, 5 required; missing: witness.navigli.sunlight.geomys.org"
    );
}

#[test]
fn a_tampered_checkpoint_is_refused_by_the_first_witness_that_signed_it() {
    let policy = WitnessPolicy::new(keys(&PUBLIC_WITNESSES[2..]), 1).unwrap();
    let tampered = PUBLIC_NOTE.replace("\n1432088532\n", "\n1432088533\n");
    assert_eq!(
        policy.check(&tampered),
        Err(CosignatureError::BadCosignature("remora.n621.de".into()))
    );
    let other_root = PUBLIC_NOTE.replace("U7WM79", "U7WM78");
    assert_eq!(
        policy.check(&other_root),
        Err(CosignatureError::BadCosignature("remora.n621.de".into()))
    );
}

#[test]
fn a_cosignature_round_trips_beside_the_logs_signature() {
    let (checkpoint, note, log_keys) = logged(5);
    let (a, b) = (witness("a.example/w", 1), witness("b.example/w", 2));
    let note = cosigned(
        &note,
        &[
            a.cosign(&checkpoint, 1_700_000_000).unwrap(),
            b.cosign(&checkpoint, 1_700_000_001).unwrap(),
        ],
    );
    // The log's check ignores the witnesses' lines, the witnesses' the log's.
    assert_eq!(log_keys.verify(&note).unwrap(), checkpoint);
    let policy = WitnessPolicy::new(vec![a.witness_key(), b.witness_key()], 2).unwrap();
    let found = policy.check(&note).unwrap();
    assert_eq!(
        found
            .iter()
            .map(|c| (c.name(), c.timestamp()))
            .collect::<Vec<_>>(),
        [
            ("a.example/w", 1_700_000_000),
            ("b.example/w", 1_700_000_001)
        ]
    );
    // The verifier key read back is the same key.
    let read = WitnessKey::from_verifier_key(&a.witness_key().to_string()).unwrap();
    assert_eq!(read, a.witness_key());
    assert_eq!(read.name(), "a.example/w");
}

#[test]
fn extension_lines_are_signed_too() {
    let checkpoint = tlog::with_extension(logged(3).0, "Timestamp: 1").unwrap();
    let w = witness("w.example/1", 3);
    let line = w.cosign(&checkpoint, 10).unwrap();
    let note = format!("{checkpoint}\n{line}\n");
    let policy = WitnessPolicy::new(vec![w.witness_key()], 1).unwrap();
    assert!(policy.check(&note).is_ok());
    assert_eq!(
        policy.check(&note.replace("Timestamp: 1", "Timestamp: 2")),
        Err(CosignatureError::BadCosignature("w.example/1".into()))
    );
}

#[test]
fn another_key_under_the_same_name_is_not_the_witness() {
    let (checkpoint, note, _) = logged(2);
    let real = witness("w.example/1", 1);
    let impostor = witness("w.example/1", 2);
    let note = cosigned(&note, &[impostor.cosign(&checkpoint, 5).unwrap()]);
    // Its key id differs, so the line is another key's: ignored, and the witness is missing.
    let policy = WitnessPolicy::new(vec![real.witness_key()], 1).unwrap();
    assert_eq!(
        policy.check(&note),
        Err(CosignatureError::TooFew {
            found: 0,
            required: 1,
            witnesses: 1,
            missing: vec!["w.example/1".into()],
        })
    );
}

#[test]
fn a_bad_line_under_a_trusted_name_and_key_id_is_refused() {
    let (checkpoint, note, _) = logged(2);
    let w = witness("w.example/1", 1);
    let good = w.cosign(&checkpoint, 5).unwrap();
    let policy = WitnessPolicy::new(vec![w.witness_key()], 1).unwrap();
    let bad = |signature: Vec<u8>| {
        let line = NoteSignature::new(good.name(), good.key_id(), signature).unwrap();
        policy.check(&cosigned(&note, &[line]))
    };
    let refused = Err(CosignatureError::BadCosignature("w.example/1".into()));
    // A flipped bit of the signature, another timestamp, a short line, one over 2^63 - 1.
    let mut flipped = good.signature().to_vec();
    flipped[40] ^= 1;
    assert_eq!(bad(flipped), refused);
    let mut later = good.signature().to_vec();
    later[7] += 1;
    assert_eq!(bad(later), refused);
    assert_eq!(bad(good.signature()[..71].to_vec()), refused);
    let mut huge = good.signature().to_vec();
    huge[0] = 0x80;
    assert_eq!(bad(huge), refused);
    assert!(bad(good.signature().to_vec()).is_ok());
}

#[test]
fn k_of_n_holds_exactly_at_k() {
    let (checkpoint, note, _) = logged(7);
    let ws: Vec<WitnessSigner> = (1..=3)
        .map(|i| witness(&format!("w{i}.example"), i))
        .collect();
    let all: Vec<WitnessKey> = ws.iter().map(WitnessSigner::witness_key).collect();
    // Two of the three cosigned.
    let note = cosigned(
        &note,
        &[
            ws[0].cosign(&checkpoint, 1).unwrap(),
            ws[2].cosign(&checkpoint, 1).unwrap(),
        ],
    );
    for k in 1..=2 {
        let policy = WitnessPolicy::new(all.clone(), k).unwrap();
        assert_eq!(policy.check(&note).unwrap().len(), 2, "{k} of 3");
    }
    assert_eq!(
        WitnessPolicy::new(all.clone(), 3).unwrap().check(&note),
        Err(CosignatureError::TooFew {
            found: 2,
            required: 3,
            witnesses: 3,
            missing: vec!["w2.example".into()],
        })
    );
    for k in [0, 4] {
        assert_eq!(
            WitnessPolicy::new(all.clone(), k),
            Err(CosignatureError::Threshold {
                required: k,
                witnesses: 3
            })
        );
    }
    assert_eq!(
        WitnessPolicy::new(Vec::new(), 0),
        Err(CosignatureError::Threshold {
            required: 0,
            witnesses: 0
        })
    );
}

#[test]
fn a_witness_named_twice_is_refused() {
    let w = witness("w.example/1", 1);
    let twice = vec![w.witness_key(), w.witness_key()];
    assert_eq!(
        WitnessPolicy::new(twice, 1),
        Err(CosignatureError::DuplicateWitness("w.example/1".into()))
    );
    // The same key under another name: one line's signature verifies under both names.
    let renamed = WitnessSigner::from_seed("w.example/2", [1; 32]).unwrap();
    assert_eq!(
        WitnessPolicy::new(vec![w.witness_key(), renamed.witness_key()], 2),
        Err(CosignatureError::DuplicateWitness("w.example/2".into()))
    );
}

#[test]
fn malformed_verifier_keys_are_refused_by_name() {
    let remora = WitnessKey::from_verifier_key(PUBLIC_WITNESSES[2]).unwrap();
    assert_eq!(remora.key_id(), 0xda77_ade7);
    assert_eq!(remora.to_string(), PUBLIC_WITNESSES[2]);
    let log = P256Signer::from_secret_bytes("log-1", &[9; 32]).unwrap();
    let log_vkey = LogKey::of_signer(&log).verifier_key("example.com/log");
    let key = "BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2";
    let cases = [
        (
            "remora.n621.de+da77ade7".to_owned(),
            CosignatureError::VerifierKeyParts("remora.n621.de+da77ade7".into()),
        ),
        (
            format!("+da77ade7+{key}"),
            CosignatureError::BadName(String::new()),
        ),
        (
            format!("remora.n621.de+da77ade+{key}"),
            CosignatureError::VerifierKeyId {
                name: "remora.n621.de".into(),
                id: "da77ade".into(),
            },
        ),
        (
            format!("remora.n621.de+-a77ade7+{key}"),
            CosignatureError::VerifierKeyId {
                name: "remora.n621.de".into(),
                id: "-a77ade7".into(),
            },
        ),
        (
            "remora.n621.de+da77ade7+not base64!".to_owned(),
            CosignatureError::VerifierKeyEncoding("remora.n621.de".into()),
        ),
        (
            "remora.n621.de+da77ade7+BOvN63jn".to_owned(),
            CosignatureError::VerifierKeyEncoding("remora.n621.de".into()),
        ),
        (
            // An Ed25519 signed-note key (type 0x01), as a log's: no witness.
            "TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6".to_owned(),
            CosignatureError::VerifierKeyType {
                name: "TEST".into(),
                found: 0x01,
            },
        ),
        (
            log_vkey,
            CosignatureError::VerifierKeyType {
                name: "example.com/log".into(),
                found: 0x02,
            },
        ),
        (
            format!("remora.n621.de+00000000+{key}"),
            CosignatureError::KeyIdMismatch {
                name: "remora.n621.de".into(),
                given: 0,
                computed: 0xda77_ade7,
            },
        ),
        (
            format!("remora.n621.dE+da77ade7+{key}"),
            CosignatureError::KeyIdMismatch {
                name: "remora.n621.dE".into(),
                given: 0xda77_ade7,
                computed: WitnessKey::new("remora.n621.dE".into(), remora.key).key_id,
            },
        ),
    ];
    for (vkey, error) in cases {
        assert_eq!(WitnessKey::from_verifier_key(&vkey), Err(error), "{vkey}");
    }
    let message =
        WitnessKey::from_verifier_key("TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6")
            .unwrap_err()
            .to_string();
    assert_eq!(
        message,
        "witness key \"TEST\" is of signature type 0x01, not 0x04 (an ed25519 cosignature/v1 key): a log's own key cannot witness"
    );
}

#[test]
fn names_and_timestamps_out_of_range_are_refused() {
    assert_eq!(
        WitnessSigner::from_seed("a b", [1; 32]).unwrap_err(),
        CosignatureError::BadName("a b".into())
    );
    assert_eq!(
        WitnessSigner::from_seed("a+b", [1; 32]).unwrap_err(),
        CosignatureError::BadName("a+b".into())
    );
    let w = witness("w.example/1", 1);
    let checkpoint = logged(1).0;
    assert!(w.cosign(&checkpoint, MAX_TIMESTAMP).is_ok());
    assert_eq!(
        w.cosign(&checkpoint, MAX_TIMESTAMP + 1),
        Err(CosignatureError::Timestamp(MAX_TIMESTAMP + 1))
    );
}

#[test]
fn a_signer_shows_its_verifier_key_never_its_seed() {
    let w = witness("w.example/1", 0xab);
    let shown = format!("{w:?}");
    assert_eq!(shown, format!("WitnessSigner({})", w.witness_key()));
    assert!(!shown.to_lowercase().contains("abababab"));
}

#[test]
fn a_note_that_is_not_a_checkpoint_is_refused() {
    let w = witness("w.example/1", 1);
    let policy = WitnessPolicy::new(vec![w.witness_key()], 1).unwrap();
    assert!(matches!(
        policy.check("not a note"),
        Err(CosignatureError::Checkpoint(CheckpointError::Note(_)))
    ));
    assert_eq!(
        policy.check("two\nlines\n\n— w.example/1 AAAAAAE=\n"),
        Err(CosignatureError::Checkpoint(CheckpointError::Lines))
    );
}
