//! No import circles in the workspace: within each crate, the files' `use` paths (and
//! inline `crate::…`/`super::…` paths) point one way. A file that imports another file that
//! (through any chain) imports it back fails this test, naming the circle. So does a loop
//! between folders: within any folder (the crate's `src/` included), its members (each
//! child file, each child folder taken whole, and its own `mod.rs`) import one another one
//! way, so that `state.rs -> http/cache.rs` and `http/auth.rs -> state.rs` is a loop between
//! `state` and `http` even though no file imports itself back. And in `mandate-server`, the
//! layers below HTTP (`services/`, `decision/`) import nothing of HTTP (`http/`, `routes/`,
//! `app.rs`, `state.rs` with its `AppState`) nor of the workers (`workers/`). A folder being
//! rewritten may be exempt from the loop check for now ([`LOOPS_ALLOWED`]).
//!
//! Each file is a node; `crate::a::b::Item` is an arrow to the deepest module file on that
//! path (`src/a/b.rs` or `src/a/b/mod.rs`, else `src/a.rs`), and on through re-exports:
//! when `a/b.rs` holds `pub use c::Item` (or `pub use c::*`), the arrow goes on to `c`'s
//! file, so that a circle hidden behind a `pub use` is found too (the `pub use` itself is
//! no arrow: a module's face re-exporting its children does not depend on them). A path relative to the
//! file's own module (`use child::Item`) counts as `crate::…::child::Item`. Test modules
//! (`#[cfg(test)]` and `*tests.rs` files) are left out: a test may look at its parent.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

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

/// The source without its test modules: everything from the first `#[cfg(test)]` (or
/// `#[cfg(all(test, …))]`) on.
fn without_tests(text: &str) -> &str {
    ["#[cfg(test)]", "#[cfg(all(test"]
        .iter()
        .filter_map(|mark| text.find(mark))
        .min()
        .map_or(text, |i| &text[..i])
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

/// Within the folder `dir` (relative to `src`; empty for `src` itself), the member of that
/// folder `file` belongs to: the child file's or child folder's name, or `mod.rs` for the
/// folder's own module file; `None` for a file outside the folder.
fn member_of(file: &Path, src: &Path, dir: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?.strip_prefix(dir).ok()?;
    let first = relative.components().next()?.as_os_str().to_string_lossy();
    Some(first.strip_suffix(".rs").unwrap_or(&first).to_owned())
}

/// The folders of a crate's `src/` (relative to it; `src/` itself is the empty path).
fn folders(src: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                found.push(path.strip_prefix(src).unwrap().to_path_buf());
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The loops between the members of the crate's folders whose files import as `arrows`:
/// for each folder with one, the loop and, for each of its steps, a file import that makes
/// it (`http/auth.rs -> state.rs`).
fn folder_loops(src: &Path, arrows: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<String> {
    let mut found = Vec::new();
    for dir in folders(src).into_iter().filter(|d| !loop_allowed(src, d)) {
        let mut members: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for (from, targets) in arrows {
            let Some(from) = member_of(from, src, &dir) else {
                continue;
            };
            let entry = members.entry(PathBuf::from(&from)).or_default();
            for to in targets.iter().filter_map(|t| member_of(t, src, &dir)) {
                if to != from {
                    entry.insert(PathBuf::from(to));
                }
            }
        }
        let Some(circle) = circle(&members) else {
            continue;
        };
        let steps: Vec<String> = circle
            .iter()
            .zip(circle.iter().cycle().skip(1))
            .map(|(a, b)| {
                let witness = arrows.iter().find_map(|(from, targets)| {
                    let to = targets
                        .iter()
                        .find(|t| member_of(t, src, &dir).is_some_and(|m| Path::new(&m) == b))?;
                    (member_of(from, src, &dir).is_some_and(|m| Path::new(&m) == a)).then(|| {
                        let shown = |p: &Path| p.strip_prefix(src).unwrap().display().to_string();
                        format!("{} -> {}", shown(from), shown(to))
                    })
                });
                format!(
                    "{} -> {} ({})",
                    a.display(),
                    b.display(),
                    witness.unwrap_or_default()
                )
            })
            .collect();
        found.push(format!("src/{}: {}", dir.display(), steps.join(", ")));
    }
    found
}

/// Folders (from the workspace root) whose members' loops are not checked for now, with
/// the folders under them: each is being rewritten by work under way, which removes its
/// entry. A loop between such a folder and its siblings is still found.
const LOOPS_ALLOWED: &[&str] = &[];

/// Whether loops between the members of the folder `dir` of the crate at `src` are allowed
/// for now ([`LOOPS_ALLOWED`]).
fn loop_allowed(src: &Path, dir: &Path) -> bool {
    let Ok(folder) = src
        .join(dir)
        .strip_prefix(workspace())
        .map(Path::to_path_buf)
    else {
        return false;
    };
    LOOPS_ALLOWED.iter().any(|f| folder.starts_with(f))
}

/// What `mandate-server`'s layers below HTTP must not import: (the layer's folder, the
/// members of `src/` it must not reach).
const BELOW_HTTP: &[(&str, &[&str])] = &[
    ("services", &["http", "routes", "app", "state", "workers"]),
    (
        "decision",
        &["http", "routes", "app", "state", "workers", "services"],
    ),
];

/// Every import of a layer below HTTP that reaches above it: (file, the file it imports).
fn above_http(src: &Path, arrows: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<String> {
    let mut found = Vec::new();
    for (from, targets) in arrows {
        let Some(layer) = member_of(from, src, Path::new("")) else {
            continue;
        };
        let Some((_, forbidden)) = BELOW_HTTP.iter().find(|(l, _)| *l == layer) else {
            continue;
        };
        for to in targets {
            if member_of(to, src, Path::new("")).is_some_and(|m| forbidden.contains(&m.as_str())) {
                found.push(format!(
                    "{} -> {}",
                    from.strip_prefix(src).unwrap().display(),
                    to.strip_prefix(src).unwrap().display()
                ));
            }
        }
        // `AppState` named however it is reached (a re-export elsewhere, a full path).
        let text = std::fs::read_to_string(from).unwrap();
        if without_tests(&text).contains("AppState") {
            found.push(format!(
                "{} names AppState",
                from.strip_prefix(src).unwrap().display()
            ));
        }
    }
    found
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
        "mandate-protocol",
        "mandate-storage",
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

#[test]
fn no_folder_of_the_workspace_has_a_loop_between_its_members() {
    let mut found = Vec::new();
    for krate in [
        "mandate-protocol",
        "mandate-storage",
        "mandate-server",
        "mandate-cli",
        "mandate-bench",
    ] {
        let src = workspace().join(krate).join("src");
        for each in folder_loops(&src, &graph(&src)) {
            found.push(format!("{krate} {each}"));
        }
    }
    assert!(
        found.is_empty(),
        "members of a folder import one another in a loop (each step with an import that makes it):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_server_layers_below_http_import_nothing_above_it() {
    let src = workspace().join("mandate-server").join("src");
    let found = above_http(&src, &graph(&src));
    assert!(
        found.is_empty(),
        "services/ and decision/ must know no HTTP (nor AppState, nor the workers): {}",
        found.join(", ")
    );
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

/// A loop between folders that no file closes is found: `state.rs` imports `http/cache.rs`
/// and `http/auth.rs` imports `state.rs` (no file imports itself back); and a layer below
/// HTTP that names `AppState` or imports `http/` is found.
#[test]
fn a_loop_between_folders_and_a_service_above_http_are_found() {
    let dir = std::env::temp_dir().join(format!("import-folders-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("http")).unwrap();
    std::fs::create_dir_all(src.join("services")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod http;\npub mod services;\npub mod state;\n",
    )
    .unwrap();
    std::fs::write(src.join("http/mod.rs"), "pub mod auth;\npub mod cache;\n").unwrap();
    std::fs::write(src.join("http/cache.rs"), "pub struct KeyCache;\n").unwrap();
    std::fs::write(src.join("http/auth.rs"), "pub fn authenticate() {}\n").unwrap();
    std::fs::write(
        src.join("state.rs"),
        "use crate::http::cache::KeyCache;\npub struct AppState(KeyCache);\n",
    )
    .unwrap();
    std::fs::write(src.join("services/mod.rs"), "pub fn create() {}\n").unwrap();
    let arrows = graph(&src);
    assert!(folder_loops(&src, &arrows).is_empty(), "{arrows:?}");
    assert!(above_http(&src, &arrows).is_empty(), "{arrows:?}");
    std::fs::write(
        src.join("http/auth.rs"),
        "use crate::state::AppState;\npub fn authenticate(_: &AppState) {}\n",
    )
    .unwrap();
    let arrows = graph(&src);
    assert!(
        circle(&arrows).is_none(),
        "no file closes the loop: {arrows:?}"
    );
    let loops = folder_loops(&src, &arrows);
    assert_eq!(loops.len(), 1, "{loops:?}");
    assert!(
        loops[0].contains("http/auth.rs -> state.rs")
            && loops[0].contains("state.rs -> http/cache.rs"),
        "{loops:?}"
    );
    std::fs::write(
        src.join("services/mod.rs"),
        "pub fn create(state: &crate::state::AppState) -> crate::http::cache::KeyCache { todo!() }\n",
    )
    .unwrap();
    let found = above_http(&src, &graph(&src));
    assert_eq!(found.len(), 3, "{found:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
