//! How a decision writer takes its next group from its queue (docs/scale.md, "Writers"). A
//! group costs the database a part that does not grow with its size (its call, its commit,
//! and on Citus each shard's function it runs), so a decision's share falls as groups grow.
//! Under full load a group fills while the one before commits. At a moderate rate it does
//! not: groups stay small and each decision carries more of its group's cost. A writer that
//! finds only a few decisions waiting, while decisions are arriving, may wait a moment for
//! more before it opens the group: less of the database's CPU a decision, for latency.
//! `decision_gather_us` sets the wait; unset, a writer waits [`CITUS_GATHER`] on Citus,
//! where a group's lane holds only its worker's share of a process's decisions and a group
//! pays for each shard it writes, and never on plain PostgreSQL, where groups fill by
//! themselves under load and the wait would only add latency.
//!
//! "While decisions are arriving" is read from the group before: it held more than one. A
//! lone request on an idle server finds a group of one before it and never waits.

use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

/// A group smaller than this, found while decisions are arriving, waits for more.
pub const GATHER_BELOW: usize = 8;

/// How long a writer on plain PostgreSQL waits for more decisions unless
/// `decision_gather_us` says (docs/operations.md): not at all. tokio's timer counts whole
/// milliseconds, so a wait set ends at the first millisecond tick after the time set.
pub const DEFAULT_GATHER: Duration = Duration::ZERO;

/// How long a writer's lane to a Citus worker waits for more decisions unless
/// `decision_gather_us` says: 2 ms (ending at the next millisecond tick, so 2 to 3 ms). Its
/// measured effect is in docs/scale.md ("Writers").
pub const CITUS_GATHER: Duration = Duration::from_millis(2);

/// The wait of a writer's lane: the one `decision_gather_us` set (`set`), else
/// [`CITUS_GATHER`] for a lane to a Citus worker (`citus`), else [`DEFAULT_GATHER`].
pub fn wait(set: Option<Duration>, citus: bool) -> Duration {
    match set {
        Some(wait) => wait,
        None if citus => CITUS_GATHER,
        None => DEFAULT_GATHER,
    }
}

/// One writer's way of taking groups: how long it may wait, and the size of its last group.
#[derive(Debug)]
pub struct Gather {
    wait: Duration,
    last: usize,
}

impl Gather {
    /// Takes groups waiting at most `wait` for more (`Duration::ZERO`: never waits).
    pub fn new(wait: Duration) -> Self {
        Self { wait, last: 0 }
    }

    /// The next group: `first` and what waits behind it in `queue`, at most `max`. When that
    /// is fewer than [`GATHER_BELOW`] and the group before held more than one, waits once,
    /// for `wait`, and takes what arrived meanwhile.
    pub async fn take<T>(
        &mut self,
        first: T,
        queue: &mut UnboundedReceiver<T>,
        max: usize,
    ) -> Vec<T> {
        let mut group = vec![first];
        drain(&mut group, queue, max);
        if !self.wait.is_zero() && self.last > 1 && group.len() < GATHER_BELOW.min(max) {
            tokio::time::sleep(self.wait).await;
            drain(&mut group, queue, max);
        }
        self.last = group.len();
        group
    }
}

/// Moves what waits in `queue` into `group`, until it holds `max`.
fn drain<T>(group: &mut Vec<T>, queue: &mut UnboundedReceiver<T>, max: usize) {
    while group.len() < max {
        match queue.try_recv() {
            Ok(item) => group.push(item),
            Err(_) => break,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    /// Unset, a lane waits on Citus and not on plain PostgreSQL; set, as set, 0 included.
    #[test]
    fn a_lane_waits_as_set_else_only_on_citus() {
        assert_eq!(wait(None, true), CITUS_GATHER);
        assert_eq!(wait(None, false), Duration::ZERO);
        assert_eq!(wait(Some(Duration::ZERO), true), Duration::ZERO);
        assert_eq!(
            wait(Some(Duration::from_micros(300)), false),
            Duration::from_micros(300)
        );
        assert_eq!(
            wait(Some(Duration::from_micros(300)), true),
            Duration::from_micros(300)
        );
    }

    /// Sends `n` items after `after` (paused time: the runtime moves the clock on when
    /// every task waits).
    fn send_later(send: &mpsc::UnboundedSender<u32>, n: u32, after: Duration) {
        let send = send.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            for i in 0..n {
                send.send(100 + i).unwrap();
            }
        });
    }

    /// A lone decision after a group of one is taken at once; once a group held more than
    /// one, a small group waits and takes what arrives during the wait, not what arrives
    /// after it; a full one, or a writer set not to wait, never waits.
    #[tokio::test(start_paused = true)]
    async fn a_small_group_waits_for_more_only_while_decisions_arrive() {
        let (send, mut queue) = mpsc::unbounded_channel();
        // Whole milliseconds apart, as tokio's timer counts them.
        let mut gather = Gather::new(Duration::from_millis(2));
        let started = tokio::time::Instant::now();

        // Idle: the group before held none, so nothing waits.
        send_later(&send, 3, Duration::from_millis(1));
        assert_eq!(gather.take(1, &mut queue, 128).await, vec![1]);
        assert_eq!(started.elapsed(), Duration::ZERO);
        // Those three arrive; the group before held one: taken as they are, no wait.
        let first = queue.recv().await.unwrap();
        assert_eq!(
            gather.take(first, &mut queue, 128).await,
            vec![100, 101, 102]
        );
        let at = tokio::time::Instant::now();

        // The group before held three: a group of two waits, and takes the two that come
        // within the wait, not the one after it.
        send.send(1).unwrap();
        send_later(&send, 2, Duration::from_millis(1));
        send_later(&send, 1, Duration::from_millis(10));
        let first = queue.recv().await.unwrap();
        assert_eq!(gather.take(first, &mut queue, 128).await, vec![1, 100, 101]);
        let waited = at.elapsed();
        assert!(waited >= Duration::from_millis(2), "{waited:?}");
        assert!(waited < Duration::from_millis(10), "{waited:?}");

        // A group as big as GATHER_BELOW does not wait.
        let at = tokio::time::Instant::now();
        for i in 0..GATHER_BELOW as u32 {
            send.send(i).unwrap();
        }
        let first = queue.recv().await.unwrap();
        assert_eq!(
            gather.take(first, &mut queue, 128).await.len(),
            GATHER_BELOW
        );
        assert_eq!(at.elapsed(), Duration::ZERO);

        // Set not to wait: a group of one after a big group is taken at once.
        let mut never = Gather::new(Duration::ZERO);
        never.last = GATHER_BELOW;
        let at = tokio::time::Instant::now();
        assert_eq!(never.take(7, &mut queue, 128).await, vec![7]);
        assert_eq!(at.elapsed(), Duration::ZERO);
        // The one sent for after the wait is still queued, for the next group.
        assert_eq!(queue.recv().await.unwrap(), 100);
    }
}
