//! The crate's documentation and manifest say what is true: the module list of the crate
//! doc names every public module, the README's table names each path once, and no manifest
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

#[test]
fn the_crate_doc_lists_every_public_module() {
    let modules: Vec<&str> = LIB
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod ")?.strip_suffix(';'))
        .collect();
    assert!(modules.len() > 10, "{modules:?}");
    for module in modules {
        let entry = format!("//! - [`{module}`]: ");
        assert!(
            LIB.contains(&entry),
            "the crate doc's module list lacks {module}"
        );
    }
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
