//! The README's steps and the docs' examples, run as written against the real binaries.
//!
//! A page marks a fenced `sh` block runnable with a line `<!-- runnable -->` just before
//! it, or `<!-- runnable: server -->` for the block that starts the server (it keeps
//! running: the test runs it in the background and goes on once the demo has written
//! `mandate-demo.env`). A page without a server block gets `mandate-server serve --demo`
//! started for it the same way. The other blocks of a page run in order, in one `bash`
//! with `set -euo pipefail`, in a fresh directory with HOME and the XDG directories inside
//! it: a failing command fails the test with the script's output.
//!
//! What the test provides, and nothing else: `cargo build --release -p …` links the
//! binaries this test run built into `./target/release/` instead of building again (it is
//! the only `cargo` command a runnable block may use); the listeners' addresses are
//! `127.0.0.1:0` through `MANDATE_API_ADDR` and `MANDATE_PUBLIC_ADDR`, so that pages run
//! side by side (the demo writes the bound addresses to `mandate-demo.env`); no other
//! `MANDATE_*` variable of the test's environment reaches the blocks.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A runnable block: whether it starts the server, its text, and its line in the page.
#[derive(Debug)]
struct Block {
    server: bool,
    text: String,
    line: usize,
}

/// The runnable blocks of a page, in order.
fn blocks(page: &str) -> Vec<Block> {
    let lines: Vec<&str> = page.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let marker = lines[i].trim();
        let server = marker == "<!-- runnable: server -->";
        if (server || marker == "<!-- runnable -->")
            && lines.get(i + 1).map(|l| l.trim()) == Some("```sh")
        {
            let start = i + 2;
            let end = (start..lines.len())
                .find(|&j| lines[j].trim() == "```")
                .unwrap_or_else(|| panic!("unclosed block at line {}", i + 2));
            out.push(Block {
                server,
                text: lines[start..end].join("\n"),
                line: i + 2,
            });
            i = end;
        }
        i += 1;
    }
    out
}

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
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

/// What every script starts with: strict mode, and `cargo build --release` as the link
/// to the binaries already built.
fn prelude() -> String {
    let cli = env!("CARGO_BIN_EXE_mandate");
    let server = server_binary();
    format!(
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

/// `bash -c script` in `dir`, in a process group of its own, with the test's environment
/// but HOME and XDG in `dir` and no `MANDATE_*` but the listeners' addresses.
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

/// Runs the runnable blocks of `page` (a path from the workspace's root).
fn run_page(page: &str) {
    let text = std::fs::read_to_string(root().join(page)).unwrap();
    let blocks = blocks(&text);
    assert!(!blocks.is_empty(), "{page} marks no block runnable");
    let dir = tempfile::tempdir().unwrap();
    for sub in ["work", "home"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    let server_script = match blocks.iter().find(|b| b.server) {
        Some(block) => format!("{}{}", prelude(), block.text),
        // As the README starts it.
        None => format!(
            "{}cargo build --release -p mandate-server -p mandate-cli\n\
             exec ./target/release/mandate-server serve --demo",
            prelude()
        ),
    };
    let log = dir.path().join("server.log");
    let mut server = bash(
        dir.path(),
        &server_script,
        Stdio::from(std::fs::File::create(&log).unwrap()),
        Stdio::from(std::fs::File::create(dir.path().join("server.err")).unwrap()),
    );
    let session = dir.path().join("work/mandate-demo.env");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !session.exists() {
        if let Some(status) = server.try_wait().unwrap() {
            panic!(
                "{page}: the server block exited ({status}) before the demo was ready:\n{}{}",
                std::fs::read_to_string(&log).unwrap_or_default(),
                std::fs::read_to_string(dir.path().join("server.err")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "{page}: no demo within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The file is written before the session is printed: wait for the printing to end.
    std::thread::sleep(Duration::from_millis(200));

    let mut script = prelude();
    for block in blocks.iter().filter(|b| !b.server) {
        script.push_str(&format!("# {page}:{}\n{}\n", block.line, block.text));
    }
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
    stop(&mut server);
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()),
        "{page}: the runnable blocks failed ({status:?})\n--- script\n{script}\n--- output\n{said}"
    );
}

#[test]
fn the_blocks_are_found_with_their_markers() {
    let page = "text\n<!-- runnable -->\n```sh\necho one\n```\n```sh\nnot this\n```\n\
                <!-- runnable: server -->\n```sh\nserve\n```\n<!-- runnable -->\nno fence\n";
    let found = blocks(page);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(!found[0].server && found[0].text == "echo one" && found[0].line == 3);
    assert!(found[1].server && found[1].text == "serve");
}

#[test]
fn the_readme_runs_top_to_bottom() {
    run_page("README.md");
}

#[test]
fn the_cli_guide_runs_as_written() {
    run_page("docs/cli.md");
}

#[test]
fn the_api_guide_runs_as_written() {
    run_page("docs/api.md");
}
