//! One timestamp format on the wire: RFC 3339 in UTC with whole seconds,
//! `2026-11-22T14:00:00Z`. Use with `#[serde(with = "crate::timefmt")]` (or `timefmt::option`).

use serde::{Deserialize, Deserializer, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Formats `at` as `YYYY-MM-DDTHH:MM:SSZ` (UTC, sub-seconds dropped).
pub fn format(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// Parses any RFC 3339 timestamp.
pub fn parse(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).ok()
}

/// serde: serialize.
pub fn serialize<S: Serializer>(at: &OffsetDateTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format(*at))
}

/// serde: deserialize.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<OffsetDateTime, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).ok_or_else(|| serde::de::Error::custom("expected an RFC 3339 timestamp"))
}

/// The same for `Option<OffsetDateTime>` (`null` when absent).
pub mod option {
    use super::*;

    /// serde: serialize.
    pub fn serialize<S: Serializer>(
        at: &Option<OffsetDateTime>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match at {
            Some(at) => serializer.serialize_str(&super::format(*at)),
            None => serializer.serialize_none(),
        }
    }

    /// serde: deserialize.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<OffsetDateTime>, D::Error> {
        let text = Option::<String>::deserialize(deserializer)?;
        text.map(|t| {
            parse(&t).ok_or_else(|| serde::de::Error::custom("expected an RFC 3339 timestamp"))
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    #[test]
    fn whole_seconds_in_utc() {
        assert_eq!(
            super::format(datetime!(2026-11-22 14:00:01.999 UTC)),
            "2026-11-22T14:00:01Z"
        );
        assert_eq!(
            super::format(datetime!(2026-11-22 23:00 -02:00)),
            "2026-11-23T01:00:00Z"
        );
        assert_eq!(
            super::parse("2026-11-22T14:00:01Z"),
            Some(datetime!(2026-11-22 14:00:01 UTC))
        );
    }
}
