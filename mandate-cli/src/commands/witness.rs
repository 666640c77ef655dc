//! `mandate witness`: a transparency-log witness speaking C2SP tlog-witness
//! (docs/audit.md, "Witnesses").
//!
//! `mandate witness init --name NAME --key-file FILE` makes the witness's Ed25519 key (a
//! seed from the operating system's RNG), writes it to a new file of mode 0600 and prints
//! the verifier key that verifiers are given; the secret is never printed. `mandate
//! witness --key-file FILE --log VKEY… --state FILE` serves `POST /add-checkpoint`: it
//! cosigns a checkpoint of a log it was given (`--log`, the log's verifier key, whose name
//! is the log's origin) only once the log's signature holds and the checkpoint extends the
//! last one it cosigned of that log, and records the new size and root in the state file
//! before it answers. `GET /<hex SHA-256 of the origin>/checkpoint` serves the last
//! checkpoint cosigned of a log, as the specification's monitors read it.

mod add;
mod http;
mod state;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use clap::{Args, Subcommand};
use mandate_protocol::tlog::{self, LogKey, LogKeys, WitnessSigner};

use super::Context;
use crate::error::{CliError, CmdResult, Exit};
use crate::output;

/// The long help of `mandate witness`.
pub const LONG_ABOUT: &str = "Run a transparency-log witness (C2SP tlog-witness) for Mandate's decision logs.\n\n\
A witness keeps, for each log it is given, the size and root of the last checkpoint it \
cosigned, and cosigns a new checkpoint only if it is signed by the log's key and a \
consistency proof shows that it extends that one: a log that forks, shrinks or rewrites \
its history gets no cosignature. Verifiers (`mandate verify --witness`, `mandate audit \
--witness`) then require the cosignatures of k of the n witnesses they trust, so that a log \
cannot show one history to them and another to others.\n\n\
First make the witness's key with `mandate witness init --name NAME --key-file FILE`, \
which prints its verifier key; then serve with `mandate witness --key-file FILE --state \
FILE --log VKEY [--log VKEY…] --listen ADDR`. The state file is written atomically after \
each cosignature: keep it, or the witness forgets what it cosigned.";

/// `mandate witness`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "\
Examples:
  mandate witness init --name witness.example.com/w1 --key-file witness.key
  mandate jwks fetch https://verdicts.example.com
  mandate witness log-keys --origin verdicts.example.com/log/org_4Fq2/live
  mandate witness --key-file witness.key --state witness-state.json \\
      --log 'verdicts.example.com/log/org_4Fq2/live+1a2b3c4d+Ak…' --listen 0.0.0.0:7380

Answers (C2SP tlog-witness): 200 the cosignature line; 400 a malformed request; 403 the
log's signature does not hold; 404 a log it was not given; 409 `old` is not the size it
cosigned last (the body is that size); 422 the consistency proof does not hold."
)]
pub struct WitnessArgs {
    /// Make a witness key, or print a log's verifier keys
    #[command(subcommand)]
    pub command: Option<WitnessCommand>,
    /// The witness's key file, made by `mandate witness init`
    #[arg(long, value_name = "FILE", required = true)]
    pub key_file: Option<PathBuf>,
    /// A log to witness: its verifier key, `<origin>+<key id>+<key>` (an ECDSA P-256 log
    /// key, as the service publishes it); repeat for each log
    #[arg(long = "log", value_name = "VKEY", required = true)]
    pub logs: Vec<String>,
    /// The state file: the last size and root cosigned of each log (made on the first
    /// cosignature)
    #[arg(long, value_name = "FILE", required = true)]
    pub state: Option<PathBuf>,
    /// The address to listen on; port 0 picks a free port (the address is printed)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7380")]
    pub listen: SocketAddr,
}

/// The subcommands of `mandate witness`.
#[derive(Debug, Subcommand)]
pub enum WitnessCommand {
    /// Make a witness key in a new file (mode 0600) and print its verifier key
    Init(InitArgs),
    /// Print the verifier keys of a log, for --log: the log keys of the service's key set
    /// under the log's origin
    LogKeys(LogKeysArgs),
}

/// `mandate witness log-keys`.
#[derive(Debug, Args)]
pub struct LogKeysArgs {
    /// The log's origin (`<verdicts host>/log/<org>/<env>`, as `mandate verify --log`
    /// prints it)
    #[arg(long, value_name = "ORIGIN")]
    pub origin: String,
    /// JWK Set file holding the log keys, instead of the cache `mandate jwks fetch` wrote
    #[arg(long, value_name = "FILE")]
    pub jwks: Option<PathBuf>,
}

/// `mandate witness init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The witness's name, a schema-less URL (e.g. witness.example.com/w1): the key name
    /// of its cosignatures
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// The file to create (an existing file is never overwritten)
    #[arg(long, value_name = "FILE")]
    pub key_file: PathBuf,
}

/// What starts a key file: C2SP's prefix of a signer key, then the name, the key id and
/// base64(0x04 || seed).
const KEY_PREFIX: &str = "PRIVATE+KEY+";

/// Runs `mandate witness`.
pub fn run(args: WitnessArgs, ctx: &Context) -> CmdResult {
    match args.command {
        Some(WitnessCommand::Init(init)) => return run_init(&init, ctx),
        Some(WitnessCommand::LogKeys(log)) => return run_log_keys(&log),
        None => {}
    }
    let (Some(key_file), Some(state)) = (args.key_file, args.state) else {
        return Err(CliError::usage(
            "mandate witness needs --key-file, --state and --log (or the init subcommand)",
        ));
    };
    let signer = read_key(&key_file)?;
    let logs = log_keys(&args.logs)?;
    let state = state::StateFile::open(state)?;
    let witness = add::Witness::new(signer, logs, state);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::usage(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(http::serve(witness, args.listen))?;
    Ok(Exit::Success)
}

/// `mandate witness init`: a new key file, and the verifier key printed.
fn run_init(args: &InitArgs, ctx: &Context) -> CmdResult {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| CliError::usage(format!("cannot draw a random key: {e}")))?;
    let signer = WitnessSigner::from_seed(args.name.clone(), seed)
        .map_err(|e| CliError::usage(format!("--name: {e}")))?;
    let key_id = signer.witness_key().key_id();
    let mut bytes = vec![0x04];
    bytes.extend_from_slice(&seed);
    let text = format!(
        "{KEY_PREFIX}{}+{key_id:08x}+{}\n",
        signer.name(),
        STANDARD.encode(bytes)
    );
    write_new_secret(&args.key_file, text.as_bytes())?;
    let vkey = signer.witness_key().to_string();
    if ctx.json {
        output::json(&serde_json::json!({ "name": signer.name(), "verifier_key": vkey }))?;
    } else {
        output::line(&vkey)?;
        output::note(&format!(
            "the key is in {}: give verifiers the verifier key above (--witness), never the file",
            args.key_file.display()
        ));
    }
    Ok(Exit::Success)
}

/// `mandate witness log-keys`: one verifier key per log key of the log's environment, under
/// the origin. Mandate's log keys are `log-<environment>-<n>` and an origin ends in
/// `/<environment>`; a key set whose kids follow no such pattern has all its keys printed.
/// While a key is rotated there are two: the witness is given both, and accepts a
/// checkpoint signed by either.
fn run_log_keys(args: &LogKeysArgs) -> CmdResult {
    let origin = &args.origin;
    if origin.is_empty()
        || origin.contains(|c: char| c.is_whitespace() || c.is_control() || c == '+')
    {
        return Err(CliError::usage(format!(
            "--origin {:?} cannot name a log: it is empty or holds a space, a '+' or a control character",
            args.origin
        )));
    }
    let keys = super::verify_log::keys(args.jwks.as_deref(), None)?;
    let keys = tlog::keys_of(&keys);
    let environment = origin.rsplit('/').next().unwrap_or_default();
    let prefix = format!("log-{environment}-");
    let mine: Vec<&LogKey> = keys
        .iter()
        .filter(|k| k.kid().starts_with(&prefix))
        .collect();
    let shown: Vec<&LogKey> = if mine.is_empty() {
        keys.iter().collect()
    } else {
        mine
    };
    for key in shown {
        output::line(&key.verifier_key(origin))?;
    }
    Ok(Exit::Success)
}

/// Creates `path` (refused if it exists) readable by its owner only, and writes `bytes`.
fn write_new_secret(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|e| {
        CliError::usage(format!(
            "cannot create {} ({e}): give a new file, an existing key is never overwritten",
            path.display()
        ))
    })?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", path.display())))
}

/// The witness's key from its key file, which must be readable by its owner only.
fn read_key(path: &Path) -> Result<WitnessSigner, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path)
            .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(CliError::usage(format!(
                "the key file {} is readable by others (mode {:o}): chmod 600 it",
                path.display(),
                mode & 0o777
            )));
        }
    }
    parse_key(text.trim_end()).ok_or_else(|| {
        CliError::usage(format!(
            "{} is not a witness key file (PRIVATE+KEY+<name>+<key id>+<key>): make one with `mandate witness init`",
            path.display()
        ))
    })
}

/// Reads `PRIVATE+KEY+<name>+<hex key id>+base64(0x04 || seed)`, checking the key id.
fn parse_key(text: &str) -> Option<WitnessSigner> {
    let mut parts = text.strip_prefix(KEY_PREFIX)?.splitn(3, '+');
    let (name, id, key) = (parts.next()?, parts.next()?, parts.next()?);
    let bytes = STANDARD.decode(key).ok()?;
    let (&0x04, seed) = bytes.split_first()? else {
        return None;
    };
    let signer = WitnessSigner::from_seed(name, seed.try_into().ok()?).ok()?;
    let matches =
        id.len() == 8 && u32::from_str_radix(id, 16).ok() == Some(signer.witness_key().key_id());
    matches.then_some(signer)
}

/// The logs to witness, by origin: each `--log` verifier key's name is its origin. Several
/// keys of one origin (a key being rotated) are one log signed by any of them.
fn log_keys(vkeys: &[String]) -> Result<Vec<(String, LogKeys)>, CliError> {
    let mut logs: Vec<(String, Vec<LogKey>)> = Vec::new();
    for vkey in vkeys {
        let (origin, key) = LogKey::from_verifier_key(vkey).ok_or_else(|| {
            CliError::usage(format!(
                "--log {vkey:?} is not the verifier key of a log (<origin>+<8 hex digits key id>+<base64 of 0x02 and an ECDSA P-256 key>): print it with `mandate witness log-keys --origin ORIGIN`"
            ))
        })?;
        match logs.iter_mut().find(|(o, _)| *o == origin) {
            Some((_, keys)) if keys.iter().any(|k| k.key_id() == key.key_id()) => {
                return Err(CliError::usage(format!(
                    "--log {vkey} is given twice: give each key once"
                )));
            }
            Some((_, keys)) => keys.push(key),
            None => logs.push((origin, vec![key])),
        }
    }
    Ok(logs
        .into_iter()
        .map(|(origin, keys)| (origin, tlog::log_keys(keys)))
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_reads_back_and_a_wrong_id_or_type_is_refused() {
        let signer = WitnessSigner::from_seed("w.example/1", [5; 32]).unwrap();
        let id = signer.witness_key().key_id();
        let mut bytes = vec![0x04];
        bytes.extend_from_slice(&[5; 32]);
        let key = STANDARD.encode(&bytes);
        let read = parse_key(&format!("PRIVATE+KEY+w.example/1+{id:08x}+{key}")).unwrap();
        assert_eq!(read.witness_key(), signer.witness_key());
        assert!(parse_key(&format!("PRIVATE+KEY+w.example/1+{:08x}+{key}", id ^ 1)).is_none());
        assert!(parse_key(&format!("PRIVATE+KEY+w.example/2+{id:08x}+{key}")).is_none());
        bytes[0] = 0x01;
        let other = STANDARD.encode(&bytes);
        assert!(parse_key(&format!("PRIVATE+KEY+w.example/1+{id:08x}+{other}")).is_none());
        assert!(parse_key(&format!("w.example/1+{id:08x}+{key}")).is_none());
    }
}
