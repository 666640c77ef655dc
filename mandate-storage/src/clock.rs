//! Time and randomness helpers shared by storage and the server: unix milliseconds, the
//! month key of decisions, and the random bytes of ids and nonces.

use time::OffsetDateTime;

/// Unix milliseconds of `at`.
pub fn ms(at: OffsetDateTime) -> i64 {
    // i128 nanoseconds to i64 milliseconds, as mandate-core counts the velocity window: in
    // range for any date this service meets.
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// The UTC month of a unix-ms time as `year * 12 + month - 1`: the key of each engine's
/// `decision_months` (SQLite's migration 0004 and PostgreSQL's 0014 compute it the same).
pub fn month_index(unix_ms: i64) -> i64 {
    let at = from_ms(unix_ms);
    i64::from(at.year()) * 12 + i64::from(u8::from(at.month())) - 1
}

/// The time at unix milliseconds `ms` (the epoch if out of range).
pub fn from_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// 16 random bytes for an id: from [`fill_id_random`], not the operating system.
pub fn random16() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    fill_id_random(&mut bytes);
    bytes
}

/// 16 bytes for an id that sorts by creation time: 6 bytes of unix milliseconds
/// (big-endian) and 10 random bytes (80 bits), like a ULID. Ids made on the hot path use
/// these so that their unique indexes grow at one edge instead of touching a random page
/// per row; they stay unguessable.
pub fn ordered16(at: OffsetDateTime) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    let millis = u64::try_from(ms(at)).unwrap_or(0).to_be_bytes();
    bytes[..6].copy_from_slice(&millis[2..]);
    fill_id_random(&mut bytes[6..]);
    bytes
}

/// Fills `buf` for ids and nonces from the thread's CSPRNG (`rand`'s `ThreadRng`: ChaCha12,
/// seeded from the operating system and reseeded from it every 64 KiB; the server never
/// forks). An authorization draws three times (request id, decision id, nonce), and a
/// `getrandom` system call each would add three kernel entries to every request. Keys and
/// signing secrets still come straight from the operating system ([`fill_random`]).
pub fn fill_id_random(buf: &mut [u8]) {
    use rand::RngCore;
    rand::rng().fill_bytes(buf);
}

/// Fills `buf` from the operating system's RNG. Failure to get entropy is fatal.
#[allow(clippy::panic)]
pub fn fill_random(buf: &mut [u8]) {
    if let Err(e) = getrandom::fill(buf) {
        panic!("the operating system's random number generator failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mandate_core::DecisionId;

    #[test]
    fn ordered_ids_sort_by_time() {
        let earlier = DecisionId::from_random(ordered16(from_ms(1_795_348_800_000)));
        let later = DecisionId::from_random(ordered16(from_ms(1_795_348_800_001)));
        assert!(earlier < later);
        let same_ms = DecisionId::from_random(ordered16(from_ms(1_795_348_800_000)));
        assert_ne!(earlier, same_ms);
    }

    /// Id bytes are drawn afresh each time, on every thread: no repeats over many draws,
    /// and threads do not share a stream.
    #[test]
    fn id_randomness_does_not_repeat_within_or_across_threads() {
        let draw = || (0..5_000).map(|_| random16()).collect::<Vec<_>>();
        let other = std::thread::spawn(draw);
        let mut all = draw();
        all.extend(other.join().unwrap_or_default());
        assert_eq!(all.len(), 10_000);
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), 10_000);
        // Every byte position varies (a fixed byte would halve the ids' strength).
        for i in 0..16 {
            let values: std::collections::HashSet<u8> = all.iter().map(|b| b[i]).collect();
            assert!(values.len() > 200, "byte {i} takes {} values", values.len());
        }
    }
}
