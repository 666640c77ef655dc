//! Saying that a test was skipped where the user reads it. `eprintln!` in a test is
//! captured by the test harness and shown only when the test fails, so a skip said that way
//! is silent; [`say`] writes to the process's stderr itself, once for each distinct notice,
//! so `cargo test` shows `SKIPPED: …` beside the summary of the target that skipped.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::sync::Mutex;

static SAID: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Says `SKIPPED: {what}` on stderr, uncaptured, the first time this process says it.
pub fn say(what: &str) {
    let first = SAID
        .lock()
        .map(|mut said| said.insert(what.to_owned()))
        .unwrap_or(true);
    if first {
        let _ = writeln!(std::io::stderr(), "SKIPPED: {what}");
    }
}
