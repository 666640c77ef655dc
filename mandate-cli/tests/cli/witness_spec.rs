//! `mandate witness`, and the service's side of the protocol, against the examples of the
//! C2SP specifications (`testdata/c2sp/`, copied from `tlog-witness.md` and
//! `tlog-cosignature.md` with their source named there): the spec's add-checkpoint request
//! is read as a request of that shape (404 for a log the witness does not follow, 403 when
//! none of its signatures is the log's key), requests of its shape get answers of the
//! spec's shape and status, the spec's example response is read by the service keeping
//! only the lines of the witness it asked, and a cosignature has the example's layout.

use base64::Engine as _;
use mandate_protocol::tlog::{self, SignedNote, WitnessPolicy};
use mandate_server::workers::witness::{Next, WitnessTarget, judge};

use crate::witness::{Log, Witness, body, init};

/// The spec's example request body.
const REQUEST: &str = include_str!("../../../testdata/c2sp/add-checkpoint-request.txt");
/// The spec's example response body.
const RESPONSE: &str = include_str!("../../../testdata/c2sp/add-checkpoint-response.txt");
/// The example of a checkpoint with a cosignature.
const COSIGNED: &str = include_str!("../../../testdata/c2sp/cosigned-checkpoint.txt");
/// The example's log: its origin.
const SOFA: &str = "example.com/behind-the-sofa";

/// A cosignature line's signature, decoded.
fn signature_of(line: &str) -> Vec<u8> {
    let signature = line.trim_end().rsplit(' ').next().unwrap();
    base64::engine::general_purpose::STANDARD
        .decode(signature)
        .unwrap()
}

#[test]
fn a_witness_answers_the_specs_example_requests_as_the_spec_says() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let (key, vkey) = init(home, "witness.example/w1");
    // Our key for the example's origin: the example's own log keys are not published.
    let log = Log::new(SOFA, 8, 0);
    let other = Log::new("other.example/log", 1, 0);

    // The example request, to a witness that does not follow its log: 404 (a body it
    // could not read would be a 400).
    let stranger = Witness::start(home, &key, &home.join("s.json"), &[other.vkey()]);
    let (status, _, message) = stranger.add(REQUEST);
    assert_eq!(status, 404, "{message}");
    drop(stranger);

    // To a witness that follows it with another key: its two signatures are of keys the
    // witness does not trust, ignored; none is left: 403.
    let witness = Witness::start(home, &key, &home.join("w.json"), &[log.vkey()]);
    let (status, _, message) = witness.add(REQUEST);
    assert_eq!(status, 403, "{message}");

    // Old size zero with the example's proof lines: the proof must be empty (422).
    let proof: Vec<&str> = REQUEST.lines().skip(1).take(4).collect();
    let with_proof = format!("old 0\n{}\n\n{}", proof.join("\n"), log.note(3));
    let (status, _, message) = witness.add(&with_proof);
    assert_eq!(status, 422, "{message}");
    // A checkpoint of size zero must have the empty tree's root (422).
    let (status, _, message) = witness.add(&body(0, &[], &log.signed(0, tlog::leaf_hash(b""))));
    assert_eq!(status, 422, "{message}");
    assert!(message.contains("the empty tree's root"), "{message}");

    // A request of the example's shape: a response of the example's shape, each line
    // `— <name> <signature>` ending in a newline, of the example cosignature's layout
    // (key id, timestamp, Ed25519 signature: 76 bytes), the key id the witness key's and
    // the timestamp not zero.
    let (status, _, response) = witness.add(&body(0, &[], &log.note(3)));
    assert_eq!(status, 200, "{response}");
    assert!(response.ends_with('\n'));
    let example = COSIGNED.lines().last().unwrap();
    for line in response.lines().chain(RESPONSE.lines()).chain([example]) {
        assert!(line.starts_with("— "), "{line}");
        assert_eq!(signature_of(line).len(), 76, "{line}");
    }
    let ours = signature_of(&response);
    assert_eq!(ours[..4], vkey.key_id().to_be_bytes());
    assert_ne!(ours[4..12], [0; 8]);
    // The example's timestamp is the time line of the spec's signed message.
    let theirs = signature_of(example);
    assert_eq!(
        u64::from_be_bytes(theirs[4..12].try_into().unwrap()),
        1_679_315_147
    );
    assert!(
        include_str!("../../../testdata/c2sp/cosignature-message.txt")
            .starts_with("cosignature/v1\ntime 1679315147\n")
    );

    // The service reads the example response, with or without its witness's line: only
    // that line is kept (the others are of keys it was not given).
    let target = WitnessTarget::parse(&format!("{}={vkey}", witness.url)).unwrap();
    let note = log.note(3);
    assert!(matches!(
        judge(&target, &note, 3, false, 200, RESPONSE),
        Next::Failed(_)
    ));
    assert_eq!(
        judge(
            &target,
            &note,
            3,
            false,
            200,
            &format!("{RESPONSE}{response}")
        ),
        Next::Cosigned(response.clone())
    );
    // A 409 of the spec's form (`text/x.tlog.size`, the size and a newline) is a retry
    // from that size; a size above the checkpoint's, a rollback.
    assert_eq!(
        judge(&target, &note, 3, false, 409, "2\n"),
        Next::Retry { old: 2 }
    );
    assert_eq!(
        judge(&target, &note, 3, false, 409, "20852163\n"),
        Next::RolledBack {
            witness_size: 20_852_163
        }
    );
}

#[test]
fn the_specs_cosigned_example_is_a_note_whose_unknown_cosignature_is_ignored() {
    let note = SignedNote::parse(COSIGNED).unwrap();
    assert_eq!(note.signatures().len(), 2);
    assert_eq!(note.signatures()[1].name(), "witness.example.com/w1");
    // A witness of that name but another key: the line is not its (another key id), so
    // it is ignored, not refused as a bad signature.
    let home = tempfile::tempdir().unwrap();
    let (_, vkey) = init(home.path(), "witness.example.com/w1");
    let message = WitnessPolicy::new(vec![vkey], 1)
        .unwrap()
        .check(COSIGNED)
        .unwrap_err()
        .to_string();
    assert!(message.contains("0 of the 1 witnesses"), "{message}");
}
