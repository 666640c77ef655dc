//! `mandate listen --port N`: a local webhook receiver for developing an event consumer.
//!
//! It listens on 127.0.0.1 only, verifies each POSTed event JWT with the core's
//! `verify_event` against the JWK Set (a file, or fetched from a URL and fetched again when
//! a token names an unknown `kid`), prints one line per event, drops repeats of a `jti`,
//! and with `--forward-to` passes each new verified event on to the consumer being
//! developed, answering Mandate with the consumer's status.
//!
//! The crate is blocking, and so is this: a thread accepts connections (polling a flag
//! that Ctrl-C sets) and each connection is served on its own thread, at most
//! [`MAX_CONNECTIONS`] at once, by the bounded HTTP/1.1 reader in [`crate::http1`].
//!
//! Longer than most files because it is a small server of its own (accept loop, per-event
//! verification, de-duplication, forwarding and its answer), and a sixth of it is tests.

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::{ArgGroup, Args};
use mandate_core::{
    CachePolicy, EventClaims, JwkSet, KeySetCache, NextFetch, TokenError, VerifyOptions,
    verify_event,
};
use reqwest::Url;
use reqwest::header::CONTENT_TYPE;
use serde::Serialize;
use time::OffsetDateTime;

use super::Context;
use super::listen_order::Reorder;
use crate::client::{self, HttpOptions};
use crate::error::{CliError, CmdResult, Exit};
use crate::http1::{self, Limits, printable};
use crate::jwks_cache;
use crate::output;

/// The long help of `ListenArgs`, set on its subcommand.
pub const LONG_ABOUT: &str = "Receive webhook events on this machine while you develop a consumer.\n\n\
Listens on 127.0.0.1:PORT (--port 0 picks a free port; the address is printed first). \
Each POST must carry an event JWT (Content-Type application/jwt). It is verified as \
`mandate verify --event` does (ES256 signature by kid against the JWK Set, issuer, expiry \
(exp, five minutes after the attempt was signed) and no iat in the future, each with a \
minute of skew) and one line is printed: time, event id, type, and \
verified, duplicate, or REJECTED with the reason; with --json one JSON object per line, \
holding the claims. Deliveries are concurrent, so events can arrive out of order: each \
line is held --order-window milliseconds (500) and lines are printed in the order the \
events were made (by event id). The answer is 200 for a verified event and for a repeat of an id \
already acknowledged, 400 for a rejected one (415 for another Content-Type).\n\n\
The key set comes from --jwks FILE (with --issuer), or from --jwks-url: the verdicts URL \
or its /.well-known/jwks.json, which also gives the issuer. It is loaded again when a \
token names a kid it does not hold (a key rotation; at most once a second) and, from a \
URL, when it is older than five minutes.\n\n\
With --forward-to URL, each new verified event is POSTed on, same body and Content-Type, \
and Mandate gets that answer's status (502 when it cannot be reached); an id counts as \
acknowledged only after a 2xx from there, so Mandate's retries reach your consumer again. \
Rejected events and repeats are not forwarded.\n\n\
Register the printed address as a sandbox webhook (http to a loopback host is accepted \
in the sandbox) and ping it. Ctrl-C stops (a second Ctrl-C exits at once); --max-events N \
exits after N POSTs. Exits 0 when stopped.";

/// `mandate listen`.
#[derive(Debug, Args)]
#[command(group = ArgGroup::new("keys").required(true).args(["jwks", "jwks_url"]))]
#[command(after_help = "\
Examples:
  mandate listen --port 9000 --jwks-url https://verdicts.example.com \\
      --forward-to http://localhost:3000/webhooks/mandate
  mandate webhooks create --url http://127.0.0.1:9000/ --event ping --event mandate.revoked
  mandate webhooks ping whk_…")]
pub struct ListenArgs {
    /// Port on 127.0.0.1; 0 picks a free one
    #[arg(long, value_name = "N")]
    pub port: u16,
    /// POST each new verified event on to this URL and answer with its status
    #[arg(long, value_name = "URL")]
    pub forward_to: Option<String>,
    /// JWK Set file to verify against (needs --issuer); read again on an unknown kid
    #[arg(long, value_name = "FILE", requires = "issuer")]
    pub jwks: Option<PathBuf>,
    /// Where to fetch the JWK Set: the verdicts URL, or its /.well-known/jwks.json
    #[arg(long, value_name = "URL")]
    pub jwks_url: Option<String>,
    /// The expected issuer, the service's verdicts URL [default: from --jwks-url]
    #[arg(long, value_name = "URL")]
    pub issuer: Option<String>,
    /// Exit after this many POSTs (verified, duplicate or rejected)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_events: Option<u64>,
    /// Hold each line this long so that events that arrive out of order (deliveries are
    /// concurrent) print in the order they were made, by event id; 0 prints at once
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub order_window: u64,
}

/// Connections served at once; more are answered 503.
pub const MAX_CONNECTIONS: usize = 32;

/// Clock skew allowed on `iat` and `exp`, as the webhook guide recommends.
const LEEWAY_SECS: i64 = 60;

/// The least time between two reloads of the key set for an unknown `kid`: a rotation is
/// picked up at its first token, and forged kids cannot make the listener hammer the URL.
const RELOAD_COOLDOWN: Duration = Duration::from_secs(1);

/// A key set fetched from a URL is fetched again when older than this, unless its
/// response's `Cache-Control` names a `max-age` (a day at most).
const URL_SET_LIFETIME: Duration = Duration::from_secs(300);

/// How often the accept loop looks at the stop flags.
const POLL: Duration = Duration::from_millis(25);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Loads a key set: reads the file, or fetches the URL; with the response's
/// `Cache-Control` when it came from a URL.
type Loader = Box<dyn Fn() -> Result<(JwkSet, Option<String>), CliError> + Send>;

/// The key set and how to load it again.
struct Keys {
    set: JwkSet,
    issuer: String,
    /// How long the set may be used before it is loaded again (a set fetched from a URL).
    lifetime: Option<Duration>,
    /// When to load it again: the core's JWK Set cache policy, by the real clock.
    cache: KeySetCache,
    load: Loader,
}

/// The cache policy of a set loaded now with `cache_control`: kept for its `max-age`, or
/// `lifetime` when the response names none (for ever when `None`: a file is loaded again
/// only for an unknown kid).
fn cache_for(lifetime: Option<Duration>, cache_control: Option<&str>) -> KeySetCache {
    let seconds = |d: Duration| time::Duration::try_from(d).unwrap_or(time::Duration::ZERO);
    let interval = seconds(RELOAD_COOLDOWN);
    let policy = match lifetime {
        Some(lifetime) => CachePolicy {
            default_max_age: seconds(lifetime),
            unknown_kid_interval: interval,
            ..jwks_cache::cache_policy()
        },
        // A century stands for ever without overflowing a date.
        None => CachePolicy {
            default_max_age: time::Duration::days(36_500),
            max_max_age: time::Duration::days(36_500),
            unknown_kid_interval: interval,
        },
    };
    let mut cache = KeySetCache::new(policy);
    cache.fetched(OffsetDateTime::now_utc(), cache_control);
    cache
}

impl Keys {
    /// Verifies an event token, loading the set again (once) when the token names a `kid`
    /// the set does not hold, and first when a fetched set is older than five minutes.
    fn verify(&mut self, token: &str, now: i64) -> Result<EventClaims, String> {
        let clock = OffsetDateTime::now_utc();
        if self.lifetime.is_some() && self.cache.before_use(clock) == NextFetch::Fetch {
            match (self.load)() {
                Ok((set, cache_control)) => self.replace(set, cache_control),
                Err(e) => output::note(&format!(
                    "cannot refresh the key set, still using the one loaded {} s ago: {e}",
                    self.cache
                        .fetched_at()
                        .map_or(0, |at| (clock - at).whole_seconds())
                )),
            }
        }
        let options = VerifyOptions {
            issuer: self.issuer.clone(),
            now: OffsetDateTime::from_unix_timestamp(now)
                .map_err(|_| format!("the time {now} is out of range"))?,
            leeway_secs: LEEWAY_SECS,
        };
        match verify_event(token, &self.set, &options) {
            Err(unknown @ TokenError::UnknownKid(_)) => {
                if self.cache.unknown_kid(clock) == NextFetch::UseCached {
                    return Err(format!(
                        "{unknown} (the set was loaded again under a second ago)"
                    ));
                }
                match (self.load)() {
                    Ok((set, cache_control)) => {
                        self.replace(set, cache_control);
                        verify_event(token, &self.set, &options)
                            .map_err(|e| output::token_error(&e))
                    }
                    Err(e) => Err(format!("{unknown}, and loading the set again failed: {e}")),
                }
            }
            other => other.map_err(|e| output::token_error(&e)),
        }
    }

    fn replace(&mut self, set: JwkSet, cache_control: Option<String>) {
        self.set = set;
        self.cache
            .fetched(OffsetDateTime::now_utc(), cache_control.as_deref());
    }
}

fn read_set_file(path: &std::path::Path) -> Result<JwkSet, CliError> {
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
    JwkSet::from_json(&bytes)
        .map_err(|e| CliError::usage(format!("{} is not a valid key set: {e}", path.display())))
}

/// Fetches the set at `url`; the set, the URL it came from after redirects and the
/// response's `Cache-Control`.
fn fetch_set(url: &Url, http: HttpOptions) -> Result<(JwkSet, Url, Option<String>), CliError> {
    let (final_url, response) = client::fetch_public(url, http)?;
    let bytes = serde_json::to_vec(&response.body)
        .map_err(|e| CliError::usage(format!("cannot encode the key set: {e}")))?;
    let set = JwkSet::from_json(&bytes).map_err(|e| CliError::UnexpectedResponse {
        status: response.status,
        detail: format!("{final_url} did not return a valid key set: {e}"),
        request_id: None,
    })?;
    Ok((set, final_url, response.cache_control))
}

/// Loads the key set the arguments name; also says where it came from.
fn initial_keys(args: &ListenArgs, http: HttpOptions) -> Result<(Keys, String), CliError> {
    if let Some(path) = &args.jwks {
        let issuer = args.issuer.clone().ok_or_else(|| {
            CliError::usage("--issuer URL is required with --jwks (the service's verdicts URL)")
        })?;
        let set = read_set_file(path)?;
        let source = path.display().to_string();
        let path = path.clone();
        let keys = Keys {
            set,
            issuer,
            lifetime: None,
            cache: cache_for(None, None),
            load: Box::new(move || Ok((read_set_file(&path)?, None))),
        };
        return Ok((keys, source));
    }
    let given = args
        .jwks_url
        .as_deref()
        .ok_or_else(|| CliError::usage("pass --jwks FILE or --jwks-url URL"))?;
    let url = client::parse_url(&jwks_cache::jwks_url(given))?;
    let (set, final_url, cache_control) = fetch_set(&url, http)?;
    let issuer = match (&args.issuer, jwks_cache::issuer_of(&final_url)) {
        (Some(issuer), _) => issuer.clone(),
        (None, Some(issuer)) => issuer,
        (None, None) => {
            return Err(CliError::usage(format!(
                "the issuer cannot be derived from {final_url}: pass --issuer URL"
            )));
        }
    };
    let keys = Keys {
        set,
        issuer,
        lifetime: Some(URL_SET_LIFETIME),
        cache: cache_for(Some(URL_SET_LIFETIME), cache_control.as_deref()),
        load: Box::new(move || fetch_set(&url, http).map(|(set, _, cc)| (set, cc))),
    };
    Ok((keys, final_url.to_string()))
}

/// Where verified events are passed on.
struct Forward {
    url: Url,
    http: reqwest::blocking::Client,
}

impl Forward {
    /// POSTs the body; the answer's status, or why none came.
    fn send(&self, body: &[u8], content_type: &str) -> Result<u16, String> {
        let response = self
            .http
            .post(self.url.clone())
            .header(CONTENT_TYPE, content_type)
            .body(body.to_vec())
            .send()
            .map_err(|e| {
                let mut cause: &dyn std::error::Error = &e;
                while let Some(inner) = cause.source() {
                    cause = inner;
                }
                if e.is_timeout() {
                    "timed out (see --timeout)".to_owned()
                } else {
                    cause.to_string()
                }
            })?;
        Ok(response.status().as_u16())
    }
}

/// What became of one POST.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// Valid and new.
    Verified,
    /// Valid, and its id was acknowledged before.
    Duplicate,
    /// Not a valid event, with the reason.
    Rejected(String),
}

/// The first line `--json` prints: where the listener listens.
#[derive(Serialize)]
struct Listening<'a> {
    listening: &'a str,
}

/// Where an event was forwarded, as `--json` prints it: the status, or why it failed.
#[derive(Serialize)]
struct Forwarded<'a> {
    url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a String>,
}

/// One handled POST as `--json` prints it (one line).
#[derive(Serialize)]
struct OutcomeJson<'a> {
    received_at: String,
    result: &'static str,
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    claims: Option<&'a EventClaims>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    forwarded: Option<Forwarded<'a>>,
}

/// One handled POST, to print.
struct Outcome {
    received_at: OffsetDateTime,
    claims: Option<EventClaims>,
    result: Check,
    /// The forward's status, or why it failed.
    forwarded: Option<Result<u16, String>>,
    /// The status answered to the sender.
    status: u16,
}

impl Outcome {
    fn rejected(received_at: OffsetDateTime, reason: String, status: u16) -> Self {
        Self {
            received_at,
            claims: None,
            result: Check::Rejected(reason),
            forwarded: None,
            status,
        }
    }

    /// The printed line (or JSON object).
    fn render(&self, as_json: bool, forward_url: Option<&Url>) -> String {
        let time = mandate_protocol::timefmt::format(self.received_at);
        if as_json {
            let line = OutcomeJson {
                received_at: time,
                result: match &self.result {
                    Check::Verified => "verified",
                    Check::Duplicate => "duplicate",
                    Check::Rejected(_) => "rejected",
                },
                status: self.status,
                claims: self.claims.as_ref(),
                reason: match &self.result {
                    Check::Rejected(reason) => Some(reason),
                    _ => None,
                },
                forwarded: self.forwarded.as_ref().map(|forwarded| {
                    let url = forward_url.map(Url::to_string);
                    match forwarded {
                        Ok(status) => Forwarded {
                            url,
                            status: Some(*status),
                            error: None,
                        },
                        Err(error) => Forwarded {
                            url,
                            status: None,
                            error: Some(error),
                        },
                    }
                }),
            };
            return serde_json::to_string(&line).unwrap_or_default();
        }
        let (jti, event_type) = match &self.claims {
            Some(c) => (c.jti.to_string(), printable(&c.event_type, 64)),
            None => ("-".to_owned(), "-".to_owned()),
        };
        let mut line = format!("{time}  {jti}  {event_type}  ");
        match &self.result {
            Check::Verified => line.push_str("verified"),
            Check::Duplicate => line.push_str("duplicate"),
            Check::Rejected(reason) => {
                line.push_str("REJECTED  ");
                line.push_str(&printable(reason, 300));
            }
        }
        match &self.forwarded {
            Some(Ok(status)) => line.push_str(&format!("  forwarded: {status}")),
            Some(Err(error)) => {
                line.push_str(&format!("  forward failed: {}", printable(error, 300)));
            }
            None => {}
        }
        line
    }
}

/// Counts of what was received.
#[derive(Debug, Default)]
struct Tally {
    verified: u64,
    duplicates: u64,
    rejected: u64,
}

/// What the connection threads share.
struct Shared {
    keys: Mutex<Keys>,
    /// Event ids acknowledged (2xx answered, after the forward when there is one).
    seen: Mutex<HashSet<String>>,
    forward: Option<Forward>,
    json: bool,
    max_events: Option<u64>,
    /// POSTs admitted for processing; with `--max-events`, never more than that.
    admitted: AtomicU64,
    /// POSTs answered.
    answered: AtomicU64,
    tally: Mutex<Tally>,
    /// A write to stdout failed (a closed pipe): stop.
    output_failed: AtomicBool,
    limits: Limits,
    /// Lines held back to be printed in the order the events were made.
    order: Reorder,
}

fn is_jwt(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/jwt"))
}

impl Shared {
    /// Takes a slot for one more event; false when `--max-events` are already taken.
    fn admit(&self) -> bool {
        let taken = self.admitted.fetch_add(1, Ordering::SeqCst);
        self.max_events.is_none_or(|max| taken < max)
    }

    fn done(&self) -> bool {
        self.output_failed.load(Ordering::SeqCst)
            || self
                .max_events
                .is_some_and(|max| self.answered.load(Ordering::SeqCst) >= max)
    }

    /// Verifies, de-duplicates and forwards one POSTed event.
    fn process(&self, request: &http1::Request) -> Outcome {
        let received_at = OffsetDateTime::now_utc();
        let content_type = request.header("content-type");
        if !is_jwt(content_type) {
            let found =
                content_type.map_or("absent".to_owned(), |v| format!("{:?}", printable(v, 64)));
            return Outcome::rejected(
                received_at,
                format!("Content-Type is {found}, not application/jwt"),
                415,
            );
        }
        let Ok(text) = std::str::from_utf8(&request.body) else {
            return Outcome::rejected(received_at, "the body is not UTF-8".to_owned(), 400);
        };
        let verified = lock(&self.keys).verify(text.trim(), received_at.unix_timestamp());
        let claims = match verified {
            Ok(claims) => claims,
            Err(reason) => return Outcome::rejected(received_at, reason, 400),
        };
        let jti = claims.jti.to_string();
        if !lock(&self.seen).insert(jti.clone()) {
            return Outcome {
                received_at,
                claims: Some(claims),
                result: Check::Duplicate,
                forwarded: None,
                status: 200,
            };
        }
        let (forwarded, status) = match &self.forward {
            None => (None, 200),
            Some(forward) => {
                let sent = forward.send(&request.body, content_type.unwrap_or("application/jwt"));
                let status = match &sent {
                    Ok(status) => *status,
                    Err(_) => 502,
                };
                (Some(sent), status)
            }
        };
        if !(200..300).contains(&status) {
            // Not acknowledged: Mandate retries, and the retry must be processed again.
            lock(&self.seen).remove(&jti);
        }
        Outcome {
            received_at,
            claims: Some(claims),
            result: Check::Verified,
            forwarded,
            status,
        }
    }

    fn print(&self, outcome: &Outcome) {
        {
            let mut tally = lock(&self.tally);
            match outcome.result {
                Check::Verified => tally.verified += 1,
                Check::Duplicate => tally.duplicates += 1,
                Check::Rejected(_) => tally.rejected += 1,
            }
        }
        let forward_url = self.forward.as_ref().map(|f| &f.url);
        let key = outcome.claims.as_ref().map(|c| c.jti.to_string());
        self.order
            .push(key, outcome.render(self.json, forward_url), Instant::now());
        self.flush(false);
    }

    /// Prints the lines held that are due (all of them with `all`), in event order.
    fn flush(&self, all: bool) {
        for line in self.order.due(Instant::now(), all) {
            if output::line(&line).is_err() {
                self.output_failed.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Serves one connection: one request, one answer.
    fn serve(&self, mut stream: TcpStream, peer: SocketAddr) {
        let request = match http1::read_request(&mut stream, &self.limits) {
            Ok(request) => request,
            Err(e) => {
                if let Some(status) = e.status() {
                    output::note(&format!("{peer}: {e}; answered {status}"));
                    http1::respond(&mut stream, status, &[], &format!("{e}\n"));
                }
                return;
            }
        };
        if request.method != "POST" {
            http1::respond(
                &mut stream,
                405,
                &[("Allow", "POST")],
                "mandate listen: POST webhook events here\n",
            );
            return;
        }
        if !self.admit() {
            http1::respond(
                &mut stream,
                503,
                &[],
                "mandate listen is stopping: --max-events reached\n",
            );
            return;
        }
        let outcome = self.process(&request);
        self.print(&outcome);
        let body = match &outcome.result {
            Check::Verified => "verified\n".to_owned(),
            Check::Duplicate => "duplicate\n".to_owned(),
            Check::Rejected(reason) => format!("rejected: {}\n", printable(reason, 300)),
        };
        http1::respond(&mut stream, outcome.status, &[], &body);
        self.answered.fetch_add(1, Ordering::SeqCst);
    }
}

/// Sets `stop` on Ctrl-C (SIGINT) and SIGTERM; a second one exits at once with 130.
fn on_interrupt(stop: &Arc<AtomicBool>) {
    use signal_hook::consts::signal::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        // The exit must be registered first: the flag it reads is set by the second handler.
        let registered =
            signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(stop))
                .and_then(|_| signal_hook::flag::register(signal, Arc::clone(stop)));
        if let Err(e) = registered {
            output::note(&format!(
                "cannot catch signal {signal} ({e}): it will end the listener abruptly"
            ));
        }
    }
}

/// Runs `mandate listen`.
pub fn run(args: ListenArgs, ctx: &Context) -> CmdResult {
    let (keys, source) = initial_keys(&args, ctx.http)?;
    let forward = forwarding(&args, ctx)?;
    let (listener, address) = bind(args.port)?;

    let stop = Arc::new(AtomicBool::new(false));
    on_interrupt(&stop);

    let url = format!("http://{address}/");
    if ctx.json {
        let line = Listening { listening: &url };
        output::line(&serde_json::to_string(&line).unwrap_or_default())?;
    } else {
        output::line(&format!("listening on {url}"))?;
    }
    let issuer = keys.issuer.clone();
    let key_count = keys.set.keys.len();
    output::note(&format!(
        "verifying events from {issuer} with {} from {source}{}; Ctrl-C to stop",
        output::count(key_count as u64, "key", "keys"),
        forward
            .as_ref()
            .map(|f| format!("; forwarding to {}", f.url))
            .unwrap_or_default()
    ));

    let shared = Arc::new(Shared {
        keys: Mutex::new(keys),
        seen: Mutex::new(HashSet::new()),
        forward,
        json: ctx.json,
        max_events: args.max_events,
        admitted: AtomicU64::new(0),
        answered: AtomicU64::new(0),
        tally: Mutex::new(Tally::default()),
        output_failed: AtomicBool::new(false),
        limits: Limits::default(),
        order: Reorder::new(Duration::from_millis(args.order_window)),
    });
    let connections = serve_until_stopped(&listener, &shared, &stop);
    drop(listener);
    finish(connections, &shared)
}

/// Where `--forward-to` sends each verified event, if anywhere: with the command's timeout
/// and no retries.
fn forwarding(args: &ListenArgs, ctx: &Context) -> Result<Option<Forward>, CliError> {
    let Some(text) = &args.forward_to else {
        return Ok(None);
    };
    let url = client::parse_url(text)?;
    let options = HttpOptions {
        timeout: ctx.http.timeout,
        retries: 0,
    };
    Ok(Some(Forward {
        url,
        http: client::http_client(options, reqwest::redirect::Policy::none())?,
    }))
}

/// The listener on 127.0.0.1:`port` (0 for any free port), non-blocking, and its address.
fn bind(port: u16) -> Result<(TcpListener, SocketAddr), CliError> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| CliError::usage(format!("cannot listen on 127.0.0.1:{port}: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| CliError::usage(format!("cannot read the bound address: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| CliError::usage(format!("cannot set up the listener: {e}")))?;
    Ok((listener, address))
}

/// Accepts connections, each served on a thread of its own, until Ctrl-C or
/// `--max-events`; the connections still open.
fn serve_until_stopped(
    listener: &TcpListener,
    shared: &Arc<Shared>,
    stop: &AtomicBool,
) -> Vec<JoinHandle<()>> {
    let mut connections: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::SeqCst) && !shared.done() {
        shared.flush(false);
        match listener.accept() {
            Ok((mut stream, peer)) => {
                connections.retain(|c| !c.is_finished());
                // Accepted sockets may inherit non-blocking mode on some systems.
                if stream.set_nonblocking(false).is_err() {
                    continue;
                }
                if connections.len() >= MAX_CONNECTIONS {
                    http1::respond(&mut stream, 503, &[], "too many connections\n");
                    continue;
                }
                let shared = Arc::clone(shared);
                match std::thread::Builder::new()
                    .name(format!("listen {peer}"))
                    .spawn(move || shared.serve(stream, peer))
                {
                    Ok(handle) => connections.push(handle),
                    Err(e) => output::note(&format!("cannot serve {peer}: {e}")),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of file descriptors and the like: wait, and go on.
                output::note(&format!("accept failed: {e}"));
                std::thread::sleep(POLL * 4);
            }
        }
    }
    connections
}

/// Waits for the connections in flight, prints what is left in order and the tally.
fn finish(mut connections: Vec<JoinHandle<()>>, shared: &Shared) -> CmdResult {
    connections.retain(|c| !c.is_finished());
    if !connections.is_empty() {
        output::note(&format!(
            "waiting for {} in flight (Ctrl-C again to exit at once)",
            output::count(connections.len() as u64, "request", "requests")
        ));
    }
    for connection in connections {
        let _ = connection.join();
    }
    shared.flush(true);
    let tally = lock(&shared.tally);
    output::note(&format!(
        "stopped: {} verified, {} duplicate, {} rejected",
        tally.verified, tally.duplicates, tally.rejected
    ));
    if shared.output_failed.load(Ordering::SeqCst) {
        return Err(CliError::Output(std::io::Error::from(
            std::io::ErrorKind::BrokenPipe,
        )));
    }
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests;
