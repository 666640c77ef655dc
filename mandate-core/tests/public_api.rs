//! The public API of mandate-core changes only on purpose: every `pub` item of `src/`
//! (its declaration up to the body, one line each, by file) is listed in
//! `mandate-core/public-api.txt`, and this test fails when the source and the listing
//! differ, so that a change to what embedders see shows in review. After a deliberate
//! change, write the listing again with `UPDATE_PUBLIC_API=1 cargo test -p mandate-core
//! --test public_api` and commit it with the change.
//!
//! The listing is read from the source text (stable Rust has no rustdoc JSON): items
//! inside `#[cfg(test)]` modules, `pub(crate)` and private items are left out; macros
//! that generate items list their body once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// The `pub` declarations of one file, each joined onto one line and cut at its body.
fn declarations(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            break;
        }
        let is_pub = trimmed.starts_with("pub ") && !trimmed.starts_with("pub(");
        if !is_pub {
            continue;
        }
        let mut declaration = trimmed.to_owned();
        // A signature may run over lines: read on until its body, `;` or `,` (a field).
        while !ends_declaration(&declaration) {
            match lines.next() {
                Some(next) => {
                    declaration.push(' ');
                    declaration.push_str(next.trim());
                }
                None => break,
            }
        }
        let is_enum = declaration.starts_with("pub enum ") && declaration.ends_with('{');
        out.push(cut(&declaration));
        if is_enum {
            out.extend(variants(&mut lines).into_iter().map(|v| format!("  {v}")));
        }
    }
    out
}

/// The variants of an enum whose opening line was just read, each cut at its fields.
fn variants<'a>(lines: &mut impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 1usize;
    for line in lines.by_ref() {
        let trimmed = line.trim();
        if depth == 1
            && trimmed.starts_with(|c: char| c.is_ascii_uppercase())
            && !trimmed.starts_with("//")
        {
            out.push(cut(trimmed));
        }
        depth += trimmed.matches('{').count();
        depth = depth.saturating_sub(trimmed.matches('}').count());
        if depth == 0 {
            break;
        }
    }
    out
}

fn ends_declaration(text: &str) -> bool {
    let open = text.matches(['(', '[']).count();
    let close = text.matches([')', ']']).count();
    open <= close
        && (text.contains('{') || text.ends_with(';') || text.ends_with(',') || text.ends_with('}'))
}

/// The declaration without its body or initializer, single-spaced.
fn cut(text: &str) -> String {
    let end = [text.find(" {"), text.find(" = "), text.find('{')]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(text.len());
    let head = text[..end].trim_end_matches([';', ',', ' ']);
    head.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("( ", "(")
        .replace(" )", ")")
        .replace(", )", ")")
        .replace(",)", ")")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn listing() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut text = String::from(
        "# The public API of mandate-core, read from src/ by tests/public_api.rs.\n\
         # Regenerate after a deliberate change: UPDATE_PUBLIC_API=1 cargo test -p mandate-core --test public_api\n",
    );
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        let items = declarations(&source);
        if items.is_empty() {
            continue;
        }
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        text.push_str(&format!("\n[{name}]\n"));
        for item in items {
            text.push_str(&item);
            text.push('\n');
        }
    }
    text
}

#[test]
fn the_public_api_is_the_listed_one() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("public-api.txt");
    let now = listing();
    if std::env::var_os("UPDATE_PUBLIC_API").is_some() {
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let listed = std::fs::read_to_string(&path).unwrap_or_default();
    if listed != now {
        let old: Vec<&str> = listed.lines().collect();
        let new: Vec<&str> = now.lines().collect();
        let removed: Vec<&&str> = old.iter().filter(|l| !new.contains(l)).collect();
        let added: Vec<&&str> = new.iter().filter(|l| !old.contains(l)).collect();
        panic!(
            "the public API differs from mandate-core/public-api.txt.\nremoved: {removed:#?}\nadded: {added:#?}\n\
             If the change is deliberate, run UPDATE_PUBLIC_API=1 cargo test -p mandate-core --test public_api and commit the listing."
        );
    }
}

#[test]
fn declarations_are_read_whole_and_cut_at_their_body() {
    let source = "pub fn a(\n    x: u8,\n) -> u8 {\n    x\n}\nfn private() {}\npub(crate) fn hidden() {}\n\
                  pub struct S {\n    pub field: u8,\n    other: u8,\n}\npub const C: u8 = 1;\n\
                  pub enum E {\n    /// A.\n    A,\n    B { x: u8 },\n    C(u8),\n}\n#[cfg(test)]\nmod tests { pub fn t() {} }\n";
    assert_eq!(
        declarations(source),
        [
            "pub fn a(x: u8) -> u8",
            "pub struct S",
            "pub field: u8",
            "pub const C: u8",
            "pub enum E",
            "  A",
            "  B",
            "  C(u8)"
        ]
    );
}
