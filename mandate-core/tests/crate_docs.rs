//! The crate's documentation and manifest say what is true: the crate doc names the crate
//! it is the face of, the README's table names each path once, and no manifest
//! carries a placeholder URL.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

const LIB: &str = include_str!("../src/lib.rs");
const PROTOCOL_LIB: &str = include_str!("../../mandate-protocol/src/lib.rs");
const README: &str = include_str!("../../README.md");
const MANIFESTS: [&str; 6] = [
    include_str!("../../Cargo.toml"),
    include_str!("../Cargo.toml"),
    include_str!("../../mandate-protocol/Cargo.toml"),
    include_str!("../../mandate-server/Cargo.toml"),
    include_str!("../../mandate-cli/Cargo.toml"),
    include_str!("../../mandate-bench/Cargo.toml"),
];

/// The face is the crate root and nothing else: no module of its own, and the crate doc
/// names `mandate-protocol` (with what it is for); mandate-protocol's modules are public.
#[test]
fn the_face_has_no_module_and_the_crate_doc_names_the_protocol() {
    let modules = LIB
        .lines()
        .filter(|line| line.starts_with("mod ") || line.starts_with("pub mod "))
        .count();
    assert_eq!(modules, 0);
    assert!(
        LIB.contains("//! This crate is the face of `mandate-protocol`"),
        "the crate doc names mandate-protocol"
    );
    let public = PROTOCOL_LIB
        .lines()
        .filter(|line| line.starts_with("pub mod "))
        .count();
    let private = PROTOCOL_LIB
        .lines()
        .filter(|line| line.starts_with("mod "))
        .count();
    assert!(
        public > 20 && private == 0,
        "{public} public, {private} private"
    );
}

#[test]
fn the_readme_names_each_path_once() {
    let mut seen = std::collections::HashSet::new();
    let paths: Vec<&str> = README
        .lines()
        .filter_map(|line| line.strip_prefix("| `")?.split('`').next())
        .collect();
    assert!(paths.contains(&"openapi.yaml"), "{paths:?}");
    for path in paths {
        assert!(seen.insert(path), "README lists {path} twice");
    }
}

#[test]
fn no_manifest_has_a_placeholder_url() {
    for manifest in MANIFESTS {
        assert!(!manifest.contains(".invalid"), "{manifest}");
    }
}
