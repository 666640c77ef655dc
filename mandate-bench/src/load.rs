//! The load generator: keep-alive connections sending POSTs with a fixed request mix,
//! closed loop (as fast as answers come) or open loop (a fixed rate, latency measured from
//! each request's scheduled time so that a slow answer cannot hide the queue behind it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::http::{Conn, verdict_of, write_post};
use crate::setup::REVIEW_ABOVE;

/// The kinds of request in the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A small amount in an allowed category.
    Allow = 0,
    /// An amount above `review_above`, within `per_transaction`.
    Review = 1,
    /// A category the mandate does not allow.
    Deny = 2,
}

impl Kind {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Allow => "allow",
            Kind::Review => "review",
            Kind::Deny => "deny",
        }
    }
}

/// Weights of the mix.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    /// Weight of [`Kind::Allow`].
    pub allow: u32,
    /// Weight of [`Kind::Review`].
    pub review: u32,
    /// Weight of [`Kind::Deny`].
    pub deny: u32,
}

impl Mix {
    /// Parses `allow,review,deny`, for example `80,10,10`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<u32> = text
            .split(',')
            .map(|p| p.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("--mix {text:?}: {e}"))?;
        match parts[..] {
            [allow, review, deny] if allow + review + deny > 0 => Ok(Self {
                allow,
                review,
                deny,
            }),
            _ => Err(format!(
                "--mix {text:?}: expected three weights allow,review,deny, not all zero"
            )),
        }
    }

    fn kind(&self, h: u64) -> Kind {
        let total = u64::from(self.allow + self.review + self.deny);
        let x = h % total;
        if x < u64::from(self.allow) {
            Kind::Allow
        } else if x < u64::from(self.allow + self.review) {
            Kind::Review
        } else {
            Kind::Deny
        }
    }
}

/// SplitMix64's finalizer: a cheap, bijective scramble.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How to build request number `i`: agent `i mod n` (round robin, so every agent's
/// requests are evenly spaced), kind drawn from the mix by a hash of `i`.
pub struct Requests {
    /// The agents' keys.
    pub keys: Vec<String>,
    /// The mix.
    pub mix: Mix,
    /// `Host` header value.
    pub host: String,
    /// The path posted to.
    pub path: String,
}

impl Requests {
    /// Writes request `i` into `out`; returns its kind.
    pub fn build(&self, i: u64, out: &mut Vec<u8>, body: &mut Vec<u8>) -> Kind {
        use std::io::Write;
        let n = self.keys.len().max(1) as u64;
        let agent = (i % n) as usize;
        let h = mix64(i);
        let kind = self.mix.kind(h);
        let cents = (h >> 20) % 100;
        let vendor = (h >> 30) % 50;
        body.clear();
        // Writing to a Vec cannot fail.
        let _ = match kind {
            Kind::Allow => {
                let units = 1 + (h >> 8) % u64::from(REVIEW_ABOVE - 1);
                let category = if (h >> 40) & 1 == 0 {
                    "software"
                } else {
                    "travel"
                };
                write!(
                    body,
                    r#"{{"amount":{units}.{cents:02},"currency":"USD","recipient":"vendor:v{vendor}","category":"{category}"}}"#
                )
            }
            Kind::Review => {
                let units = u64::from(REVIEW_ABOVE) + 1 + (h >> 8) % 800;
                write!(
                    body,
                    r#"{{"amount":{units}.{cents:02},"currency":"USD","recipient":"vendor:v{vendor}","category":"software"}}"#
                )
            }
            Kind::Deny => {
                let units = 1 + (h >> 8) % 50;
                write!(
                    body,
                    r#"{{"amount":{units}.{cents:02},"currency":"USD","recipient":"vendor:v{vendor}","category":"gambling"}}"#
                )
            }
        };
        let key = self.keys.get(agent).map(String::as_str);
        write_post(out, &self.host, &self.path, key, body);
        kind
    }
}

/// A fixed permutation of `0..n` that sends consecutive positions far apart: position `k`
/// to `k * step mod n`, with `step` the first of a few large primes prime to `n`.
pub fn scattered(n: usize) -> Vec<usize> {
    let step = [7_919u64, 104_729, 1_299_709]
        .into_iter()
        .find(|p| !(n as u64).is_multiple_of(*p))
        .unwrap_or(1);
    (0..n as u64)
        .map(|k| usize::try_from(k * step % n.max(1) as u64).unwrap_or(0))
        .collect()
}

/// Which server of several a request goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spread {
    /// Each agent's requests always to the same server (a load balancer routing by API
    /// key): an agent's cached state stays current on its server.
    Agent,
    /// Each round over the agents to the next server: an agent's consecutive requests go
    /// to different servers, so every decision finds its agent changed by another process
    /// (the worst case of the cross-process check).
    Request,
    /// Each agent's requests to the server its organization is routed to (a load balancer
    /// routing by organization): the server of agent `a` is `servers[a]`, taken modulo
    /// the servers.
    Table(Arc<[usize]>),
}

impl Spread {
    /// The server (of `servers`) for request `i` over `agents` agents.
    pub fn server(&self, i: u64, agents: u64, servers: usize) -> usize {
        let servers = servers.max(1) as u64;
        let agents = agents.max(1);
        let n = match self {
            Spread::Agent => (i % agents) % servers,
            Spread::Request => (i / agents + i % agents) % servers,
            Spread::Table(table) => {
                let agent = usize::try_from(i % agents).unwrap_or(0);
                table.get(agent).map_or(0, |s| *s as u64) % servers
            }
        };
        n as usize
    }

    /// The same spread for agents called in `order` (position k calls agent `order[k]`): a
    /// table keeps each agent's server.
    pub fn in_order(self, order: &[usize]) -> Self {
        match self {
            Spread::Table(table) => Spread::Table(
                order
                    .iter()
                    .map(|&agent| table.get(agent).copied().unwrap_or(0))
                    .collect(),
            ),
            other => other,
        }
    }
}

/// How to drive the load.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Concurrent keep-alive connections.
    pub connections: usize,
    /// Time before measuring.
    pub warmup: Duration,
    /// Time measured.
    pub duration: Duration,
    /// Open loop at this many requests per second; closed loop when `None`.
    pub rate: Option<f64>,
    /// Stop after this many requests (then every response counts, and `duration` is only
    /// a time limit).
    pub limit: Option<u64>,
    /// The number of the first request (round robin continues across runs).
    pub first_seq: u64,
}

/// What one run measured (counts are of responses completed inside the measured window,
/// unless named `total_`).
#[derive(Debug, Default)]
pub struct Outcome {
    /// Latency of each measured response, µs: from sending (closed loop) or from the
    /// scheduled time (open loop).
    pub latencies_us: Vec<u32>,
    /// The second of the measured window in which each of `latencies_us` completed (in
    /// the same order), so that the tail can be placed in time.
    pub seconds: Vec<u16>,
    /// Open loop only: latency from the actual send, µs.
    pub service_us: Vec<u32>,
    /// Responses by status.
    pub statuses: BTreeMap<u16, u64>,
    /// 201 responses by request kind and `verdict`.
    pub verdicts: BTreeMap<(Kind, String), u64>,
    /// Requests sent in all phases.
    pub total_sent: u64,
    /// 201 responses in all phases (decisions the server stored).
    pub total_201: u64,
    /// Connection or protocol errors.
    pub io_errors: u64,
    /// The first such error.
    pub first_error: Option<String>,
    /// The measured window.
    pub window: Duration,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.latencies_us.extend(other.latencies_us);
        self.seconds.extend(other.seconds);
        self.service_us.extend(other.service_us);
        for (k, v) in other.statuses {
            *self.statuses.entry(k).or_default() += v;
        }
        for (k, v) in other.verdicts {
            *self.verdicts.entry(k).or_default() += v;
        }
        self.total_sent += other.total_sent;
        self.total_201 += other.total_201;
        self.io_errors += other.io_errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    /// 201s in the window.
    pub fn created(&self) -> u64 {
        self.statuses.get(&201).copied().unwrap_or(0)
    }
}

struct Shared {
    requests: Arc<Requests>,
    addrs: Vec<SocketAddr>,
    spread: Spread,
    seq: AtomicU64,
    slot: AtomicU64,
    start: Instant,
    measure_from: Instant,
    end: Instant,
    rate: Option<f64>,
    pacer: Option<Arc<Semaphore>>,
    last_seq: Option<u64>,
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

async fn worker(shared: Arc<Shared>) -> Outcome {
    let mut out = Outcome::default();
    // One keep-alive connection to each server.
    let mut conns: Vec<Option<Conn>> = shared.addrs.iter().map(|_| None).collect();
    let mut request = Vec::with_capacity(512);
    let mut body = Vec::with_capacity(256);
    let mut verdicts: Vec<(Kind, Vec<u8>, u64)> = Vec::new();
    loop {
        let scheduled = match (&shared.pacer, shared.rate) {
            (Some(pacer), Some(rate)) => {
                match pacer.acquire().await {
                    Ok(permit) => permit.forget(),
                    Err(_) => break,
                }
                let k = shared.slot.fetch_add(1, Ordering::Relaxed);
                Some(shared.start + Duration::from_secs_f64(k as f64 / rate))
            }
            _ => None,
        };
        if Instant::now() >= shared.end {
            break;
        }
        let i = shared.seq.fetch_add(1, Ordering::Relaxed);
        if shared.last_seq.is_some_and(|last| i >= last) {
            break;
        }
        let kind = shared.requests.build(i, &mut request, &mut body);
        let agents = shared.requests.keys.len() as u64;
        let server = shared.spread.server(i, agents, shared.addrs.len());
        let conn = &mut conns[server];
        let c = match &mut *conn {
            Some(c) => c,
            None => match Conn::connect(shared.addrs[server]).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    out.io_errors += 1;
                    out.first_error
                        .get_or_insert_with(|| format!("connect: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let sent = Instant::now();
        out.total_sent += 1;
        match c.request(&request).await {
            Ok(response) => {
                let done = Instant::now();
                let status = response.status;
                if status == 201 {
                    out.total_201 += 1;
                }
                let from = scheduled.unwrap_or(sent);
                if from >= shared.measure_from && done <= shared.end {
                    out.latencies_us
                        .push(micros(done.saturating_duration_since(from)));
                    let second = done
                        .saturating_duration_since(shared.measure_from)
                        .as_secs();
                    out.seconds.push(u16::try_from(second).unwrap_or(u16::MAX));
                    if scheduled.is_some() {
                        out.service_us.push(micros(done - sent));
                    }
                    *out.statuses.entry(status).or_default() += 1;
                    if status == 201 {
                        let verdict = verdict_of(response.body).unwrap_or(b"(none)");
                        match verdicts
                            .iter_mut()
                            .find(|(k, v, _)| *k == kind && v.as_slice() == verdict)
                        {
                            Some(entry) => entry.2 += 1,
                            None => verdicts.push((kind, verdict.to_vec(), 1)),
                        }
                    }
                }
                if response.close {
                    *conn = None;
                }
            }
            Err(e) => {
                out.io_errors += 1;
                out.first_error.get_or_insert_with(|| e.to_string());
                *conn = None;
            }
        }
    }
    for (kind, verdict, n) in verdicts {
        *out.verdicts
            .entry((kind, String::from_utf8_lossy(&verdict).into_owned()))
            .or_default() += n;
    }
    out
}

/// Drives the load on `addr` with `requests`, following `plan`. Call inside a tokio runtime.
pub async fn run(addr: SocketAddr, requests: Arc<Requests>, plan: Plan) -> Outcome {
    run_on(vec![addr], Spread::Agent, requests, plan).await
}

/// [`run`] on several servers, each request sent to the one `spread` picks.
pub async fn run_on(
    addrs: Vec<SocketAddr>,
    spread: Spread,
    requests: Arc<Requests>,
    plan: Plan,
) -> Outcome {
    let start = Instant::now();
    let measure_from = if plan.limit.is_some() {
        start
    } else {
        start + plan.warmup
    };
    let end = measure_from + plan.duration;
    let pacer = plan.rate.map(|_| Arc::new(Semaphore::new(0)));
    let shared = Arc::new(Shared {
        requests,
        addrs,
        spread,
        seq: AtomicU64::new(plan.first_seq),
        slot: AtomicU64::new(0),
        start,
        measure_from,
        end,
        rate: plan.rate,
        pacer: pacer.clone(),
        last_seq: plan.limit.map(|l| plan.first_seq + l),
    });
    // The pacer releases one permit per scheduled request, from a plain thread that sleeps
    // ~100 µs at a time (tokio's timer has a 1 ms grain, too coarse for 10,000+/s).
    let stop = Arc::new(AtomicBool::new(false));
    let pacer_thread = match (pacer, plan.rate) {
        (Some(sem), Some(rate)) => {
            let stop = stop.clone();
            Some(std::thread::spawn(move || {
                let mut released: u64 = 0;
                loop {
                    let now = Instant::now();
                    if now >= end || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let due = ((now - start).as_secs_f64() * rate) as u64 + 1;
                    if due > released {
                        sem.add_permits(usize::try_from(due - released).unwrap_or(0));
                        released = due;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                sem.close();
            }))
        }
        _ => None,
    };
    let mut tasks = Vec::with_capacity(plan.connections);
    for _ in 0..plan.connections.max(1) {
        tasks.push(tokio::spawn(worker(shared.clone())));
    }
    let mut outcome = Outcome::default();
    for task in tasks {
        match task.await {
            Ok(o) => outcome.merge(o),
            Err(e) => {
                outcome.io_errors += 1;
                outcome
                    .first_error
                    .get_or_insert_with(|| format!("worker: {e}"));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = pacer_thread {
        let _ = t.join();
    }
    outcome.window = if plan.limit.is_some() {
        start.elapsed()
    } else {
        plan.duration
    };
    outcome
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_follows_the_weights() {
        let mix = Mix::parse("80,10,10").unwrap();
        let mut counts = [0u32; 3];
        for i in 0..100_000 {
            counts[mix.kind(mix64(i)) as usize] += 1;
        }
        assert!((79_000..81_000).contains(&counts[0]), "{counts:?}");
        assert!((9_500..10_500).contains(&counts[1]), "{counts:?}");
        assert!(Mix::parse("1,2").is_err());
        assert!(Mix::parse("0,0,0").is_err());
    }

    /// Spread by agent, an agent always meets the same server; by request, its consecutive
    /// requests meet different ones.
    #[test]
    fn requests_spread_by_agent_or_by_request() {
        let agents = 5;
        for agent in 0..agents {
            let servers: Vec<usize> = (0..6)
                .map(|round| Spread::Agent.server(round * agents + agent, agents, 2))
                .collect();
            assert!(servers.iter().all(|s| *s == servers[0]), "{servers:?}");
            let servers: Vec<usize> = (0..6)
                .map(|round| Spread::Request.server(round * agents + agent, agents, 2))
                .collect();
            assert!(servers.windows(2).all(|w| w[0] != w[1]), "{servers:?}");
        }
        // Either way both servers get half the load.
        for spread in [Spread::Agent, Spread::Request] {
            let first = (0..1000)
                .filter(|i| spread.server(*i, agents, 2) == 0)
                .count();
            assert!((400..=600).contains(&first), "{first}");
        }
        assert_eq!(Spread::Agent.server(7, 5, 1), 0);
    }

    /// Spread by a table (by organization), each agent always meets its own server, as
    /// the table says, whatever the round.
    #[test]
    fn requests_spread_by_table_meet_each_agents_server() {
        let table = Spread::Table(Arc::from(vec![1, 0, 0, 1, 2]));
        let agents = 5;
        for round in 0..4 {
            let servers: Vec<usize> = (0..agents)
                .map(|agent| table.server(round * agents + agent, agents, 2))
                .collect();
            assert_eq!(servers, vec![1, 0, 0, 1, 0], "round {round}");
        }
        assert_eq!(table.server(4, 5, 3), 2);
        // Called in another order, each agent still meets its own server.
        let order = scattered(5);
        let reordered = table.clone().in_order(&order);
        for (position, agent) in order.iter().enumerate() {
            assert_eq!(
                reordered.server(position as u64, agents, 2),
                table.server(*agent as u64, agents, 2),
                "agent {agent}"
            );
        }
        assert_eq!(Spread::Agent.in_order(&order), Spread::Agent);
    }

    /// The scattered order is a permutation, and neighbours in it are not neighbours among
    /// the agents.
    #[test]
    fn the_scattered_order_is_a_permutation_of_far_apart_neighbours() {
        for n in [1, 2, 7, 20_000, 7_919 * 3] {
            let order = scattered(n);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n = {n}");
        }
        let order = scattered(20_000);
        assert!(
            order.windows(2).all(|w| w[0].abs_diff(w[1]) > 100),
            "neighbours stay apart"
        );
    }

    #[test]
    fn requests_round_robin_over_agents() {
        let requests = Requests {
            keys: vec!["k0".into(), "k1".into(), "k2".into()],
            mix: Mix::parse("1,1,1").unwrap(),
            host: "h".into(),
            path: "/v1/authorizations".into(),
        };
        let (mut out, mut body) = (Vec::new(), Vec::new());
        for i in 0..30u64 {
            let kind = requests.build(i, &mut out, &mut body);
            let text = String::from_utf8(out.clone()).unwrap();
            assert!(text.contains(&format!("Bearer k{}\r\n", i % 3)), "{text}");
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let amount: f64 = json["amount"].to_string().parse().unwrap();
            match kind {
                Kind::Allow => assert!(amount <= f64::from(REVIEW_ABOVE)),
                Kind::Review => assert!(amount > f64::from(REVIEW_ABOVE)),
                Kind::Deny => assert_eq!(json["category"], "gambling"),
            }
        }
    }
}
