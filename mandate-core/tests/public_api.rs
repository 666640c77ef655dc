//! The public API of mandate-core changes only on purpose: every `pub` item of `src/`
//! (its declaration up to the body, one line each, by file) is listed, and this test fails
//! when the source and the listings differ, so that a change to what others see shows in
//! review. After a deliberate change, write the listings again with
//! `UPDATE_PUBLIC_API=1 cargo test -p mandate-core --test public_api` and commit them with
//! the change.
//!
//! Two listings: `mandate-core/public-api.txt` is the face embedders use (mandate-core's
//! re-exports and what those items carry), `mandate-protocol/api.txt` is the rest of
//! mandate-protocol (what Mandate's server, CLI and benchmarks use besides). An item of
//! mandate-protocol is the face's when it (or the type whose member it is) is named by
//! mandate-core's `src/lib.rs`; everything else is the protocol's.
//!
//! The listing is read from the source text (stable Rust has no rustdoc JSON): items
//! inside `#[cfg(test)]` modules, `pub(crate)` and private items are left out; macros
//! that generate items list their body once; the `pub use` plumbing inside the modules is
//! left out (each item is listed where it is declared).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The `pub` declarations of one file, each joined onto one line and cut at its body, with
/// the top-level item it belongs to (its own name, or the type of the `impl` it is in).
fn declarations(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut owner: Option<String> = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            break;
        }
        if line.starts_with(|c: char| c.is_ascii_alphabetic()) {
            owner = owner_of(trimmed);
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
        out.push((cut(&declaration), owner.clone()));
        if is_enum {
            let listed = variants(&mut lines).into_iter();
            out.extend(listed.map(|v| (format!("  {v}"), owner.clone())));
        }
    }
    out
}

/// The name a top-level line declares, or the type an `impl` line is for (with its path,
/// `crate::mandate::Mandate`, when it names one).
fn owner_of(line: &str) -> Option<String> {
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == '<' || c == '(' || c == '{' || c == ':')
        .filter(|w| !w.is_empty())
        .collect();
    if line.starts_with("impl") {
        // `impl<T> Trait for Type<T> {` or `impl crate::path::Type {`: the type, with its path.
        let head = line.split(" for ").last()?.trim_start_matches("impl");
        let head = head.trim_start();
        let head = if head.starts_with('<') {
            head.split_once("> ")?.1
        } else {
            head
        };
        let path: String = head
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        return Some(path);
    }
    let keywords = [
        "pub", "const", "fn", "struct", "enum", "trait", "type", "mod", "static", "use",
    ];
    words
        .iter()
        .find(|w| !keywords.contains(w) && !w.ends_with('!'))
        .or(words.iter().find(|w| w.ends_with('!')))
        .map(|w| w.trim_end_matches(['!', ';']).to_owned())
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
    if text.starts_with("pub use ") {
        return text.ends_with(';');
    }
    let open = text.matches(['(', '[']).count();
    let close = text.matches([')', ']']).count();
    open <= close
        && (text.contains('{') || text.ends_with(';') || text.ends_with(',') || text.ends_with('}'))
}

/// The declaration without its body or initializer, single-spaced; a `pub use` whole.
fn cut(text: &str) -> String {
    if text.starts_with("pub use ") {
        return text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace("{ ", "{")
            .replace(", }", "}")
            .replace(" }", "}");
    }
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

/// What `mandate-core/src/lib.rs` re-exports from mandate-protocol, as (module, name) with
/// the module the first one under `mandate-protocol/src/` (`tlog`).
fn face(source: &str) -> HashSet<(String, String)> {
    let mut named = HashSet::new();
    for (statement, _) in declarations(source) {
        let Some(path) = statement.strip_prefix("pub use mandate_protocol::") else {
            continue;
        };
        let (module, items) = path.split_once("::").unwrap();
        let items = items.trim_end_matches(';');
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let item = item.rsplit("::").next().unwrap();
            assert_ne!(
                item, "*",
                "the face re-exports {module} whole: name its items"
            );
            named.insert((module.to_owned(), item.to_owned()));
        }
    }
    named
}

/// The workspace's directory and mandate-core's face.
fn workspace_and_face() -> (PathBuf, String) {
    let root = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    );
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    (root.parent().unwrap().to_path_buf(), lib)
}

/// The two listings, the face (mandate-core) and the rest (mandate-protocol), read from
/// mandate-protocol's `src/` and mandate-core's `src/lib.rs`.
fn listings() -> (String, String) {
    let (workspace, lib) = workspace_and_face();
    let protocol = workspace.join("mandate-protocol");
    let mut files = Vec::new();
    sources(&protocol.join("src"), &mut files);
    let named = face(&lib);
    let regenerate = "# Regenerate after a deliberate change: UPDATE_PUBLIC_API=1 cargo test -p mandate-core --test public_api\n";
    let mut face = format!(
        "# The public API of mandate-core (its re-exports and what they carry), read by\n\
         # mandate-core/tests/public_api.rs.\n{regenerate}\n[mandate-core/src/lib.rs]\n"
    );
    for (statement, _) in declarations(&lib) {
        face.push_str(&statement);
        face.push('\n');
    }
    let mut rest = format!(
        "# mandate-protocol beyond mandate-core's face: what Mandate's server, CLI and benchmarks\n\
         # use besides, with no stability promise. Read by mandate-core/tests/public_api.rs.\n{regenerate}"
    );
    for file in files {
        let name = file.strip_prefix(&workspace).unwrap().display().to_string();
        let module = name
            .trim_start_matches("mandate-protocol/src/")
            .split(['/', '.'])
            .next()
            .unwrap()
            .to_owned();
        let plumbing = module != "lib";
        let mut sections = [Vec::new(), Vec::new()];
        for (item, owner) in declarations(&std::fs::read_to_string(&file).unwrap()) {
            if plumbing && item.starts_with("pub use ") {
                continue;
            }
            let (module, owner) = match owner.as_deref().and_then(|o| o.strip_prefix("crate::")) {
                Some(path) => match path.split_once("::") {
                    Some((module, rest)) => (
                        module.to_owned(),
                        rest.rsplit("::").next().map(str::to_owned),
                    ),
                    None => (module.clone(), Some(path.to_owned())),
                },
                None => (module.clone(), owner),
            };
            let in_face = owner.is_some_and(|o| named.contains(&(module, o)));
            sections[usize::from(!in_face)].push(item);
        }
        for (listing, items) in [&mut face, &mut rest].into_iter().zip(sections) {
            if items.is_empty() {
                continue;
            }
            listing.push_str(&format!("\n[{name}]\n"));
            for item in items {
                listing.push_str(&item);
                listing.push('\n');
            }
        }
    }
    (face, rest)
}

#[test]
fn the_public_api_is_the_listed_one() {
    let (workspace, _) = workspace_and_face();
    let (face, rest) = listings();
    for (file, now) in [
        ("mandate-core/public-api.txt", face),
        ("mandate-protocol/api.txt", rest),
    ] {
        let path = workspace.join(file);
        if std::env::var_os("UPDATE_PUBLIC_API").is_some() {
            std::fs::write(&path, &now).unwrap();
            continue;
        }
        let listed = std::fs::read_to_string(&path).unwrap_or_default();
        if listed != now {
            let old: Vec<&str> = listed.lines().collect();
            let new: Vec<&str> = now.lines().collect();
            let removed: Vec<&&str> = old.iter().filter(|l| !new.contains(l)).collect();
            let added: Vec<&&str> = new.iter().filter(|l| !old.contains(l)).collect();
            panic!(
                "the public API differs from {file}.\nremoved: {removed:#?}\nadded: {added:#?}\n\
                 If the change is deliberate, run UPDATE_PUBLIC_API=1 cargo test -p mandate-core --test public_api and commit the listings."
            );
        }
    }
}

/// The face re-exports nothing of the modules only the server and the CLI use (the API's
/// wire types and the server's state machines), and is nothing but re-exports.
#[test]
fn the_face_names_no_module_of_the_server() {
    let (_, lib) = workspace_and_face();
    let named = face(&lib);
    assert!(named.len() > 60, "{}", named.len());
    for server in [
        "wire",
        "review",
        "escrow",
        "funding",
        "delivery",
        "idempotency",
        "budget",
    ] {
        assert!(
            !named.iter().any(|(module, _)| module == server),
            "the face re-exports from {server}"
        );
    }
    for (statement, _) in declarations(&lib) {
        assert!(
            statement.starts_with("pub use mandate_protocol::"),
            "{statement}"
        );
    }
    assert!(named.contains(&("counterparty".to_owned(), "Counterparty".to_owned())));
}

#[test]
fn declarations_are_read_whole_and_cut_at_their_body() {
    let source = "pub fn a(\n    x: u8,\n) -> u8 {\n    x\n}\nfn private() {}\npub(crate) fn hidden() {}\n\
                  pub struct S {\n    pub field: u8,\n    other: u8,\n}\npub const C: u8 = 1;\n\
                  pub enum E {\n    /// A.\n    A,\n    B { x: u8 },\n    C(u8),\n}\n\
                  impl<'a> crate::m::T<'a> {\n    pub fn t(&self) {}\n}\npub use m::{\n    A,\n    B,\n};\n\
                  #[cfg(test)]\nmod tests { pub fn t() {} }\n";
    let owned = |item: &str, owner: &str| (item.to_owned(), Some(owner.to_owned()));
    assert_eq!(
        declarations(source),
        [
            owned("pub fn a(x: u8) -> u8", "a"),
            owned("pub struct S", "S"),
            owned("pub field: u8", "S"),
            owned("pub const C: u8", "C"),
            owned("pub enum E", "E"),
            owned("  A", "E"),
            owned("  B", "E"),
            owned("  C(u8)", "E"),
            owned("pub fn t(&self)", "crate::m::T"),
            owned("pub use m::{A, B};", "m"),
        ]
    );
}
