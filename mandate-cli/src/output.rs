//! Printing: aligned tables and field lists for people, the server's JSON for scripts,
//! notes and progress on stderr. Nothing here panics on a closed pipe: writes return
//! their error, which the caller turns into an exit code.

use std::io::Write as _;

use serde::Serialize;
// Answers shown as the server sent them: the field lists read any JSON, so that a member
// this CLI does not know is shown too.
use serde_json::Value;

use crate::error::CliError;

/// Prints a JSON value (an answer as the server sent it, or one of the CLI's own typed
/// reports), pretty, on stdout. Numbers keep their exact text.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::usage(format!("cannot encode JSON: {e}")))?;
    line(&text)
}

/// Prints one line on stdout.
pub fn line(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(())
}

/// A note for the person at the terminal, on stderr (never mixed into stdout).
pub fn note(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "note: {text}");
}

/// Rewrites the progress line on stderr (only called when stderr is a terminal).
pub fn progress(text: &str) {
    let _ = write!(std::io::stderr().lock(), "\r\x1b[K{text}");
}

/// Clears the progress line.
pub fn progress_done() {
    let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
}

/// A JSON value as a table cell: strings bare, numbers exact, arrays comma-separated,
/// null or absent as `-`.
pub fn text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "-".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) if items.is_empty() => "-".to_owned(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| text(Some(v)))
            .collect::<Vec<_>>()
            .join(","),
        Some(other) => other.to_string(),
    }
}

/// An optional field as a cell: its text, or `-` when absent or null (as [`text`]).
pub fn opt<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A list field as a cell: comma-separated, `-` when empty (as [`text`]).
pub fn joined<T: ToString>(items: &[T]) -> String {
    if items.is_empty() {
        return "-".to_owned();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `1 page`, `3 pages`: a count and its noun, singular for one.
pub fn count(n: impl Into<u64>, singular: &str, plural: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { singular } else { plural })
}

/// A time given in seconds since the epoch, as the wire writes times (UTC); the raw number
/// when it is out of range.
pub fn unix_time(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .map_or_else(|_| secs.to_string(), mandate_protocol::timefmt::format)
}

/// Why a token was refused, in words: the core's message, with an expiry given as a UTC
/// time rather than seconds since the epoch.
pub fn token_error(error: &mandate_core::TokenError) -> String {
    match error {
        mandate_core::TokenError::Expired { exp } => {
            format!("token expired at {}", unix_time(*exp))
        }
        other => other.to_string(),
    }
}

/// A timestamp as a cell, in the wire's format.
pub fn time(at: time::OffsetDateTime) -> String {
    mandate_protocol::timefmt::format(at)
}

/// A table column: its header and how a cell is read from a typed object.
pub type Column<T> = (&'static str, fn(&T) -> String);

/// Prints rows under headers, columns aligned. An empty list prints `(none)`.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> Result<(), CliError> {
    if rows.is_empty() {
        return line("(none)");
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let render = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(cell);
            let pad = widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(cell.chars().count());
            if i + 1 < widths.len() {
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", render(&mut headers.iter().copied()))?;
    for row in rows {
        writeln!(out, "{}", render(&mut row.iter().map(String::as_str)))?;
    }
    Ok(())
}

/// Rows of a list: one row per object, one column per (header, cell reader).
pub fn list_table<'a, T: 'a>(
    columns: &[Column<T>],
    objects: impl IntoIterator<Item = &'a T>,
) -> Result<(), CliError> {
    let headers: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    let rows: Vec<Vec<String>> = objects
        .into_iter()
        .map(|o| columns.iter().map(|(_, read)| read(o)).collect())
        .collect();
    table(&headers, &rows)
}

/// Flattens an object into (dotted name, cell) pairs, in the object's key order, without
/// the members named in `except` (shown otherwise, or not at all).
pub fn flatten(value: &Value, except: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    match value.as_object() {
        Some(members) if !members.is_empty() => {
            for (key, inner) in members {
                if !except.contains(&key.as_str()) {
                    flatten_into(inner, key, &mut out);
                }
            }
        }
        _ => flatten_into(value, "", &mut out),
    }
    out
}

fn flatten_into(value: &Value, prefix: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, inner) in map {
                let name = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten_into(inner, &name, out);
            }
        }
        other => out.push((prefix.to_owned(), text(Some(other)))),
    }
}

/// Prints `name  value` lines, names aligned.
pub fn fields(pairs: &[(String, String)]) -> Result<(), CliError> {
    let width = pairs
        .iter()
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = std::io::stdout().lock();
    for (name, value) in pairs {
        writeln!(out, "{name:<width$}  {value}")?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn cells_keep_exact_numbers_and_flatten_nests() {
        let value: Value = serde_json::from_str(
            r#"{"id": "dec_1", "request": {"amount": 100.10, "category": "x"}, "tags": ["a", "b"], "reason": null}"#,
        )
        .unwrap();
        let cells = flatten(&value, &[]);
        let cell = |name: &str| {
            cells
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(cell("request.amount"), Some("100.10"));
        assert_eq!(cell("tags"), Some("a,b"));
        assert_eq!(cell("reason"), Some("-"));
        assert_eq!(text(value.get("missing")), "-");
        assert_eq!(count(1u64, "page", "pages"), "1 page");
        assert_eq!(count(3u64, "page", "pages"), "3 pages");
        assert_eq!(unix_time(1_795_534_997), "2026-11-24T15:43:17Z");
        let expired = mandate_core::TokenError::Expired { exp: 1_795_534_997 };
        assert_eq!(
            token_error(&expired),
            "token expired at 2026-11-24T15:43:17Z"
        );
        let names: Vec<String> = flatten(&value, &[]).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["id", "reason", "request.amount", "request.category", "tags"]
        );
        let without: Vec<String> = flatten(&value, &["request", "tags"])
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(without, ["id", "reason"]);
    }
}
