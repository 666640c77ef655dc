//! A group's control statements in one message. PostgreSQL answers every message of a
//! pipeline with its own `ReadyForQuery` and flushes its socket there: one `send` a message,
//! and behind each the wake-up of the reader (docs/scale.md, "Issue #49"). A simple query
//! holding several statements is one message and one flush. Its statements carry no
//! parameters, so the writers' statements are prepared by name on each of their
//! connections when it is made ([`prepares`], SQL `PREPARE`: planned and cached as a
//! protocol-level prepared statement is) and run with `EXECUTE`, their values written as
//! constants (`constant.rs`). The values are the writers' own: ids and keys the server
//! made, counts and seqs.
//!
//! - [`Opening::messages`]: the claim's transaction (its row opened when the writer has
//!   none), its commit, the group's `BEGIN` and the first run of version moves, where there
//!   were four messages (`BEGIN`, the claim, `COMMIT; BEGIN`, the run);
//! - [`settle_and_commit`]: the claim's settlement and the group's `COMMIT`, where there
//!   were two.
//!
//! On Citus a `SET LOCAL` goes alone in its message ([`SetLocal`]), and the opening takes
//! four messages again.

use tokio_postgres::SimpleQueryMessage;

use super::claims;
use super::constant::{NulInValue, bigint, text};
use super::record::BUMP_MANY_SQL;

/// The settings of the group's transaction, after its `BEGIN`: its statements find rows
/// through indexes only, so the version moves of a run ([`BUMP_MANY_SQL`]) lock the agents'
/// rows in the order of their keys, as every group does.
const BEGIN_GROUP: &str = "SET LOCAL enable_seqscan TO OFF; SET LOCAL enable_bitmapscan TO OFF";

/// The `PREPARE`s a writer's connection runs once, when it is made
/// (`connect::Target::writers_pool`): [`claims::OPEN`], [`claims::CLAIM`],
/// [`claims::MONTH`], [`BUMP_MANY_SQL`], [`claims::SETTLED`] and [`claims::SETTLE`] under
/// the names the scripts `EXECUTE`.
pub(crate) fn prepares() -> String {
    format!(
        "PREPARE mandate_open (TEXT, TEXT) AS {open};
         PREPARE mandate_claim (TEXT, TEXT, BIGINT, BIGINT) AS {claim};
         PREPARE mandate_month (TEXT, TEXT, BIGINT) AS {month};
         PREPARE mandate_bump_many (TEXT, BIGINT[], BIGINT[], TEXT[], TEXT[], TEXT[]) AS {bump};
         PREPARE mandate_settled (TEXT, TEXT, BIGINT) AS {settled};
         PREPARE mandate_settle (TEXT, TEXT, BIGINT) AS {settle}",
        open = claims::OPEN,
        claim = claims::CLAIM,
        month = claims::MONTH,
        bump = *BUMP_MANY_SQL,
        settled = claims::SETTLED,
        settle = claims::SETTLE,
    )
}

/// Where a `SET LOCAL` may be sent. Citus (with `citus.propagate_set_commands = 'local'`,
/// which its migration sets) sends the text of the whole message that holds a `SET LOCAL`
/// to every worker the transaction reaches, as the first thing there: a message of
/// `EXECUTE`s would run again on the worker, where nothing is prepared (and a `COMMIT`
/// there would end the worker's transaction). There each `SET LOCAL` goes in a message of
/// `BEGIN` and `SET`s only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SetLocal {
    /// PostgreSQL: in any message.
    Anywhere,
    /// Citus: in a message of its own.
    Alone,
}

impl SetLocal {
    /// The rule of the database `c` is connected to: [`SetLocal::Alone`] where the `citus`
    /// extension is installed.
    pub(super) async fn of(c: &tokio_postgres::Client) -> Result<Self, tokio_postgres::Error> {
        let citus: bool = c
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
                &[],
            )
            .await?
            .get(0);
        Ok(if citus { Self::Alone } else { Self::Anywhere })
    }
}

/// What opening a group asks: its organization, its writer, whether the writer's row must
/// be opened first, how many decision seqs and event seqs to claim, the month of its
/// latest decision ([`claims::MONTH`]), and the `EXECUTE` of the group's first version
/// moves when they are a run ([`BUMP_MANY_SQL`]).
pub(super) struct Opening<'a> {
    pub(super) org: &'a str,
    pub(super) writer: &'a str,
    pub(super) open_row: bool,
    pub(super) seqs: i64,
    pub(super) events: i64,
    pub(super) month: i64,
    pub(super) first_run: Option<String>,
}

impl Opening<'_> {
    /// The simple queries: the claim and its month's mark in a transaction of their own
    /// (not waiting for its flush, rows found by key only: [`claims::BEGIN_CLAIM`]), its
    /// commit, the group's
    /// `BEGIN` (rows found by key only), then the first run's version moves. One message,
    /// or four where a `SET LOCAL` goes alone.
    pub(super) fn messages(&self, set_local: SetLocal) -> Result<Vec<String>, NulInValue> {
        let (org, writer) = (text(self.org)?, text(self.writer)?);
        let mut claim = String::new();
        if self.open_row {
            claim.push_str(&format!("EXECUTE mandate_open ({org}, {writer}); "));
        }
        claim.push_str(&format!(
            "EXECUTE mandate_claim ({org}, {writer}, {}, {}); \
             EXECUTE mandate_month ({org}, {writer}, {}); COMMIT; BEGIN",
            bigint(self.seqs),
            bigint(self.events),
            bigint(self.month)
        ));
        let mut parts = vec![
            claims::BEGIN_CLAIM.to_owned(),
            claim,
            BEGIN_GROUP.to_owned(),
        ];
        parts.extend(self.first_run.clone());
        Ok(match set_local {
            SetLocal::Anywhere => vec![parts.join("; ")],
            SetLocal::Alone => parts,
        })
    }
}

/// What the opening script answered: the claim's first seqs (none when the writer had no
/// row to hold it), and the agents' keys whose versions its run moved (none without a run).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Opened {
    pub(super) claimed: Option<(i64, Option<i64>)>,
    pub(super) moved: Option<Vec<i64>>,
}

/// An answer that is not what the script's statements return.
#[derive(Debug, thiserror::Error)]
#[error("the group's opening statements answered {0}")]
pub(crate) struct Unreadable(String);

/// Reads the opening's answers, in order: the claim's row follows the columns `first_seq,
/// first_event`; the run's rows the column `seq`.
pub(super) fn read_opened<'a>(
    messages: impl IntoIterator<Item = &'a SimpleQueryMessage>,
) -> Result<Opened, Unreadable> {
    let mut opened = Opened {
        claimed: None,
        moved: None,
    };
    let mut columns: Vec<String> = Vec::new();
    for message in messages {
        match message {
            SimpleQueryMessage::RowDescription(described) => {
                columns = described.iter().map(|c| c.name().to_owned()).collect();
                if columns == ["seq"] {
                    opened.moved.get_or_insert_with(Vec::new);
                }
            }
            SimpleQueryMessage::Row(row) => {
                let number = |i: usize| -> Result<Option<i64>, Unreadable> {
                    row.try_get(i)
                        .map_err(|e| Unreadable(e.to_string()))?
                        .map(|v| v.parse::<i64>().map_err(|_| Unreadable(format!("{v:?}"))))
                        .transpose()
                };
                match columns.as_slice() {
                    [a, b] if a == "first_seq" && b == "first_event" => {
                        let first = number(0)?.ok_or_else(|| Unreadable("no first seq".into()))?;
                        opened.claimed = Some((first, number(1)?));
                    }
                    [seq] if seq == "seq" => {
                        let moved = number(0)?.ok_or_else(|| Unreadable("no seq".into()))?;
                        opened.moved.get_or_insert_with(Vec::new).push(moved);
                    }
                    other => return Err(Unreadable(format!("a row of {other:?}"))),
                }
            }
            _ => {}
        }
    }
    Ok(opened)
}

/// The end of a group: its claim settled (checked, [`claims::SETTLED`], when it stored
/// decisions; cleared, [`claims::SETTLE`], when it stored none), then `COMMIT`, in one
/// message. A failed check abandons the rest of the message, so the group's transaction
/// is left aborted, not committed.
pub(super) fn settle_and_commit(
    org: &str,
    writer: &str,
    first: i64,
    stored_any: bool,
) -> Result<String, NulInValue> {
    let name = if stored_any {
        "mandate_settled"
    } else {
        "mandate_settle"
    };
    Ok(format!(
        "EXECUTE {name} ({}, {}, {}); COMMIT",
        text(org)?,
        text(writer)?,
        bigint(first)
    ))
}
