//! Values written as SQL constants, for statements sent without parameters (`script`): an
//! `EXECUTE` of a statement prepared by name takes its values as constants.

/// A value that cannot be written as a constant: PostgreSQL's text holds no NUL, and a
/// simple query ends at one.
#[derive(Debug, thiserror::Error)]
#[error("a writer's value holds a NUL character")]
pub(crate) struct NulInValue;

/// `value` as an SQL string constant, read the same whatever `standard_conforming_strings`
/// is: an escape string (`E'…'`) with its backslashes and quotes doubled.
pub(crate) fn text(value: &str) -> Result<String, NulInValue> {
    if value.contains('\0') {
        return Err(NulInValue);
    }
    let mut constant = String::with_capacity(value.len() + 3);
    constant.push_str("E'");
    for c in value.chars() {
        match c {
            '\\' => constant.push_str("\\\\"),
            '\'' => constant.push_str("''"),
            c => constant.push(c),
        }
    }
    constant.push('\'');
    Ok(constant)
}

/// `value` as an SQL `BIGINT` constant.
pub(crate) fn bigint(value: i64) -> String {
    format!("{value}::BIGINT")
}

/// `values` as an SQL `BIGINT[]`.
pub(crate) fn bigint_array(values: &[i64]) -> String {
    let items: Vec<String> = values.iter().map(i64::to_string).collect();
    format!("ARRAY[{}]::BIGINT[]", items.join(","))
}

/// `values` as an SQL `TEXT[]`.
pub(crate) fn text_array(values: &[&str]) -> Result<String, NulInValue> {
    let items = values
        .iter()
        .map(|value| text(value))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!("ARRAY[{}]::TEXT[]", items.join(",")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_doubles_backslashes_and_quotes_and_refuses_nul() {
        assert_eq!(text("org_1").unwrap(), "E'org_1'");
        assert_eq!(text(r"a'b\c").unwrap(), r"E'a''b\\c'");
        assert!(text("a\0b").is_err());
        assert_eq!(bigint_array(&[]), "ARRAY[]::BIGINT[]");
        assert_eq!(bigint_array(&[-1, 2]), "ARRAY[-1,2]::BIGINT[]");
        assert_eq!(
            text_array(&["x", "'"]).unwrap(),
            "ARRAY[E'x',E'''']::TEXT[]"
        );
    }
}
