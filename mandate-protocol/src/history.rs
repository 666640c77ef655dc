//! What the policy engine needs to know about an agent's past: its recent requests (the
//! velocity window) and its mandate's spend this UTC day, ISO week and month.
//!
//! Both are plain data with pure update functions, so a server can keep them in memory for
//! speed and rebuild them from stored decisions at start: feeding the stored requests, in
//! order, through [`AgentHistory::record`] gives the same state as having served them.

use serde::{Deserialize, Serialize};
use time::{Month, OffsetDateTime, UtcOffset};

use crate::amount::Amount;

/// The velocity rule: more than this many requests ...
pub const VELOCITY_LIMIT: usize = 10;
/// ... within this many milliseconds gives `deny_velocity`.
pub const VELOCITY_WINDOW_MS: i64 = 60_000;

/// The times of an agent's most recent requests, enough to apply the velocity rule.
///
/// Only the last [`VELOCITY_LIMIT`] request times matter: the next request is over the
/// limit exactly when the oldest of those is inside the trailing window.
///
/// Serialized (serde) as the list of the kept request times in unix milliseconds, oldest
/// first, at most [`VELOCITY_LIMIT`] of them.
///
/// Two windows are equal when they hold the same times in the same order, wherever the
/// ring buffer starts.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(into = "Vec<i64>", try_from = "Vec<i64>")]
pub struct VelocityWindow {
    /// Ring buffer of request times, unix milliseconds.
    times: [i64; VELOCITY_LIMIT],
    /// How many slots hold a time (at most `VELOCITY_LIMIT`).
    len: usize,
    /// Index of the oldest time when full; the next slot to write.
    next: usize,
}

impl VelocityWindow {
    /// Whether a request at `now` would be more than the [`VELOCITY_LIMIT`]th in the
    /// trailing window `(now - 60 s, now]` (to the millisecond).
    pub fn is_exceeded_at(&self, now: OffsetDateTime) -> bool {
        let now_ms = unix_ms(now);
        self.len == VELOCITY_LIMIT && self.times[self.next] > now_ms - VELOCITY_WINDOW_MS
    }

    /// How many recorded requests fall in the trailing window at `now`.
    pub fn count_at(&self, now: OffsetDateTime) -> usize {
        let now_ms = unix_ms(now);
        self.times[..self.len]
            .iter()
            .filter(|&&t| t > now_ms - VELOCITY_WINDOW_MS)
            .count()
    }

    /// Records a request at `at` (kept to the millisecond). Requests are expected in time
    /// order.
    pub fn record(&mut self, at: OffsetDateTime) {
        self.times[self.next] = unix_ms(at);
        self.next = (self.next + 1) % VELOCITY_LIMIT;
        if self.len < VELOCITY_LIMIT {
            self.len += 1;
        }
    }
}

impl PartialEq for VelocityWindow {
    fn eq(&self, other: &Self) -> bool {
        Vec::<i64>::from(*self) == Vec::<i64>::from(*other)
    }
}

impl Eq for VelocityWindow {}

impl From<VelocityWindow> for Vec<i64> {
    fn from(window: VelocityWindow) -> Self {
        // Oldest first: from `next` round when full, from the start while filling.
        let start = if window.len == VELOCITY_LIMIT {
            window.next
        } else {
            0
        };
        (0..window.len)
            .map(|i| window.times[(start + i) % VELOCITY_LIMIT])
            .collect()
    }
}

impl TryFrom<Vec<i64>> for VelocityWindow {
    type Error = String;

    fn try_from(times: Vec<i64>) -> Result<Self, String> {
        if times.len() > VELOCITY_LIMIT {
            return Err(format!(
                "a velocity window keeps at most {VELOCITY_LIMIT} times, not {}",
                times.len()
            ));
        }
        let mut window = VelocityWindow::default();
        for at_ms in times {
            window.times[window.next] = at_ms;
            window.next = (window.next + 1) % VELOCITY_LIMIT;
            window.len += 1;
        }
        Ok(window)
    }
}

/// A mandate's allowed spend in one calendar month, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonthToDate {
    year: i32,
    month: u8,
    total: Amount,
    count: u64,
}

fn month_of(at: OffsetDateTime) -> (i32, u8) {
    let at = at.to_offset(UtcOffset::UTC);
    (at.year(), u8::from(at.month()))
}

impl MonthToDate {
    /// The spend in the calendar month (UTC) that contains `now`.
    pub fn total_at(&self, now: OffsetDateTime) -> Amount {
        if month_of(now) == (self.year, self.month) {
            self.total
        } else {
            Amount::ZERO
        }
    }

    /// How many allows the calendar month (UTC) that contains `now` holds.
    pub fn count_at(&self, now: OffsetDateTime) -> u64 {
        if month_of(now) == (self.year, self.month) {
            self.count
        } else {
            0
        }
    }

    /// Adds an allowed amount spent at `at`; a new month starts from zero.
    pub fn add(&mut self, amount: Amount, at: OffsetDateTime) {
        let (year, month) = month_of(at);
        if (year, month) != (self.year, self.month) {
            *self = Self {
                year,
                month,
                total: Amount::ZERO,
                count: 0,
            };
        }
        // A total that cannot be held exactly (past Decimal's digits) saturates at the
        // largest amount, over every limit, rather than rounding or staying below.
        self.total = self.total.checked_add(amount).unwrap_or(Amount::MAX);
        self.count = self.count.saturating_add(1);
    }

    /// The month this total belongs to, as (year, month).
    pub fn month(&self) -> Option<(i32, Month)> {
        Month::try_from(self.month).ok().map(|m| (self.year, m))
    }
}

/// A mandate's allowed spend in one numbered period (a UTC day or an ISO week): the
/// total belongs to `period`, and a spend in a later period starts again from zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeriodToDate {
    period: i64,
    total: Amount,
    count: u64,
}

impl PeriodToDate {
    /// The spend in `period`, zero for any other.
    fn total_in(&self, period: i64) -> Amount {
        if period == self.period {
            self.total
        } else {
            Amount::ZERO
        }
    }

    /// How many allows `period` holds, zero for any other.
    fn count_in(&self, period: i64) -> u64 {
        if period == self.period { self.count } else { 0 }
    }

    /// Adds an allowed amount spent in `period`.
    fn add_in(&mut self, amount: Amount, period: i64) {
        if period != self.period {
            *self = Self {
                period,
                total: Amount::ZERO,
                count: 0,
            };
        }
        // Saturate at the largest amount, as the month does.
        self.total = self.total.checked_add(amount).unwrap_or(Amount::MAX);
        self.count = self.count.saturating_add(1);
    }
}

const SECONDS_A_DAY: i64 = 86_400;

/// The UTC calendar day that contains `at`, counted in days from 1970-01-01.
pub fn day_of(at: OffsetDateTime) -> i64 {
    at.unix_timestamp().div_euclid(SECONDS_A_DAY)
}

/// The ISO week (Monday 00:00 UTC to the next) that contains `at`, counted in weeks from
/// Monday 1969-12-29, three days before the epoch's Thursday.
pub fn week_of(at: OffsetDateTime) -> i64 {
    (day_of(at) + 3).div_euclid(7)
}

/// A mandate's allows over its whole life: their sum and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifetimeToDate {
    total: Amount,
    count: u64,
}

impl LifetimeToDate {
    /// The sum of the mandate's allows.
    pub fn total(&self) -> Amount {
        self.total
    }

    /// How many allows the mandate gave.
    pub fn count(&self) -> u64 {
        self.count
    }

    fn add(&mut self, amount: Amount) {
        // Saturate at the largest amount, over every limit, as the month does.
        self.total = self.total.checked_add(amount).unwrap_or(Amount::MAX);
        self.count = self.count.saturating_add(1);
    }
}

/// A mandate's allowed spend (and number of allows) in the current UTC day, ISO week and
/// calendar month, each rolling over by the time it is asked or added at, and over its
/// whole life.
///
/// The lifetime figures are exact only if every allow since the mandate's creation was
/// added: a server rebuilding this from stored decisions reads them all when the mandate
/// has a lifetime limit ([`counts_lifetime`](crate::mandate::counts_lifetime)), and only the
/// month's and the week's otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpendToDate {
    /// The spend this calendar month (UTC).
    pub month: MonthToDate,
    /// The spend this UTC day.
    pub day: PeriodToDate,
    /// The spend this ISO week (from Monday 00:00 UTC).
    pub week: PeriodToDate,
    /// The spend over the mandate's life.
    pub lifetime: LifetimeToDate,
}

impl SpendToDate {
    /// The month-to-date spend at `now` (the calendar month, UTC).
    pub fn total_at(&self, now: OffsetDateTime) -> Amount {
        self.month.total_at(now)
    }

    /// The spend in the UTC day that contains `now`.
    pub fn day_total_at(&self, now: OffsetDateTime) -> Amount {
        self.day.total_in(day_of(now))
    }

    /// The spend in the ISO week that contains `now`.
    pub fn week_total_at(&self, now: OffsetDateTime) -> Amount {
        self.week.total_in(week_of(now))
    }

    /// How many allows the UTC day that contains `now` holds.
    pub fn day_count_at(&self, now: OffsetDateTime) -> u64 {
        self.day.count_in(day_of(now))
    }

    /// How many allows the ISO week that contains `now` holds.
    pub fn week_count_at(&self, now: OffsetDateTime) -> u64 {
        self.week.count_in(week_of(now))
    }

    /// How many allows the calendar month (UTC) that contains `now` holds.
    pub fn month_count_at(&self, now: OffsetDateTime) -> u64 {
        self.month.count_at(now)
    }

    /// Adds an allowed amount spent at `at` to the day, the week, the month and the
    /// mandate's life, each counting one more allow.
    pub fn add(&mut self, amount: Amount, at: OffsetDateTime) {
        self.month.add(amount, at);
        self.day.add_in(amount, day_of(at));
        self.week.add_in(amount, week_of(at));
        self.lifetime.add(amount);
    }
}

/// Everything the engine needs about one agent's past.
///
/// The velocity window is per agent and survives a new mandate; the spend belongs to the
/// agent's current mandate, and the owner starts it again
/// ([`AgentHistory::start_mandate`]) when a new mandate supersedes the old one. A request is recorded with
/// [`AgentHistory::record`](crate::history::AgentHistory::record), defined beside the
/// engine because it reads the engine's [`Evaluation`](crate::policy::Evaluation).
///
/// Serialized (serde, JSON) as plain data to keep between requests:
/// `{"velocity": [unix ms, …], "spend": {"month": {"year", "month", "total", "count"},
/// "day": {"period", "total", "count"}, "week": {…}, "lifetime": {"total", "count"}}}`
/// (`period` counts UTC days or ISO weeks since the epoch; amounts are JSON numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentHistory {
    /// The agent's recent requests.
    pub(crate) velocity: VelocityWindow,
    /// The current mandate's allowed spend this day, week and month.
    pub(crate) spend: SpendToDate,
}

impl AgentHistory {
    /// A new mandate supersedes the agent's current one: its spend starts from nothing,
    /// while the velocity window (the agent's, not the mandate's) carries over.
    pub fn start_mandate(&mut self) {
        self.spend = SpendToDate::default();
    }

    /// What the current mandate allowed in the calendar month (UTC) that contains `now`.
    pub fn spent_at(&self, now: OffsetDateTime) -> Amount {
        self.spend.total_at(now)
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms(at: OffsetDateTime) -> i64 {
    // i128 nanoseconds to i64 milliseconds: in range for any date this service meets.
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

// What Mandate's server and CLI compute with this module's types beyond their methods
// an embedder sees through mandate-core.

/// The agent's recent requests.
pub fn velocity(history: &AgentHistory) -> &VelocityWindow {
    &history.velocity
}

/// The agent's recent requests, to rebuild them from stored decisions.
pub fn velocity_mut(history: &mut AgentHistory) -> &mut VelocityWindow {
    &mut history.velocity
}

/// The current mandate's allowed spend by period.
pub fn spend(history: &AgentHistory) -> &SpendToDate {
    &history.spend
}

/// The current mandate's allowed spend by period, to rebuild it from stored decisions.
pub fn spend_mut(history: &mut AgentHistory) -> &mut SpendToDate {
    &mut history.spend
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn ms(at: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(at) * 1_000_000).unwrap()
    }
    use time::macros::datetime;

    #[test]
    fn the_eleventh_request_inside_sixty_seconds_is_over() {
        let mut window = VelocityWindow::default();
        for i in 0..10 {
            assert!(!window.is_exceeded_at(ms(i * 1000)));
            window.record(ms(i * 1000));
        }
        // 10 requests at 0..9 s: the 11th at 59.999 s is over, at 60 s the first has left.
        assert!(window.is_exceeded_at(ms(59_999)));
        assert!(!window.is_exceeded_at(ms(60_000)));
        assert_eq!(window.count_at(ms(59_999)), 10);
        assert_eq!(window.count_at(ms(60_000)), 9);
    }

    #[test]
    fn month_to_date_resets_on_a_new_month() {
        let mut spend = MonthToDate::default();
        let a = Amount::parse("40").unwrap();
        spend.add(a, datetime!(2026-11-30 23:59:59 UTC));
        spend.add(a, datetime!(2026-11-30 23:59:59 UTC));
        assert_eq!(
            spend.total_at(datetime!(2026-11-01 0:00 UTC)).to_string(),
            "80"
        );
        assert_eq!(spend.total_at(datetime!(2026-12-01 0:00 UTC)), Amount::ZERO);
        spend.add(a, datetime!(2026-12-01 0:00 UTC));
        assert_eq!(
            spend.total_at(datetime!(2026-12-15 0:00 UTC)).to_string(),
            "40"
        );
        // Another time zone is read in UTC.
        let local = datetime!(2026-12-31 20:00 -05:00);
        assert_eq!(spend.total_at(local), Amount::ZERO);
    }

    #[test]
    fn day_and_week_roll_over_at_utc_midnight_and_monday() {
        let a = Amount::parse("40").unwrap();
        let mut spend = SpendToDate::default();
        // Sunday 2026-11-29 23:59:59 UTC, then Monday 2026-11-30 00:00 UTC.
        spend.add(a, datetime!(2026-11-29 23:59:59 UTC));
        spend.add(a, datetime!(2026-11-29 23:59:59 UTC));
        let day = spend.day_total_at(datetime!(2026-11-29 0:00 UTC));
        assert_eq!(day.to_string(), "80");
        let week = spend.week_total_at(datetime!(2026-11-23 0:00 UTC));
        assert_eq!(week.to_string(), "80");
        let monday = datetime!(2026-11-30 0:00 UTC);
        assert_eq!(spend.day_total_at(monday), Amount::ZERO);
        assert_eq!(spend.week_total_at(monday), Amount::ZERO);
        // A week that starts in November holds the first of December; the month does not.
        spend.add(a, datetime!(2026-11-30 12:00 UTC));
        spend.add(a, datetime!(2026-12-01 0:00 UTC));
        let sunday = datetime!(2026-12-06 23:59:59 UTC);
        assert_eq!(spend.week_total_at(sunday).to_string(), "80");
        assert_eq!(spend.total_at(sunday).to_string(), "40");
        assert_eq!(
            spend
                .day_total_at(datetime!(2026-12-01 23:59 UTC))
                .to_string(),
            "40"
        );
        assert_eq!(
            spend.week_total_at(datetime!(2026-12-07 0:00 UTC)),
            Amount::ZERO
        );
        // Another time zone is read in UTC: Monday 00:30 in Paris is still Sunday in UTC.
        let paris = datetime!(2026-11-30 0:30 +01:00);
        assert_eq!(week_of(paris), week_of(datetime!(2026-11-29 0:00 UTC)));
        // Weeks start on Monday before the epoch too.
        assert_eq!(week_of(datetime!(1969-12-29 0:00 UTC)), 0);
        assert_eq!(week_of(datetime!(1969-12-28 23:59:59 UTC)), -1);
        assert_eq!(week_of(datetime!(1970-01-04 23:59:59 UTC)), 0);
        assert_eq!(week_of(datetime!(1970-01-05 0:00 UTC)), 1);
    }

    #[test]
    fn counts_follow_the_windows_and_the_lifetime_never_rolls_over() {
        let a = Amount::parse("10").unwrap();
        let mut spend = SpendToDate::default();
        spend.add(a, datetime!(2026-11-29 12:00 UTC));
        spend.add(a, datetime!(2026-11-30 12:00 UTC));
        spend.add(a, datetime!(2026-12-01 12:00 UTC));
        let now = datetime!(2026-12-01 13:00 UTC);
        assert_eq!(spend.day_count_at(now), 1);
        assert_eq!(spend.week_count_at(now), 2);
        assert_eq!(spend.month_count_at(now), 1);
        assert_eq!(spend.lifetime.count(), 3);
        assert_eq!(spend.lifetime.total().to_string(), "30");
        let later = datetime!(2027-03-01 0:00 UTC);
        assert_eq!(spend.day_count_at(later), 0);
        assert_eq!(spend.week_count_at(later), 0);
        assert_eq!(spend.month_count_at(later), 0);
        assert_eq!(spend.lifetime.count(), 3);
    }
}
