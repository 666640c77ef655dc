use super::*;
use mandate_protocol::jws::P256Signer;
use mandate_protocol::tlog::{self, Checkpoint, WitnessSigner};

/// A signed checkpoint of `size` leaves and a witness able to cosign it.
fn fixture(size: u64) -> (String, Checkpoint, WitnessSigner, WitnessTarget) {
    let log = P256Signer::from_secret_bytes("log-1", &[9; 32]).unwrap();
    let checkpoint = tlog::checkpoint("v.example/log/org_1/live", size, tlog::leaf_hash(b"r"));
    let checkpoint = checkpoint.unwrap();
    let note = tlog::sign_checkpoint(&checkpoint, &log).unwrap();
    let signer = WitnessSigner::from_seed("w1.example/witness", [7; 32]).unwrap();
    let entry = format!("http://127.0.0.1:9/w={}", signer.witness_key());
    (
        note,
        checkpoint,
        signer,
        WitnessTarget::parse(&entry).unwrap(),
    )
}

#[test]
fn a_target_is_a_url_and_a_witness_verifier_key() {
    let (_, _, signer, target) = fixture(1);
    assert_eq!(target.name(), "w1.example/witness");
    assert_eq!(target.endpoint(), "http://127.0.0.1:9/w/add-checkpoint");
    let vkey = signer.witness_key().to_string();
    for (entry, says) in [
        ("no-equals-sign".to_owned(), "is not <URL>=<verifier key>"),
        (
            format!("ftp://w.example={vkey}"),
            "must be http:// or https://",
        ),
        (format!("not a url={vkey}"), "the witness URL"),
        (format!("https://w.example/?a={vkey}"), "must have no query"),
        (
            "https://w.example=w+00000000+AAAA".to_owned(),
            "the witness at https://w.example/",
        ),
    ] {
        let error = WitnessTarget::parse(&entry).unwrap_err();
        assert!(error.contains(says), "{entry}: {error}");
    }
    // A password in the URL is never repeated in a message.
    let error = WitnessTarget::parse("https://u:hunter2@w.example=w+00000000+AAAA").unwrap_err();
    assert!(!error.contains("hunter2"), "{error}");
    // One witness twice is refused.
    let twice = [target.clone(), target];
    assert!(check_targets(&twice).unwrap_err().contains("named twice"));
}

#[test]
fn a_cosignature_is_kept_only_if_it_verifies_with_the_witness_key() {
    let (note, checkpoint, signer, target) = fixture(5);
    let line = format!("{}\n", signer.cosign(&checkpoint, 1_700_000_000).unwrap());
    let other = WitnessSigner::from_seed("w1.example/witness", [8; 32]).unwrap();
    let forged = format!("{}\n", other.cosign(&checkpoint, 1_700_000_000).unwrap());
    assert_eq!(
        judge(&target, &note, 5, false, 200, &format!("{forged}{line}")),
        Next::Cosigned(line.clone())
    );
    assert!(matches!(
        judge(&target, &note, 5, false, 200, &forged),
        Next::Failed(why) if why.contains("verifies")
    ));
    // The cosigned note is a valid signed note that a policy of the witness accepts.
    let cosigned = with_lines(&note, &line);
    let policy = WitnessPolicy::new(vec![signer.witness_key()], 1).unwrap();
    assert!(policy.check(&cosigned).is_ok());
    assert_eq!(with_lines(&note, "not a line\n"), note);
}

#[test]
fn a_409_is_retried_once_from_the_witness_size_unless_it_is_above_the_log() {
    let (note, _, _, target) = fixture(5);
    assert_eq!(
        judge(&target, &note, 5, false, 409, "3\n"),
        Next::Retry { old: 3 }
    );
    assert!(matches!(
        judge(&target, &note, 5, true, 409, "3\n"),
        Next::Failed(_)
    ));
    assert_eq!(
        judge(&target, &note, 5, false, 409, "8\n"),
        Next::RolledBack { witness_size: 8 }
    );
    assert_eq!(
        judge(&target, &note, 5, true, 409, "8\n"),
        Next::RolledBack { witness_size: 8 }
    );
    assert!(matches!(
        judge(&target, &note, 5, false, 409, "x"),
        Next::Failed(_)
    ));
    assert_eq!(
        judge(&target, &note, 5, false, 422, "the log forked\n"),
        Next::Forked {
            why: "the log forked".into()
        }
    );
    assert!(matches!(
        judge(&target, &note, 5, false, 404, "unknown log"),
        Next::Failed(why) if why == "answered 404: unknown log"
    ));
}
