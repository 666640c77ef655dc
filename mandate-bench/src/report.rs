//! Figures: percentiles, the machine, and the text and JSON report.

use std::path::Path;

use serde_json::{Value, json};

use crate::load::Outcome;

/// Latency percentiles in µs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Percentiles {
    /// Median.
    pub p50: u32,
    /// 90th.
    pub p90: u32,
    /// 99th.
    pub p99: u32,
    /// 99.9th.
    pub p999: u32,
    /// Largest.
    pub max: u32,
}

/// Percentiles of `values` (sorted in place); all zero when empty.
pub fn percentiles(values: &mut [u32]) -> Percentiles {
    values.sort_unstable();
    let at = |q: f64| -> u32 {
        if values.is_empty() {
            return 0;
        }
        let rank = (q * values.len() as f64).ceil() as usize;
        values[rank.clamp(1, values.len()) - 1]
    };
    Percentiles {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        p999: at(0.999),
        max: values.last().copied().unwrap_or(0),
    }
}

/// Fewest answers in a second for its p99 to be reported (the p99 of 100 is their largest
/// but one).
pub const MIN_PER_SECOND: usize = 100;

/// The p99 of each second of the window, µs, from each answer's latency and the second it
/// completed in (`seconds[i]` for `latencies[i]`), oldest second first. Seconds with fewer
/// than [`MIN_PER_SECOND`] answers (a run's ragged end) are left out. One p99 over a run
/// cannot tell a tail spread over every second from a stall in one of them; this can.
pub fn p99_by_second(latencies: &[u32], seconds: &[u16]) -> Vec<u32> {
    let buckets = seconds.iter().max().map_or(0, |&s| usize::from(s) + 1);
    let mut by_second: Vec<Vec<u32>> = vec![Vec::new(); buckets];
    for (&latency, &second) in latencies.iter().zip(seconds) {
        by_second[usize::from(second)].push(latency);
    }
    by_second
        .iter_mut()
        .filter(|values| values.len() >= MIN_PER_SECOND)
        .map(|values| percentiles(values).p99)
        .collect()
}

/// Smallest, median and largest of `values` (µs), as one line in ms.
pub fn spread_line(values: &[u32]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    match (sorted.first(), sorted.last()) {
        (Some(min), Some(max)) => format!(
            "min {}  median {}  max {}  (ms, {} seconds)",
            ms(*min),
            ms(sorted[(sorted.len() - 1) / 2]),
            ms(*max),
            sorted.len()
        ),
        _ => "none (no second had enough answers)".into(),
    }
}

impl Percentiles {
    /// As JSON, µs.
    pub fn json(&self) -> Value {
        json!({"p50": self.p50, "p90": self.p90, "p99": self.p99, "p99_9": self.p999, "max": self.max})
    }

    /// One line, in ms.
    pub fn line(&self) -> String {
        format!(
            "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (ms)",
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.p999),
            ms(self.max)
        )
    }
}

fn ms(us: u32) -> String {
    format!("{:.3}", f64::from(us) / 1000.0)
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The machine: core count and CPU model.
pub fn machine() -> (usize, String) {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    (cores, model)
}

/// The type of the filesystem holding `path` (longest matching mount point in
/// `/proc/mounts`); a tmpfs would make fsync free and the figures meaningless.
pub fn filesystem(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown".into();
    };
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_dev), Some(point), Some(kind)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if path.starts_with(point) && best.as_ref().is_none_or(|(len, _)| point.len() > *len) {
            best = Some((point.len(), kind.to_owned()));
        }
    }
    best.map(|(_, k)| k).unwrap_or_else(|| "unknown".into())
}

/// The verdict mix of an outcome: overall shares, and per request kind.
pub fn verdict_mix(outcome: &Outcome) -> (Vec<(String, u64)>, Value) {
    let mut overall: Vec<(String, u64)> = Vec::new();
    let mut by_kind = serde_json::Map::new();
    for ((kind, verdict), n) in &outcome.verdicts {
        match overall.iter_mut().find(|(v, _)| v == verdict) {
            Some(e) => e.1 += n,
            None => overall.push((verdict.clone(), *n)),
        }
        let entry = by_kind
            .entry(kind.name())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(m) = entry {
            m.insert(verdict.clone(), json!(n));
        }
    }
    overall.sort_by_key(|b| std::cmp::Reverse(b.1));
    (overall, Value::Object(by_kind))
}

/// `allow 80.1 %  review 9.9 %  ...`.
pub fn shares(counts: &[(String, u64)]) -> String {
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    counts
        .iter()
        .map(|(v, n)| format!("{v} {:.1} %", 100.0 * *n as f64 / total.max(1) as f64))
        .collect::<Vec<_>>()
        .join("  ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_rank() {
        let mut v: Vec<u32> = (1..=1000).rev().collect();
        let p = percentiles(&mut v);
        assert_eq!(
            (p.p50, p.p90, p.p99, p.p999, p.max),
            (500, 900, 990, 999, 1000)
        );
        assert_eq!(percentiles(&mut []).max, 0);
    }

    #[test]
    fn p99_is_taken_second_by_second() {
        // Second 0: 200 answers of 1..=200 µs; second 1: 150 of 1,000 µs and a stall of
        // two at 9,000 µs; second 2: a ragged end of 10 answers, left out.
        let mut latencies: Vec<u32> = (1..=200).collect();
        let mut seconds = vec![0u16; 200];
        latencies.extend(std::iter::repeat_n(1_000, 150));
        latencies.extend([9_000, 9_000]);
        seconds.extend(std::iter::repeat_n(1u16, 152));
        latencies.extend(std::iter::repeat_n(50_000, 10));
        seconds.extend(std::iter::repeat_n(2u16, 10));
        // Interleave, as answers from many connections arrive.
        let mut pairs: Vec<(u32, u16)> = latencies.into_iter().zip(seconds).collect();
        pairs.sort_by_key(|&(l, s)| (l % 7, s));
        let (latencies, seconds): (Vec<u32>, Vec<u16>) = pairs.into_iter().unzip();
        assert_eq!(p99_by_second(&latencies, &seconds), vec![198, 9_000]);
        assert_eq!(p99_by_second(&[], &[]), Vec::<u32>::new());
        assert_eq!(
            spread_line(&[9_000, 198, 4_000]),
            "min 0.198  median 4.000  max 9.000  (ms, 3 seconds)"
        );
    }

    #[test]
    fn formats() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(thousands(123_456), "123,456");
    }
}
