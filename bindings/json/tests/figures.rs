//! docs/embedding.md's figures for the packages ("Speed and size") are the record's,
//! mandate-bench/results/2026-11-27-verify-packages.tsv: each rate and the module's sizes
//! appear on the page as the record has them (with thousands separators), so the page
//! cannot drift from the measurement it cites.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

const RECORD: &str = "mandate-bench/results/2026-11-27-verify-packages.tsv";

fn read(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(
            &std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../..")
        .join(path),
    )
    .unwrap()
}

/// `1189` as `1,189`.
fn separated(digits: &str) -> String {
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn the_embedding_guide_states_the_records_figures() {
    let record = read(RECORD);
    let page = read("docs/embedding.md");
    assert!(page.contains(RECORD), "the page names its record");
    let mut figures = Vec::new();
    for line in record.lines().filter(|l| !l.starts_with('#')).skip(1) {
        figures.push(line.split('\t').nth(2).unwrap().to_owned());
    }
    for line in record.lines().filter(|l| l.starts_with("# wasm_")) {
        figures.push(line.split('\t').nth(1).unwrap().to_owned());
    }
    assert_eq!(figures.len(), 6, "{figures:?}");
    for figure in figures {
        let shown = separated(&figure);
        assert!(
            page.contains(&shown),
            "docs/embedding.md does not say {shown}"
        );
    }
}
