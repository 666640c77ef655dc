//! Where a webhook may point: the URL rules, applied at registration (`services/webhooks.rs`)
//! and again before every delivery (`workers/delivery.rs`), so that an endpoint can't be
//! turned against the server's own network. Beside both, so that neither imports the other.
//!
//! - `https://` always; `http://` only in the sandbox and only to a loopback host.
//! - No credentials in the URL; no backslashes, spaces, control characters or other
//!   characters outside ASCII (percent-encode them).
//! - A host name is labels of ASCII letters, digits and inner hyphens, joined by single
//!   dots, the last starting with a letter; `--` only in an internationalized label's
//!   `xn--` form. A port is written in decimal without leading zeros. This is the grammar
//!   `openapi.yaml` declares, so the server refuses whatever the declared pattern refuses.
//! - An IPv4 address must be written as four decimal parts (`127.0.0.1`): integer, hex,
//!   octal and shortened forms (`http://2130706433/`, `0x7f.1`) are refused everywhere.
//! - The address, written literally or resolved from the name, may not be loopback,
//!   private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16, fe80::/10),
//!   unspecified, a cloud metadata address (169.254.169.254, fd00:ec2::254), shared address
//!   space (100.64/10), documentation (192.0.2/24, 198.51.100/24, 203.0.113/24,
//!   2001:db8::/32), multicast or reserved (including local-use NAT64 64:ff9b:1::/48 and
//!   Teredo 2001::/32, whose embedded IPv4 addresses can't be judged reliably); IPv4
//!   embedded in IPv6 (`::ffff:127.0.0.1`, well-known NAT64, 6to4) is judged by its IPv4
//!   address. The sandbox may target loopback.
//!
//! The checks are pure functions of the URL text, the environment and the resolved
//! addresses; [`GuardedResolver`] applies them to the delivery client's DNS answers, so the
//! address checked is the address connected to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::model::Env;

/// Longest URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// 127/8, ::1.
    Loopback,
    /// 10/8, 172.16/12, 192.168/16, fc00::/7, fec0::/10.
    Private,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// 169.254.169.254, fd00:ec2::254.
    Metadata,
    /// 0/8, ::.
    Unspecified,
    /// 100.64/10 (carrier-grade NAT).
    SharedAddressSpace,
    /// 224/4, ff00::/8.
    Multicast,
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32: examples, never a real host.
    Documentation,
    /// 240/4, 192.0.0/24, 198.18/15, ::/96, 100::/64, 64:ff9b:1::/48 (local-use NAT64),
    /// 2001::/32 (Teredo).
    Reserved,
}

impl Refused {
    /// The kind of address, as the error message names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::Metadata => "cloud metadata",
            Self::Unspecified => "unspecified",
            Self::SharedAddressSpace => "shared (carrier-grade NAT)",
            Self::Multicast => "multicast",
            Self::Documentation => "documentation",
            Self::Reserved => "reserved",
        }
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Refused> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip == Ipv4Addr::new(169, 254, 169, 254) => Refused::Metadata,
        (0, _, _) => Refused::Unspecified,
        (127, _, _) => Refused::Loopback,
        (10, _, _) | (192, 168, _) => Refused::Private,
        (172, 16..=31, _) => Refused::Private,
        (169, 254, _) => Refused::LinkLocal,
        (100, 64..=127, _) => Refused::SharedAddressSpace,
        (224..=239, _, _) => Refused::Multicast,
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Refused::Documentation,
        (240..=255, _, _) | (192, 0, 0) | (198, 18..=19, _) => Refused::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<Refused> {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    if s[..2] == [0x64, 0xff9b] && s[2..6] == [0, 0, 0, 0] {
        // NAT64: judged by the IPv4 address it reaches.
        return classify_v4(Ipv4Addr::new(
            (s[6] >> 8) as u8,
            s[6] as u8,
            (s[7] >> 8) as u8,
            s[7] as u8,
        ));
    }
    if s[0] == 0x2002 {
        // 6to4: the IPv4 address is in the next 32 bits.
        return classify_v4(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    Some(match s {
        _ if ip == Ipv6Addr::UNSPECIFIED => Refused::Unspecified,
        _ if ip == Ipv6Addr::LOCALHOST => Refused::Loopback,
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] => Refused::Metadata,
        [0, 0, 0, 0, 0, 0, _, _] => Refused::Reserved, // IPv4-compatible, deprecated
        [0x100, 0, 0, 0, ..] => Refused::Reserved,
        // Local-use NAT64 (RFC 8215): the IPv4 address may sit anywhere in it, so refuse it
        // all rather than guess which site-local network it reaches.
        [0x64, 0xff9b, 1, ..] => Refused::Reserved,
        [0x2001, 0xdb8, ..] => Refused::Documentation,
        // Teredo: the client's IPv4 address is obfuscated and relayed; refuse the block.
        [0x2001, 0, ..] => Refused::Reserved,
        [first, ..] if first & 0xfe00 == 0xfc00 => Refused::Private,
        [first, ..] if first & 0xffc0 == 0xfec0 => Refused::Private,
        [first, ..] if first & 0xffc0 == 0xfe80 => Refused::LinkLocal,
        [first, ..] if first & 0xff00 == 0xff00 => Refused::Multicast,
        _ => return None,
    })
}

/// Why `ip` may not be a webhook's address anywhere, or `None` for a public address.
pub fn classify(ip: IpAddr) -> Option<Refused> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Whether an endpoint of `env` may be reached at `ip`: public addresses everywhere, and
/// loopback in the sandbox.
pub fn permitted(ip: IpAddr, env: Env) -> Result<(), Refused> {
    match (classify(ip), env) {
        (None, _) | (Some(Refused::Loopback), Env::Sandbox) => Ok(()),
        (Some(refused), _) => Err(refused),
    }
}

/// A URL that broke a rule. Every message starts with `url`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Not an absolute `http(s)://` URL of acceptable length and characters.
    #[error("url {0}")]
    Malformed(&'static str),
    /// `http://` outside the sandbox's loopback exception.
    #[error("url must use https://; http:// is accepted only in the sandbox, to a loopback host")]
    NeedsHttps,
    /// An IPv4 address written in a non-standard form.
    #[error("url host {written} is an IPv4 address in a non-standard form; write it as {ip}")]
    ObfuscatedIp {
        /// The host as written.
        written: String,
        /// The address it stands for.
        ip: Ipv4Addr,
    },
    /// The host is, or resolves to, an address webhooks may not target.
    #[error("url host {host} points at a {} address ({ip}); webhooks may not target it", kind.as_str())]
    Refused {
        /// The host as written.
        host: String,
        /// The address.
        ip: IpAddr,
        /// Why.
        kind: Refused,
    },
    /// `localhost` or a name under `.localhost` outside the sandbox.
    #[error("url host {0} is a loopback name; webhooks may not target it")]
    LoopbackName(String),
    /// A host name outside the grammar of host names.
    #[error("url host {written} {why}")]
    BadName {
        /// The host as written, cut to 64 characters.
        written: String,
        /// What is wrong with it, and what to write instead.
        why: &'static str,
    },
}

/// The host of a URL that passed [`check_url`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// Written as an address: already judged.
    Ip(IpAddr),
    /// A name: to be resolved and judged ([`check_resolved`]), unless it is a loopback
    /// name in the sandbox.
    Name(String),
}

/// A URL accepted by [`check_url`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl {
    /// The URL in normalized form.
    pub url: Url,
    /// Its host.
    pub host: Host,
    /// Its port (explicit or the scheme's).
    pub port: u16,
}

fn is_loopback_name(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    name == "localhost" || name.ends_with(".localhost")
}

/// The authority as written in `text` (which starts with `http://` or `https://`): what
/// comes between `://` and the first `/`, `?` or `#`.
fn written_authority(text: &str) -> &str {
    let after = text.split_once("://").map_or("", |(_, rest)| rest);
    after.split(['/', '?', '#']).next().unwrap_or("")
}

/// The host as written in `text` (which starts with `http://` or `https://`).
fn written_host(text: &str) -> &str {
    let authority = written_authority(text);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.starts_with('[') {
        host_port.split_inclusive(']').next().unwrap_or(host_port)
    } else {
        host_port.split(':').next().unwrap_or(host_port)
    }
}

/// Judges a host name as written against the grammar the declared pattern states: labels
/// of ASCII letters, digits and hyphens, none empty, none starting or ending with a hyphen,
/// `--` only in an `xn--` label (whose Punycode the URL parser has checked), the last label
/// starting with a letter.
fn check_name(written: &str) -> Result<(), UrlError> {
    let bad = |why| UrlError::BadName {
        written: written.chars().take(64).collect(),
        why,
    };
    if written.is_empty() {
        return Err(UrlError::Malformed(
            "must name its host right after the scheme's //",
        ));
    }
    if !written
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    {
        return Err(bad(
            "may hold only ASCII letters, digits, hyphens and dots; write an \
             internationalized name in its xn-- form",
        ));
    }
    let labels: Vec<&str> = written.split('.').collect();
    if labels.iter().any(|l| l.is_empty()) {
        return Err(bad(
            "has an empty label; write it without leading, trailing or doubled dots",
        ));
    }
    if labels
        .iter()
        .any(|l| l.starts_with('-') || l.ends_with('-'))
    {
        return Err(bad("has a label that starts or ends with a hyphen"));
    }
    let xn = |l: &str| l.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("xn--"));
    if labels.iter().any(|l| l.contains("--") && !xn(l)) {
        return Err(bad(
            "has -- inside a label, which only an internationalized label in its xn-- form may",
        ));
    }
    if labels
        .last()
        .is_some_and(|l| !l.starts_with(|c: char| c.is_ascii_alphabetic()))
    {
        return Err(bad(
            "has a last label that does not start with a letter; write an IPv4 address as \
             four decimal parts",
        ));
    }
    Ok(())
}

/// Judges the port as written after the host: none, or `:` and a decimal number without
/// leading zeros (the URL parser has checked that it is at most 65535).
fn check_written_port(text: &str, written_host: &str) -> Result<(), UrlError> {
    let authority = written_authority(text);
    let port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .get(written_host.len()..)
        .unwrap_or("");
    let Some(digits) = port.strip_prefix(':') else {
        return Ok(());
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(UrlError::Malformed(
            "port must be a number from 0 to 65535 after the host's colon",
        ));
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(UrlError::Malformed(
            "port must be written without leading zeros",
        ));
    }
    Ok(())
}

/// Checks the URL text of an endpoint of `env` against every rule that needs no DNS.
pub fn check_url(text: &str, env: Env) -> Result<WebhookUrl, UrlError> {
    if text.len() > MAX_URL_LEN {
        return Err(UrlError::Malformed("must be at most 2048 characters"));
    }
    if text
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err(UrlError::Malformed(
            "must not contain spaces, control characters or backslashes",
        ));
    }
    if !text.is_ascii() {
        return Err(UrlError::Malformed(
            "must be ASCII: percent-encode other characters of the path, query or fragment, \
             and write an internationalized host name in its xn-- form",
        ));
    }
    let lower = text.to_ascii_lowercase();
    let https = lower.starts_with("https://");
    if !https && !lower.starts_with("http://") {
        return Err(UrlError::NeedsHttps);
    }
    let url = Url::parse(text).map_err(|_| UrlError::Malformed("must be an absolute URL"))?;
    if !url.username().is_empty()
        || url.password().is_some()
        || written_authority(text).contains('@')
    {
        return Err(UrlError::Malformed("must not contain credentials"));
    }
    let written = written_host(text);
    check_written_port(text, written)?;
    let host = match url.host() {
        Some(url::Host::Ipv4(ip)) => {
            if written != ip.to_string() {
                return Err(UrlError::ObfuscatedIp {
                    written: written.chars().take(64).collect(),
                    ip,
                });
            }
            Host::Ip(IpAddr::V4(ip))
        }
        Some(url::Host::Ipv6(ip)) => Host::Ip(IpAddr::V6(ip)),
        Some(url::Host::Domain(name)) => {
            check_name(written)?;
            Host::Name(name.to_owned())
        }
        None => return Err(UrlError::Malformed("must name a host")),
    };
    let loopback = match &host {
        Host::Ip(ip) => classify(*ip) == Some(Refused::Loopback),
        Host::Name(name) => is_loopback_name(name),
    };
    let http_allowed = env == Env::Sandbox && loopback;
    if !(https || http_allowed) {
        return Err(UrlError::NeedsHttps);
    }
    match &host {
        Host::Ip(ip) => permitted(*ip, env).map_err(|kind| UrlError::Refused {
            host: written.to_owned(),
            ip: *ip,
            kind,
        })?,
        Host::Name(name) if env == Env::Live && is_loopback_name(name) => {
            return Err(UrlError::LoopbackName(name.clone()));
        }
        Host::Name(_) => {}
    }
    let port = url.port_or_known_default().unwrap_or(443);
    Ok(WebhookUrl { url, host, port })
}

/// Judges the addresses `name` resolved to: every one must be permitted in `env`.
pub fn check_resolved(name: &str, addrs: &[IpAddr], env: Env) -> Result<(), UrlError> {
    for ip in addrs {
        permitted(*ip, env).map_err(|kind| UrlError::Refused {
            host: name.to_owned(),
            ip: *ip,
            kind,
        })?;
    }
    Ok(())
}

/// How long a registration waits for DNS.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// Resolves `name`; `None` when it does not resolve (in time). Registration accepts a name
/// that does not resolve yet: every delivery resolves and judges it again.
pub async fn resolve(name: &str, port: u16) -> Option<Vec<IpAddr>> {
    let lookup = tokio::net::lookup_host((name, port));
    match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
        Ok(Ok(addrs)) => Some(addrs.map(|a| a.ip()).collect()),
        _ => None,
    }
}

/// The delivery client's DNS: resolves with the system resolver and refuses the whole
/// answer when any address is not permitted in its environment. IP-literal URLs never reach
/// a resolver; [`check_url`] judges those before each attempt.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver(pub Env);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let env = self.0;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
            check_resolved(&host, &ips, env)?;
            if addrs.is_empty() {
                return Err(format!("{host} did not resolve").into());
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn refused(text: &str, env: Env) -> String {
        match check_url(text, env) {
            Ok(u) => panic!("{text} accepted as {u:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn classifies_addresses() {
        let cases: &[(&str, Option<Refused>)] = &[
            ("127.0.0.1", Some(Refused::Loopback)),
            ("127.255.0.9", Some(Refused::Loopback)),
            ("::1", Some(Refused::Loopback)),
            ("10.0.0.1", Some(Refused::Private)),
            ("172.16.0.1", Some(Refused::Private)),
            ("172.31.255.255", Some(Refused::Private)),
            ("172.32.0.1", None),
            ("192.168.1.1", Some(Refused::Private)),
            ("fc00::1", Some(Refused::Private)),
            ("fdff::1", Some(Refused::Private)),
            ("169.254.1.1", Some(Refused::LinkLocal)),
            ("fe80::1", Some(Refused::LinkLocal)),
            ("febf::1", Some(Refused::LinkLocal)),
            ("169.254.169.254", Some(Refused::Metadata)),
            ("fd00:ec2::254", Some(Refused::Metadata)),
            ("0.0.0.0", Some(Refused::Unspecified)),
            ("::", Some(Refused::Unspecified)),
            ("100.64.0.1", Some(Refused::SharedAddressSpace)),
            ("100.127.255.255", Some(Refused::SharedAddressSpace)),
            ("100.128.0.1", None),
            ("224.0.0.1", Some(Refused::Multicast)),
            ("ff02::1", Some(Refused::Multicast)),
            ("255.255.255.255", Some(Refused::Reserved)),
            ("::ffff:127.0.0.1", Some(Refused::Loopback)),
            ("::ffff:10.1.2.3", Some(Refused::Private)),
            ("::ffff:169.254.169.254", Some(Refused::Metadata)),
            ("::127.0.0.1", Some(Refused::Reserved)),
            ("64:ff9b::7f00:1", Some(Refused::Loopback)),
            ("64:ff9b::808:808", None),
            ("64:ff9b:1::a00:1", Some(Refused::Reserved)),
            ("64:ff9b:1:ffff::1", Some(Refused::Reserved)),
            ("64:ff9b:2::1", None),
            ("192.0.2.1", Some(Refused::Documentation)),
            ("198.51.100.7", Some(Refused::Documentation)),
            ("203.0.113.255", Some(Refused::Documentation)),
            ("192.0.3.1", None),
            ("198.51.101.1", None),
            ("203.0.114.1", None),
            ("2001:db8::1", Some(Refused::Documentation)),
            (
                "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                Some(Refused::Reserved),
            ),
            ("2001::1", Some(Refused::Reserved)),
            ("2001:4860:4860::8888", None),
            ("2002:a9fe:a9fe::", Some(Refused::Metadata)),
            ("::ffff:93.184.216.34", None),
            ("93.184.216.34", None),
            ("8.8.8.8", None),
            ("2606:4700::1111", None),
        ];
        for (text, want) in cases {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(classify(ip), *want, "{text}");
        }
    }

    #[test]
    fn sandbox_permits_loopback_only() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let private: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(permitted(lo, Env::Sandbox), Ok(()));
        assert_eq!(permitted(lo, Env::Live), Err(Refused::Loopback));
        assert_eq!(permitted(private, Env::Sandbox), Err(Refused::Private));
    }

    #[test]
    fn live_refuses_each_internal_form() {
        for text in [
            "https://127.0.0.1/hook",
            "https://[::1]/hook",
            "https://10.0.0.1/hook",
            "https://169.254.169.254/latest/meta-data",
            "https://[::ffff:127.0.0.1]/",
            "https://[fd00:ec2::254]/",
            "https://100.64.0.1/",
            "https://0.0.0.0/",
        ] {
            let message = refused(text, Env::Live);
            assert!(message.starts_with("url host "), "{message}");
            assert!(message.contains("webhooks may not target it"), "{message}");
        }
        assert_eq!(
            refused("https://localhost/x", Env::Live),
            "url host localhost is a loopback name; webhooks may not target it"
        );
        // A trailing dot is no way around the rule: it is not a host name's form.
        assert!(refused("https://a.localhost./x", Env::Live).contains("empty label"));
    }

    /// What the declared pattern refuses, the server refuses, each with what to write
    /// instead; these are forms the URL parser itself takes.
    #[test]
    fn host_names_ports_and_characters_follow_the_declared_grammar() {
        for (text, says) in [
            (
                "https://198.49.118.35*/",
                "only ASCII letters, digits, hyphens and dots",
            ),
            ("https://a_b.example/", "only ASCII letters"),
            ("https://ex%61mple.com/", "only ASCII letters"),
            ("https://a..example/", "empty label"),
            ("https://example.com./", "empty label"),
            ("https://.example.com/", "empty label"),
            ("https://a-.example/", "starts or ends with a hyphen"),
            ("https://-a.example/", "starts or ends with a hyphen"),
            ("https://a--b.example/", "-- inside a label"),
            (
                "https://a.1b/",
                "last label that does not start with a letter",
            ),
            ("https://example.com:080/", "without leading zeros"),
            ("https://example.com:/", "a number from 0 to 65535"),
            ("https:///example.com/", "right after the scheme's //"),
            ("https://@example.com/", "credentials"),
            ("https://:@example.com/", "credentials"),
            ("https://b\u{fc}cher.example/", "must be ASCII"),
            ("https://\u{ff45}xample.com/", "must be ASCII"),
            ("https://example.com/caf\u{e9}", "must be ASCII"),
        ] {
            for env in [Env::Live, Env::Sandbox] {
                let message = refused(text, env);
                assert!(message.contains(says), "{text}: {message}");
            }
        }
        for (text, host) in [
            ("https://xn--bcher-kva.example/", "xn--bcher-kva.example"),
            ("https://XN--BCHER-KVA.Example:0/", "xn--bcher-kva.example"),
            ("https://a-b.c-d:65535/e%C3%A9?f#g", "a-b.c-d"),
            ("https://1.example/", "1.example"),
        ] {
            let url = check_url(text, Env::Live).unwrap();
            assert_eq!(url.host, Host::Name(host.into()), "{text}");
        }
        assert!(refused("https://xn--a.example/", Env::Live).contains("absolute URL"));
    }

    #[test]
    fn integer_hex_and_octal_ips_are_refused_everywhere() {
        for text in [
            "http://2130706433/",
            "https://2130706433/",
            "https://0x7f000001/",
            "https://0177.0.0.1/",
            "https://127.1/",
            "https://0x7f.0.0.1/",
            "https://%31%32%37.0.0.1/",
            "https://127.0.0.1./",
        ] {
            for env in [Env::Live, Env::Sandbox] {
                let message = refused(text, env);
                assert!(
                    message.contains("non-standard form; write it as 127.0.0.1"),
                    "{text}: {message}"
                );
            }
        }
        assert!(refused("https://134744072/", Env::Live).contains("write it as 8.8.8.8"));
    }

    #[test]
    fn scheme_rules() {
        let ok = check_url("https://hooks.example.com/mandate?x=1", Env::Live).unwrap();
        assert_eq!(ok.host, Host::Name("hooks.example.com".into()));
        assert_eq!(ok.port, 443);
        assert!(check_url("https://93.184.216.34:8443/", Env::Live).is_ok());
        for text in [
            "http://127.0.0.1:9000/hook",
            "http://localhost:1/",
            "http://[::1]/",
        ] {
            let url = check_url(text, Env::Sandbox).unwrap();
            assert_eq!(url.url.scheme(), "http");
            assert!(check_url(text, Env::Live).is_err());
        }
        assert!(check_url("https://localhost/", Env::Sandbox).is_ok());
        assert_eq!(
            refused("http://hooks.example.com/", Env::Sandbox),
            UrlError::NeedsHttps.to_string()
        );
        assert_eq!(
            refused("http://10.0.0.1/", Env::Sandbox),
            UrlError::NeedsHttps.to_string()
        );
        assert!(refused("https://10.0.0.1/", Env::Sandbox).contains("private"));
        assert_eq!(
            refused("ftp://example.com/", Env::Live),
            UrlError::NeedsHttps.to_string()
        );
        assert_eq!(
            refused("example.com", Env::Live),
            UrlError::NeedsHttps.to_string()
        );
        assert!(refused("https://user:pw@example.com/", Env::Live).contains("credentials"));
        assert!(refused("https://example.com\\@127.0.0.1/", Env::Live).contains("backslash"));
        assert!(refused("https://exa mple.com/", Env::Live).contains("spaces"));
        assert!(refused("https://", Env::Live).starts_with("url "));
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_LEN));
        assert!(refused(&long, Env::Live).contains("2048"));
    }

    #[test]
    fn resolved_addresses_are_judged_all() {
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(check_resolved("a.example", &[public], Env::Live), Ok(()));
        let e = check_resolved("a.example", &[public, lo], Env::Live).unwrap_err();
        assert_eq!(
            e.to_string(),
            "url host a.example points at a loopback address (127.0.0.1); webhooks may not target it"
        );
        assert_eq!(check_resolved("localhost", &[lo], Env::Sandbox), Ok(()));
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_by_the_resolver() {
        let ips = resolve("localhost", 443).await.unwrap();
        assert!(check_resolved("localhost", &ips, Env::Live).is_err());
        let live = GuardedResolver(Env::Live);
        let name: Name = "localhost".parse().unwrap();
        let error = live.resolve(name).await.err().unwrap();
        assert!(error.to_string().contains("loopback"), "{error}");
        let sandbox = GuardedResolver(Env::Sandbox);
        let addrs: Vec<_> = sandbox
            .resolve("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
