//! What can go wrong in a command, and the exit code each outcome maps to.
//!
//! The exit codes are part of the CLI's interface (scripts branch on them), so they are
//! defined once here and documented in `--help` and `docs/cli.md`.

use std::process::ExitCode;

use mandate_protocol::wire::ErrorDetail;

/// The meaning of each exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: the command did what was asked (for `verify`: a valid `allow` that matches).
    Success,
    /// 1: the API answered with an error envelope (or an answer that is not the API's).
    Api,
    /// 2: a usage error: bad arguments, or local input the command cannot use.
    Usage,
    /// 3: the service could not be reached (connection, TLS, timeout), or a streamed
    /// export stopped before its end.
    Network,
    /// 4: `authorize` returned a denial (`deny_*`).
    Denied,
    /// 5: `authorize` returned `review`.
    Review,
    /// 6: `verify` refused the token: invalid, expired, signed by a sandbox key without
    /// `--sandbox`, not `allow`, not matching, replayed.
    Rejected,
    /// 7: `verify --signature-only`: a valid `allow` whose transaction was not compared.
    /// Not 0, so that no script settles on it by mistake.
    SignatureOnly,
    /// 8: `audit` refused the log: a decision deleted, changed or reordered since the
    /// checkpoint accepted before, or the log shrank or forked.
    LogRefused,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Api => 1,
            Self::Usage => 2,
            Self::Network => 3,
            Self::Denied => 4,
            Self::Review => 5,
            Self::Rejected => 6,
            Self::SignatureOnly => 7,
            Self::LogRefused => 8,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

/// The help text that lists the exit codes (shown by `mandate --help`).
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success (verify: a valid allow verdict that matches the transaction)
  1  API error: the server's code, message and request id are printed
  2  usage error: bad arguments, or local input that cannot be used
     (no API key, unreadable file, invalid draft, missing or stale key-set cache)
  3  network error: the service could not be reached, or an export was cut off
  4  authorize: the verdict is a denial (deny_*)
  5  authorize: the verdict is review
  6  verify: the token is invalid, expired, replayed, not allow, does not match, or is
     signed by a sandbox key (kid sandbox-…) without --sandbox
  7  verify --signature-only: a valid allow verdict; the transaction was not compared
  8  audit: the log is not what was accepted (a decision deleted, changed or reordered,
     the log shrank or forked); the decision or the sizes are named";

/// A command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The API answered with its error envelope.
    #[error("{} (HTTP {status}): {}", detail.code, detail.message)]
    Api {
        /// The HTTP status.
        status: u16,
        /// Code, message and request id, as the server sent them.
        detail: ErrorDetail,
        /// The whole envelope, printed as it came with `--json`.
        body: serde_json::Value,
    },
    /// The answer was not the API's JSON (a proxy page, a truncated body).
    #[error("unexpected answer (HTTP {status}): {detail}")]
    UnexpectedResponse {
        /// The HTTP status.
        status: u16,
        /// What was wrong with it.
        detail: String,
        /// The `X-Request-Id` header, when there was one.
        request_id: Option<String>,
    },
    /// Bad arguments or unusable local input.
    #[error("{0}")]
    Usage(String),
    /// The service could not be reached.
    #[error("cannot reach {url}: {message}")]
    Network {
        /// Where the request went.
        url: String,
        /// Why it failed.
        message: String,
        /// The Idempotency-Key of a POST whose outcome is unknown, to retry it safely.
        idempotency_key: Option<String>,
    },
    /// A streamed answer (the export) stopped before its end: the server aborted it or the
    /// connection dropped. Nothing partial is kept under the output's name.
    #[error("{0}")]
    Incomplete(String),
    /// `verify` refused the token.
    #[error("token rejected: {0}")]
    Rejected(String),
    /// `audit` refused the log's new checkpoint.
    #[error("log refused: {0}")]
    LogRefused(String),
    /// Writing the output failed (a closed pipe).
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The exit code of this failure.
    pub fn exit(&self) -> Exit {
        match self {
            Self::Api { .. } | Self::UnexpectedResponse { .. } => Exit::Api,
            Self::Usage(_) => Exit::Usage,
            Self::Network { .. } | Self::Incomplete(_) => Exit::Network,
            Self::Rejected(_) => Exit::Rejected,
            Self::LogRefused(_) => Exit::LogRefused,
            Self::Output(_) => Exit::Usage,
        }
    }

    /// A usage error from anything printable.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::Usage(message.into())
    }
}

/// What a command returns: the exit code of a completed command, or why it failed.
pub type CmdResult = Result<Exit, CliError>;

/// Prints a failure on stderr (and, with `--json`, the server's error envelope on stdout)
/// and returns its exit code. A closed stdout pipe ends the command quietly.
pub fn report(error: &CliError, as_json: bool) -> Exit {
    use std::io::Write as _;

    if let CliError::Output(e) = error
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        return Exit::Success;
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "error: {error}");
    match error {
        CliError::Api { detail, body, .. } => {
            let _ = writeln!(err, "request id: {}", detail.request_id);
            if as_json && let Ok(text) = serde_json::to_string_pretty(body) {
                let _ = writeln!(std::io::stdout().lock(), "{text}");
            }
        }
        CliError::UnexpectedResponse {
            request_id: Some(id),
            ..
        } => {
            let _ = writeln!(err, "request id: {id}");
        }
        CliError::Network {
            idempotency_key: Some(key),
            ..
        } => {
            let _ = writeln!(
                err,
                "the request may or may not have been applied: retry safely with --idempotency-key {key}"
            );
        }
        _ => {}
    }
    error.exit()
}
