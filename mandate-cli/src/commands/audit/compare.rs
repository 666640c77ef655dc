//! Whether the decisions the API serves are the log's: for a window of leaf indexes, the
//! decisions the API serves there (the export, in its `seq` order, from the decision
//! before the window) are matched with the leaves by the hash of their verdict tokens.
//!
//! The leaves are the auditor's own (its mirror, and the new leaves it checked against the
//! new checkpoint), never the service's word; the log's entries (verdict tokens) only name
//! the decision at an index and show what differs. A leaf no decision hashes to was
//! deleted, or changed when a decision served in its place (same id, or the same slot)
//! hashes to nothing logged; decisions served out of the leaves' order were reordered.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead as _, BufReader};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mandate_core::{JwkSet, VerifyOptions, verify_verdict};
use mandate_protocol::tlog::{LogHash, leaf_hash};
use serde_json::{Map, Value};

use crate::client::Client;
use crate::error::CliError;
use crate::output;

/// A decision as the API serves it.
struct Served {
    id: String,
    token: String,
    /// The index its `log` member gives, when it has one.
    index: Option<u64>,
}

impl Served {
    fn from_value(value: &Value) -> Option<Self> {
        Some(Self {
            id: value.get("id")?.as_str()?.to_owned(),
            token: value.get("verdict_token")?.as_str()?.to_owned(),
            index: value.get("log").and_then(|l| l.get("index")?.as_u64()),
        })
    }
}

/// What the comparison knows of the log: the true leaves from index 0, and the entries
/// (verdict tokens) it read, by index.
pub struct Log<'a> {
    /// Leaf hashes, from index 0.
    pub leaves: &'a [LogHash],
    /// Verdict tokens by leaf index, where known.
    pub entries: &'a HashMap<u64, String>,
    /// The verdict keys, to say whether a changed token still verifies.
    pub keys: &'a JwkSet,
}

impl Log<'_> {
    fn id(&self, index: u64) -> Option<String> {
        jti(self.entries.get(&index)?)
    }
}

/// The decision id (`jti`) of a verdict token.
pub fn jti(token: &str) -> Option<String> {
    Some(claims(token)?.get("jti")?.as_str()?.to_owned())
}

/// The claims of a compact JWS, as a JSON object; `None` when it is not one.
pub fn claims(token: &str) -> Option<Map<String, Value>> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// Checks a verdict token's signature against `keys` as of its own `iat`, under its own
/// `iss` (the caller compares the issuer with the log's): a logged token may have expired
/// long ago, and still proves what was answered.
pub fn verify_signature(token: &str, keys: &JwkSet) -> Result<(), String> {
    let claims = claims(token).ok_or("it is not a compact JWS with JSON claims")?;
    let iss = claims
        .get("iss")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let iat = claims
        .get("iat")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let now = time::OffsetDateTime::from_unix_timestamp(iat)
        .map_err(|_| format!("its iat {iat} is not a time"))?;
    let options = VerifyOptions {
        issuer: iss.to_owned(),
        now,
        leeway_secs: 0,
    };
    verify_verdict(token, keys, &options)
        .map(|_| ())
        .map_err(|e| output::token_error(&e))
}

/// The claims that differ between a served token and the logged one, as `name: the API
/// serves X, the log holds Y` (nested members by their dotted path).
pub fn differences(served: &str, logged: &str) -> Vec<String> {
    let (Some(a), Some(b)) = (claims(served), claims(logged)) else {
        return vec!["the tokens' claims cannot be read".to_owned()];
    };
    let mut out = Vec::new();
    diff_objects("", &Value::Object(a), &Value::Object(b), &mut out);
    out
}

fn diff_objects(path: &str, served: &Value, logged: &Value, out: &mut Vec<String>) {
    match (served, logged) {
        (Value::Object(a), Value::Object(b)) => {
            let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
            names.sort();
            names.dedup();
            for name in names {
                let path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                let none = Value::Null;
                diff_objects(
                    &path,
                    a.get(name).unwrap_or(&none),
                    b.get(name).unwrap_or(&none),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(format!("{path}: the API serves {a}, the log holds {b}")),
        _ => {}
    }
}

/// Compares the decisions the API serves at leaf indexes `from..to` with the log's
/// leaves; what differs, each naming the decision.
pub fn window(client: &Client, log: &Log<'_>, from: u64, to: u64) -> Result<Vec<String>, CliError> {
    let count = usize::try_from(to - from).unwrap_or(usize::MAX);
    let mut findings = Vec::new();
    let mut served = Vec::new();
    // The export resumes after the decision before the window; failing that (unknown, or
    // no longer served), after the window's first, which is read alone.
    let anchor = if from == 0 {
        Some((None, count))
    } else if let Some(before) = log.id(from - 1) {
        Some((Some(before), count))
    } else if let Some(first) = log.id(from) {
        match read_one(client, &first)? {
            Some(decision) => {
                served.push(decision);
                Some((Some(first), count - 1))
            }
            None => None,
        }
    } else {
        None
    };
    // Neither the decision before the window nor its first is known (the log serves no
    // entries there: leaves logged before the service kept them): nothing finds the
    // window's place in the export, and nothing is said of it.
    if anchor.is_none() && (from..to).all(|i| log.id(i).is_none()) {
        output::note(&format!(
            "the decisions at leaves {from} to {} are not compared with the API: the log serves no entries there to find them by",
            to - 1
        ));
        return Ok(findings);
    }
    let exported = match anchor {
        Some((after, n)) => export(client, after.as_deref(), n)?,
        None => None,
    };
    match exported {
        Some(lines) => served.extend(lines),
        // The anchor is gone: each decision the log names is read by its id.
        None => {
            for index in from..to {
                if let Some(id) = log.id(index)
                    && let Some(decision) = read_one(client, &id)?
                {
                    served.push(decision);
                }
            }
        }
    }
    analyse(log, from, to, &served, &mut findings);
    Ok(findings)
}

/// `GET /decisions/{id}`; `None` on a 404.
fn read_one(client: &Client, id: &str) -> Result<Option<Served>, CliError> {
    match client.get(&format!("/decisions/{id}"), &[]) {
        Ok(response) => Ok(Served::from_value(&response.body)),
        Err(CliError::Api { status: 404, .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The first `n` decisions with a token of the export after `after`; `None` when `after`
/// is not served (404).
fn export(client: &Client, after: Option<&str>, n: usize) -> Result<Option<Vec<Served>>, CliError> {
    let query: Vec<(&str, String)> = after.map(|a| ("after", a.to_owned())).into_iter().collect();
    let response = match client.get_stream("/exports/decisions", &query) {
        Ok(response) => response,
        Err(CliError::Api { status: 404, .. }) if after.is_some() => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = Vec::with_capacity(n);
    for line in BufReader::new(response).lines() {
        if out.len() == n {
            break;
        }
        let line =
            line.map_err(|e| CliError::Incomplete(format!("the export was cut off: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line)
            .map_err(|e| CliError::Incomplete(format!("a line of the export is not JSON: {e}")))?;
        if let Some(decision) = Served::from_value(&value) {
            out.push(decision);
        }
    }
    Ok(Some(out))
}

/// Matches the served decisions with the leaves `from..to`.
fn analyse(log: &Log<'_>, from: u64, to: u64, served: &[Served], findings: &mut Vec<String>) {
    let at: HashMap<LogHash, u64> = (from..to)
        .filter_map(|i| Some((*log.leaves.get(usize::try_from(i).ok()?)?, i)))
        .collect();
    let places: Vec<Option<u64>> = served
        .iter()
        .map(|d| at.get(&leaf_hash(d.token.as_bytes())).copied())
        .collect();
    let found: HashSet<u64> = places.iter().flatten().copied().collect();
    // Served in the log's order, and at the index the log has them.
    let mut previous: Option<(u64, &str)> = None;
    for (decision, place) in served.iter().zip(&places) {
        let Some(index) = *place else { continue };
        if let Some((before, id)) = previous
            && before > index
        {
            findings.push(format!(
                "decision {} (logged at index {index}) is served after decision {id} (logged at index {before}): the API serves them out of the log's order (their seq was changed)",
                decision.id
            ));
        }
        if let Some(claimed) = decision.index
            && claimed != index
        {
            findings.push(format!(
                "decision {} is logged at index {index}, the API gives it index {claimed}",
                decision.id
            ));
        }
        previous = Some((index, &decision.id));
    }
    // Decisions served that hash to no leaf of the window, up to the last one that does
    // (those after it are later decisions, read past a deleted one).
    let last = places.iter().rposition(Option::is_some);
    let mut stray: Vec<&Served> = served
        .iter()
        .zip(&places)
        .enumerate()
        .filter(|(i, (_, place))| place.is_none() && last.is_none_or(|l| *i < l))
        .map(|(_, (d, _))| d)
        .collect();
    // A served decision past the last found one may still be a changed leaf at the end of
    // the window: kept when its id is the one the log holds at a missing index.
    let missing: Vec<u64> = (from..to).filter(|i| !found.contains(i)).collect();
    for (i, (decision, place)) in served.iter().zip(&places).enumerate() {
        if place.is_none()
            && last.is_some_and(|l| i > l)
            && missing
                .iter()
                .any(|m| log.id(*m).as_deref() == Some(&decision.id))
        {
            stray.push(decision);
        }
    }
    let mut unpaired = Vec::new();
    for index in missing {
        let logged_id = log.id(index);
        let by_id = stray
            .iter()
            .position(|d| logged_id.as_deref() == Some(d.id.as_str()));
        match by_id {
            Some(k) => {
                let decision = stray.remove(k);
                findings.push(changed(log, index, decision));
            }
            None => unpaired.push((index, logged_id)),
        }
    }
    // Leaves no decision hashes to, and decisions of unknown id in their slots: paired in
    // order when the decision is not the log's at another index.
    let known: HashSet<String> = (from..to).filter_map(|i| log.id(i)).collect();
    let mut strangers = stray.into_iter().filter(|d| !known.contains(&d.id));
    for (index, logged_id) in unpaired {
        match (strangers.next(), logged_id) {
            (Some(decision), logged) => findings.push(replaced(log, index, decision, logged)),
            (None, Some(id)) => findings.push(format!(
                "decision {id} (index {index}) is in the log but the API no longer serves it: it was deleted"
            )),
            (None, None) => findings.push(format!(
                "the decision logged at index {index} is not served by the API: it was deleted"
            )),
        }
    }
}

/// A decision served under its logged id with another token.
fn changed(log: &Log<'_>, index: u64, decision: &Served) -> String {
    let mut text = format!("decision {} (index {index}) was changed", decision.id);
    match log.entries.get(&index) {
        Some(logged) => {
            text.push_str(": ");
            text.push_str(&differences(&decision.token, logged).join("; "));
        }
        None => text.push_str(": the API serves a verdict token that is not the one logged"),
    }
    if let Err(reason) = verify_signature(&decision.token, log.keys) {
        text.push_str(&format!(
            "; the token served does not verify ({reason}): the decision was changed after it was signed"
        ));
    }
    text
}

/// Another decision, or another token, served where the log holds `logged`.
fn replaced(log: &Log<'_>, index: u64, decision: &Served, logged: Option<String>) -> String {
    let mut text = match (&logged, log.entries.get(&index)) {
        (Some(id), Some(token)) => {
            let diffs = differences(&decision.token, token);
            format!(
                "index {index}: the API serves decision {} where the log holds decision {id}{}",
                decision.id,
                if diffs.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", diffs.join("; "))
                }
            )
        }
        _ => format!(
            "decision {} (index {index}): the API serves a verdict token that is not the one the log holds at index {index}",
            decision.id
        ),
    };
    if let Err(reason) = verify_signature(&decision.token, log.keys) {
        text.push_str(&format!(
            "; the token served does not verify ({reason}): the decision was changed after it was signed"
        ));
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn token(claims: &Value) -> String {
        format!("e30.{}.sig", URL_SAFE_NO_PAD.encode(claims.to_string()))
    }

    fn log_of(tokens: &[String]) -> (Vec<LogHash>, HashMap<u64, String>) {
        let leaves = tokens.iter().map(|t| leaf_hash(t.as_bytes())).collect();
        let entries = tokens
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, t)| (i as u64, t))
            .collect();
        (leaves, entries)
    }

    fn served(tokens: &[String]) -> Vec<Served> {
        tokens
            .iter()
            .map(|t| Served {
                id: jti(t).unwrap(),
                token: t.clone(),
                index: None,
            })
            .collect()
    }

    fn findings(logged: &[String], shown: &[String]) -> Vec<String> {
        let (leaves, entries) = log_of(logged);
        let keys = JwkSet { keys: Vec::new() };
        let log = Log {
            leaves: &leaves,
            entries: &entries,
            keys: &keys,
        };
        let mut out = Vec::new();
        analyse(&log, 0, logged.len() as u64, &served(shown), &mut out);
        out
    }

    fn tokens(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| token(&serde_json::json!({"jti": format!("dec_{i}"), "verdict": "deny", "request": {"amount": "1"}})))
            .collect()
    }

    #[test]
    fn the_same_decisions_in_order_differ_in_nothing() {
        let logged = tokens(5);
        let mut shown = logged.clone();
        shown.push(token(&serde_json::json!({"jti": "dec_later"})));
        assert_eq!(findings(&logged, &shown), Vec::<String>::new());
    }

    #[test]
    fn each_change_is_named_with_its_decision() {
        let logged = tokens(5);
        // Changed: the amount and the verdict of dec_2.
        let mut shown = logged.clone();
        shown[2] = token(
            &serde_json::json!({"jti": "dec_2", "verdict": "allow", "request": {"amount": "2"}}),
        );
        let out = findings(&logged, &shown);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].starts_with("decision dec_2 (index 2) was changed: request.amount: the API serves \"2\", the log holds \"1\"; verdict: the API serves \"allow\", the log holds \"deny\""), "{out:?}");
        // Deleted: dec_3, a later decision read in its stead at the end.
        let mut shown = logged.clone();
        shown.remove(3);
        shown.push(token(&serde_json::json!({"jti": "dec_later"})));
        assert_eq!(
            findings(&logged, &shown),
            [
                "decision dec_3 (index 3) is in the log but the API no longer serves it: it was deleted"
            ]
        );
        // Swapped: dec_1 and dec_2.
        let mut shown = logged.clone();
        shown.swap(1, 2);
        let out = findings(&logged, &shown);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].starts_with("decision dec_1 (logged at index 1) is served after decision dec_2 (logged at index 2)"), "{out:?}");
        // Replaced: another decision in the slot of dec_4, the last one.
        let mut shown = logged.clone();
        shown[4] = token(&serde_json::json!({"jti": "dec_other"}));
        let out = findings(&logged, &shown);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(
            out[0].starts_with(
                "decision dec_4 (index 4) is in the log but the API no longer serves it"
            ),
            "{out:?}"
        );
    }
}
