//! No import circles in the workspace: within each crate, the files' `use` paths (and
//! inline `crate::…`/`super::…` paths) point one way. A file that imports another file that
//! (through any chain) imports it back fails this test, naming the circle.
//!
//! Each file is a node; `crate::a::b::Item` is an arrow to the deepest module file on that
//! path (`src/a/b.rs` or `src/a/b/mod.rs`, else `src/a.rs`), and on through re-exports:
//! when `a/b.rs` holds `pub use c::Item` (or `pub use c::*`), the arrow goes on to `c`'s
//! file, so that a circle hidden behind a `pub use` is found too (the `pub use` itself is
//! no arrow: a module's face re-exporting its children does not depend on them). A path relative to the
//! file's own module (`use child::Item`) counts as `crate::…::child::Item`. Test modules
//! (`#[cfg(test)]` and `*tests.rs` files) are left out: a test may look at its parent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's module files by module path (`["http", "error"]` for `src/http/error.rs`).
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".rs") else {
                continue;
            };
            if stem.ends_with("tests") {
                continue;
            }
            let relative = path.parent().unwrap().strip_prefix(src).unwrap();
            let mut module: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if !matches!(stem, "mod" | "lib" | "main") {
                module.push(stem.to_owned());
            }
            found.insert(module, path);
        }
    }
    found
}

/// The source without its test modules: everything from the first `#[cfg(test)]` on.
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

/// The paths a `use` tree names, expanded (`a::{b, c::d}` gives `a::b` and `a::c::d`).
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap().trim().to_owned()];
    };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap()];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| match p.as_str() {
            "self" => prefix.to_owned(),
            _ => format!("{prefix}::{p}"),
        })
        .collect()
}

/// Every module path a file's code refers to, made absolute (from the crate root), and the
/// paths it re-exports (`pub use`, made absolute the same way). A path relative to the
/// file's module is written under it, to be checked against the crate's modules.
fn references_and_exports(
    text: &str,
    module: &[String],
    is_mod_file: bool,
) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let code: String = without_tests(text)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut paths = Vec::new();
    let mut exported = Vec::new();
    // `use` statements (a line that starts one, up to its `;`), brace groups expanded.
    let mut statement: Option<(String, bool)> = None;
    for line in code.lines() {
        let trimmed = line.trim_start();
        let opening = [
            ("use ", false),
            ("pub use ", true),
            ("pub(crate) use ", true),
            ("pub(super) use ", true),
        ]
        .iter()
        .find_map(|(start, public)| trimmed.strip_prefix(start).map(|rest| (rest, *public)));
        let (text, public) = match (&mut statement, opening) {
            (Some((open, public)), _) => {
                open.push_str(trimmed);
                (open.clone(), *public)
            }
            (None, Some((rest, public))) => (rest.to_owned(), public),
            (None, None) => continue,
        };
        match text.find(';') {
            Some(end) => {
                let expanded = expand(&text[..end]);
                // A re-export is no arrow of its own: whoever names the item through it
                // is given an arrow to where the item is (see `through_reexports`).
                if public {
                    exported.extend(expanded);
                } else {
                    paths.extend(expanded);
                }
                statement = None;
            }
            None => statement = Some((text, public)),
        }
    }
    // Inline paths: `crate::a::b` and `super::a` anywhere in the code.
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            let end = code[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            paths.push(code[at..end].trim_end_matches(':').to_owned());
            from = end;
        }
    }
    // The module that `super` names: a `mod.rs` file is its directory's module.
    let parent: Vec<String> = match module.split_last() {
        Some((_, parent)) if !is_mod_file => parent.to_vec(),
        _ if is_mod_file && !module.is_empty() => module[..module.len() - 1].to_vec(),
        _ => Vec::new(),
    };
    let absolute = |p: String| -> Option<Vec<String>> {
        let segments: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
        match segments.split_first()? {
            (&"crate", rest) => Some(rest.iter().map(|s| (*s).to_owned()).collect()),
            (&"super", rest) => {
                let mut full = parent.clone();
                full.extend(rest.iter().map(|s| (*s).to_owned()));
                Some(full)
            }
            (&"self", rest) => {
                let mut full = if is_mod_file {
                    module.to_vec()
                } else {
                    parent.clone()
                };
                full.extend(rest.iter().map(|s| (*s).to_owned()));
                Some(full)
            }
            // Relative to the file's module (a child module, or another crate: the graph
            // keeps it only if the crate has that child).
            _ => {
                let mut full = module.to_vec();
                full.push(RELATIVE.to_owned());
                full.extend(segments.iter().map(|s| (*s).to_owned()));
                Some(full)
            }
        }
    };
    (
        paths.into_iter().filter_map(absolute).collect(),
        exported.into_iter().filter_map(absolute).collect(),
    )
}

/// Marks where a relative path starts in a path made absolute by [`references_and_exports`].
const RELATIVE: &str = "<relative>";

/// `path` with its relative marker resolved: the path under the module if that module has
/// the child the path names first; `None` for another crate's path.
fn resolve_relative(
    path: &[String],
    modules: &BTreeMap<Vec<String>, PathBuf>,
) -> Option<Vec<String>> {
    let Some(at) = path.iter().position(|s| s == RELATIVE) else {
        return Some(path.to_vec());
    };
    let mut full = path[..at].to_vec();
    full.extend(path[at + 1..].iter().cloned());
    modules.contains_key(&full[..=at]).then_some(full)
}

/// The crate's import graph: file to the files it refers to, through re-exports.
fn graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let modules = modules(src);
    // What each module re-exports: (module, name) to the path it names; "*" for a glob.
    let mut reexports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    let mut references = Vec::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let is_mod_file = file.file_name().is_some_and(|n| n == "mod.rs");
        let (paths, exported) = references_and_exports(&text, module, is_mod_file);
        for path in exported
            .iter()
            .filter_map(|p| resolve_relative(p, &modules))
        {
            if let Some(name) = path.last() {
                reexports.insert((module.clone(), name.clone()), path.clone());
            }
        }
        references.push((file, paths));
    }
    let mut arrows: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (file, paths) in references {
        let targets = arrows.entry(file.clone()).or_default();
        for path in paths.iter().filter_map(|p| resolve_relative(p, &modules)) {
            let target = through_reexports(&path, &modules, &reexports)
                .filter(|t| t != file && !t.ends_with("lib.rs") && !t.ends_with("main.rs"));
            if let Some(target) = target {
                targets.insert(target);
            }
        }
    }
    arrows
}

/// The module file `path` names: the deepest module file on it, followed on through the
/// re-exports of that module (a bounded number of hops, in case two re-export each other).
fn through_reexports(
    path: &[String],
    modules: &BTreeMap<Vec<String>, PathBuf>,
    reexports: &BTreeMap<(Vec<String>, String), Vec<String>>,
) -> Option<PathBuf> {
    let mut path = path.to_vec();
    for _ in 0..8 {
        let depth = (0..=path.len())
            .rev()
            .find(|n| modules.contains_key(&path[..*n]))?;
        let module = path[..depth].to_vec();
        let next = path.get(depth).and_then(|name| {
            reexports
                .get(&(module.clone(), name.clone()))
                .map(|to| {
                    let mut to = to.clone();
                    to.extend(path[depth + 1..].iter().cloned());
                    to
                })
                .or_else(|| {
                    // A glob re-export: the name is looked for in the module it names.
                    let glob = reexports.get(&(module.clone(), "*".to_owned()))?;
                    let mut to = glob[..glob.len() - 1].to_vec();
                    to.extend(path[depth..].iter().cloned());
                    modules
                        .keys()
                        .any(|m| to.starts_with(m) && m.len() > module.len())
                        .then_some(to)
                })
        });
        match next {
            Some(to) if to != path => path = to,
            _ => return modules.get(&module).cloned(),
        }
    }
    let depth = (0..=path.len())
        .rev()
        .find(|n| modules.contains_key(&path[..*n]))?;
    modules.get(&path[..depth]).cloned()
}

/// A circle of `arrows`, if there is one.
fn circle(arrows: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Option<Vec<PathBuf>> {
    // 0: not seen, 1: on the current path, 2: done.
    fn visit(
        node: &PathBuf,
        arrows: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        state: &mut BTreeMap<PathBuf, u8>,
        path: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        state.insert(node.clone(), 1);
        path.push(node.clone());
        for next in arrows.get(node).into_iter().flatten() {
            match state.get(next).copied().unwrap_or(0) {
                1 => {
                    let from = path.iter().position(|p| p == next).unwrap();
                    return Some(path[from..].to_vec());
                }
                0 => {
                    if let Some(found) = visit(next, arrows, state, path) {
                        return Some(found);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in arrows.keys() {
        if state.get(node).copied().unwrap_or(0) == 0
            && let Some(found) = visit(node, arrows, &mut state, &mut Vec::new())
        {
            return Some(found);
        }
    }
    None
}

/// The workspace of the checkout being tested, read at run time (cargo says which package
/// it runs), not the build's: with a shared target directory that may be another checkout.
fn workspace() -> PathBuf {
    let package: PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    package.parent().unwrap().to_path_buf()
}

#[test]
fn no_crate_of_the_workspace_has_an_import_circle() {
    for krate in [
        "mandate-core",
        "mandate-server",
        "mandate-cli",
        "mandate-bench",
    ] {
        let src = workspace().join(krate).join("src");
        let arrows = graph(&src);
        assert!(
            arrows.len() > 5,
            "{krate}: only {} files read",
            arrows.len()
        );
        if let Some(found) = circle(&arrows) {
            let names: Vec<String> = found
                .iter()
                .map(|p| p.strip_prefix(&src).unwrap().display().to_string())
                .collect();
            panic!("{krate} has an import circle: {}", names.join(" -> "));
        }
    }
}

/// The check sees a circle where there is one, through `use` groups, `super::` and inline
/// paths alike.
#[test]
fn a_circle_is_found() {
    let dir = std::env::temp_dir().join(format!("import-circles-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod c;\n").unwrap();
    std::fs::write(
        src.join("a/mod.rs"),
        "pub mod b;\nuse crate::{c::{Thing, other}};\n",
    )
    .unwrap();
    std::fs::write(src.join("a/b.rs"), "pub fn f() { super::g(); }\n").unwrap();
    std::fs::write(
        src.join("c.rs"),
        "pub struct Thing;\n#[cfg(test)]\nmod tests { use crate::a::b; }\n",
    )
    .unwrap();
    let arrows = graph(&src);
    assert!(circle(&arrows).is_none(), "{arrows:?}");
    // c -> a::b -> a -> c.
    std::fs::write(
        src.join("c.rs"),
        "pub struct Thing;\nfn h() { crate::a::b::f() }\n",
    )
    .unwrap();
    let found = circle(&graph(&src)).expect("the circle c -> a/b -> a -> c");
    assert_eq!(found.len(), 3, "{found:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A circle behind a re-export is found: `a.rs` names `crate::w::Thing`, which `w/mod.rs`
/// re-exports from `w/t.rs`, which imports `a` back; likewise through a glob.
#[test]
fn a_circle_through_a_reexport_is_found() {
    let dir = std::env::temp_dir().join(format!("import-circles-re-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("w")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod w;\n").unwrap();
    std::fs::write(
        src.join("w/t.rs"),
        "use crate::a::Plain;\npub struct Thing;\n",
    )
    .unwrap();
    std::fs::write(src.join("a.rs"), "pub struct Plain;\n").unwrap();
    std::fs::write(src.join("w/mod.rs"), "pub mod t;\npub use t::Thing;\n").unwrap();
    assert!(circle(&graph(&src)).is_none());
    std::fs::write(
        src.join("a.rs"),
        "pub struct Plain;\nfn f() -> crate::w::Thing { crate::w::Thing }\n",
    )
    .unwrap();
    let found = circle(&graph(&src)).expect("the circle a -> w/t -> a");
    assert_eq!(found.len(), 2, "{found:?}");
    std::fs::write(src.join("w/mod.rs"), "pub mod t;\npub use t::*;\n").unwrap();
    let found = circle(&graph(&src)).expect("the circle a -> w/t -> a, through a glob");
    assert_eq!(found.len(), 2, "{found:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
