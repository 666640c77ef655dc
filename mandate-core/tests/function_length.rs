//! No function in any crate's `src/` is longer than [`MAX_LINES`] lines, from the line of
//! its `fn` to the line of its closing brace (its doc comment and attributes not counted;
//! a function nested in another counts in both). Read off the source text, in the spirit of
//! `import_circles.rs`: comments, strings and character literals are blanked first, so that
//! a brace or a `fn` inside them is not counted, then each `fn` item's body is found by
//! matching its braces. Test modules in `src/` count like any other code.
//!
//! [`ALLOWED`] names the functions over the limit that belong to another engineer's work
//! under way, each with its length when it was listed: they are split by that work, which
//! removes their entries.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

/// The longest a function may be, in lines.
const MAX_LINES: usize = 100;

/// Functions over [`MAX_LINES`] allowed for now, as (where, function name): each is being
/// split by work in progress, which removes its entry. Where is a file from the workspace
/// root, or a module without `.rs` (`mandate-core/src/policy` is `policy.rs` and every file
/// under `policy/`), so that a module split into a folder keeps its entries.
const ALLOWED: &[(&str, &str)] = &[];

/// The source with comments, string and character literals blanked (each of their
/// characters but newlines made a space), so that only code is left to read.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    // Blanks `chars[from..to]`, keeping newlines.
    let blank = |out: &mut String, from: usize, to: usize| {
        for c in &chars[from..to.min(chars.len())] {
            out.push(if *c == '\n' { '\n' } else { ' ' });
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let before = i.checked_sub(1).map(|j| chars[j]);
        if c == '/' && next == Some('/') {
            let end = chars[i..]
                .iter()
                .position(|c| *c == '\n')
                .map_or(chars.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            // Block comments nest.
            let (mut depth, mut j) = (0, i);
            while j < chars.len() {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !before.is_some_and(ident)
            && raw_string_at(&chars, i).is_some()
        {
            let end = raw_string_at(&chars, i).unwrap();
            blank(&mut out, i, end);
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), or else a lifetime or a label.
            let end = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|c| *c == '\'')
                    .map(|n| i + 2 + n + 1)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Where the raw string literal starting at `at` (`r"…"`, `r#"…"#`, `br"…"`) ends, if one
/// starts there.
fn raw_string_at(chars: &[char], at: usize) -> Option<usize> {
    let mut j = at + if chars[at] == 'b' { 2 } else { 1 };
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    loop {
        if j >= chars.len() {
            return Some(chars.len());
        }
        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
}

/// The name of the function item a code line starts, if it starts one (`pub(crate) async
/// fn name…`, `const fn name…`, `unsafe extern "C" fn name…`).
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        let stripped = [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
        ]
        .iter()
        .find_map(|q| rest.strip_prefix(q))
        .or_else(|| {
            // `extern "C"` with its string blanked: `extern` and spaces.
            rest.strip_prefix("extern ").map(str::trim_start)
        });
        match stripped {
            Some(s) => rest = s.trim_start(),
            None => break,
        }
    }
    let rest = rest.strip_prefix("fn ")?.trim_start();
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Every function with a body in `text`: (name, first line, length in lines), lines
/// counted from 1.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    // Line starts, to turn a character offset into a line number.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(code.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |offset: usize| starts.partition_point(|s| *s <= offset);
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for (index, start) in starts.iter().enumerate() {
        let end = starts.get(index + 1).copied().unwrap_or(code.len());
        let Some(name) = fn_name(&code[*start..end]) else {
            continue;
        };
        // The body opens at the first `{` outside the signature's parentheses and
        // brackets; a `;` there first is a declaration without a body.
        let (mut depth, mut at) = (0i32, *start);
        let open = loop {
            match bytes.get(at) {
                None => break None,
                Some(b'(' | b'[') => depth += 1,
                Some(b')' | b']') => depth -= 1,
                Some(b';') if depth == 0 => break None,
                Some(b'{') if depth == 0 => break Some(at),
                _ => {}
            }
            at += 1;
        };
        let Some(open) = open else {
            continue;
        };
        let mut braces = 0;
        let close = (open..bytes.len()).find(|&i| {
            match bytes[i] {
                b'{' => braces += 1,
                b'}' => braces -= 1,
                _ => {}
            }
            braces == 0
        });
        let close = close.unwrap_or_else(|| panic!("fn {name}: its braces do not match"));
        let first = index + 1;
        found.push((name.to_owned(), first, line_of(close) - first + 1));
    }
    found
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Whether the file `shown` is `at`: that file, or the module `at` names (`at.rs` or a
/// file under `at/`).
fn within(shown: &str, at: &str) -> bool {
    shown == at
        || shown.strip_suffix(".rs") == Some(at)
        || shown
            .strip_prefix(at)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The workspace of the checkout being tested, read at run time (see `import_circles.rs`).
fn workspace() -> PathBuf {
    let package: PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    package.parent().unwrap().to_path_buf()
}

#[test]
fn no_function_in_any_crate_is_over_the_limit() {
    let root = workspace();
    let mut over = Vec::new();
    let mut allowed_seen = Vec::new();
    let mut counted = 0;
    for krate in [
        "mandate-protocol",
        "mandate-storage",
        "mandate-server",
        "mandate-cli",
        "mandate-bench",
    ] {
        for file in rust_files(&root.join(krate).join("src")) {
            let shown = file.strip_prefix(&root).unwrap().display().to_string();
            let text = std::fs::read_to_string(&file).unwrap();
            for (name, line, length) in functions(&text) {
                counted += 1;
                if length <= MAX_LINES {
                    continue;
                }
                let entry = format!("{shown}:{line} fn {name}: {length} lines");
                if let Some((at, _)) = ALLOWED
                    .iter()
                    .find(|(at, n)| *n == name && within(&shown, at))
                {
                    allowed_seen.push((*at, name));
                    eprintln!("allowed for now: {entry}");
                } else {
                    over.push(entry);
                }
            }
        }
    }
    assert!(counted > 1000, "only {counted} functions read");
    // An entry whose function is now short (or gone) is said, not failed: the work it
    // waits for removes it.
    for (file, name) in ALLOWED {
        if !allowed_seen.iter().any(|(f, n)| f == file && n == name) {
            eprintln!(
                "{file} fn {name} is no longer over {MAX_LINES} lines: remove its entry from ALLOWED"
            );
        }
    }
    assert!(
        over.is_empty(),
        "functions over {MAX_LINES} lines (split them, one step a function):\n{}",
        over.join("\n")
    );
}

/// The scanner measures what it should: braces and `fn` inside strings, raw strings,
/// characters and comments are not code, a declaration has no body, and a nested function
/// counts on its own.
#[test]
fn the_scanner_measures_functions() {
    let text = r##"
/// fn not_a_function() {
pub(crate) async fn outer(x: [u8; 2]) -> usize {
    let s = "}{ fn inside_a_string() {";
    let r = r#"}"#;
    let c = '}';
    let l: &'static str = "";
    /* } */
    fn inner() {
    }
    x.len()
}
trait T {
    fn declared(&self) -> [u8; 32];
}
"##;
    let found = functions(text);
    assert_eq!(
        found,
        vec![("outer".to_owned(), 3, 10), ("inner".to_owned(), 9, 2)],
        "{found:?}"
    );
}
