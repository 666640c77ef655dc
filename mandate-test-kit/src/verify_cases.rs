//! The shared verification cases (testdata/verify/cases.json) run through the Rust API:
//! each check of a case built into `Counterparty::check` with an `ExpectedTransaction`, its
//! outcome compared with the one the file records. The npm package's tests
//! (bindings/wasm/package/test) and the Python package's (bindings/python/tests) run the
//! same file through their own `check`, so the three refuse exactly the same tokens with
//! the same codes. Used by mandate-core's tests/verify_cases.rs and by mandate-server's
//! tests/verify_cases, which writes the file from tokens the real server signs.

use mandate_core::{
    Allowance, Amount, CheckError, Counterparty, Currency, EnvironmentPolicy, ExpectedTransaction,
    JwkSet, LogEntry, LogKeys, MemoryReplayGuard, PaymentRequirements, Recipient, VerifiedVerdict,
};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The file, from the workspace root.
pub const PATH: &str = "testdata/verify/cases.json";

/// Runs every case of `file`; the failures, each naming its case and check.
pub fn run(file: &Value) -> Vec<String> {
    let mut failures = Vec::new();
    for case in file["cases"].as_array().into_iter().flatten() {
        // One replay guard per case: its checks run in order against the same guard.
        let mut guard = MemoryReplayGuard::default();
        for (i, check) in case["checks"].as_array().into_iter().flatten().enumerate() {
            if let Err(e) = run_check(file, check, &mut guard) {
                failures.push(format!("{} (check {}): {e}", case["name"], i + 1));
            }
        }
    }
    failures
}

fn run_check(file: &Value, check: &Value, guard: &mut MemoryReplayGuard) -> Result<(), String> {
    let token = file["tokens"][text(&check["token"])?]
        .as_str()
        .ok_or("the check names a token the file does not hold")?;
    let key_set = file["key_sets"][text(&check["key_set"])?].to_string();
    let jwks = JwkSet::from_json(key_set.as_bytes()).map_err(|e| e.to_string())?;
    let options = &check["options"];
    let mut counterparty = Counterparty::new(text(&options["issuer"])?)
        .leeway_secs(options["leeway_secs"].as_i64().unwrap_or(0));
    if options["environments"] == "live_or_sandbox" {
        counterparty = counterparty.environments(EnvironmentPolicy::LiveOrSandbox);
    }
    if options["require_log"] == true {
        let keys = LogKeys::from_jwks_json(key_set.as_bytes()).map_err(|e| e.to_string())?;
        counterparty = counterparty.require_log(keys);
    }
    let expected = expected(&check["expected"])?;
    let now = now(&options["now"])?;
    let checked = match &options["log"] {
        Value::Null => counterparty.check(token, &jwks, &expected, guard, now),
        entry => {
            let entry: LogEntry =
                serde_json::from_value(entry.clone()).map_err(|e| e.to_string())?;
            counterparty.check_logged(token, &entry, &jwks, &expected, guard, now)
        }
    };
    compare(&check["outcome"], &checked)
}

/// The outcome of a check as the file writes it: `{"ok": {…}}` or `{"error": code,
/// "objections": [codes]}`.
pub fn outcome(checked: &Result<VerifiedVerdict, CheckError>) -> Value {
    match checked {
        Ok(v) => json!({"ok": {
            "jti": v.claims.jti.as_str(),
            "verdict": v.claims.verdict.as_str(),
            "amount": v.claims.request.amount.to_string(),
            "currency": v.claims.request.currency.as_str(),
            "recipient": v.claims.request.recipient.as_str(),
            "kid": v.kid,
            "environment": v.environment.as_str(),
            "unchecked": serde_json::to_value(&v.unchecked).unwrap_or(Value::Null),
        }}),
        Err(e) => {
            let objections: Vec<&str> = match e {
                CheckError::Refused { objections, .. } => {
                    objections.iter().map(|o| o.code()).collect()
                }
                _ => Vec::new(),
            };
            json!({"error": e.code(), "objections": objections})
        }
    }
}

fn compare(want: &Value, checked: &Result<VerifiedVerdict, CheckError>) -> Result<(), String> {
    let got = outcome(checked);
    if &got == want {
        return Ok(());
    }
    let said = match checked {
        Ok(_) => String::new(),
        Err(e) => format!(" ({e})"),
    };
    Err(format!("expected {want}, got {got}{said}"))
}

fn text(value: &Value) -> Result<&str, String> {
    value
        .as_str()
        .ok_or_else(|| format!("{value} is not a string"))
}

/// The expected transaction of a check, through the Rust API.
fn expected(value: &Value) -> Result<ExpectedTransaction, String> {
    let amount = Amount::parse(text(&value["amount"])?).map_err(|e| e.to_string())?;
    let currency = Currency::parse(text(&value["currency"])?).map_err(|e| e.to_string())?;
    let recipient = Recipient::parse(text(&value["recipient"])?).map_err(|e| e.to_string())?;
    let mut out = ExpectedTransaction::new(amount, currency, recipient);
    if let Some(x402) = value.get("x402") {
        let requirements = PaymentRequirements::from_json(&x402["requirements"], "x402")
            .map_err(|e| e.to_string())?;
        let decimals = x402["decimals"].as_u64().map(|d| d as u32);
        out = out.with_x402(requirements, decimals);
    }
    if let Some(digest) = value["ap2"]["mandate"].as_str() {
        out = out.with_ap2_mandate(digest);
    }
    if let Some(id) = value["ap2"]["transaction"].as_str() {
        out = out.with_ap2_transaction(id);
    }
    if let Some(acp) = value.get("acp") {
        let allowance =
            Allowance::from_json(&acp["allowance"], "acp.allowance").map_err(|e| e.to_string())?;
        out = out.with_acp(allowance);
    }
    Ok(out)
}

/// `now`: unix seconds or an RFC 3339 string.
fn now(value: &Value) -> Result<OffsetDateTime, String> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
            .ok_or_else(|| format!("now {n} is not unix seconds")),
        Value::String(s) => OffsetDateTime::parse(s, &Rfc3339).map_err(|e| e.to_string()),
        other => Err(format!("now {other} is neither unix seconds nor RFC 3339")),
    }
}
