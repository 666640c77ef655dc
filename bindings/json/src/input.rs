//! The arguments, read from JSON text at the edge into mandate-core's types: every error
//! names the member and says what to write instead, and a member this crate does not know
//! is refused (a misspelt `recipent` must not leave the recipient unchecked).

use mandate_core::{
    Allowance, Amount, Currency, EnvironmentPolicy, ExpectedTransaction, LogEntry,
    PaymentRequirements, Recipient,
};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The transaction a verdict must be for, read from JSON.
#[derive(Debug, Clone)]
pub struct Expected(ExpectedTransaction);

/// How to check, read from JSON.
#[derive(Debug, Clone)]
pub struct Options {
    /// The expected issuer (the service's verdicts URL).
    pub issuer: String,
    /// The instant of the check.
    pub now: OffsetDateTime,
    /// The environments whose keys are accepted.
    pub environments: EnvironmentPolicy,
    /// Clock skew allowed on `exp` and `iat`, in seconds.
    pub leeway_secs: i64,
    /// Whether proof that the verdict is in the issuer's log is required.
    pub require_log: bool,
    /// The decision's `log` member, if it came with the token.
    pub log: Option<LogEntry>,
}

/// A JSON object from `text`, with `what` in the error.
fn object(text: &str, what: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!("{what} must be an object")),
        Err(e) => Err(format!("{what} is not JSON: {e}")),
    }
}

/// Refuses the members of `map` that are not in `known`.
fn only(map: &Map<String, Value>, known: &[&str], what: &str) -> Result<(), String> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(format!(
            "{what}.{unknown} is not a member this check knows (it knows {})",
            known.join(", ")
        )),
        None => Ok(()),
    }
}

/// The string member `name` of `map`, if present.
fn string<'a>(
    map: &'a Map<String, Value>,
    name: &str,
    what: &str,
) -> Result<Option<&'a str>, String> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{what}.{name} must be a string")),
    }
}

/// The string member `name` of `map`, required.
fn required<'a>(map: &'a Map<String, Value>, name: &str, what: &str) -> Result<&'a str, String> {
    string(map, name, what)?.ok_or_else(|| format!("{what}.{name} is missing"))
}

impl Expected {
    /// Reads `{"amount", "currency", "recipient", "x402"?, "ap2"?, "acp"?}`.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let map = object(text, "expected")?;
        only(
            &map,
            &["amount", "currency", "recipient", "x402", "ap2", "acp"],
            "expected",
        )?;
        let amount = match map.get("amount") {
            Some(Value::String(s)) => {
                Amount::parse(s).map_err(|e| format!("expected.amount {s:?}: {e}"))?
            }
            Some(Value::Number(n)) => {
                return Err(format!(
                    "expected.amount must be a decimal string such as \"{n}\", not a number: a float may already have rounded it"
                ));
            }
            Some(_) => {
                return Err("expected.amount must be a decimal string such as \"42.50\"".into());
            }
            None => return Err("expected.amount is missing".into()),
        };
        let currency = required(&map, "currency", "expected")?;
        let currency = Currency::parse(currency)
            .map_err(|e| format!("expected.currency {currency:?}: {e}"))?;
        let recipient = required(&map, "recipient", "expected")?;
        let recipient = Recipient::parse(recipient)
            .map_err(|e| format!("expected.recipient {recipient:?}: {e}"))?;
        let mut transaction = ExpectedTransaction::new(amount, currency, recipient);
        if let Some(x402) = map.get("x402").filter(|v| !v.is_null()) {
            transaction = with_x402(transaction, x402)?;
        }
        if let Some(ap2) = map.get("ap2").filter(|v| !v.is_null()) {
            transaction = with_ap2(transaction, ap2)?;
        }
        if let Some(acp) = map.get("acp").filter(|v| !v.is_null()) {
            transaction = with_acp(transaction, acp)?;
        }
        Ok(Self(transaction))
    }

    /// The transaction, as mandate-core takes it.
    pub fn transaction(&self) -> ExpectedTransaction {
        self.0.clone()
    }
}

/// `{"requirements": {…}, "decimals": 6}`: the x402 payment to be settled.
fn with_x402(
    transaction: ExpectedTransaction,
    x402: &Value,
) -> Result<ExpectedTransaction, String> {
    let Value::Object(map) = x402 else {
        return Err(
            "expected.x402 must be an object {\"requirements\": {…}, \"decimals\": 6}".into(),
        );
    };
    only(map, &["requirements", "decimals"], "expected.x402")?;
    let requirements = map
        .get("requirements")
        .ok_or("expected.x402.requirements is missing: the x402 PaymentRequirements the payment was made against")?;
    let requirements = PaymentRequirements::from_json(requirements, "expected.x402.requirements")
        .map_err(|e| e.to_string())?;
    let decimals = match map.get("decimals") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_u64()
                .and_then(|d| u32::try_from(d).ok())
                .ok_or("expected.x402.decimals must be a whole number (6 for USDC)")?,
        ),
    };
    Ok(transaction.with_x402(requirements, decimals))
}

/// `{"mandate": digest, "transaction": id}`: the AP2 mandates the payment is made under.
fn with_ap2(
    mut transaction: ExpectedTransaction,
    ap2: &Value,
) -> Result<ExpectedTransaction, String> {
    let Value::Object(map) = ap2 else {
        return Err(
            "expected.ap2 must be an object {\"mandate\": digest, \"transaction\": id}".into(),
        );
    };
    only(map, &["mandate", "transaction"], "expected.ap2")?;
    if let Some(digest) = string(map, "mandate", "expected.ap2")? {
        transaction = transaction.with_ap2_mandate(digest);
    }
    if let Some(id) = string(map, "transaction", "expected.ap2")? {
        transaction = transaction.with_ap2_transaction(id);
    }
    Ok(transaction)
}

/// `{"allowance": {…}}`: the ACP delegated payment allowance the payment is made under.
fn with_acp(transaction: ExpectedTransaction, acp: &Value) -> Result<ExpectedTransaction, String> {
    let Value::Object(map) = acp else {
        return Err("expected.acp must be an object {\"allowance\": {…}}".into());
    };
    only(map, &["allowance"], "expected.acp")?;
    let allowance = map
        .get("allowance")
        .ok_or("expected.acp.allowance is missing: the ACP allowance the payment is made under")?;
    let allowance =
        Allowance::from_json(allowance, "expected.acp.allowance").map_err(|e| e.to_string())?;
    Ok(transaction.with_acp(allowance))
}

impl Options {
    /// Reads `{"issuer", "now", "environments"?, "leeway_secs"?, "require_log"?, "log"?}`.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let map = object(text, "options")?;
        only(
            &map,
            &[
                "issuer",
                "now",
                "environments",
                "leeway_secs",
                "require_log",
                "log",
            ],
            "options",
        )?;
        let issuer = required(&map, "issuer", "options")
            .map_err(|e| format!("{e}: the verdicts URL of the service whose tokens you accept"))?;
        let environments = match string(&map, "environments", "options")? {
            None | Some("live_only") => EnvironmentPolicy::LiveOnly,
            Some("live_or_sandbox") => EnvironmentPolicy::LiveOrSandbox,
            Some(other) => {
                return Err(format!(
                    "options.environments {other:?} is neither \"live_only\" nor \"live_or_sandbox\""
                ));
            }
        };
        let leeway_secs = match map.get("leeway_secs") {
            None | Some(Value::Null) => 0,
            Some(value) => value
                .as_i64()
                .filter(|s| *s >= 0)
                .ok_or("options.leeway_secs must be a whole number of seconds, 0 or more")?,
        };
        let require_log = match map.get("require_log") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("options.require_log must be true or false".into()),
        };
        let log = match map.get("log") {
            None | Some(Value::Null) => None,
            Some(entry) => Some(serde_json::from_value(entry.clone()).map_err(|e| {
                format!("options.log: {e}; pass the decision's `log` member as it came")
            })?),
        };
        Ok(Self {
            issuer: issuer.to_owned(),
            now: now(map.get("now"))?,
            environments,
            leeway_secs,
            require_log,
            log,
        })
    }
}

/// `now`: whole unix seconds, or an RFC 3339 string.
fn now(value: Option<&Value>) -> Result<OffsetDateTime, String> {
    const HOW: &str = "whole unix seconds or an RFC 3339 string such as \"2026-11-22T12:00:00Z\"";
    match value {
        None | Some(Value::Null) => Err(format!(
            "options.now is missing: pass the current time, as {HOW}"
        )),
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
            .ok_or_else(|| format!("options.now {n} is not {HOW}")),
        Some(Value::String(s)) => OffsetDateTime::parse(s, &Rfc3339)
            .map_err(|e| format!("options.now {s:?} is not {HOW}: {e}")),
        Some(_) => Err(format!("options.now must be {HOW}")),
    }
}
