//! Where the CLI keeps its files, the named profiles, and how the base URL and API key of a
//! command are chosen: a flag, then the environment, then the selected profile.
//!
//! Profiles live in `config.json` under `mandate/` in the platform's configuration
//! directory: `$XDG_CONFIG_HOME/mandate/` or `~/.config/mandate/` on Linux and macOS,
//! `%APPDATA%\mandate\` on Windows (the `etcetera` crate's base strategy). The file holds
//! API keys, so it is written with mode 0600 in a directory of mode 0700 (on Unix),
//! replaced atomically, and keys are only ever shown masked.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use etcetera::BaseStrategy;
use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// The base URL used when no flag, variable or profile gives one: the server's default
/// API listener.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080/v1";

/// The profile used when neither `--profile` nor `MANDATE_PROFILE` names one.
pub const DEFAULT_PROFILE: &str = "default";

/// One named profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The API key (organization or agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The API base URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
}

/// The whole config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Profiles by name.
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// The platform's directory of one kind: configuration or cache.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Config,
    Cache,
}

impl Kind {
    /// The XDG variable that names the directory (Linux and macOS).
    fn xdg_var(self) -> &'static str {
        match self {
            Kind::Config => "XDG_CONFIG_HOME",
            Kind::Cache => "XDG_CACHE_HOME",
        }
    }

    /// The directory under `strategy`'s layout.
    fn dir_in(self, strategy: &impl BaseStrategy) -> PathBuf {
        match self {
            Kind::Config => strategy.config_dir(),
            Kind::Cache => strategy.cache_dir(),
        }
    }
}

/// `mandate/` in the platform's directory of `kind`: XDG (`$XDG_CONFIG_HOME` or
/// `~/.config`, `$XDG_CACHE_HOME` or `~/.cache`) on Linux and macOS, `%APPDATA%` and
/// `%LOCALAPPDATA%` on Windows.
fn app_dir(kind: Kind) -> Result<PathBuf, CliError> {
    let base = match etcetera::choose_base_strategy() {
        Ok(strategy) => kind.dir_in(&strategy),
        // No home directory to be found: an absolute XDG variable still says where (the
        // XDG spec ignores relative paths).
        Err(_) => std::env::var_os(kind.xdg_var())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .ok_or_else(|| {
                CliError::usage(format!(
                    "cannot find the home directory: set HOME or {}",
                    kind.xdg_var()
                ))
            })?,
    };
    Ok(base.join("mandate"))
}

/// `$XDG_CONFIG_HOME/mandate` or `~/.config/mandate` (Linux, macOS);
/// `%APPDATA%\mandate` (Windows).
pub fn config_dir() -> Result<PathBuf, CliError> {
    app_dir(Kind::Config)
}

/// `$XDG_CACHE_HOME/mandate` or `~/.cache/mandate` (Linux, macOS);
/// `%LOCALAPPDATA%\mandate` (Windows).
pub fn cache_dir() -> Result<PathBuf, CliError> {
    app_dir(Kind::Cache)
}

/// The path of the config file.
pub fn config_path() -> Result<PathBuf, CliError> {
    Ok(config_dir()?.join("config.json"))
}

impl ConfigFile {
    /// Reads the config file; a missing file is an empty config.
    pub fn load(path: &Path) -> Result<Self, CliError> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                CliError::usage(format!("config file {} is not valid: {e}", path.display()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(CliError::usage(format!(
                "cannot read config file {}: {e}",
                path.display()
            ))),
        }
    }

    /// Writes the config file with mode 0600, atomically.
    pub fn save(&self, path: &Path) -> Result<(), CliError> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| CliError::usage(format!("cannot encode the config: {e}")))?;
        write_private(path, format!("{text}\n").as_bytes())
    }
}

/// Writes `bytes` to `path` through a temporary file renamed into place. The file gets
/// mode 0600 and a directory created for it 0700 (on Unix).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let fail = |what: &str, e: std::io::Error| {
        CliError::usage(format!("cannot {what} {}: {e}", path.display()))
    };
    let dir = path
        .parent()
        .ok_or_else(|| CliError::usage(format!("{} has no directory", path.display())))?;
    create_private_dir(dir).map_err(|e| fail("create the directory of", e))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let result = (|| {
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(fail("write", e));
    }
    Ok(())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// The key prefixes the service issues; masking keeps them readable.
const KEY_PREFIXES: [&str; 4] = ["sk_sandbox_", "sk_live_", "ak_sandbox_", "ak_live_"];

/// A key as it may be shown: its class prefix, the first and last four characters, and
/// an ellipsis in between (`sk_sandbox_abcd…wxyz`). A short key shows only its prefix.
pub fn mask_key(key: &str) -> String {
    let prefix = KEY_PREFIXES
        .iter()
        .find(|p| key.starts_with(*p))
        .copied()
        .unwrap_or("");
    let body: Vec<char> = key[prefix.len()..].chars().collect();
    if body.len() < 16 {
        return format!("{prefix}…");
    }
    let head: String = body[..4].iter().collect();
    let tail: String = body[body.len() - 4..].iter().collect();
    format!("{prefix}{head}…{tail}")
}

/// Whether a key has one of the service's prefixes.
pub fn has_known_prefix(key: &str) -> bool {
    KEY_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Normalizes a base URL: no trailing slash, and the `/v1` segment added when missing.
pub fn normalize_base_url(url: &str) -> String {
    let trimmed = url.trim().trim_end_matches('/');
    if trimmed.ends_with("/v1") {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1")
    }
}

/// Where the base URL and the key came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag.
    Flag,
    /// An environment variable.
    Env,
    /// The selected profile.
    Profile,
}

/// The connection settings of a command, resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The API base URL, ending in `/v1`.
    pub base_url: String,
    /// The API key, when one was found.
    pub api_key: Option<String>,
    /// Where the key came from.
    pub key_source: Option<Source>,
    /// The profile that was read, if any.
    pub profile: Option<String>,
}

/// The command line's and the environment's view, before the profile is consulted.
#[derive(Debug, Clone, Default)]
pub struct Given {
    /// `--base-url` or `MANDATE_BASE_URL`, and which of the two.
    pub base_url: Option<(String, Source)>,
    /// `--api-key` or `MANDATE_API_KEY`, and which of the two.
    pub api_key: Option<(String, Source)>,
    /// `--profile` or `MANDATE_PROFILE`; `None` selects `default` when it exists.
    pub profile: Option<String>,
}

/// Resolves the settings: a flag beats the environment, which beats the profile.
///
/// A profile named explicitly must exist; the `default` profile is used only if present.
pub fn resolve(given: &Given, file: &ConfigFile) -> Result<Resolved, CliError> {
    let (profile_name, profile) = match &given.profile {
        Some(name) => match file.profiles.get(name) {
            Some(p) => (Some(name.clone()), Some(p)),
            None => {
                let known: Vec<&str> = file.profiles.keys().map(String::as_str).collect();
                return Err(CliError::usage(format!(
                    "no profile named {name:?} (known: {}); create it with `mandate login --profile {name} --api-key KEY`",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                )));
            }
        },
        None => match file.profiles.get(DEFAULT_PROFILE) {
            Some(p) => (Some(DEFAULT_PROFILE.to_owned()), Some(p)),
            None => (None, None),
        },
    };
    let base_url = match (&given.base_url, profile.and_then(|p| p.base_url.clone())) {
        (Some((url, _)), _) => url.clone(),
        (None, Some(url)) => url,
        (None, None) => DEFAULT_BASE_URL.to_owned(),
    };
    let (api_key, key_source) = match (&given.api_key, profile.and_then(|p| p.api_key.clone())) {
        (Some((key, source)), _) => (Some(key.clone()), Some(*source)),
        (None, Some(key)) => (Some(key), Some(Source::Profile)),
        (None, None) => (None, None),
    };
    Ok(Resolved {
        base_url: normalize_base_url(&base_url),
        api_key,
        key_source,
        profile: profile_name,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn masks_keep_prefix_and_ends_only() {
        let key = "sk_sandbox_abcdefghijklmnopqrstuvwxyz012345";
        assert_eq!(mask_key(key), "sk_sandbox_abcd…2345");
        assert_eq!(mask_key("ak_live_short"), "ak_live_…");
        assert_eq!(mask_key("0123456789abcdefghij"), "0123…ghij");
        assert!(!mask_key(key).contains("efgh"));
    }

    #[test]
    fn base_urls_get_one_v1() {
        assert_eq!(normalize_base_url("http://h:1"), "http://h:1/v1");
        assert_eq!(normalize_base_url("http://h:1/"), "http://h:1/v1");
        assert_eq!(normalize_base_url("http://h:1/v1/"), "http://h:1/v1");
    }

    fn file() -> ConfigFile {
        let mut file = ConfigFile::default();
        file.profiles.insert(
            "default".into(),
            Profile {
                api_key: Some("sk_sandbox_default".into()),
                base_url: Some("http://d".into()),
            },
        );
        file.profiles.insert(
            "live".into(),
            Profile {
                api_key: Some("sk_live_x".into()),
                base_url: None,
            },
        );
        file
    }

    #[test]
    fn flag_beats_env_beats_profile() {
        let none = resolve(&Given::default(), &file()).unwrap();
        assert_eq!(none.api_key.as_deref(), Some("sk_sandbox_default"));
        assert_eq!(none.base_url, "http://d/v1");
        let given = Given {
            api_key: Some(("ak_env".into(), Source::Env)),
            profile: Some("live".into()),
            ..Given::default()
        };
        let env = resolve(&given, &file()).unwrap();
        assert_eq!(env.api_key.as_deref(), Some("ak_env"));
        assert_eq!(env.key_source, Some(Source::Env));
        assert_eq!(env.base_url, DEFAULT_BASE_URL);
        assert!(
            resolve(
                &Given {
                    profile: Some("nope".into()),
                    ..Given::default()
                },
                &file()
            )
            .is_err()
        );
        let empty = resolve(&Given::default(), &ConfigFile::default()).unwrap();
        assert!(empty.api_key.is_none());
    }
}
