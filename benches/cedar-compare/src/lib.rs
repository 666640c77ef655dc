//! The same mandate decided by two engines: `mandate_core::evaluate` and the mandate
//! written as Cedar policies, evaluated with `cedar_policy::Authorizer::is_authorized`.
//!
//! Cedar has no state, so the agent's history (velocity window, spend of the day, the week
//! and the month) is kept in Rust with `mandate_core::AgentHistory` for **both**
//! engines. For Cedar the numbers it needs (requests in the trailing 60 s, the spends) are
//! read from that history and passed in the request context; every rule itself (expiry,
//! velocity, category, recipient lists, currency, per transaction, per day, per week, per
//! month, review) is a Cedar policy.
//!
//! Both engines see the same deterministic stream ([`stream`]) of a few thousand requests
//! from a few agents; [`run_core`] and [`run_cedar`] replay it from empty histories.
//!
//! Longer than 800 lines: the Cedar policies, the stream and both replays are read side by
//! side, rule by rule, in one file; the tests are its last hundred lines.

use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityUid, Policy, PolicyId, PolicySet, Request,
    RestrictedExpression,
};
use mandate_core::{AgentHistory, AgentId, Amount, AuthorizationRequest, CountWindow, Evaluation, Mandate, MandateDraft, MandateId, MandateStatus, Mode, Reason, RecipientPattern, RecipientRefusal, SpendWindow, Verdict, evaluate};
use mandate_protocol::history::{self, VELOCITY_LIMIT, VELOCITY_WINDOW_MS};
use time::macros::datetime;
use time::{Duration, OffsetDateTime, Time};

/// How many requests the stream holds.
pub const STREAM_LEN: usize = 4000;
/// How many agents share the mandate.
pub const AGENTS: usize = 8;

/// The mandate's `per_day`, chosen so that the stream reaches it often.
const PER_DAY: &str = "2500.00";
/// The mandate's `per_week`.
const PER_WEEK: &str = "7000.00";

/// The recipients of the stream: allowed exactly, allowed by prefix, denied by prefix
/// (though the allow prefix matches too), denied exactly, and in no list.
const RECIPIENTS: [&str; 6] = [
    "vendor:acme",
    "vendor:acme",
    "vendor:aws-eu",
    "vendor:aws-gov-1",
    "vendor:acme-old",
    "vendor:zed",
];

/// The mandate both engines enforce: every limit and both recipient lists set.
pub fn mandate() -> Mandate {
    let text = r#"{
            "agent": "agt_a0",
            "limits": {"per_transaction": 500.00, "per_day": PER_DAY, "per_week": PER_WEEK,
                       "per_month": 20000.00, "currency": "USD"},
            "categories": ["software", "cloud", "travel", "office", "data"],
            "recipients": {"allow": ["vendor:acme", "vendor:aws*"], "deny": ["vendor:aws-gov*", "vendor:acme-old"]},
            "review_above": 250.00,
            "expires": "2026-12-31"
        }"#
    .replace("PER_DAY", PER_DAY)
    .replace("PER_WEEK", PER_WEEK);
    let body = serde_json::from_str(&text).expect("mandate JSON");
    Mandate {
        id: MandateId::from_random([3; 16]),
        terms: MandateDraft::from_json(&body).expect("mandate draft"),
        status: MandateStatus::Active,
        created_at: datetime!(2026-11-01 0:00 UTC),
    }
}

/// The same mandate with the limits of the third round as well: a start (`not_before`),
/// a lifetime `total` and count limits per day, week, month and in total, set so that the
/// stream reaches each.
pub fn mandate_lifetime() -> Mandate {
    mandate_lifetime_with(120)
}

/// [`mandate_lifetime`] with `count_total` allows over the mandate's life. The stream's
/// agents spend the lifetime `total` of 9000.00 in 101 to 119 allows: at 120 the amount
/// total is reached first, at 100 the count.
pub fn mandate_lifetime_with(count_total: u64) -> Mandate {
    let mut m = mandate();
    let extra: serde_json::Value = serde_json::from_str(&format!(
        r#"{{"total": 9000.00, "count": {{"per_day": 9, "per_week": 30, "per_month": 70, "total": {count_total}}}}}"#,
    ))
    .expect("limits JSON");
    let limits = &mut m.terms.limits;
    limits.total = Some(Amount::parse("9000.00").expect("amount"));
    limits.count = serde_json::from_value(extra["count"].clone()).expect("count limits");
    m.terms.not_before = Some(time::macros::date!(2026 - 11 - 22));
    m
}

/// One request of the stream: which agent, what it asks, and when.
#[derive(Debug, Clone)]
pub struct Item {
    /// Index of the agent, `0..AGENTS`.
    pub agent: usize,
    /// The parsed request.
    pub request: AuthorizationRequest,
    /// When it arrives (non-decreasing along the stream).
    pub at: OffsetDateTime,
}

/// A 64-bit LCG (Knuth's MMIX constants); the high bits are used.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The deterministic request stream: [`STREAM_LEN`] requests from [`AGENTS`] agents, from
/// 2026-11-20 to early January 2027. Half the traffic is one busy agent (velocity denials);
/// amounts from cents to 700 (review and per-transaction denials, month-to-date reached);
/// about 8 % in EUR, about 10 % in categories the mandate does not allow, about 30 % to
/// recipients other than vendor:acme (allowed by prefix, denied, or in no list); days and
/// weeks turn (their spends reach and reset), the month turns (month-to-date resets) and the
/// mandate expires at the end of 2026-12-31.
pub fn stream() -> Vec<Item> {
    const CATEGORIES: [&str; 7] = [
        "software", "cloud", "travel", "office", "data", "gambling", "crypto",
    ];
    let agents: Vec<AgentId> = (0..AGENTS)
        .map(|i| AgentId::parse(&format!("agt_a{i}")).expect("agent id"))
        .collect();
    let mut rng = Lcg(0x006d_616e_6461_7465);
    // Recipients come from their own generator, so the other draws stay as they were.
    let mut recipients = Lcg(0x7265_6369_7069_656e);
    let mut at = datetime!(2026-11-20 0:00 UTC);
    let mut items = Vec::with_capacity(STREAM_LEN);
    for _ in 0..STREAM_LEN {
        // Mostly bursts (0-3 s apart), sometimes minutes to an hour, rarely up to two days.
        let gap_ms = match rng.below(100) {
            0..=84 => rng.below(3_000),
            85..=98 => rng.below(3_600_000),
            _ => rng.below(172_800_000),
        };
        at += Duration::milliseconds(gap_ms as i64);
        let agent = if rng.below(2) == 0 {
            0
        } else {
            1 + rng.below(AGENTS as u64 - 1) as usize
        };
        let cents = match rng.below(100) {
            0..=59 => rng.below(10_000),           // up to 100.00
            60..=89 => 10_000 + rng.below(20_000), // 100 to 300
            _ => 25_000 + rng.below(45_001),       // 250 to 700
        };
        // Some whole amounts, written without decimals.
        let amount = if rng.below(5) == 0 {
            format!("{}", cents / 100)
        } else {
            format!("{}.{:02}", cents / 100, cents % 100)
        };
        let currency = if rng.below(12) == 0 { "EUR" } else { "USD" };
        let category = if rng.below(10) == 0 {
            CATEGORIES[5 + rng.below(2) as usize]
        } else {
            CATEGORIES[rng.below(5) as usize]
        };
        // Mostly vendor:acme; about one request in six to each of the others in turn.
        let recipient = if recipients.below(10) < 7 {
            RECIPIENTS[0]
        } else {
            RECIPIENTS[1 + recipients.below(5) as usize]
        };
        let body = serde_json::from_str(&format!(
            r#"{{"amount": {amount}, "currency": "{currency}", "recipient": "{recipient}", "category": "{category}"}}"#
        ))
        .expect("request JSON");
        let request =
            AuthorizationRequest::from_json(agents[agent].clone(), &body).expect("request");
        items.push(Item { agent, request, at });
    }
    items
}

/// mandate-core: `evaluate` then `history.record`, per request, from empty histories.
/// Returns each evaluation (verdict and reason).
pub fn run_core(mandate: &Mandate, items: &[Item]) -> Vec<Evaluation> {
    let mut histories = [AgentHistory::default(); AGENTS];
    items
        .iter()
        .map(|item| {
            let history = &mut histories[item.agent];
            let evaluation = evaluate(
                Some(mandate),
                &item.request,
                history,
                Mode::Enforce,
                item.at,
            );
            history.record(&evaluation, item.request.amount, item.at);
            evaluation
        })
        .collect()
}

/// The verdict with the limit that was hit, as Cedar's policy ids name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// No policy permits (the request is not for this mandate).
    DenyNoMandate,
    /// `deny_no_mandate`: before the mandate's `not_before`.
    DenyNotBefore,
    /// `deny_expired`.
    DenyExpired,
    /// `deny_velocity`.
    DenyVelocity,
    /// `deny_category`.
    DenyCategory,
    /// `deny_recipient`: the recipient matches `recipients.deny`.
    DenyRecipientDenied,
    /// `deny_recipient`: `recipients.allow` has no entry for the recipient.
    DenyRecipientNotAllowed,
    /// `deny_limit`: the currency differs.
    DenyLimitCurrency,
    /// `deny_limit`: above per_transaction.
    DenyLimitPerTransaction,
    /// `deny_limit`: today's spend plus amount above per_day.
    DenyLimitPerDay,
    /// `deny_limit`: this week's spend plus amount above per_week.
    DenyLimitPerWeek,
    /// `deny_limit`: month-to-date plus amount above per_month.
    DenyLimitPerMonth,
    /// `deny_limit`: the mandate's lifetime spend plus amount above total.
    DenyLimitTotal,
    /// `deny_limit`: today's allows at count.per_day.
    DenyLimitCountDay,
    /// `deny_limit`: this week's allows at count.per_week.
    DenyLimitCountWeek,
    /// `deny_limit`: this month's allows at count.per_month.
    DenyLimitCountMonth,
    /// `deny_limit`: the mandate's allows at count.total.
    DenyLimitCountTotal,
    /// `review`.
    Review,
    /// `allow`.
    Allow,
}

impl Rule {
    /// Policy ids of the forbid rules, in the engine's order (first one wins).
    pub const FORBIDS: [(&'static str, Rule); 17] = [
        ("deny_not_before", Rule::DenyNotBefore),
        ("deny_expired", Rule::DenyExpired),
        ("deny_velocity", Rule::DenyVelocity),
        ("deny_category", Rule::DenyCategory),
        ("deny_recipient_denied", Rule::DenyRecipientDenied),
        ("deny_recipient_not_allowed", Rule::DenyRecipientNotAllowed),
        ("deny_limit_currency", Rule::DenyLimitCurrency),
        ("deny_limit_per_transaction", Rule::DenyLimitPerTransaction),
        ("deny_limit_per_day", Rule::DenyLimitPerDay),
        ("deny_limit_per_week", Rule::DenyLimitPerWeek),
        ("deny_limit_per_month", Rule::DenyLimitPerMonth),
        ("deny_limit_total", Rule::DenyLimitTotal),
        ("deny_limit_count_per_day", Rule::DenyLimitCountDay),
        ("deny_limit_count_per_week", Rule::DenyLimitCountWeek),
        ("deny_limit_count_per_month", Rule::DenyLimitCountMonth),
        ("deny_limit_count_total", Rule::DenyLimitCountTotal),
        ("review", Rule::Review),
    ];

    /// The verdict this rule gives.
    pub fn verdict(self) -> Verdict {
        match self {
            Rule::DenyNoMandate | Rule::DenyNotBefore => Verdict::DenyNoMandate,
            Rule::DenyExpired => Verdict::DenyExpired,
            Rule::DenyVelocity => Verdict::DenyVelocity,
            Rule::DenyCategory => Verdict::DenyCategory,
            Rule::DenyRecipientDenied | Rule::DenyRecipientNotAllowed => Verdict::DenyRecipient,
            Rule::DenyLimitCurrency
            | Rule::DenyLimitPerTransaction
            | Rule::DenyLimitPerDay
            | Rule::DenyLimitPerWeek
            | Rule::DenyLimitPerMonth
            | Rule::DenyLimitTotal
            | Rule::DenyLimitCountDay
            | Rule::DenyLimitCountWeek
            | Rule::DenyLimitCountMonth
            | Rule::DenyLimitCountTotal => Verdict::DenyLimit,
            Rule::Review => Verdict::Review,
            Rule::Allow => Verdict::Allow,
        }
    }

    /// The rule behind a mandate-core evaluation; `deny_limit` is told apart by its reason.
    pub fn of_evaluation(evaluation: &Evaluation) -> Rule {
        let reason = evaluation.reason.as_ref();
        match evaluation.policy_verdict {
            Verdict::Allow => Rule::Allow,
            Verdict::Review => Rule::Review,
            Verdict::DenyNoMandate if matches!(reason, Some(Reason::NotYetInForce { .. })) => {
                Rule::DenyNotBefore
            }
            Verdict::DenyNoMandate | Verdict::DenyRevoked => Rule::DenyNoMandate,
            Verdict::DenyExpired => Rule::DenyExpired,
            Verdict::DenyVelocity => Rule::DenyVelocity,
            Verdict::DenyCategory => Rule::DenyCategory,
            Verdict::DenyRecipient
                if matches!(
                    reason,
                    Some(Reason::Recipient {
                        refusal: RecipientRefusal::Denied,
                        ..
                    })
                ) =>
            {
                Rule::DenyRecipientDenied
            }
            Verdict::DenyRecipient => Rule::DenyRecipientNotAllowed,
            Verdict::DenyLimit
                if matches!(
                    reason,
                    Some(Reason::Window {
                        window: SpendWindow::Day,
                        ..
                    })
                ) =>
            {
                Rule::DenyLimitPerDay
            }
            Verdict::DenyLimit
                if matches!(
                    reason,
                    Some(Reason::Window {
                        window: SpendWindow::Week,
                        ..
                    })
                ) =>
            {
                Rule::DenyLimitPerWeek
            }
            Verdict::DenyLimit if matches!(reason, Some(Reason::Currency { .. })) => {
                Rule::DenyLimitCurrency
            }
            Verdict::DenyLimit if matches!(reason, Some(Reason::PerMonth { .. })) => {
                Rule::DenyLimitPerMonth
            }
            Verdict::DenyLimit if matches!(reason, Some(Reason::Total { .. })) => {
                Rule::DenyLimitTotal
            }
            Verdict::DenyLimit => match reason {
                Some(Reason::Count { window, .. }) => match window {
                    CountWindow::Day => Rule::DenyLimitCountDay,
                    CountWindow::Week => Rule::DenyLimitCountWeek,
                    CountWindow::Month => Rule::DenyLimitCountMonth,
                    CountWindow::Total => Rule::DenyLimitCountTotal,
                    _ => Rule::DenyNoMandate,
                },
                _ => Rule::DenyLimitPerTransaction,
            },
            // A verdict this comparison does not know (none today) is counted as no mandate.
            #[allow(unreachable_patterns)]
            _ => Rule::DenyNoMandate,
        }
    }
}

/// An amount in integer cents (Cedar's `decimal` has no addition, so money is a `Long`).
pub fn cents(amount: Amount) -> i64 {
    let value = amount.value();
    let scale = value.scale();
    assert!(scale <= 2, "amount {amount} has more than 2 decimals");
    let cents = value.mantissa() * 10i128.pow(2 - scale);
    i64::try_from(cents).expect("amount fits in i64 cents")
}

/// The mandate written as Cedar policies, one policy id per rule.
///
/// Cedar's forbid overrides permit, so every deny reason and `review` is a `forbid`, and
/// `allow` is the single `permit` scoped to the mandate. When several forbids hold, the
/// verdict is the first in [`Rule::FORBIDS`] order among the determining policies — the same
/// first-rule-wins order as mandate-core.
pub fn cedar_policies(mandate: &Mandate) -> String {
    let terms = &mandate.terms;
    let limits = &terms.limits;
    // Valid through the last second of `expires`, UTC: expired from the next midnight on.
    let expired_from = terms
        .expires
        .next_day()
        .expect("date")
        .with_time(Time::MIDNIGHT)
        .assume_utc()
        .unix_timestamp();
    let categories = terms
        .categories
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let scope = "principal, action, resource";
    let mut text = format!(
        "@id(\"allow\")\npermit (principal is Agent, action == Action::\"authorize\", resource == Mandate::\"{}\");\n",
        mandate.id
    );
    if let Some(start) = terms.not_before {
        let start = start
            .with_time(Time::MIDNIGHT)
            .assume_utc()
            .unix_timestamp();
        text += &format!(
            "@id(\"deny_not_before\")\nforbid ({scope}) when {{ context.now < {start} }};\n"
        );
    }
    text += &format!(
        "@id(\"deny_expired\")\nforbid ({scope}) when {{ context.now >= {expired_from} }};\n"
    );
    text += &format!(
        "@id(\"deny_velocity\")\nforbid ({scope}) when {{ context.recent_requests >= {VELOCITY_LIMIT} }};\n"
    );
    text += &format!(
        "@id(\"deny_category\")\nforbid ({scope}) unless {{ [{categories}].contains(context.category) }};\n"
    );
    if let Some(recipients) = &terms.recipients {
        // A prefix entry is Cedar's `like` with its `*`; an exact one is `==`.
        let matches = |list: &[RecipientPattern]| {
            list.iter()
                .map(|p| match p {
                    RecipientPattern::Exact(r) => format!("context.recipient == \"{r}\""),
                    RecipientPattern::Prefix(_) => format!("context.recipient like \"{p}\""),
                })
                .collect::<Vec<_>>()
                .join(" || ")
        };
        if !recipients.deny.is_empty() {
            text += &format!(
                "@id(\"deny_recipient_denied\")\nforbid ({scope}) when {{ {} }};\n",
                matches(&recipients.deny)
            );
        }
        if !recipients.allow.is_empty() {
            text += &format!(
                "@id(\"deny_recipient_not_allowed\")\nforbid ({scope}) unless {{ {} }};\n",
                matches(&recipients.allow)
            );
        }
    }
    text += &format!(
        "@id(\"deny_limit_currency\")\nforbid ({scope}) when {{ context.currency != \"{}\" }};\n",
        limits.currency
    );
    text += &format!(
        "@id(\"deny_limit_per_transaction\")\nforbid ({scope}) when {{ context.amount > {} }};\n",
        cents(limits.per_transaction)
    );
    if let Some(per_day) = limits.per_day {
        text += &format!(
            "@id(\"deny_limit_per_day\")\nforbid ({scope}) when {{ context.day_to_date + context.amount > {} }};\n",
            cents(per_day)
        );
    }
    if let Some(per_week) = limits.per_week {
        text += &format!(
            "@id(\"deny_limit_per_week\")\nforbid ({scope}) when {{ context.week_to_date + context.amount > {} }};\n",
            cents(per_week)
        );
    }
    if let Some(per_month) = limits.per_month {
        text += &format!(
            "@id(\"deny_limit_per_month\")\nforbid ({scope}) when {{ context.month_to_date + context.amount > {} }};\n",
            cents(per_month)
        );
    }
    if let Some(total) = limits.total {
        text += &format!(
            "@id(\"deny_limit_total\")\nforbid ({scope}) when {{ context.total_to_date + context.amount > {} }};\n",
            cents(total)
        );
    }
    if let Some(count) = limits.count {
        for (field, limit) in [
            ("per_day", count.per_day),
            ("per_week", count.per_week),
            ("per_month", count.per_month),
            ("total", count.total),
        ] {
            if let Some(limit) = limit {
                text += &format!(
                    "@id(\"deny_limit_count_{field}\")\nforbid ({scope}) when {{ context.count_{field} >= {limit} }};\n"
                );
            }
        }
    }
    if let Some(review_above) = terms.review_above {
        text += &format!(
            "@id(\"review\")\nforbid ({scope}) when {{ context.amount > {} }};\n",
            cents(review_above)
        );
    }
    text
}

/// Cedar, ready to decide: the policies, the authorizer and the fixed entity uids.
pub struct CedarEngine {
    authorizer: Authorizer,
    policies: PolicySet,
    entities: Entities,
    action: EntityUid,
    resource: EntityUid,
    principals: Vec<EntityUid>,
}

impl CedarEngine {
    /// Compiles the mandate's policies. Each policy gets its `@id` as its policy id, so that
    /// the response's determining policies name the rule.
    pub fn new(mandate: &Mandate, agents: &[AgentId]) -> Self {
        let parsed = PolicySet::from_str(&cedar_policies(mandate)).expect("Cedar policies parse");
        let mut policies = PolicySet::new();
        for policy in parsed.policies() {
            let id = policy.annotation("id").expect("every policy has an @id");
            let renamed = Policy::parse(Some(PolicyId::new(id)), policy.to_string())
                .expect("policy re-parses");
            policies.add(renamed).expect("unique ids");
        }
        let uid = |text: &str| EntityUid::from_str(text).expect("entity uid");
        Self {
            authorizer: Authorizer::new(),
            policies,
            entities: Entities::empty(),
            action: uid(r#"Action::"authorize""#),
            resource: uid(&format!("Mandate::\"{}\"", mandate.id)),
            principals: agents
                .iter()
                .map(|a| uid(&format!("Agent::\"{a}\"")))
                .collect(),
        }
    }

    /// The Cedar request for `item`: the request's fields and the numbers read from the
    /// agent's history (kept in Rust) in the context.
    pub fn request(&self, item: &Item, history: &AgentHistory) -> Request {
        let spend = history::spend(history);
        let recent = history::velocity(history).count_at(item.at) as i64;
        let month_to_date = cents(spend.total_at(item.at));
        let day_to_date = cents(spend.day_total_at(item.at));
        let week_to_date = cents(spend.week_total_at(item.at));
        let count = |n: u64| RestrictedExpression::new_long(i64::try_from(n).expect("count"));
        let context = Context::from_pairs([
            (
                "total_to_date".to_owned(),
                RestrictedExpression::new_long(cents(spend.lifetime.total())),
            ),
            (
                "count_per_day".to_owned(),
                count(spend.day_count_at(item.at)),
            ),
            (
                "count_per_week".to_owned(),
                count(spend.week_count_at(item.at)),
            ),
            (
                "count_per_month".to_owned(),
                count(spend.month_count_at(item.at)),
            ),
            ("count_total".to_owned(), count(spend.lifetime.count())),
            (
                "amount".to_owned(),
                RestrictedExpression::new_long(cents(item.request.amount)),
            ),
            (
                "currency".to_owned(),
                RestrictedExpression::new_string(item.request.currency.to_string()),
            ),
            (
                "category".to_owned(),
                RestrictedExpression::new_string(item.request.category.to_string()),
            ),
            (
                "recipient".to_owned(),
                RestrictedExpression::new_string(item.request.recipient.to_string()),
            ),
            (
                "day_to_date".to_owned(),
                RestrictedExpression::new_long(day_to_date),
            ),
            (
                "week_to_date".to_owned(),
                RestrictedExpression::new_long(week_to_date),
            ),
            (
                "month_to_date".to_owned(),
                RestrictedExpression::new_long(month_to_date),
            ),
            (
                "recent_requests".to_owned(),
                RestrictedExpression::new_long(recent),
            ),
            (
                "now".to_owned(),
                RestrictedExpression::new_long(item.at.unix_timestamp()),
            ),
        ])
        .expect("context");
        Request::new(
            self.principals[item.agent].clone(),
            self.action.clone(),
            self.resource.clone(),
            context,
            None,
        )
        .expect("request")
    }

    /// `is_authorized`, mapped to a rule: `Allow` is allow; on `Deny` the first determining
    /// forbid in engine order wins; no determining policy means nothing permitted.
    pub fn decide(&self, request: &Request) -> Rule {
        let response = self
            .authorizer
            .is_authorized(request, &self.policies, &self.entities);
        if response.decision() == Decision::Allow {
            return Rule::Allow;
        }
        let mut best = Rule::DenyNoMandate;
        let mut best_rank = usize::MAX;
        for id in response.diagnostics().reason() {
            let id: &str = id.as_ref();
            if let Some(rank) = Rule::FORBIDS.iter().position(|(name, _)| *name == id)
                && rank < best_rank
            {
                best_rank = rank;
                best = Rule::FORBIDS[rank].1;
            }
        }
        best
    }

    /// Whether evaluating `request` raised errors (it never should).
    pub fn errors(&self, request: &Request) -> Vec<String> {
        self.authorizer
            .is_authorized(request, &self.policies, &self.entities)
            .diagnostics()
            .errors()
            .map(|e| e.to_string())
            .collect()
    }
}

/// The agents of the stream, `agt_a0..`.
pub fn agents() -> Vec<AgentId> {
    (0..AGENTS)
        .map(|i| AgentId::parse(&format!("agt_a{i}")).expect("agent id"))
        .collect()
}

/// Cedar: per request, build the context from the history, `is_authorized`, map the rule,
/// then `history.record` with the same verdict, from empty histories.
pub fn run_cedar(engine: &CedarEngine, items: &[Item]) -> Vec<Rule> {
    let mut histories = [AgentHistory::default(); AGENTS];
    items
        .iter()
        .map(|item| {
            let history = &mut histories[item.agent];
            let rule = engine.decide(&engine.request(item, history));
            let verdict = rule.verdict();
            let evaluation = Evaluation {
                verdict,
                policy_verdict: verdict,
                reason: None,
            };
            history.record(&evaluation, item.request.amount, item.at);
            rule
        })
        .collect()
}

/// The Cedar requests of the whole stream, built once (for timing `is_authorized` alone).
pub fn cedar_requests(engine: &CedarEngine, items: &[Item]) -> Vec<Request> {
    let mut histories = [AgentHistory::default(); AGENTS];
    items
        .iter()
        .map(|item| {
            let history = &mut histories[item.agent];
            let request = engine.request(item, history);
            let verdict = engine.decide(&request).verdict();
            let evaluation = Evaluation {
                verdict,
                policy_verdict: verdict,
                reason: None,
            };
            history.record(&evaluation, item.request.amount, item.at);
            request
        })
        .collect()
}

/// How many of each rule, in [`Rule`] order, for printing the mix.
pub fn mix(rules: &[Rule]) -> Vec<(Rule, usize)> {
    let all = [
        Rule::Allow,
        Rule::Review,
        Rule::DenyExpired,
        Rule::DenyVelocity,
        Rule::DenyCategory,
        Rule::DenyRecipientDenied,
        Rule::DenyRecipientNotAllowed,
        Rule::DenyLimitCurrency,
        Rule::DenyLimitPerTransaction,
        Rule::DenyLimitPerDay,
        Rule::DenyLimitPerWeek,
        Rule::DenyLimitPerMonth,
        Rule::DenyLimitTotal,
        Rule::DenyLimitCountDay,
        Rule::DenyLimitCountWeek,
        Rule::DenyLimitCountMonth,
        Rule::DenyLimitCountTotal,
        Rule::DenyNotBefore,
        Rule::DenyNoMandate,
    ];
    all.into_iter()
        .map(|r| (r, rules.iter().filter(|x| **x == r).count()))
        .filter(|(_, n)| *n > 0)
        .collect()
}

// Keep the window constant in sight: Cedar's velocity rule reads a count over this window.
const _: () = assert!(VELOCITY_WINDOW_MS == 60_000);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_engines_give_identical_verdicts_on_the_whole_stream() {
        let counts = identical_on_the_stream(&mandate());
        for rule in [
            Rule::Allow,
            Rule::Review,
            Rule::DenyExpired,
            Rule::DenyVelocity,
            Rule::DenyCategory,
            Rule::DenyRecipientDenied,
            Rule::DenyRecipientNotAllowed,
            Rule::DenyLimitCurrency,
            Rule::DenyLimitPerTransaction,
            Rule::DenyLimitPerDay,
            Rule::DenyLimitPerWeek,
            Rule::DenyLimitPerMonth,
        ] {
            let n = counts
                .iter()
                .find(|(r, _)| *r == rule)
                .map_or(0, |(_, n)| *n);
            assert!(n >= 20, "{rule:?} occurs only {n} times: {counts:?}");
        }
    }

    /// With the third round's limits too (start, lifetime total, counts): identical, and
    /// each new rule reached.
    #[test]
    fn the_lifetime_limits_give_identical_verdicts_too() {
        // Two count totals, one each side of where the amount total binds, so that both
        // lifetime denials are reached (the amount is checked before the count).
        let mut counts = identical_on_the_stream(&mandate_lifetime_with(120));
        for (rule, n) in identical_on_the_stream(&mandate_lifetime_with(100)) {
            match counts.iter_mut().find(|(r, _)| *r == rule) {
                Some((_, total)) => *total += n,
                None => counts.push((rule, n)),
            }
        }
        for rule in [
            Rule::DenyNotBefore,
            Rule::DenyLimitTotal,
            Rule::DenyLimitCountDay,
            Rule::DenyLimitCountWeek,
            Rule::DenyLimitCountMonth,
            Rule::DenyLimitCountTotal,
            Rule::Allow,
        ] {
            let n = counts
                .iter()
                .find(|(r, _)| *r == rule)
                .map_or(0, |(_, n)| *n);
            assert!(n >= 20, "{rule:?} occurs only {n} times: {counts:?}");
        }
    }

    /// Runs both engines over the stream under `mandate`, asserts every verdict and rule
    /// equal and no Cedar error; the mix of rules.
    fn identical_on_the_stream(mandate: &Mandate) -> Vec<(Rule, usize)> {
        let items = stream();
        let engine = CedarEngine::new(mandate, &agents());
        let core = run_core(mandate, &items);
        let cedar = run_cedar(&engine, &items);
        assert_eq!(core.len(), STREAM_LEN);
        assert_eq!(cedar.len(), STREAM_LEN);
        for (i, (evaluation, rule)) in core.iter().zip(&cedar).enumerate() {
            assert_eq!(
                evaluation.verdict,
                rule.verdict(),
                "request {i} {:?}: mandate-core {:?}, Cedar {rule:?}",
                items[i],
                evaluation.reason
            );
            assert_eq!(Rule::of_evaluation(evaluation), *rule, "request {i}");
        }
        // Cedar never failed to evaluate a policy (an error would silently skip a forbid).
        for request in cedar_requests(&engine, &items) {
            assert_eq!(engine.errors(&request), Vec::<String>::new());
        }
        let counts = mix(&cedar);
        println!("verdict mix: {counts:?}");
        counts
    }

    #[test]
    fn a_request_for_another_mandate_is_not_permitted() {
        let mandate = mandate();
        let engine = CedarEngine::new(&mandate, &agents());
        let mut other = mandate.clone();
        other.id = MandateId::from_random([4; 16]);
        let other_engine = CedarEngine::new(&other, &agents());
        let item = &stream()[0];
        let request = other_engine.request(item, &AgentHistory::default());
        assert_eq!(engine.decide(&request), Rule::DenyNoMandate);
    }
}
