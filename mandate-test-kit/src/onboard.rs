//! What `mandate-server onboard` prints, read by the tests that run it: the organization's
//! id and its keys.
#![allow(dead_code)]
// Compiled into several test targets, which each use a part of it.

/// The organization's id (`org_…`) in `onboard`'s output: "organization NAME (org_…)
/// onboarded, …".
pub fn org_id(out: &str) -> String {
    out.split_once(" (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(id, _)| id.to_owned())
        .unwrap_or_else(|| panic!("no organization id in {out}"))
}

/// The key on `onboard`'s line that starts with `prefix` (`sandbox key:`, `live key:`).
pub fn key(out: &str, prefix: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in {out}"))
        .trim()
        .to_owned()
}
