//! `mandate reviews approve|deny`: resolve a pending review. There is no read path for
//! reviews: a pending one shows through the decision that opened it
//! (`mandate decisions list --verdict review`).

use clap::{Args, Subcommand};
use mandate_protocol::{id::ReviewId, wire::DenyReview, wire::Review};

use super::authorize::print_verdict;
use super::{Context, PostArgs, print_object};
use crate::error::{CmdResult, Exit};

/// `mandate reviews …`.
#[derive(Debug, Subcommand)]
pub enum ReviewsCommand {
    /// Approve: a fresh decision is made, re-checked against the mandate as it is now
    #[command(long_about = LONG_ABOUT)]
    Approve(ApproveArgs),
    /// Deny: the review is closed, no new decision is made (with the agent key of the
    /// decision's agent: the agent withdraws its own review, which nothing can approve then)
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
            let path = format!("/reviews/{}/approve", args.id);
            let response = client.post_empty(&path, &args.post.key()?)?;
            print_verdict(&response, ctx.json)?;
        }
        ReviewsCommand::Deny(args) => {
            let path = format!("/reviews/{}/deny", args.id);
            let key = args.post.key()?;
            // No reason, no body.
            let response = match args.reason {
                Some(reason) => {
                    let body = DenyReview {
                        reason: Some(reason),
                    };
                    client.post(&path, &body, &key)?
                }
                None => client.post_empty(&path, &key)?,
            };
            print_object::<Review>(ctx, &response, "a review")?;
        }
    }
    Ok(Exit::Success)
}
