//! `mandate export decisions --output FILE`: the audit export, `GET /v1/exports/decisions`,
//! streamed to a file (or stdout) in fixed-size chunks, never held in memory.
//!
//! A file is written under a temporary name next to it and renamed only once the whole
//! export has arrived (the server's body ended properly, its last line ends with a
//! newline), so FILE is either the complete export or untouched: an API error or a body
//! cut off midway never leaves a short but well-formed file behind. The output is NDJSON,
//! oldest first, which `mandate simulate --decisions FILE` reads as it is.

use std::fs::File;
use std::io::{BufWriter, IsTerminal as _, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use mandate_core::{AgentId, DecisionId, Verdict};
use serde::Serialize;

use super::{Context, parse_verdict};
use crate::error::{CliError, CmdResult, Exit};
use crate::output;

/// The media type of the export.
const NDJSON: &str = "application/x-ndjson";

/// Bytes read (and held) at a time.
const CHUNK: usize = 64 * 1024;

/// How often the progress line is redrawn, at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// `mandate export …`.
#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// Stream every matching decision as NDJSON, oldest first, to a file or stdout
    #[command(long_about = DECISIONS_LONG_ABOUT)]
    Decisions(DecisionsArgs),
}

/// The long help of `DecisionsArgs`, set on its subcommand.
pub const DECISIONS_LONG_ABOUT: &str = "Export every decision that matches the filters, for \
an audit or another system: one decision object per line (NDJSON), oldest first, in the \
shape of `mandate decisions get`, amounts with their exact digits. The export covers every \
decision committed when it starts; it is not paginated. With `--after DECISION` (the last \
decision of a previous export) only the decisions committed after that one are exported: \
appending each such export to the last one follows the log without a gap or a repeat.\n\n\
The body is copied to FILE as it arrives, in 64 KiB chunks, whatever its size. It is \
written under a temporary name in FILE's directory and renamed to FILE only when complete, \
so FILE is never left short: if the server aborts the export or the connection drops, the \
command exits 3 and FILE is untouched (with `--output -` what was already printed stays \
printed). While it runs, a progress line on stderr counts the decisions and bytes so far \
(only when stderr is a terminal); at the end a summary gives the totals (on stdout, or on \
stderr with `--output -`).\n\n\
An organization key exports its environment, an agent key its own decisions. The file is \
what `mandate simulate --decisions FILE` reads.";

/// `mandate export decisions`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate export decisions --output decisions.ndjson
  mandate export decisions --agent agt_buyer --output buyer.ndjson
  mandate export decisions --after \"$(tail -n1 all.ndjson | jq -r .id)\" --output new.ndjson
  mandate simulate --mandate tighter.json --decisions buyer.ndjson
  mandate export decisions --verdict review --output - | jq -r .id")]
pub struct DecisionsArgs {
    /// Where to write the NDJSON: a file (replaced when complete), or `-` for stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// Only decisions whose returned verdict is this (allow, review, deny_*)
    #[arg(long, value_name = "VERDICT", value_parser = parse_verdict)]
    pub verdict: Option<Verdict>,
    /// Only decisions whose policy verdict is this (differs from verdict in observe mode)
    #[arg(long, value_name = "VERDICT", value_parser = parse_verdict)]
    pub policy_verdict: Option<Verdict>,
    /// Only this agent's decisions
    #[arg(long, value_name = "ID")]
    pub agent: Option<AgentId>,
    /// Only decisions committed after this one (the last line of a previous export): an
    /// incremental export
    #[arg(long, value_name = "DECISION")]
    pub after: Option<DecisionId>,
}

/// The `--json` report of an export to a file.
#[derive(Serialize)]
struct Exported<'a> {
    output: &'a str,
    decisions: u64,
    bytes: u64,
}

/// How much of the export has been copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Complete lines, one decision each.
    pub decisions: u64,
    /// Bytes.
    pub bytes: u64,
    /// Whether the last byte copied is a newline (or nothing was copied).
    pub at_line_end: bool,
}

/// Why a copy stopped.
#[derive(Debug)]
pub enum CopyError {
    /// Reading the body failed: the server aborted it or the connection dropped.
    Read(std::io::Error),
    /// Writing the output failed.
    Write(std::io::Error),
}

/// Copies `from` to `to` in [`CHUNK`]-sized pieces, counting lines and bytes, and calls
/// `progress` after each piece. Holds one chunk, whatever the size of the body.
pub fn copy_counting(
    mut from: impl Read,
    mut to: impl Write,
    mut progress: impl FnMut(&Tally),
) -> Result<Tally, (CopyError, Tally)> {
    let mut buffer = vec![0u8; CHUNK];
    let mut tally = Tally {
        at_line_end: true,
        ..Tally::default()
    };
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err((CopyError::Read(e), tally)),
        };
        let chunk = buffer.get(..read).unwrap_or_default();
        to.write_all(chunk)
            .map_err(|e| (CopyError::Write(e), tally))?;
        let lines = chunk.iter().filter(|&&b| b == b'\n').count();
        tally.decisions += u64::try_from(lines).unwrap_or(u64::MAX);
        tally.bytes += u64::try_from(read).unwrap_or(u64::MAX);
        tally.at_line_end = chunk.last() == Some(&b'\n');
        progress(&tally);
    }
    to.flush().map_err(|e| (CopyError::Write(e), tally))?;
    Ok(tally)
}

/// A byte count for people: `812 B`, `6.3 kB`, `509.2 MB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: &[&str] = &["kB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    // Tenths of the unit, in integers: exact enough, and no float in the count itself.
    let mut unit = 0;
    let mut scaled = bytes;
    while scaled >= 999_950 && unit + 1 < UNITS.len() {
        scaled /= 1000;
        unit += 1;
    }
    let tenths = (scaled + 50) / 100;
    format!(
        "{}.{} {}",
        tenths / 10,
        tenths % 10,
        UNITS.get(unit).copied().unwrap_or("TB")
    )
}

/// `1 decision`, `7 decisions`.
fn decisions_text(count: u64) -> String {
    if count == 1 {
        "1 decision".to_owned()
    } else {
        format!("{count} decisions")
    }
}

/// Where the export goes.
enum Sink {
    Stdout,
    /// A temporary file beside `target`, renamed to it on [`FileSink::commit`].
    File(FileSink),
}

/// A file being written under a temporary name; removed unless committed.
struct FileSink {
    target: PathBuf,
    temp: PathBuf,
    file: Option<BufWriter<File>>,
}

impl FileSink {
    /// Creates the temporary file in `target`'s directory (so the rename stays on one file
    /// system), before any request: an unwritable place is a usage error up front.
    fn create(target: &Path) -> Result<Self, CliError> {
        let name = target
            .file_name()
            .filter(|_| !target.as_os_str().is_empty())
            .ok_or_else(|| {
                CliError::usage(format!("--output {}: not a file name", target.display()))
            })?;
        if target.is_dir() {
            return Err(CliError::usage(format!(
                "--output {}: is a directory",
                target.display()
            )));
        }
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes)
            .map_err(|e| CliError::usage(format!("cannot draw random bytes: {e}")))?;
        let temp_name = format!(
            ".{}.{}.partial",
            name.to_string_lossy(),
            mandate_protocol::id::base32(&bytes)
        );
        let temp = target.with_file_name(temp_name);
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| CliError::usage(format!("cannot write {}: {e}", target.display())))?;
        Ok(Self {
            target: target.to_owned(),
            temp,
            file: Some(BufWriter::with_capacity(CHUNK, file)),
        })
    }

    /// Flushes, syncs and renames the temporary file to the target.
    fn commit(mut self) -> Result<(), CliError> {
        let failed = |e: std::io::Error| {
            CliError::usage(format!("cannot write {}: {e}", self.target.display()))
        };
        if let Some(writer) = self.file.take() {
            let file = writer.into_inner().map_err(|e| failed(e.into_error()))?;
            file.sync_all().map_err(failed)?;
        }
        std::fs::rename(&self.temp, &self.target).map_err(failed)?;
        Ok(())
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        // Still here: the export did not complete (or the rename failed). Nothing partial
        // stays behind.
        drop(self.file.take());
        let _ = std::fs::remove_file(&self.temp);
    }
}

/// Runs `mandate export …`.
pub fn run(command: ExportCommand, ctx: &Context) -> CmdResult {
    match command {
        ExportCommand::Decisions(args) => decisions(&args, ctx),
    }
}

fn decisions(args: &DecisionsArgs, ctx: &Context) -> CmdResult {
    let filters = filters(args);
    let client = ctx.client()?;
    let mut sink = if args.output == Path::new("-") {
        Sink::Stdout
    } else {
        Sink::File(FileSink::create(&args.output)?)
    };
    let response = client.get_stream("/exports/decisions", &filters)?;
    check_ndjson(&response)?;

    let show_progress = std::io::stderr().is_terminal();
    let mut last_drawn: Option<Instant> = None;
    let progress = |tally: &Tally| {
        if show_progress && last_drawn.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY) {
            last_drawn = Some(Instant::now());
            output::progress(&format!(
                "exporting: {}, {}…",
                decisions_text(tally.decisions),
                human_bytes(tally.bytes)
            ));
        }
    };
    let copied = match &mut sink {
        Sink::Stdout => copy_counting(response, std::io::stdout().lock(), progress),
        Sink::File(file) => match file.file.as_mut() {
            Some(writer) => copy_counting(response, writer, progress),
            None => return Err(CliError::usage("the output file is already closed")),
        },
    };
    if show_progress {
        output::progress_done();
    }
    let shown = match &args.output {
        path if path == Path::new("-") => "stdout".to_owned(),
        path => path.display().to_string(),
    };
    let tally = match copied {
        Ok(tally) if tally.at_line_end => tally,
        Ok(tally) => return Err(cut_off(&shown, tally, "the last line is unfinished")),
        Err((CopyError::Read(e), tally)) => {
            return Err(cut_off(&shown, tally, &read_error_text(&e)));
        }
        Err((CopyError::Write(e), _)) => {
            return Err(match sink {
                Sink::Stdout => CliError::Output(e),
                Sink::File(_) => CliError::usage(format!("cannot write {shown}: {e}")),
            });
        }
    };
    report(sink, &tally, &shown, ctx.json)
}

/// The query of the export: the filters given.
fn filters(args: &DecisionsArgs) -> Vec<(&'static str, String)> {
    let mut filters = Vec::new();
    if let Some(agent) = &args.agent {
        filters.push(("agent", agent.to_string()));
    }
    if let Some(verdict) = args.verdict {
        filters.push(("verdict", verdict.as_str().to_owned()));
    }
    if let Some(verdict) = args.policy_verdict {
        filters.push(("policy_verdict", verdict.as_str().to_owned()));
    }
    if let Some(after) = &args.after {
        filters.push(("after", after.to_string()));
    }
    filters
}

/// Refuses an answer that is not NDJSON (a proxy's page, say) before a byte is written.
fn check_ndjson(response: &reqwest::blocking::Response) -> Result<(), CliError> {
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with(NDJSON) {
        return Ok(());
    }
    Err(CliError::UnexpectedResponse {
        status: response.status().as_u16(),
        detail: format!("expected {NDJSON}, got {content_type:?}"),
        request_id: None,
    })
}

/// A whole export: the file put in place under its name, and what was exported said (on
/// stderr when the export went to stdout).
fn report(sink: Sink, tally: &Tally, shown: &str, as_json: bool) -> CmdResult {
    let size = if tally.bytes < 1000 {
        format!("{} bytes", tally.bytes)
    } else {
        format!("{} bytes, {}", tally.bytes, human_bytes(tally.bytes))
    };
    let summary = format!(
        "{} ({size}) exported to {shown}",
        decisions_text(tally.decisions)
    );
    match sink {
        Sink::Stdout => {
            let _ = writeln!(std::io::stderr().lock(), "{summary}");
        }
        Sink::File(file) => {
            file.commit()?;
            if as_json {
                output::json(&Exported {
                    output: shown,
                    decisions: tally.decisions,
                    bytes: tally.bytes,
                })?;
            } else {
                output::line(&summary)?;
            }
        }
    }
    Ok(Exit::Success)
}

/// The innermost cause of a read error (reqwest nests them).
fn read_error_text(error: &std::io::Error) -> String {
    let mut cause: &dyn std::error::Error = error;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

fn cut_off(shown: &str, tally: Tally, why: &str) -> CliError {
    let kept = if shown == "stdout" {
        "the output is incomplete".to_owned()
    } else {
        format!("{shown} was not written")
    };
    CliError::Incomplete(format!(
        "the export was cut off after {} ({} bytes): {why}; {kept}. The server aborted it \
         or the connection dropped: run the command again",
        decisions_text(tally.decisions),
        tally.bytes
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// A reader that gives `data` and then fails, as a body cut off midway does.
    struct CutOff<'a>(&'a [u8]);

    impl Read for CutOff<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::other("connection reset"));
            }
            let n = self.0.len().min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn copies_in_chunks_counting_lines_and_bytes() {
        let line = b"{\"id\":\"dec_1\",\"request\":{\"amount\":42.50}}\n";
        let body: Vec<u8> = line
            .iter()
            .copied()
            .cycle()
            .take(line.len() * 5000)
            .collect();
        let mut out = Vec::new();
        let mut calls = 0;
        let tally = copy_counting(&body[..], &mut out, |_| calls += 1).unwrap();
        assert_eq!(out, body);
        assert_eq!(tally.decisions, 5000);
        assert_eq!(tally.bytes, body.len() as u64);
        assert!(tally.at_line_end);
        assert!(calls > 1, "progress after each chunk");

        let empty = copy_counting(&b""[..], Vec::new(), |_| {}).unwrap();
        assert_eq!(
            (empty.decisions, empty.bytes, empty.at_line_end),
            (0, 0, true)
        );
        let unfinished = copy_counting(&b"{}\n{\"id\""[..], Vec::new(), |_| {}).unwrap();
        assert_eq!(unfinished.decisions, 1);
        assert!(!unfinished.at_line_end);
    }

    #[test]
    fn a_failed_read_reports_what_was_copied() {
        let (error, tally) = copy_counting(CutOff(b"{}\n{}\n{"), Vec::new(), |_| {}).unwrap_err();
        assert!(matches!(error, CopyError::Read(_)));
        assert_eq!((tally.decisions, tally.bytes), (2, 7));
    }

    #[test]
    fn byte_counts_and_counts_read_well() {
        assert_eq!(decisions_text(1), "1 decision");
        assert_eq!(decisions_text(0), "0 decisions");
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(6_789), "6.8 kB");
        assert_eq!(human_bytes(999_949), "999.9 kB");
        assert_eq!(human_bytes(999_999), "1.0 MB");
        assert_eq!(human_bytes(509_200_000), "509.2 MB");
        assert_eq!(human_bytes(5_100_000_000), "5.1 GB");
    }

    #[test]
    fn a_file_is_renamed_into_place_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.ndjson");
        std::fs::write(&target, "old\n").unwrap();
        {
            let mut sink = FileSink::create(&target).unwrap();
            sink.file.as_mut().unwrap().write_all(b"partial").unwrap();
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old\n");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "temp removed"
        );

        let mut sink = FileSink::create(&target).unwrap();
        sink.file.as_mut().unwrap().write_all(b"{}\n").unwrap();
        sink.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "{}\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        assert!(FileSink::create(dir.path()).is_err());
        assert!(FileSink::create(&dir.path().join("missing/out.ndjson")).is_err());
    }
}
