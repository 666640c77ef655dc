//! The README's steps and the docs' examples, run as written against the real binaries,
//! and checked against what the page shows they print.
//!
//! A page marks a fenced `sh` block runnable with a line `<!-- runnable -->` just before
//! it, or `<!-- runnable: server -->` for the block that starts the server (it keeps
//! running: the test runs it in the background and goes on once the demo has written
//! `mandate-demo.env`). A page without a server block gets `mandate-server serve --demo`
//! started for it the same way. The other blocks of a page run in order, in one `bash`
//! with `set -euo pipefail`, in a fresh directory with HOME and the XDG directories inside
//! it: a failing command fails the test with the script's output. Each page runs on a demo
//! of its own.
//!
//! **What a block shows.** The fenced block right after a runnable block (blank lines
//! aside; a plain fence, `text` or `json`) is what it prints, stdout and stderr together, and the test fails
//! when it prints something else; a runnable block with no such block after it must print
//! nothing. The comparison ([`check_shown`]) ignores whitespace (line breaks and column
//! widths are the page's to choose), takes `…` as "anything here" (what the page trims),
//! and reads values that differ on every run as equal whatever their value: ids and keys
//! (`dec_…`, `sk_sandbox_…`), tokens (`eyJ…`), cursors, timestamps, Unix times, local
//! ports and policy versions ([`normalize`]).
//!
//! **The checkout as found.** The blocks run in a git repository holding the repository's
//! `.gitignore`, as a reader runs them in a clone: after them, `git add -A` must find
//! nothing to add (every file a page writes is removed by the page or ignored), and a file
//! that holds an API key must be readable by its owner only.
//!
//! **The demo as found.** After its blocks, a page must leave the demo as it found it:
//! the sandbox's enforcement mode and the demo agent's mandate (id and status) are read
//! before and after, so that a reader who runs one page after another on one demo gets
//! what each page shows (a page that switches to observe must switch back).
//!
//! What the test provides, and nothing else: `cargo build --release -p …` links the
//! binaries this test run built into `./target/release/` instead of building again (it is
//! the only `cargo` command a runnable block may use); the listeners' addresses are
//! `127.0.0.1:0` through `MANDATE_API_ADDR` and `MANDATE_PUBLIC_ADDR`, so that pages run
//! side by side (the demo writes the bound addresses to `mandate-demo.env`); `python3` is
//! `MANDATE_THIRD_PARTY_PYTHON` when the test is given one (CI's, with the protocols'
//! libraries: docs/protocols.md's AP2 example needs `sd-jwt` and `jwcrypto`); no other
//! `MANDATE_*` variable of the test's environment reaches the blocks.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::Value;

/// The pages with runnable blocks, each run by a test below.
const PAGES: [&str; 6] = [
    "README.md",
    "docs/api.md",
    "docs/cli.md",
    "docs/mcp.md",
    "docs/protocols.md",
    "docs/webhooks.md",
];

/// A runnable block: whether it starts the server, its text, its line in the page, and
/// what the page shows it prints.
#[derive(Debug)]
struct Block {
    server: bool,
    text: String,
    line: usize,
    shows: Option<Shown>,
}

/// The output block shown under a runnable block, and its line.
#[derive(Debug)]
struct Shown {
    text: String,
    line: usize,
}

/// The fenced block that starts at `lines[at]`, if one does and its fence is one of
/// `fences`: its text and the index of its closing fence.
fn fenced(lines: &[&str], at: usize, fences: &[&str]) -> Option<(String, usize)> {
    let opening = lines.get(at)?.trim();
    if !fences.contains(&opening) {
        return None;
    }
    let end = (at + 1..lines.len())
        .find(|&j| lines[j].trim() == "```")
        .unwrap_or_else(|| panic!("unclosed block at line {}", at + 1));
    Some((lines[at + 1..end].join("\n"), end))
}

/// The runnable blocks of a page, in order, each with what the page shows under it.
fn blocks(page: &str) -> Vec<Block> {
    let lines: Vec<&str> = page.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let marker = lines[i].trim();
        let server = marker == "<!-- runnable: server -->";
        if (server || marker == "<!-- runnable -->")
            && let Some((text, end)) = fenced(&lines, i + 1, &["```sh"])
        {
            let next = (end + 1..lines.len())
                .find(|&j| !lines[j].trim().is_empty())
                .unwrap_or(lines.len());
            let shows = fenced(&lines, next, &["```", "```text", "```json"]);
            out.push(Block {
                server,
                text,
                line: i + 2,
                shows: shows.as_ref().map(|(text, _)| Shown {
                    text: text.clone(),
                    line: end + 2,
                }),
            });
            i = shows.map_or(end, |(_, shown_end)| shown_end);
        }
        i += 1;
    }
    out
}

/// Values that differ on every run, each replaced by one placeholder wherever it stands,
/// in the page (where `…` may stand for any part of it) and in the output alike.
static VOLATILE: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        // Compact JWS (verdict tokens), whole or trimmed.
        (r"eyJ[A-Za-z0-9_\-.…]*", "⟨token⟩"),
        (r"\b(sk|ak)_(sandbox|live)_[0-9a-z…]+", "${1}_${2}_⟨key⟩"),
        (
            r"\b(dec|mnd|rev|evt|whk|esc|req|org|n|idem|key)_(?:[0-9a-z]{12,}|[0-9a-z]*…[0-9a-z…]*)",
            "${1}_⟨id⟩",
        ),
        (r"\bcur_[A-Za-z0-9_\-.…]+", "cur_⟨cursor⟩"),
        (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z", "⟨time⟩"),
        (r"\b1\d{9}\b", "⟨unix time⟩"),
        (r"127\.0\.0\.1:\d+", "127.0.0.1:⟨port⟩"),
        (r"\bpol_\d{4}-\d{2}-\d{2}\.\d+", "pol_⟨version⟩"),
    ]
    .into_iter()
    .map(|(pattern, with)| (Regex::new(pattern).unwrap(), with))
    .collect()
});

/// `text` with its volatile values replaced ([`VOLATILE`]) and its whitespace removed.
fn normalize(text: &str) -> String {
    let mut out = text.to_owned();
    for (pattern, with) in VOLATILE.iter() {
        out = pattern.replace_all(&out, *with).into_owned();
    }
    out.retain(|c| !c.is_whitespace());
    out
}

/// `text[from..to]`, both ends moved back to a character's start and `to` within `text`.
fn slice(text: &str, from: usize, to: usize) -> &str {
    let back = |mut at: usize| {
        at = at.min(text.len());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    &text[back(from)..back(to)]
}

/// Whether `printed` is what `shown` shows: equal once normalized, `…` in `shown`
/// standing for anything. `Err` says where they part.
fn check_shown(shown: &str, printed: &str) -> Result<(), String> {
    let (pattern, text) = (normalize(shown), normalize(printed));
    let pieces: Vec<&str> = pattern.split('…').collect();
    let around = |at: usize| format!("{:?}", slice(&text, at, at + 80));
    let (first, rest) = pieces.split_first().unwrap_or((&"", &[]));
    if !text.starts_with(first) {
        let same = first
            .char_indices()
            .zip(text.chars())
            .find(|((_, a), b)| a != b)
            .map_or(first.len().min(text.len()), |((at, _), _)| at);
        return Err(format!(
            "it differs here: printed {}, shown {:?}",
            around(same),
            slice(first, same, same + 80)
        ));
    }
    let mut at = first.len();
    let Some((last, middle)) = rest.split_last() else {
        return if at == text.len() {
            Ok(())
        } else {
            Err(format!("it prints more: {}", around(at)))
        };
    };
    for piece in middle {
        match text[at..].find(piece) {
            Some(found) => at += found + piece.len(),
            None => {
                return Err(format!(
                    "{piece:?} (shown) is not printed after {}",
                    around(at.saturating_sub(40))
                ));
            }
        }
    }
    if text.len() >= at + last.len() && text.ends_with(last) {
        Ok(())
    } else {
        let tail = text.len().saturating_sub(last.len().max(80));
        Err(format!(
            "it does not end with {last:?} (shown) but with {:?}",
            slice(&text, tail, text.len())
        ))
    }
}

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .parent()
    .unwrap()
    .to_path_buf()
}

/// The `mandate-server` binary of this build: beside `mandate` when the workspace's tests
/// built it (as `cargo test --workspace` does), else built now.
fn server_binary() -> PathBuf {
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_mandate"));
    let server = cli.with_file_name(format!("mandate-server{}", std::env::consts::EXE_SUFFIX));
    if !server.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "mandate-server", "--bin", "mandate-server"])
            .current_dir(root())
            .status()
            .unwrap();
        assert!(status.success(), "cannot build mandate-server");
    }
    server
}

/// The Python a page's blocks run as `python3`: the test's third-party Python if any.
fn third_party_python() -> Option<String> {
    std::env::var("MANDATE_THIRD_PARTY_PYTHON").ok()
}

/// What every script starts with: strict mode, `cargo build --release` as the link to
/// the binaries already built, and `python3` as the test's third-party Python if any.
fn prelude() -> String {
    prelude_with(third_party_python().as_deref())
}

/// [`prelude`] with `python3` as `python`, when given.
fn prelude_with(python: Option<&str>) -> String {
    let cli = env!("CARGO_BIN_EXE_mandate");
    let server = server_binary();
    let python = match python {
        Some(path) => format!("python3() {{ '{path}' \"$@\"; }}\n"),
        None => String::new(),
    };
    python
        + &format!(
            r#"set -euo pipefail
cargo() {{
  case "$*" in
    "build --release -p "*) ;;
    *) echo "cargo $*: the docs test runs only 'cargo build --release -p …'" >&2; return 1 ;;
  esac
  mkdir -p target/release
  ln -sf '{cli}' target/release/mandate
  ln -sf '{server}' target/release/mandate-server
}}
"#,
            server = server.display()
        )
}

/// `bash -c script` in `dir/work`, in a process group of its own, with the test's
/// environment but HOME and XDG in `dir` and no `MANDATE_*` but the listeners' addresses.
fn bash(dir: &Path, script: &str, output: Stdio, errors: Stdio) -> Child {
    let mut command = Command::new("bash");
    command.arg("-c").arg(script).current_dir(dir.join("work"));
    for (name, _) in std::env::vars() {
        if name.starts_with("MANDATE_") || name.starts_with("XDG_") {
            command.env_remove(name);
        }
    }
    command
        .env("HOME", dir.join("home"))
        .env("XDG_CONFIG_HOME", dir.join("home/.config"))
        .env("XDG_CACHE_HOME", dir.join("home/.cache"))
        .env("MANDATE_API_ADDR", "127.0.0.1:0")
        .env("MANDATE_PUBLIC_ADDR", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(errors);
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command.spawn().unwrap()
}

/// Stops a process group started by [`bash`].
fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", child.id())])
        .status();
    let _ = child.wait();
}

/// A page's demo server, running in the background in `dir/work`.
struct Demo {
    server: Child,
    /// `MANDATE_BASE_URL` and `MANDATE_API_KEY` of `mandate-demo.env`.
    base_url: String,
    org_key: String,
}

impl Demo {
    /// Runs `server_script` in `dir` and waits for the demo's session file.
    fn start(dir: &Path, server_script: &str, page: &str) -> Demo {
        let log = dir.join("server.log");
        let mut server = bash(
            dir,
            server_script,
            Stdio::from(std::fs::File::create(&log).unwrap()),
            Stdio::from(std::fs::File::create(dir.join("server.err")).unwrap()),
        );
        let session = dir.join("work/mandate-demo.env");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !session.exists() {
            if let Some(status) = server.try_wait().unwrap() {
                panic!(
                    "{page}: the server block exited ({status}) before the demo was ready:\n{}{}",
                    std::fs::read_to_string(&log).unwrap_or_default(),
                    std::fs::read_to_string(dir.join("server.err")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "{page}: no demo within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        // The file is written before the session is printed: wait for the printing to end.
        std::thread::sleep(Duration::from_millis(200));
        let text = std::fs::read_to_string(&session).unwrap();
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("no {name} in {text}"))
                .to_owned()
        };
        Demo {
            base_url: value("MANDATE_BASE_URL"),
            org_key: value("MANDATE_API_KEY"),
            server,
        }
    }

    fn get(&self, path: &str) -> Value {
        reqwest::blocking::Client::new()
            .get(format!("{}{path}", self.base_url))
            .bearer_auth(&self.org_key)
            .send()
            .and_then(|r| r.json())
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// What a page must leave as it found it: the sandbox's enforcement mode, and the demo
    /// agent's current mandate and its status.
    fn state(&self) -> String {
        let mode = self.get("/enforcement")["mode"].clone();
        let mandate = &self.get("/mandates?agent=agt_shopper&limit=1")["data"][0];
        format!(
            "enforcement mode {mode}, agt_shopper's mandate {} ({})",
            mandate["id"], mandate["status"]
        )
    }
}

/// The line that separates one block's output from the next one's in the script's output.
fn separator(n: usize) -> String {
    format!("@@mandate-docs-block-{n}@@")
}

/// What each block printed, from the script's output (the blocks that ran).
fn outputs(said: &str, count: usize) -> Vec<String> {
    let mut out = Vec::new();
    for n in 0..count {
        let Some(start) = said.find(&separator(n)) else {
            break;
        };
        let start = start + separator(n).len();
        let end = said[start..]
            .find(&separator(n + 1))
            .map_or(said.len(), |end| start + end);
        out.push(said[start..end].trim().to_owned());
    }
    out
}

/// Runs the runnable blocks of `page` (a path from the workspace's root) on a demo of its
/// own; panics with every block that failed, or printed something else than the page
/// shows, or with the demo's state changed.
fn run_page(page: &str) {
    run_page_with(page, third_party_python().as_deref());
}

/// [`run_page`] with `python3` as `python`, when given.
fn run_page_with(page: &str, python: Option<&str>) {
    let prelude = || prelude_with(python);
    let text = std::fs::read_to_string(root().join(page)).unwrap();
    let blocks = blocks(&text);
    assert!(!blocks.is_empty(), "{page} marks no block runnable");
    let dir = tempfile::tempdir().unwrap();
    for sub in ["work", "home"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    let work = dir.path().join("work");
    std::fs::copy(root().join(".gitignore"), work.join(".gitignore")).unwrap();
    git(&work, dir.path(), &["init", "-q"]);
    let server_script = match blocks.iter().find(|b| b.server) {
        Some(block) => format!("{}{}", prelude(), block.text),
        // As the README starts it.
        None => format!(
            "{}cargo build --release -p mandate-server -p mandate-cli\n\
             exec ./target/release/mandate-server serve --demo",
            prelude()
        ),
    };
    let mut demo = Demo::start(dir.path(), &server_script, page);
    let found = demo.state();

    let runnable: Vec<&Block> = blocks.iter().filter(|b| !b.server).collect();
    let mut script = prelude();
    for (n, block) in runnable.iter().enumerate() {
        script.push_str(&format!(
            "printf '\\n{}\\n'\n# {page}:{}\n{}\n",
            separator(n),
            block.line,
            block.text
        ));
    }
    script.push_str(&format!("printf '\\n{}\\n'\n", separator(runnable.len())));
    let out = dir.path().join("script.out");
    let file = std::fs::File::create(&out).unwrap();
    let mut child = bash(
        dir.path(),
        &script,
        Stdio::from(file.try_clone().unwrap()),
        Stdio::from(file),
    );
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            stop(&mut child);
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let left = status.is_some_and(|s| s.success()).then(|| demo.state());
    stop(&mut demo.server);
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()),
        "{page}: the runnable blocks failed ({status:?})\n--- script\n{script}\n--- output\n{said}"
    );

    let mut wrong = Vec::new();
    for (block, printed) in runnable.iter().zip(outputs(&said, runnable.len())) {
        let checked = match &block.shows {
            Some(shown) => check_shown(&shown.text, &printed)
                .map_err(|e| format!("{e}\n(shown at {page}:{})", shown.line)),
            None if printed.is_empty() => Ok(()),
            None => Err("it prints this, and the page shows no output under it".to_owned()),
        };
        if let Err(why) = checked {
            wrong.push(format!(
                "{page}:{}: the block prints something else than the page shows: {why}\n--- printed\n{printed}\n",
                block.line
            ));
        }
    }
    wrong.extend(left_in_the_checkout(page, &work, dir.path()));
    if left.as_deref() != Some(found.as_str()) {
        wrong.push(format!(
            "{page}: its blocks leave the demo with {}, not as they found it ({found}): a reader who goes on to another page on the same demo would not get what it shows",
            left.unwrap_or_default()
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `git args` in `work` (HOME in `dir/home`); its stdout.
fn git(work: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(work)
        .env("HOME", dir.join("home"))
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// What a page's blocks left in the checkout that they should not have: files `git add -A`
/// would add (neither removed nor ignored), and files holding an API key that others may
/// read (there or in the reader's home).
fn left_in_the_checkout(page: &str, work: &Path, dir: &Path) -> Vec<String> {
    let mut wrong = Vec::new();
    let added = git(work, dir, &["add", "-A", "--dry-run"]);
    let added: Vec<&str> = added.lines().filter(|l| *l != "add '.gitignore'").collect();
    if !added.is_empty() {
        wrong.push(format!(
            "{page}: its blocks leave files that `git add -A` would commit in a clone; remove them in the page or list them in .gitignore:\n{}",
            added.join("\n")
        ));
    }
    let key = Regex::new(r"\b(sk|ak)_(sandbox|live)_[0-9a-z]{20,}").unwrap();
    // The checkout and the reader's home (the CLI's profiles and caches).
    let mut dirs = vec![work.to_path_buf(), dir.join("home")];
    while let Some(at) = dirs.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap();
            let (path, kind) = (entry.path(), entry.file_type().unwrap());
            if kind.is_dir() && entry.file_name() != ".git" {
                dirs.push(path);
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap_or_default();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
                if mode & 0o077 != 0 && key.is_match(&String::from_utf8_lossy(&bytes)) {
                    wrong.push(format!(
                        "{page}: {} holds an API key and others may read it (mode {mode:o}): write it owner-only (umask 077)",
                        path.strip_prefix(dir).unwrap().display()
                    ));
                }
            }
        }
    }
    wrong
}

#[test]
fn the_blocks_are_found_with_their_markers_and_what_they_show() {
    let page = "text\n<!-- runnable -->\n```sh\necho one\n```\n```\none\n```\n```sh\nnot this\n```\n\
                <!-- runnable: server -->\n```sh\nserve\n```\n<!-- runnable -->\nno fence\n\
                <!-- runnable -->\n```sh\ntrue\n```\n\n```json\n{}\n```\n\
                <!-- runnable -->\n```sh\nfalse\n```\ntext\n```\nnot shown\n```\n";
    let found = blocks(page);
    assert_eq!(found.len(), 4, "{found:?}");
    assert!(!found[0].server && found[0].text == "echo one" && found[0].line == 3);
    let shown = found[0].shows.as_ref().unwrap();
    assert_eq!((shown.text.as_str(), shown.line), ("one", 6));
    assert!(found[1].server && found[1].text == "serve" && found[1].shows.is_none());
    // Output shown right under its block, blank lines aside.
    assert_eq!(found[2].shows.as_ref().unwrap().text, "{}");
    // Not after a paragraph.
    assert!(found[3].shows.is_none());
}

/// The comparison: whitespace aside, `…` for anything, volatile values equal whatever
/// they are, and anything else shown must be what is printed.
#[test]
fn a_block_that_prints_something_else_than_shown_fails() {
    let printed = r#"{"created_at":"2026-11-25T12:00:01Z","id":"dec_3xhebwzwtd6tyq39rye811w4s8","iss":"http://127.0.0.1:41234","nonce":"n_hmpzrjxb8q7ttck80s2fyxt534","reason":null,"verdict":"allow","verdict_token":"eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJ4In0.c2ln"}"#;
    let shown = r#"{"created_at":"2026-11-22T14:51:25Z","id":"dec_9wexys45z4xysm7kh37yckdqwr",
 "iss":"http://127.0.0.1:8081","nonce":"n_…","reason":null,"verdict":"allow","verdict_token":"eyJhbGci…"}"#;
    assert_eq!(check_shown(shown, printed), Ok(()));
    assert_eq!(check_shown(r#"{…,"verdict":"allow",…}"#, printed), Ok(()));
    // Another verdict, a missing member, more or less than shown: each fails.
    for wrong in [
        shown.replace("\"allow\"", "\"review\""),
        shown.replace("\"reason\":null,", ""),
        format!("{shown}\n201"),
        r#"{"created_at":"2026-11-22T14:51:25Z""#.to_owned(),
    ] {
        assert!(check_shown(&wrong, printed).is_err(), "{wrong}");
    }
    // Tables: column widths and line breaks are the page's.
    assert_eq!(
        check_shown(
            "AGENT      AMOUNT\nagt_buyer  42.50",
            "AGENT AMOUNT\nagt_buyer 42.50\n"
        ),
        Ok(())
    );
    assert!(check_shown("agt_buyer  42.50", "agt_buyer 42.5").is_err());
    // Nothing shown, something printed.
    assert!(check_shown("", "exit 4").is_err());
}

#[test]
fn every_page_with_runnable_blocks_is_run() {
    let mut marked = Vec::new();
    let mut pages = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        pages.push(entry.unwrap().path());
    }
    for path in pages {
        if path.extension().is_some_and(|e| e == "md")
            && std::fs::read_to_string(&path)
                .unwrap()
                .contains("<!-- runnable")
        {
            let name = path.strip_prefix(root()).unwrap().to_string_lossy();
            marked.push(name.replace('\\', "/"));
        }
    }
    marked.sort();
    let mut run: Vec<&str> = PAGES.to_vec();
    run.sort();
    assert_eq!(marked, run, "a page with runnable blocks that no test runs");
}

#[test]
fn the_readme_runs_top_to_bottom() {
    run_page(PAGES[0]);
}

#[test]
fn the_api_guide_runs_as_written() {
    run_page(PAGES[1]);
}

#[test]
fn the_cli_guide_runs_as_written() {
    run_page(PAGES[2]);
}

#[test]
fn the_webhooks_guide_runs_as_written() {
    run_page(PAGES[5]);
}

/// docs/mcp.md's task over HTTP is driven by the official MCP Python SDK (`mcp` on PyPI):
/// its blocks run with `MANDATE_MCP_PYTHON` (else the third-party Python) as `python3`.
/// Without the SDK the page is skipped, unless `MANDATE_REQUIRE_MCP_CLIENT=1` (CI).
#[test]
fn the_mcp_guide_runs_as_written() {
    let python = std::env::var("MANDATE_MCP_PYTHON")
        .ok()
        .or_else(third_party_python)
        .unwrap_or_else(|| "python3".to_owned());
    let found = Command::new(&python)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !found && std::env::var("MANDATE_REQUIRE_MCP_CLIENT").as_deref() != Ok("1") {
        mandate_test_kit::skip::say(&format!(
            "docs/mcp.md: {python} lacks the MCP SDK (pip install mcp==2.3.0)"
        ));
        return;
    }
    assert!(found, "{python} lacks the MCP SDK");
    run_page_with(PAGES[3], Some(&python));
}

/// After `serve --demo` in a clone, `git add -A` commits none of what it wrote: the
/// session's keys (`mandate-demo.env`) and the database with its WAL and shared memory
/// are in the repository's `.gitignore`.
#[test]
fn what_the_demo_writes_is_never_one_git_add_away_from_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["work", "home"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    let work = dir.path().join("work");
    std::fs::copy(root().join(".gitignore"), work.join(".gitignore")).unwrap();
    let git = |args: &[&str]| git(&work, dir.path(), args);
    git(&["init", "-q"]);
    let script = format!(
        "{}cargo build --release -p mandate-server -p mandate-cli\n\
         exec ./target/release/mandate-server serve --demo",
        prelude()
    );
    let mut demo = Demo::start(dir.path(), &script, "the demo");
    let written: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let added = git(&["add", "-A", "--dry-run"]);
    stop(&mut demo.server);
    for file in [
        "mandate-demo.env",
        "mandate.db",
        "mandate.db-wal",
        "mandate.db-shm",
    ] {
        assert!(
            written.iter().any(|w| w == file),
            "{file} not in {written:?}"
        );
    }
    assert_eq!(added.trim(), "add '.gitignore'", "{written:?}");
}

/// docs/embedding.md's dependency lines, as a project beside a checkout (`../mandate`)
/// writes them: cargo resolves them to this repository's mandate-core, offline.
#[test]
fn the_embedding_guides_dependency_lines_resolve() {
    let page = std::fs::read_to_string(root().join("docs/embedding.md")).unwrap();
    let lines: Vec<&str> = page.lines().collect();
    let at = lines.iter().position(|l| l.trim() == "```toml").unwrap();
    let (block, _) = fenced(&lines, at, &["```toml"]).unwrap();
    assert!(block.contains("[dependencies]"), "{block}");
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("embedder");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        project.join("Cargo.toml"),
        format!(
            "[package]\nname = \"embedder\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n{block}\n"
        ),
    )
    .unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root(), dir.path().join("mandate")).unwrap();
    // The repository's lock: its versions are the ones this machine has, offline.
    std::fs::copy(root().join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    // This machine's target only: the packages of other targets (wasm's) may not be here.
    let rustc = Command::new("rustc").arg("-vV").output().unwrap();
    let host = String::from_utf8(rustc.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .unwrap();
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &host, "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docs/embedding.md's dependencies do not resolve:\n{block}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    let core = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "mandate-core")
        .expect("mandate-core among the packages");
    let manifest = Path::new(core["manifest_path"].as_str().unwrap());
    assert_eq!(
        manifest.canonicalize().unwrap(),
        root()
            .join("mandate-core/Cargo.toml")
            .canonicalize()
            .unwrap()
    );
}

/// docs/protocols.md's AP2 example issues its mandates with Python's `sd-jwt` and
/// jwcrypto: without them the page is skipped, unless `MANDATE_REQUIRE_THIRD_PARTY=1`
/// (CI, which installs them).
#[test]
fn the_protocols_guide_runs_as_written() {
    let python =
        std::env::var("MANDATE_THIRD_PARTY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let found = Command::new(&python)
        .args(["-c", "import sd_jwt, jwcrypto"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !found && std::env::var("MANDATE_REQUIRE_THIRD_PARTY").as_deref() != Ok("1") {
        mandate_test_kit::skip::say(&format!(
            "docs/protocols.md: {python} lacks sd-jwt and jwcrypto"
        ));
        return;
    }
    assert!(found, "{python} lacks sd-jwt and jwcrypto");
    run_page("docs/protocols.md");
}
