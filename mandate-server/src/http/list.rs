//! The list conventions: `limit` (1 to 100, default 20), `cursor` (signed, bound to the
//! list, the filter set and the key scope, 24 hours), newest first, and the envelope
//! `{data, has_more, next_cursor}` with `next_cursor` absent on the last page.

use std::collections::BTreeMap;

use mandate_core::{CursorContext, CursorKey};
use mandate_protocol::wire::ListPage;
use serde_json::Value;
use time::OffsetDateTime;

use crate::http::error::ApiError;
use crate::model::Caller;

/// What paging reads of the server: the key cursors are signed and opened with, and the
/// time now (a cursor lives 24 hours).
#[derive(Clone, Copy)]
pub struct Paging<'a> {
    /// The server's cursor key.
    pub cursors: &'a CursorKey,
    /// Now.
    pub now: OffsetDateTime,
}

/// The message for any bad `limit`.
pub const LIMIT_MESSAGE: &str = "limit must be an integer between 1 and 100";

/// Parsed list parameters.
#[derive(Debug, Clone)]
pub struct ListParams {
    /// Page size.
    pub limit: i64,
    /// Cursor from the previous page.
    pub cursor: Option<String>,
    /// Filters given, by name.
    pub filters: BTreeMap<String, String>,
}

/// Parses a query string: `limit`, `cursor` and the named filters; anything else is 400.
pub fn parse(raw: Option<&str>, filters: &[&str]) -> Result<ListParams, ApiError> {
    let mut params = ListParams {
        limit: 20,
        cursor: None,
        filters: BTreeMap::new(),
    };
    let mut seen = std::collections::HashSet::new();
    for (name, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        if !seen.insert(name.to_string()) {
            return Err(ApiError::InvalidRequest(format!(
                "query parameter {name} is given more than once"
            )));
        }
        match name.as_ref() {
            "limit" => {
                params.limit = value
                    .parse::<i64>()
                    .ok()
                    .filter(|n| (1..=100).contains(n) && !value.starts_with('+'))
                    .ok_or_else(|| ApiError::InvalidRequest(LIMIT_MESSAGE.into()))?;
            }
            "cursor" => params.cursor = Some(value.into_owned()),
            other if filters.contains(&other) => {
                params.filters.insert(other.to_owned(), value.into_owned());
            }
            other => {
                let shown: String = other.chars().take(64).collect();
                let allowed = filters.join(", ");
                return Err(ApiError::InvalidRequest(format!(
                    "unknown query parameter {shown}; this list takes limit, cursor{}{allowed}",
                    if filters.is_empty() { "" } else { ", " }
                )));
            }
        }
    }
    Ok(params)
}

/// The cursor context of a list for this caller and these filters.
pub fn context(list: &str, caller: &Caller, params: &ListParams) -> CursorContext {
    let mut context = CursorContext::new(list, caller.cursor_scope());
    for (name, value) in &params.filters {
        context = context.with_filter(name.clone(), value.clone());
    }
    context
}

/// The position to continue after: `i64::MAX` for the first page.
pub fn start(
    paging: Paging<'_>,
    params: &ListParams,
    context: &CursorContext,
) -> Result<i64, ApiError> {
    match &params.cursor {
        None => Ok(i64::MAX),
        Some(token) => Ok(paging.cursors.open(token, context, paging.now)?),
    }
}

/// The envelope of a list with nothing in it: `{"data": [], "has_more": false}`.
pub fn empty() -> Value {
    let page: ListPage<Value> = ListPage {
        data: Vec::new(),
        has_more: false,
        next_cursor: None,
    };
    serde_json::to_value(page).unwrap_or(Value::Null)
}

/// Builds the envelope from up to `limit + 1` rows (seq, object), newest first.
pub fn envelope(
    paging: Paging<'_>,
    context: &CursorContext,
    limit: i64,
    mut rows: Vec<(i64, Value)>,
) -> Value {
    let has_more = i64::try_from(rows.len()).unwrap_or(i64::MAX) > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_cursor = match rows.last() {
        Some((last, _)) if has_more => Some(paging.cursors.issue(context, *last, paging.now)),
        _ => None,
    };
    let page = ListPage {
        data: rows.into_iter().map(|(_, v)| v).collect(),
        has_more,
        next_cursor,
    };
    serde_json::to_value(page).unwrap_or(Value::Null)
}
