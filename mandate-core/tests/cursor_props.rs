//! Properties of cursor tokens: they round-trip, and every edit, truncation or foreign key
//! is refused as malformed, while a changed filter is reported as a mismatch.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use mandate_core::{CursorContext, CursorError, CursorKey};
use proptest::prelude::*;

const SECRET: &[u8] = b"cursor property test secret, 32+";

/// A time from unix seconds.
fn secs(at: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(at).unwrap()
}

fn key() -> CursorKey {
    CursorKey::new(SECRET)
}

fn context() -> impl Strategy<Value = CursorContext> {
    context_with_filters(0..5)
}

fn context_with_filters(count: std::ops::Range<usize>) -> impl Strategy<Value = CursorContext> {
    (
        prop::sample::select(vec!["decisions", "mandates", "events", "webhooks"]),
        prop::collection::vec((".{0,12}", ".{0,24}"), count),
        ".{0,40}",
    )
        .prop_map(|(list, filters, scope)| CursorContext {
            list: list.to_owned(),
            filters,
            scope,
        })
}

/// An issue time and a `now` inside the cursor's lifetime.
fn times() -> impl Strategy<Value = (i64, i64)> {
    (0i64..4_000_000_000, 0i64..86_400).prop_map(|(issued, age)| (issued, issued + age))
}

proptest! {
    #[test]
    fn round_trips(context in context(), position in any::<i64>(), (issued, now) in times()) {
        let token = key().issue(&context, position, secs(issued));
        prop_assert_eq!(key().open(&token, &context, secs(now)), Ok(position));
    }

    #[test]
    fn filter_order_is_irrelevant(
        context in context(),
        position in any::<i64>(),
        seed in any::<u64>(),
    ) {
        let token = key().issue(&context, position, secs(1_000));
        let mut shuffled = context.clone();
        let len = shuffled.filters.len();
        if len > 1 {
            shuffled.filters.rotate_left((seed as usize) % len);
        }
        prop_assert_eq!(key().open(&token, &shuffled, secs(1_000)), Ok(position));
    }

    #[test]
    fn any_single_byte_edit_is_malformed(
        context in context(),
        position in any::<i64>(),
        index in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
    ) {
        let token = key().issue(&context, position, secs(1_000));
        let mut bytes = token.clone().into_bytes();
        let at = index.index(bytes.len());
        prop_assume!(bytes[at] != replacement);
        bytes[at] = replacement;
        // A byte that breaks UTF-8 never reaches `open`; the lossy form is still an edit.
        let edited = String::from_utf8_lossy(&bytes).into_owned();
        prop_assert_ne!(&edited, &token);
        prop_assert_eq!(key().open(&edited, &context, secs(1_000)), Err(CursorError::Malformed));
    }

    #[test]
    fn any_truncation_is_malformed(
        context in context(),
        position in any::<i64>(),
        index in any::<prop::sample::Index>(),
    ) {
        let token = key().issue(&context, position, secs(1_000));
        let len = index.index(token.len());
        prop_assert_eq!(key().open(&token[..len], &context, secs(1_000)), Err(CursorError::Malformed));
    }

    #[test]
    fn another_secret_is_malformed(
        context in context(),
        position in any::<i64>(),
        other in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        prop_assume!(other != SECRET);
        let token = CursorKey::new(&other).issue(&context, position, secs(1_000));
        prop_assert_eq!(key().open(&token, &context, secs(1_000)), Err(CursorError::Malformed));
    }

    #[test]
    fn changing_one_filter_value_is_a_mismatch(
        context in context_with_filters(1..5),
        position in any::<i64>(),
        index in any::<prop::sample::Index>(),
        value in ".{0,24}",
    ) {
        let token = key().issue(&context, position, secs(1_000));
        let mut changed = context.clone();
        let at = index.index(changed.filters.len());
        prop_assume!(changed.filters[at].1 != value);
        changed.filters[at].1 = value;
        // Changing one value of a duplicated pair into its twin's value is no change.
        let mut before = context.filters.clone();
        let mut after = changed.filters.clone();
        before.sort();
        after.sort();
        prop_assume!(before != after);
        prop_assert_eq!(key().open(&token, &changed, secs(1_000)), Err(CursorError::Mismatch));
    }

    #[test]
    fn changing_the_scope_is_a_mismatch(
        context in context(),
        position in any::<i64>(),
        scope in ".{0,40}",
    ) {
        prop_assume!(context.scope != scope);
        let token = key().issue(&context, position, secs(1_000));
        let changed = CursorContext { scope, ..context.clone() };
        prop_assert_eq!(key().open(&token, &changed, secs(1_000)), Err(CursorError::Mismatch));
    }
}
