//! `mandate reviews approve|deny`: resolve a pending review. There is no read path for
//! reviews: a pending one shows through the decision that opened it
//! (`mandate decisions list --verdict review`).

use clap::{Args, Subcommand};
use mandate_core::id::ReviewId;
use mandate_core::wire::{DenyReview, Review};

use super::authorize::print_verdict;
use super::{Context, PostArgs, print_object, request_body};
use crate::error::{CmdResult, Exit};

/// `mandate reviews …`.
#[derive(Debug, Subcommand)]
pub enum ReviewsCommand {
    /// Approve: a fresh decision is made, re-checked against the mandate as it is now
    #[command(long_about = LONG_ABOUT)]
    Approve(ApproveArgs),
    /// Deny: the review is closed, no new decision is made
    Deny(DenyArgs),
}

/// The long help of `ApproveArgs`, set on its subcommand (a variant's doc comment would
/// replace a long help given on the struct).
pub const LONG_ABOUT: &str = "Approve a pending review. The answer is a fresh decision with its own \
signed verdict token (five minutes) and supersedes pointing at the original. It is \
re-checked against the mandate as it is now: a revoked or expired mandate, or the monthly \
limit, gives that denial instead of allow. The command exits 0 whenever the API accepted \
the approval; read the printed verdict.";

/// `mandate reviews approve ID`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The review id, rev_…
    pub id: ReviewId,
    #[command(flatten)]
    pub post: PostArgs,
}

/// `mandate reviews deny ID [--reason TEXT]`.
#[derive(Debug, Args)]
pub struct DenyArgs {
    /// The review id, rev_…
    pub id: ReviewId,
    /// Why, at most 500 characters; stored on the review
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub post: PostArgs,
}

/// Runs `mandate reviews …`.
pub fn run(command: ReviewsCommand, ctx: &Context) -> CmdResult {
    let client = ctx.client()?;
    match command {
        ReviewsCommand::Approve(args) => {
            let response = client.post(
                &format!("/reviews/{}/approve", args.id),
                None,
                &args.post.key()?,
            )?;
            print_verdict(&response, ctx.json)?;
        }
        ReviewsCommand::Deny(args) => {
            // No reason, no body.
            let body = match args.reason {
                Some(reason) => Some(request_body(&DenyReview {
                    reason: Some(reason),
                })?),
                None => None,
            };
            let response = client.post(
                &format!("/reviews/{}/deny", args.id),
                body.as_ref(),
                &args.post.key()?,
            )?;
            print_object::<Review>(ctx, &response, "a review")?;
        }
    }
    Ok(Exit::Success)
}
