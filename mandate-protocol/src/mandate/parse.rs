//! Reading a mandate body: [`MandateDraft::from_json`], section by section (agent,
//! principal, limits, categories, review_above, the days, escrow, recipients), naming the
//! offending field in every error.

use serde_json::{Map, Value};
use time::Date;

use super::{
    CountLimits, EscrowTerms, Limits, MAX_COUNT_LIMIT, MAX_RECIPIENT_ENTRIES, MandateDraft,
    RecipientPattern, Recipients, format_date, parse_date,
};
use crate::field::{FieldError, amount, check_fields, invalid, present, required, string};
use crate::id::AgentId;
use crate::names::{Category, Currency, Principal};

const READ_ONLY_FIELDS: &[&str] = &["id", "status", "created_at", "agent_key", "revoked_at"];
const LIMIT_FIELDS: &[&str] = &[
    "per_transaction",
    "min_per_transaction",
    "per_day",
    "per_week",
    "per_month",
    "total",
    "count",
    "currency",
];
const COUNT_FIELDS: &[&str] = &["per_day", "per_week", "per_month", "total"];
const TOP_FIELDS: &[&str] = &[
    "agent",
    "principal",
    "limits",
    "categories",
    "review_above",
    "expires",
    "not_before",
    "escrow",
    "recipients",
];

impl MandateDraft {
    /// Parses and validates a mandate body, naming the field in every error. The sections
    /// are read in the order of the body's documentation, so the first problem found is the
    /// one reported.
    pub fn from_json(body: &Value) -> Result<Self, FieldError> {
        let object = body.as_object().ok_or(FieldError::NotAnObject)?;
        check_fields(object, "", TOP_FIELDS, READ_ONLY_FIELDS)?;
        let agent = agent_from(required(object, "agent", "agent")?)?;
        let principal = present(object, "principal")
            .map(principal_from)
            .transpose()?;
        let limits = limits_from(required(object, "limits", "limits")?)?;
        let categories = categories_from(required(object, "categories", "categories")?)?;
        let review_above = present(object, "review_above")
            .map(|v| amount(v, "review_above"))
            .transpose()?;
        let (expires, not_before) = days_from(object)?;
        let escrow = present(object, "escrow").map(escrow_from).transpose()?;
        let recipients = present(object, "recipients")
            .map(recipients_from)
            .transpose()?;
        Ok(Self {
            agent,
            principal,
            limits,
            categories,
            review_above,
            expires,
            not_before,
            escrow,
            recipients,
        })
    }
}

/// Parses `agent`: an agent id, `agt_<name>`.
fn agent_from(value: &Value) -> Result<AgentId, FieldError> {
    AgentId::parse(string(value, "agent")?)
        .map_err(|_| invalid("agent", "must be an agent id, agt_<name>"))
}

/// Parses `principal`: `role:<name>`.
fn principal_from(value: &Value) -> Result<Principal, FieldError> {
    Principal::parse(string(value, "principal")?).map_err(|e| invalid("principal", e))
}

/// Parses `limits`: `per_transaction` and `currency` required, the other limits optional,
/// `min_per_transaction` at most `per_transaction`.
fn limits_from(value: &Value) -> Result<Limits, FieldError> {
    let object = value
        .as_object()
        .ok_or_else(|| invalid("limits", "must be an object"))?;
    check_fields(object, "limits.", LIMIT_FIELDS, &[])?;
    let optional = |key: &str| {
        present(object, key)
            .map(|v| amount(v, &format!("limits.{key}")))
            .transpose()
    };
    let per_transaction = amount(
        required(object, "per_transaction", "limits.per_transaction")?,
        "limits.per_transaction",
    )?;
    let min_per_transaction = optional("min_per_transaction")?;
    if let Some(minimum) = min_per_transaction
        && minimum > per_transaction
    {
        return Err(invalid(
            "limits.min_per_transaction",
            format!("must be <= limits.per_transaction ({per_transaction})"),
        ));
    }
    Ok(Limits {
        per_transaction,
        min_per_transaction,
        per_day: optional("per_day")?,
        per_week: optional("per_week")?,
        per_month: optional("per_month")?,
        total: optional("total")?,
        count: present(object, "count")
            .map(count_limits_from)
            .transpose()?,
        currency: currency_from(required(object, "currency", "limits.currency")?)?,
    })
}

/// Parses `limits.currency`.
fn currency_from(value: &Value) -> Result<Currency, FieldError> {
    Currency::parse(string(value, "limits.currency")?).map_err(|e| invalid("limits.currency", e))
}

/// Parses `categories`: 1 to 100 categories; duplicates are dropped, the order kept.
fn categories_from(value: &Value) -> Result<Vec<Category>, FieldError> {
    let items = value
        .as_array()
        .ok_or_else(|| invalid("categories", "must be an array of strings"))?;
    if items.is_empty() {
        return Err(invalid("categories", "must not be empty"));
    }
    if items.len() > 100 {
        return Err(invalid("categories", "must have at most 100 entries"));
    }
    let mut categories: Vec<Category> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = format!("categories[{i}]");
        let category = Category::parse(string(item, &path)?).map_err(|e| invalid(&path, e))?;
        if !categories.contains(&category) {
            categories.push(category);
        }
    }
    Ok(categories)
}

/// Parses `expires` (required) and `not_before` (optional, on or before `expires`).
fn days_from(object: &Map<String, Value>) -> Result<(Date, Option<Date>), FieldError> {
    let expires_text = string(required(object, "expires", "expires")?, "expires")?;
    let expires =
        parse_date(expires_text).ok_or_else(|| invalid("expires", "must be a date, YYYY-MM-DD"))?;
    let not_before = match present(object, "not_before") {
        Some(v) => Some(
            parse_date(string(v, "not_before")?)
                .ok_or_else(|| invalid("not_before", "must be a date, YYYY-MM-DD"))?,
        ),
        None => None,
    };
    if let Some(start) = not_before
        && start > expires
    {
        return Err(invalid(
            "not_before",
            format!("must be on or before expires ({})", format_date(expires)),
        ));
    }
    Ok((expires, not_before))
}

/// Parses `escrow`: `{"required_above": amount}`.
fn escrow_from(value: &Value) -> Result<EscrowTerms, FieldError> {
    let object = value
        .as_object()
        .ok_or_else(|| invalid("escrow", "must be an object"))?;
    check_fields(object, "escrow.", &["required_above"], &[])?;
    let required_above = amount(
        required(object, "required_above", "escrow.required_above")?,
        "escrow.required_above",
    )?;
    Ok(EscrowTerms { required_above })
}

/// Parses `limits.count`: an object of whole numbers from 1 to [`MAX_COUNT_LIMIT`], at
/// least one of `per_day`, `per_week`, `per_month` and `total`.
fn count_limits_from(value: &Value) -> Result<CountLimits, FieldError> {
    let object = value
        .as_object()
        .ok_or_else(|| invalid("limits.count", "must be an object"))?;
    check_fields(object, "limits.count.", COUNT_FIELDS, &[])?;
    let number = |key: &str| -> Result<Option<u64>, FieldError> {
        let path = format!("limits.count.{key}");
        let Some(v) = present(object, key) else {
            return Ok(None);
        };
        // A whole number, also when written with a zero fraction (`3.0`: JSON Schema's
        // integer), read from the number's text, never through a float.
        let whole = v.as_u64().or_else(|| {
            let text = v.as_number()?.to_string();
            let value = rust_decimal::Decimal::from_str_exact(&text).ok()?;
            if !value.fract().is_zero() {
                return None;
            }
            rust_decimal::prelude::ToPrimitive::to_u64(&value)
        });
        match whole {
            Some(n) if (1..=MAX_COUNT_LIMIT).contains(&n) => Ok(Some(n)),
            _ => Err(invalid(
                &path,
                format!("must be a whole number from 1 to {MAX_COUNT_LIMIT}"),
            )),
        }
    };
    let limits = CountLimits {
        per_day: number("per_day")?,
        per_week: number("per_week")?,
        per_month: number("per_month")?,
        total: number("total")?,
    };
    if limits == CountLimits::default() {
        return Err(invalid(
            "limits.count",
            "must set at least one of per_day, per_week, per_month and total",
        ));
    }
    Ok(limits)
}

/// Parses `recipients`: `{"allow": [...], "deny": [...]}`, both optional, each at most
/// [`MAX_RECIPIENT_ENTRIES`] entries; duplicates are dropped, the order kept.
fn recipients_from(value: &Value) -> Result<Recipients, FieldError> {
    let object = value
        .as_object()
        .ok_or_else(|| invalid("recipients", "must be an object with allow and deny lists"))?;
    check_fields(object, "recipients.", &["allow", "deny"], &[])?;
    let list = |key: &str| -> Result<Vec<RecipientPattern>, FieldError> {
        let path = format!("recipients.{key}");
        let Some(v) = present(object, key) else {
            return Ok(Vec::new());
        };
        let items = v
            .as_array()
            .ok_or_else(|| invalid(&path, "must be an array of strings"))?;
        if items.len() > MAX_RECIPIENT_ENTRIES {
            return Err(invalid(
                &path,
                format!("must have at most {MAX_RECIPIENT_ENTRIES} entries"),
            ));
        }
        let mut patterns: Vec<RecipientPattern> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            let pattern = RecipientPattern::parse(string(item, &item_path)?).ok_or_else(|| {
                invalid(
                    &item_path,
                    "must be a recipient, vendor:<name>, or a prefix ending in *, such as vendor:aws*",
                )
            })?;
            if !patterns.contains(&pattern) {
                patterns.push(pattern);
            }
        }
        Ok(patterns)
    };
    Ok(Recipients {
        allow: list("allow")?,
        deny: list("deny")?,
    })
}
