//! One timestamp format on the wire: RFC 3339 in UTC with whole seconds,
//! `2026-11-22T14:00:00Z`. Use with `#[serde(with = "crate::timefmt")]` (or `timefmt::option`).

use serde::{Deserialize, Deserializer, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Formats `at` as `YYYY-MM-DDTHH:MM:SSZ` (UTC, sub-seconds dropped).
///
/// Written digit by digit: every decision's `created_at` goes through here, and `format!`
/// with six padded fields is a measurable part of an authorization. Years
/// outside 0..=9999, which RFC 3339 cannot write, are written as `format!` would.
pub fn format(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    let Ok(year) = u16::try_from(at.year()) else {
        return padded(at);
    };
    if year > 9999 {
        return padded(at);
    }
    let mut out = *b"0000-00-00T00:00:00Z";
    let mut put = |at: usize, value: u16, width: usize| {
        let mut value = value;
        for i in (at..at + width).rev() {
            out[i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, year, 4);
    put(5, u16::from(u8::from(at.month())), 2);
    put(8, u16::from(at.day()), 2);
    put(11, u16::from(at.hour()), 2);
    put(14, u16::from(at.minute()), 2);
    put(17, u16::from(at.second()), 2);
    out.iter().map(|&b| char::from(b)).collect()
}

fn padded(at: OffsetDateTime) -> String {
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
#[allow(clippy::unwrap_used)]
mod tests {
    use time::macros::datetime;

    /// Digit by digit is what `format!` writes, over a spread of instants (leap days,
    /// year ends, the edges of the four-digit years).
    #[test]
    fn digit_by_digit_matches_format() {
        use time::OffsetDateTime;
        let mut instants: Vec<i64> = (0..20_000).map(|i| i * 7_919 * 1_597).collect();
        instants.extend([
            -62_167_219_200, // 0000-01-01T00:00:00Z
            253_402_300_799, // 9999-12-31T23:59:59Z
            951_782_400,     // 2000-02-29T00:00:00Z
            1_798_761_599,   // 2026-12-31T23:59:59Z
        ]);
        for secs in instants {
            let at = OffsetDateTime::from_unix_timestamp(secs).unwrap();
            assert_eq!(super::format(at), super::padded(at), "{secs}");
        }
        // Outside four digits RFC 3339 has no form; the text is what it always was.
        let far = OffsetDateTime::from_unix_timestamp(-62_167_219_201).unwrap();
        assert_eq!(super::format(far), "-001-12-31T23:59:59Z");
    }

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
