//! What an online run says: the refusal, every finding naming what changed, with its
//! evidence beside the state; or what was accepted and checked.

use mandate_core::Checkpoint;

use super::AuditArgs;
use super::state::Stored;
use crate::error::{CliError, CmdResult, Exit};
use crate::output;

/// The refusal: the checkpoint and the findings written beside the state, every finding
/// in the message.
pub fn refuse(
    args: &AuditArgs,
    checkpoint: &Checkpoint,
    note: &str,
    findings: &[String],
) -> CmdResult {
    let evidence = format!("{}.refused-{}", args.state.display(), checkpoint.size());
    let text = format!("{note}\n{}\n", findings.join("\n"));
    let mut reason = findings.join("\n  ");
    if std::fs::write(&evidence, text).is_ok() {
        reason.push_str(&format!(
            "\n  the state is kept; the refused checkpoint and these findings are in {evidence}"
        ));
    }
    Err(CliError::LogRefused(reason))
}

/// Says what was accepted and checked.
pub fn say_accepted(
    args: &AuditArgs,
    ctx: &crate::commands::Context,
    first: bool,
    old: u64,
    next: &Stored,
    windows: Vec<(u64, u64)>,
    witnessed: Option<String>,
) -> CmdResult {
    let size = next.audit.size();
    let checked: u64 = windows.iter().map(|(s, e)| e - s).sum();
    let head = format!(
        "accepted: the log {} at {size} decisions ({} new)",
        next.audit.origin(),
        size - old
    );
    let message = if first {
        format!(
            "{head}, its first checkpoint in {}: later runs check that the log extends it",
            args.state.display()
        )
    } else {
        format!("{head} extends the checkpoint accepted before")
    };
    let detail = format!(
        "checked: the tiles against the mirror of {size} leaves, and {checked} decisions the API serves against the log's entries"
    );
    if ctx.json {
        output::json(&serde_json::json!({
            "checked": checked,
            "new": size - old,
            "origin": next.audit.origin(),
            "root": next.audit.root().to_base64(),
            "size": size,
        }))?;
        output::note(&detail);
    } else {
        println!("{message}");
        println!("{detail}");
    }
    if let Some(line) = witnessed {
        if ctx.json {
            output::note(&line);
        } else {
            output::line(&line)?;
        }
    }
    Ok(Exit::Success)
}
