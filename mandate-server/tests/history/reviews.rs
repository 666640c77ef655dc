//! Reviews in the history: requests over the mandate's review threshold open reviews, and
//! racers (approvers and deniers, each on another process when there are several) race
//! to resolve each one under the run's faults. The checker reads the final log and finds
//! every review resolved at most once: an approved review has exactly one decision (its
//! resolution), no other has any, no resolution answered 2xx disagrees with the final
//! state, and of racers only one is answered 2xx, the others the spec's answer to a review
//! no longer pending (400).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::checker::Logged;
use crate::driver::Urls;

/// Reviews opened (their ids, with their organization's key), as the authorization clients
/// were answered them.
pub type Opened = Arc<Mutex<VecDeque<(String, String)>>>;

/// Approve or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Approve,
    Deny,
}

/// What came of one resolution attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Answered {
    /// A status, and for a 201 approval the fresh decision's id, for a 200 denial the
    /// review's status.
    Status { status: u16, said: Option<String> },
    /// Dropped by the client.
    Dropped,
    /// No answer (the process died or was paused past the client's patience).
    NoAnswer,
}

/// One attempt to resolve a review.
#[derive(Debug, Clone)]
pub struct Resolve {
    pub review: String,
    pub action: Action,
    pub process: usize,
    pub answered: Answered,
}

/// Races each opened review until `stop` (and then the ones still queued, for a few
/// seconds): `racers` attempts at once, each approving or denying at random, each on the
/// next process; an attempt without an answer (or a 5xx) is sent again until it has one,
/// bounded. Returns every attempt.
pub async fn race(
    seed: u64,
    urls: Urls,
    opened: Opened,
    racers: usize,
    stop: Arc<AtomicBool>,
) -> Vec<Resolve> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5e71e);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let mut all = Vec::new();
    let mut drained_since: Option<Instant> = None;
    loop {
        let next = opened.lock().unwrap().pop_front();
        let Some((review, org)) = next else {
            if stop.load(Ordering::Relaxed) {
                let since = *drained_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(3) {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let first = rng.random_range(0..urls.len());
        let racing: Vec<_> = (0..racers)
            .map(|i| {
                let action = if rng.random_bool(0.5) {
                    Action::Approve
                } else {
                    Action::Deny
                };
                let drop_after = rng
                    .random_bool(0.125)
                    .then(|| Duration::from_millis(rng.random_range(1..30)));
                let (client, urls, org, review) =
                    (client.clone(), urls.clone(), org.clone(), review.clone());
                let process = (first + i) % urls.len();
                tokio::spawn(async move {
                    attempts(&client, &urls, process, &org, &review, action, drop_after).await
                })
            })
            .collect();
        for r in racing {
            all.extend(r.await.unwrap());
        }
    }
    all
}

/// One racer: sends its resolution until it is answered (2xx or 4xx), bounded.
async fn attempts(
    client: &reqwest::Client,
    urls: &Urls,
    process: usize,
    org: &str,
    review: &str,
    action: Action,
    mut drop_after: Option<Duration>,
) -> Vec<Resolve> {
    let verb = match action {
        Action::Approve => "approve",
        Action::Deny => "deny",
    };
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    loop {
        let url = urls[process].lock().unwrap().clone();
        let request = client
            .post(format!("{url}/v1/reviews/{review}/{verb}"))
            .bearer_auth(org);
        let dropping = drop_after.is_some();
        let request = match drop_after.take() {
            Some(after) => request.timeout(after),
            None => request,
        };
        let answered = match request.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                match r.bytes().await {
                    Ok(bytes) => {
                        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                        let said = match (action, status) {
                            (Action::Approve, 201) => body["id"].as_str().map(str::to_owned),
                            (Action::Deny, 200) => body["status"].as_str().map(str::to_owned),
                            _ => None,
                        };
                        Answered::Status { status, said }
                    }
                    Err(e) if e.is_timeout() && dropping => Answered::Dropped,
                    Err(_) => Answered::NoAnswer,
                }
            }
            Err(e) if e.is_timeout() && dropping => Answered::Dropped,
            Err(_) => Answered::NoAnswer,
        };
        // A 429 (the org key's rate, which racers draining a burst of reviews can reach)
        // did nothing: sent again, as a 5xx is.
        let limited = matches!(answered, Answered::Status { status: 429, .. });
        let done = !limited && matches!(answered, Answered::Status { status, .. } if status < 500);
        out.push(Resolve {
            review: review.to_owned(),
            action,
            process,
            answered,
        });
        if done || Instant::now() > give_up {
            return out;
        }
        // Over the rate the key's window clears within a second (the 429's Retry-After).
        let pause = if limited { 1000 } else { 100 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// Every anomaly of the reviews: each review of the log against its resolutions.
pub fn check(resolves: &[Resolve], log: &[Logged]) -> Vec<String> {
    let mut anomalies = Vec::new();
    let opened: BTreeMap<&str, &Logged> = log
        .iter()
        .filter_map(|d| d.review.as_deref().map(|r| (r, d)))
        .collect();
    let mut fresh: BTreeMap<&str, Vec<&Logged>> = BTreeMap::new();
    for d in log {
        if let Some(original) = d.supersedes.as_deref() {
            fresh.entry(original).or_default().push(d);
        }
    }
    let mut tried: BTreeMap<&str, Vec<&Resolve>> = BTreeMap::new();
    for r in resolves {
        tried.entry(r.review.as_str()).or_default().push(r);
    }
    for (review, original) in &opened {
        let status = original.review_status.as_deref().unwrap_or("?");
        let made = fresh
            .get(original.id.as_str())
            .map_or(&[][..], Vec::as_slice);
        // At most one resolution; an approved review made exactly one decision, named
        // as its resolution; no other review made any.
        match status {
            "approved" => {
                if made.len() != 1 {
                    anomalies.push(format!(
                        "review {review}: approved, with {} decisions made by approving it",
                        made.len()
                    ));
                }
                if made.first().map(|d| d.id.as_str()) != original.review_resolution.as_deref()
                    || made.len() != 1
                {
                    anomalies.push(format!(
                        "review {review}: resolution {:?}, decisions made by approving it {:?}",
                        original.review_resolution,
                        made.iter().map(|d| &d.id).collect::<Vec<_>>()
                    ));
                }
            }
            _ if !made.is_empty() => anomalies.push(format!(
                "review {review}: {status}, yet {} decisions were made by approving it",
                made.len()
            )),
            _ => {}
        }
        let attempts = tried.get(review).map_or(&[][..], Vec::as_slice);
        let mut won = Vec::new();
        for r in attempts {
            let Answered::Status { status: code, said } = &r.answered else {
                continue;
            };
            match (r.action, *code) {
                // A 2xx agrees with the final state.
                (Action::Approve, 201) => {
                    won.push(format!("approve → {said:?}"));
                    if status != "approved" || said.as_deref() != original.review_resolution.as_deref() {
                        anomalies.push(format!(
                            "review {review}: approval answered 201 {said:?}, the review is {status} with resolution {:?}",
                            original.review_resolution
                        ));
                    }
                }
                (Action::Deny, 200) => {
                    won.push("deny".to_owned());
                    if status != "denied" {
                        anomalies.push(format!(
                            "review {review}: denial answered 200, the review is {status}"
                        ));
                    }
                }
                // The loser's answer: the review is no longer pending.
                (_, 400) => {}
                // Refused before anything was done: over the org key's rate, or a failure.
                (_, code) if code == 429 || code >= 500 => {}
                (action, code) => anomalies.push(format!(
                    "review {review}: {action:?} answered {code}, neither a resolution nor the answer to a review no longer pending (400)"
                )),
            }
        }
        if won.len() > 1 {
            anomalies.push(format!(
                "review {review}: resolved {} times for its callers: {won:?} (resolved more than once)",
                won.len()
            ));
        }
    }
    // A decision made by approving what was no review of the log, or that no approval
    // asked for.
    for original in fresh.keys() {
        match log
            .iter()
            .find(|d| d.id == *original)
            .and_then(|d| d.review.as_deref())
        {
            None => anomalies.push(format!(
                "decisions supersede {original}, which opened no review"
            )),
            Some(review) => {
                let asked = tried
                    .get(review)
                    .is_some_and(|a| a.iter().any(|r| r.action == Action::Approve));
                if !asked {
                    anomalies.push(format!(
                        "review {review}: a decision made by approving it, which no one asked for"
                    ));
                }
            }
        }
    }
    anomalies.sort();
    anomalies.dedup();
    anomalies
}

/// How many reviews of the log were resolved (approved or denied).
pub fn resolved(log: &[Logged]) -> usize {
    log.iter()
        .filter(|d| {
            matches!(
                d.review_status.as_deref(),
                Some("approved") | Some("denied")
            )
        })
        .count()
}

/// The review checker on histories made by hand: a sound race passes, each kind of
/// anomaly is found.
#[test]
fn the_review_checker_finds_a_review_resolved_twice_and_none_in_a_sound_race() {
    let at = time::OffsetDateTime::from_unix_timestamp(1_795_348_800).unwrap();
    let decision =
        |id: &str, review: Option<(&str, &str, Option<&str>)>, supersedes: Option<&str>| Logged {
            id: id.into(),
            agent: "agt_a".into(),
            verdict: if review.is_some() { "review" } else { "allow" }.into(),
            amount: 19,
            recipient: "vendor:k1".into(),
            created: at,
            review: review.map(|r| r.0.to_owned()),
            review_status: review.map(|r| r.1.to_owned()),
            review_resolution: review.and_then(|r| r.2.map(str::to_owned)),
            supersedes: supersedes.map(str::to_owned),
        };
    let attempt = |action, status: u16, said: Option<&str>| Resolve {
        review: "rev_1".into(),
        action,
        process: 0,
        answered: Answered::Status {
            status,
            said: said.map(str::to_owned),
        },
    };
    let log = [
        decision("dec_1", Some(("rev_1", "approved", Some("dec_2"))), None),
        decision("dec_2", None, Some("dec_1")),
    ];
    let sound = [
        attempt(Action::Approve, 201, Some("dec_2")),
        attempt(Action::Deny, 400, None),
        attempt(Action::Approve, 400, None),
    ];
    assert_eq!(check(&sound, &log), Vec::<String>::new());
    // Two approvals answered 201, two decisions made.
    let twice_log = [
        log[0].clone(),
        log[1].clone(),
        decision("dec_3", None, Some("dec_1")),
    ];
    let twice = [
        attempt(Action::Approve, 201, Some("dec_2")),
        attempt(Action::Approve, 201, Some("dec_3")),
    ];
    let found = check(&twice, &twice_log);
    assert!(
        found.iter().any(|a| a.contains("resolved more than once")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|a| a.contains("with 2 decisions")),
        "{found:?}"
    );
    // A denial answered 200 for a review that ended approved.
    let found = check(
        &[sound[0].clone(), attempt(Action::Deny, 200, Some("denied"))],
        &log,
    );
    assert!(
        found.iter().any(|a| a.contains("denial answered 200")),
        "{found:?}"
    );
    // A decision made by approving a review that ended denied.
    let denied = [
        decision("dec_1", Some(("rev_1", "denied", None)), None),
        log[1].clone(),
    ];
    let found = check(&[attempt(Action::Deny, 200, Some("denied"))], &denied);
    assert!(
        found.iter().any(|a| a.contains("yet 1 decisions")),
        "{found:?}"
    );
    // A loser answered something else than 400.
    let found = check(&[sound[0].clone(), attempt(Action::Deny, 409, None)], &log);
    assert!(
        found.iter().any(|a| a.contains("answered 409")),
        "{found:?}"
    );
}
