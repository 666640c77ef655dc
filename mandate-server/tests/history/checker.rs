//! The checker: reads a recorded history (every request sent and what came of it) and the
//! final decision log, and reports every anomaly it finds. Nothing here talks to a server.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// One attempt of one request (one Idempotency-Key may be sent many times).
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The Idempotency-Key; each key asks for one payment, to `vendor:<key>`.
    pub key: String,
    /// The agent asked for.
    pub agent: String,
    /// The amount asked, as sent.
    pub amount: i64,
    /// Which server process it was sent to.
    pub process: usize,
    /// When it was sent and when it ended, ms since the run began.
    pub sent_ms: u64,
    pub ended_ms: u64,
    pub outcome: Outcome,
}

/// What came of an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// An answer: its status, whether it says it is a replay, and for a 201 the decision's
    /// id and verdict.
    Answer {
        status: u16,
        replayed: bool,
        decision: Option<(String, String)>,
    },
    /// The client gave up on it early (it dropped the connection).
    Dropped,
    /// No answer: the connection failed (the process died, or was stopped).
    NoAnswer,
}

/// A decision of the final log.
#[derive(Debug, Clone)]
pub struct Logged {
    pub id: String,
    pub agent: String,
    pub verdict: String,
    pub amount: i64,
    pub recipient: String,
    pub created: OffsetDateTime,
    /// The review it opened, where that review stands, and its resolution.
    pub review: Option<String>,
    pub review_status: Option<String>,
    pub review_resolution: Option<String>,
    /// On a decision made by approving a review: the decision that opened it.
    pub supersedes: Option<String>,
}

impl Logged {
    /// Reads a decision object of the API's log.
    pub fn from_json(v: &Value) -> Logged {
        let request = &v["request"];
        Logged {
            id: v["id"].as_str().unwrap().to_owned(),
            agent: request["agent"].as_str().unwrap().to_owned(),
            verdict: v["verdict"].as_str().unwrap().to_owned(),
            amount: request["amount"].to_string().parse().unwrap_or(i64::MAX),
            recipient: request["recipient"].as_str().unwrap().to_owned(),
            created: OffsetDateTime::parse(v["created_at"].as_str().unwrap(), &Rfc3339).unwrap(),
            review: v["review"]["id"]
                .as_str()
                .or(v["review"].as_str())
                .map(str::to_owned),
            review_status: v["review_status"].as_str().map(str::to_owned),
            review_resolution: v["review_resolution"].as_str().map(str::to_owned),
            supersedes: v["supersedes"].as_str().map(str::to_owned),
        }
    }
}

/// The limits every agent's mandate has in a run.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub per_day: i64,
    pub per_week: i64,
    pub per_month: i64,
    /// Allows in any minute (the core's velocity limit bounds requests, so allows too).
    pub per_minute: usize,
}

/// The recipient a key's request names.
pub fn recipient_of(key: &str) -> String {
    format!("vendor:{key}")
}

/// Every anomaly of `history` against `log` (each agent's decisions in commit order:
/// oldest first), as sentences. Empty: none.
pub fn check(history: &[Attempt], log: &[Logged], limits: Limits) -> Vec<String> {
    let mut anomalies = Vec::new();
    let by_id: BTreeMap<&str, Vec<&Logged>> = log.iter().fold(BTreeMap::new(), |mut m, d| {
        m.entry(d.id.as_str()).or_insert_with(Vec::new).push(d);
        m
    });
    let sent: BTreeMap<String, &Attempt> =
        history.iter().map(|a| (recipient_of(&a.key), a)).collect();
    // Every 201 answered is in the log exactly once, with the answered claims.
    for a in history {
        if let Outcome::Answer {
            status: 201,
            decision: Some((id, verdict)),
            ..
        } = &a.outcome
        {
            match by_id.get(id.as_str()).map(Vec::as_slice) {
                Some([d]) => {
                    if d.verdict != *verdict
                        || d.amount != a.amount
                        || d.recipient != recipient_of(&a.key)
                        || d.agent != a.agent
                    {
                        anomalies.push(format!(
                            "key {}: answered {id} {verdict}, the log holds {d:?}",
                            a.key
                        ));
                    }
                }
                Some(many) => anomalies.push(format!(
                    "key {}: answered {id}, in the log {} times",
                    a.key,
                    many.len()
                )),
                None => anomalies.push(format!(
                    "key {}: answered 201 {id} ({verdict}), not in the log (lost)",
                    a.key
                )),
            }
        }
    }
    // One outcome per Idempotency-Key: every 201 of a key is one decision, and the log
    // holds at most one decision for it (dropped and stalled attempts included).
    let mut answered: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for a in history {
        if let Outcome::Answer {
            decision: Some((id, _)),
            ..
        } = &a.outcome
        {
            answered.entry(&a.key).or_default().insert(id);
        }
    }
    for (key, ids) in &answered {
        if ids.len() > 1 {
            anomalies.push(format!(
                "key {key}: answered with {} decisions: {ids:?}",
                ids.len()
            ));
        }
    }
    let mut per_key: BTreeMap<&str, usize> = BTreeMap::new();
    for d in log {
        // A decision made by approving a review shares its request (reviews.rs checks it).
        if d.supersedes.is_none() {
            *per_key.entry(d.recipient.as_str()).or_default() += 1;
        }
        // No decision that no request caused.
        if !sent.contains_key(&d.recipient) {
            anomalies.push(format!(
                "decision {} for {} that no request asked for",
                d.id, d.recipient
            ));
        }
    }
    for (recipient, n) in per_key {
        if n > 1 {
            anomalies.push(format!(
                "{recipient}: {n} decisions stored for one Idempotency-Key"
            ));
        }
    }
    // No window over its limit, in commit order.
    let mut agents: BTreeMap<&str, Vec<&Logged>> = BTreeMap::new();
    for d in log {
        agents.entry(d.agent.as_str()).or_default().push(d);
    }
    for (agent, decisions) in agents {
        let mut sums: BTreeMap<(u8, String), i64> = BTreeMap::new();
        let allows: Vec<&&Logged> = decisions.iter().filter(|d| d.verdict == "allow").collect();
        for d in &allows {
            let date = d.created.date();
            let (year, week) = (date.to_iso_week_date().0, date.iso_week());
            for (n, window, limit) in [
                (0u8, date.to_string(), limits.per_day),
                (1, format!("{year}-W{week}"), limits.per_week),
                (
                    2,
                    format!("{}-{}", date.year(), u8::from(date.month())),
                    limits.per_month,
                ),
            ] {
                let sum = sums.entry((n, window.clone())).or_default();
                *sum += d.amount;
                if *sum > limit {
                    anomalies.push(format!(
                        "{agent}: window {window} holds {sum} of allows, over its limit {limit} (overspend, at {})",
                        d.id
                    ));
                }
            }
        }
        // Allows within one minute (created_at has whole seconds: 58 s apart at most
        // are less than 60 s apart). An approval is no request: velocity is not applied
        // to it (decisions.md), so only the allows of requests count.
        let allows: Vec<&&Logged> = allows
            .into_iter()
            .filter(|d| d.supersedes.is_none())
            .collect();
        for (i, d) in allows.iter().enumerate() {
            let start = d.created.unix_timestamp();
            let within = allows[i..]
                .iter()
                .filter(|e| {
                    let t = e.created.unix_timestamp();
                    t >= start && t <= start + 58
                })
                .count();
            if within > limits.per_minute {
                anomalies.push(format!(
                    "{agent}: {within} allows within a minute from {}, over the velocity limit {}",
                    d.created, limits.per_minute
                ));
                break;
            }
        }
    }
    anomalies.sort();
    anomalies.dedup();
    anomalies
}

/// The checker on histories made by hand: it finds each kind of anomaly it is for, and
/// none in a sound history.
#[test]
fn the_checker_finds_each_anomaly_and_none_in_a_sound_history() {
    let limits = Limits {
        per_day: 30,
        per_week: 30,
        per_month: 30,
        per_minute: 10,
    };
    let at = OffsetDateTime::from_unix_timestamp(1_795_348_800).unwrap();
    let logged = |id: &str, key: &str, amount: i64| Logged {
        id: id.into(),
        agent: "agt_a".into(),
        verdict: "allow".into(),
        amount,
        recipient: recipient_of(key),
        created: at,
        review: None,
        review_status: None,
        review_resolution: None,
        supersedes: None,
    };
    let answered = |key: &str, id: &str, amount: i64| Attempt {
        key: key.into(),
        agent: "agt_a".into(),
        amount,
        process: 0,
        sent_ms: 0,
        ended_ms: 1,
        outcome: Outcome::Answer {
            status: 201,
            replayed: false,
            decision: Some((id.into(), "allow".into())),
        },
    };
    let sound = [answered("k1", "dec_1", 10), answered("k2", "dec_2", 20)];
    let log = [logged("dec_1", "k1", 10), logged("dec_2", "k2", 20)];
    assert_eq!(check(&sound, &log, limits), Vec::<String>::new());
    // Lost: answered, not in the log.
    let lost = check(&sound, &log[..1], limits);
    assert!(
        lost.iter().any(|a| a.contains("not in the log")),
        "{lost:?}"
    );
    // Overspend: three allows of 10, 20 and 5 under 30.
    let over_history = [
        sound[0].clone(),
        sound[1].clone(),
        answered("k3", "dec_3", 5),
    ];
    let over_log = [log[0].clone(), log[1].clone(), logged("dec_3", "k3", 5)];
    let over = check(&over_history, &over_log, limits);
    assert!(over.iter().any(|a| a.contains("overspend")), "{over:?}");
    // Two outcomes for one key: two decisions stored, and two answered.
    let twice_history = [sound[0].clone(), answered("k1", "dec_9", 10)];
    let twice_log = [log[0].clone(), logged("dec_9", "k1", 10)];
    let twice = check(&twice_history, &twice_log, limits);
    assert!(
        twice
            .iter()
            .any(|a| a.contains("answered with 2 decisions")),
        "{twice:?}"
    );
    assert!(
        twice.iter().any(|a| a.contains("2 decisions stored")),
        "{twice:?}"
    );
    // A decision nobody asked for.
    let planted = check(
        &sound,
        &[log[0].clone(), log[1].clone(), logged("dec_x", "kx", 1)],
        limits,
    );
    assert!(
        planted.iter().any(|a| a.contains("no request asked for")),
        "{planted:?}"
    );
    // Velocity: eleven allows in one minute.
    let small: Vec<Attempt> = (0..11)
        .map(|i| answered(&format!("v{i}"), &format!("dec_v{i}"), 1))
        .collect();
    let small_log: Vec<Logged> = (0..11)
        .map(|i| logged(&format!("dec_v{i}"), &format!("v{i}"), 1))
        .collect();
    let fast = check(&small, &small_log, limits);
    assert!(fast.iter().any(|a| a.contains("velocity")), "{fast:?}");
}
