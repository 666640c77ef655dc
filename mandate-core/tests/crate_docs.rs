//! The crate's documentation and manifest say what is true: the crate doc names its one
//! public module, the README's table names each path once, and no manifest
//! carries a placeholder URL.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

const LIB: &str = include_str!("../src/lib.rs");
const README: &str = include_str!("../../README.md");
const MANIFESTS: [&str; 5] = [
    include_str!("../../Cargo.toml"),
    include_str!("../Cargo.toml"),
    include_str!("../../mandate-server/Cargo.toml"),
    include_str!("../../mandate-cli/Cargo.toml"),
    include_str!("../../mandate-bench/Cargo.toml"),
];

/// The face is the crate root: every module is private but `unstable`, which the crate
/// doc names (with what it is for).
#[test]
fn the_modules_are_private_but_unstable_and_the_crate_doc_names_it() {
    let public: Vec<&str> = LIB
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod ")?.strip_suffix(';'))
        .collect();
    assert_eq!(public, ["unstable"]);
    let private = LIB
        .lines()
        .filter(|line| line.starts_with("mod ") && line.ends_with(';'))
        .count();
    assert!(private > 20, "{private}");
    assert!(
        LIB.contains("//! [`unstable`] holds what"),
        "the crate doc names unstable"
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
