//! The vocabulary storage shares with the server: environments, key classes, and the
//! stored decision with its API shape ([`decision`]).

pub mod decision;

/// An organization's environment. Sandbox keys act on the sandbox only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Env {
    /// Test environment; starts in enforce.
    Sandbox,
    /// Production; starts in observe.
    Live,
}

impl Env {
    /// The stored and printed form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sandbox => "sandbox",
            Self::Live => "live",
        }
    }

    /// Parses the stored form.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "sandbox" => Some(Self::Sandbox),
            "live" => Some(Self::Live),
            _ => None,
        }
    }
}

/// The two key classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyClass {
    /// `sk_sandbox_…`, `sk_live_…`.
    Org,
    /// `ak_sandbox_…`, `ak_live_…`.
    Agent,
}

impl KeyClass {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Org => "org",
            Self::Agent => "agent",
        }
    }

    /// The prefix of a key of this class in `env`.
    pub fn key_prefix(self, env: Env) -> &'static str {
        match (self, env) {
            (Self::Org, Env::Sandbox) => "sk_sandbox_",
            (Self::Org, Env::Live) => "sk_live_",
            (Self::Agent, Env::Sandbox) => "ak_sandbox_",
            (Self::Agent, Env::Live) => "ak_live_",
        }
    }
}
