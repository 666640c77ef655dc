//! The transparency log against independent implementations' vectors (`testdata/tlog/`,
//! README there): every inclusion and consistency case of Go's transparency-dev/merkle,
//! the reference tree of its `testonly` package, and real ECDSA signed-note checkpoints of
//! Sigstore's Rekor and the Pixel 6 transparency log.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mandate_protocol::tlog::LogHash;
use mandate_protocol::{
    tlog::LogKey, tlog::SignedNote, tlog::TreeEdge, tlog::verify_consistency,
    tlog::verify_inclusion,
};
use serde::Deserialize;

/// `testdata/tlog/` from the package directory `cargo test` gives the running test.
fn testdata() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../testdata/tlog")
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            json_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
    out.sort();
}

/// A hash of a vector: `None` when it is not 32 bytes (the Go cases feed empty and short
/// hashes; a `LogHash` cannot hold them, so such input is refused before any check).
fn hash(text: &str) -> Option<LogHash> {
    let bytes = STANDARD.decode(text).unwrap();
    Some(LogHash::from_bytes(bytes.try_into().ok()?))
}

fn hashes(texts: &Option<Vec<String>>) -> Option<Vec<LogHash>> {
    texts.iter().flatten().map(|t| hash(t)).collect()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InclusionCase {
    leaf_idx: u64,
    tree_size: u64,
    root: String,
    leaf_hash: String,
    proof: Option<Vec<String>>,
    desc: String,
    want_err: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConsistencyCase {
    size1: u64,
    size2: u64,
    root1: String,
    root2: String,
    proof: Option<Vec<String>>,
    desc: String,
    want_err: bool,
}

#[test]
fn every_inclusion_vector_of_transparency_dev_merkle() {
    let mut files = Vec::new();
    json_files(&testdata().join("merkle/inclusion"), &mut files);
    assert_eq!(files.len(), 98, "the vendored inclusion cases");
    let (mut accepted, mut refused) = (0, 0);
    for file in &files {
        let case: InclusionCase = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        let result = match (hash(&case.leaf_hash), hash(&case.root), hashes(&case.proof)) {
            (Some(leaf), Some(root), Some(proof)) => {
                verify_inclusion(&leaf, case.leaf_idx, case.tree_size, &proof, &root).is_ok()
            }
            _ => false,
        };
        assert_eq!(result, !case.want_err, "{} ({})", file.display(), case.desc);
        if result { accepted += 1 } else { refused += 1 }
    }
    assert_eq!((accepted, refused), (6, 92), "accepted and refused");
}

#[test]
fn every_consistency_vector_of_transparency_dev_merkle() {
    let mut files = Vec::new();
    json_files(&testdata().join("merkle/consistency"), &mut files);
    assert_eq!(files.len(), 98, "the vendored consistency cases");
    let (mut accepted, mut refused) = (0, 0);
    for file in &files {
        let case: ConsistencyCase = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        let result = match (hash(&case.root1), hash(&case.root2), hashes(&case.proof)) {
            (Some(root1), Some(root2), Some(proof)) => {
                verify_consistency(case.size1, &root1, case.size2, &root2, &proof).is_ok()
            }
            // The one accepted case with short roots: equal sizes, equal roots, no proof.
            // Its point does not depend on the roots' length; with 32-byte roots it holds.
            _ if file.ends_with("additional/sizes-are-equal-one-and-proof-is-empty.json") => {
                assert_eq!(case.root1, case.root2);
                let root = mandate_protocol::tlog::leaf_hash(case.root1.as_bytes());
                verify_consistency(1, &root, 1, &root, &[]).is_ok()
            }
            _ => false,
        };
        assert_eq!(result, !case.want_err, "{} ({})", file.display(), case.desc);
        if result { accepted += 1 } else { refused += 1 }
    }
    assert_eq!((accepted, refused), (6, 92), "accepted and refused");
}

#[derive(Deserialize)]
struct ReferenceTree {
    leaf_inputs_hex: Vec<String>,
    root_hex_by_size: Vec<String>,
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn the_reference_tree_has_the_reference_roots_at_every_size() {
    let tree: ReferenceTree =
        serde_json::from_slice(&std::fs::read(testdata().join("tree.json")).unwrap()).unwrap();
    assert_eq!(tree.root_hex_by_size.len(), tree.leaf_inputs_hex.len() + 1);
    let mut edge = TreeEdge::new();
    for (size, root) in tree.root_hex_by_size.iter().enumerate() {
        assert_eq!(
            edge.root().as_bytes().as_slice(),
            unhex(root),
            "size {size}"
        );
        if let Some(input) = tree.leaf_inputs_hex.get(size) {
            edge.push(mandate_protocol::tlog::leaf_hash(&unhex(input)))
                .unwrap();
        }
    }
}

#[derive(Deserialize)]
struct NoteVectors {
    keys: Vec<KeyCase>,
    notes: Vec<NoteCase>,
}

#[derive(Deserialize)]
struct KeyCase {
    name: String,
    vkey: String,
    valid: bool,
}

#[derive(Deserialize)]
struct NoteCase {
    desc: String,
    vkey: String,
    /// The key name to verify under, when not the verifier key's own.
    name: Option<String>,
    note: String,
    verifies: bool,
}

fn note_vectors() -> NoteVectors {
    serde_json::from_slice(&std::fs::read(testdata().join("notes.json")).unwrap()).unwrap()
}

#[test]
fn ecdsa_verifier_keys_are_read_as_go_reads_them_and_written_back() {
    for case in note_vectors().keys {
        let parsed = LogKey::from_verifier_key(&case.vkey);
        assert_eq!(parsed.is_some(), case.valid, "{}", case.vkey);
        if let Some((name, key)) = parsed {
            assert_eq!(name, case.name);
            // The key id is SHA-256 of the SPKI DER, which this crate builds itself.
            assert_eq!(key.verifier_key(&name), case.vkey);
        }
    }
}

#[test]
fn real_rekor_and_pixel_checkpoints_verify_and_altered_ones_do_not() {
    for case in note_vectors().notes {
        let (own_name, key) = LogKey::from_verifier_key(&case.vkey).unwrap();
        let name = case.name.unwrap_or(own_name);
        let verified = SignedNote::parse(&case.note)
            .map_err(|e| e.to_string())
            .and_then(|note| key.verify_note(&note, &name).map_err(|e| e.to_string()));
        assert_eq!(
            verified == Ok(true),
            case.verifies,
            "{}: {verified:?}",
            case.desc
        );
    }
}

#[test]
fn a_changed_byte_of_a_real_checkpoint_fails_its_signature() {
    let vectors = note_vectors();
    let case = &vectors.notes[0];
    let (name, key) = LogKey::from_verifier_key(&case.vkey).unwrap();
    // The size line 798034 becomes 798035: same shape, another tree.
    let altered = case.note.replacen("798034", "798035", 1);
    let note = SignedNote::parse(&altered).unwrap();
    assert!(key.verify_note(&note, &name).is_err());
}
