//! `mandate events list|get`: the event log, newest first, read whole whatever became of
//! its deliveries. Organization keys only.

use clap::builder::PossibleValuesParser;
use clap::{Args, Subcommand};
use mandate_core::delivery::EVENT_TYPES;
use mandate_core::id::EventId;
use serde_json::Value;

use super::{Context, ListArgs, print_list};
use crate::error::{CmdResult, Exit};
use crate::output;

/// The columns of an event list. `SUBJECT` is the object the event is about: its `id`, or
/// for a ping the webhook.
const COLUMNS: &[(&str, &str)] = &[
    ("ID", "id"),
    ("TYPE", "type"),
    ("SUBJECT", "subject"),
    ("CREATED", "created_at"),
];

/// `mandate events …`.
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// List events, newest first (`--type` to filter)
    List(ListEventsArgs),
    /// Show one event with its data
    Get(GetArgs),
}

/// `mandate events list`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate events list --type mandate.revoked
  mandate events list --all --json > events.json")]
pub struct ListEventsArgs {
    /// Only events of this type
    #[arg(
        long = "type",
        value_name = "TYPE",
        value_parser = PossibleValuesParser::new(EVENT_TYPES),
    )]
    pub event_type: Option<String>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// `mandate events get ID`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The event id, evt_…
    pub id: EventId,
}

/// The object an event is about, for the table: `data.id`, else `data.webhook`.
fn with_subject(event: &Value) -> Value {
    let mut row = event.clone();
    let subject = ["data.id", "data.webhook"]
        .iter()
        .find_map(|path| output::at(event, path).filter(|v| v.is_string()))
        .cloned()
        .unwrap_or(Value::Null);
    if let Value::Object(map) = &mut row {
        map.insert("subject".to_owned(), subject);
    }
    row
}

/// Runs `mandate events …`.
pub fn run(command: EventsCommand, ctx: &Context) -> CmdResult {
    let client = ctx.client()?;
    match command {
        EventsCommand::List(args) => {
            let mut filters = Vec::new();
            if let Some(event_type) = &args.event_type {
                filters.push(("type", event_type.clone()));
            }
            let mut page = client.list("/events", &filters, &args.list.paging())?;
            if !ctx.json {
                page.data = page.data.iter().map(with_subject).collect();
            }
            print_list(ctx, &page, COLUMNS)?;
        }
        EventsCommand::Get(args) => {
            let response = client.get(&format!("/events/{}", args.id), &[])?;
            output::object(&response.body, ctx.json)?;
        }
    }
    Ok(Exit::Success)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_subject_is_the_object_id_or_the_webhook() {
        let revoked: Value =
            serde_json::from_str(r#"{"id": "evt_1", "data": {"id": "mnd_1"}}"#).unwrap();
        assert_eq!(output::cell(&with_subject(&revoked), "subject"), "mnd_1");
        let ping: Value =
            serde_json::from_str(r#"{"id": "evt_2", "data": {"webhook": "whk_1"}}"#).unwrap();
        assert_eq!(output::cell(&with_subject(&ping), "subject"), "whk_1");
        let odd: Value = serde_json::from_str(r#"{"id": "evt_3", "data": 3}"#).unwrap();
        assert_eq!(output::cell(&with_subject(&odd), "subject"), "-");
    }
}
