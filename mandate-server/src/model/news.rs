//! What this process stored that its background workers should look at soon: the decision
//! logs it added decisions to, and the organizations it appended events to.
//!
//! The workers act on this news at once, one organization at a time: the checkpoint worker
//! extends the logs named here, the delivery worker reads the due deliveries of the
//! organizations named here. Each statement of that work names its organization, so on
//! Citus it reaches one worker, and the work grows with what was decided, not with how many
//! organizations there are. What a process does not learn of here (another process's
//! decisions and events when that process has died, a delivery's retry coming due, review
//! expiry) is found by the scans across every organization, which only the sweeping process
//! runs, once a [`SWEEP_EVERY`](crate::workers::SWEEP_EVERY) (`workers::Sweeper`). So news
//! changes how soon work is done, never whether it is.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::Env;

/// The news of this process, drained by its workers.
#[derive(Debug, Default)]
pub struct News {
    /// Each log named, with how many decisions this process committed to it since.
    logs: Mutex<HashMap<(Arc<str>, Env), u64>>,
    events: Mutex<HashSet<Arc<str>>>,
    /// Wakes the delivery worker when an organization has new events.
    evented: Notify,
}

impl News {
    /// A decision of `org` in `env` was committed: its log has something to append.
    pub fn decided(&self, org: &Arc<str>, env: Env) {
        self.again(org, env, 1);
    }

    /// Names the log of `org` in `env` again with `decisions` committed to it: the
    /// checkpoint worker puts back a log it left for a later round, with the decisions it
    /// was named for (0 when it read the log and found nothing of its own to count).
    pub fn again(&self, org: &Arc<str>, env: Env, decisions: u64) {
        let mut logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        *logs.entry((Arc::clone(org), env)).or_default() += decisions;
    }

    /// An event of `org` was committed: it may have deliveries due at once.
    pub fn evented(&self, org: &str) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if !events.contains(org) {
            events.insert(Arc::from(org));
        }
        drop(events);
        self.evented.notify_one();
    }

    /// The logs named since the last call, each with the decisions this process committed
    /// to it since, in no order; none are kept.
    pub fn take_logs(&self) -> Vec<((Arc<str>, Env), u64)> {
        let mut logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.drain().collect()
    }

    /// The organizations named since the last call, in no order; none are kept.
    pub fn take_events(&self) -> Vec<Arc<str>> {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        events.drain().collect()
    }

    /// Waits until an event is named (at once if one was named since the last wait).
    pub async fn wait_for_events(&self) {
        self.evented.notified().await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn news_is_taken_once_and_counts_each_logs_decisions() {
        let news = News::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("org_a"), Arc::from("org_b"));
        news.decided(&a, Env::Sandbox);
        news.decided(&a, Env::Sandbox);
        news.decided(&a, Env::Live);
        news.decided(&b, Env::Sandbox);
        news.again(&b, Env::Sandbox, 3);
        news.again(&b, Env::Live, 0);
        let mut logs = news.take_logs();
        logs.sort_by(|x, y| (&x.0.0, x.0.1.as_str()).cmp(&(&y.0.0, y.0.1.as_str())));
        assert_eq!(
            logs,
            [
                ((a.clone(), Env::Live), 1),
                ((a.clone(), Env::Sandbox), 2),
                ((b.clone(), Env::Live), 0),
                ((b.clone(), Env::Sandbox), 4)
            ]
        );
        assert!(news.take_logs().is_empty());
        news.evented("org_a");
        news.evented("org_a");
        assert_eq!(news.take_events(), [a]);
        assert!(news.take_events().is_empty());
    }

    #[tokio::test]
    async fn an_event_named_before_the_wait_wakes_it() {
        let news = News::default();
        news.evented("org_a");
        tokio::time::timeout(std::time::Duration::from_secs(5), news.wait_for_events())
            .await
            .unwrap();
    }
}
