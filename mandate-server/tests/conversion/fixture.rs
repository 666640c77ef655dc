//! The previous release's database (`testdata/previous-release/`, its README says how it was
//! made and what a conversion must keep): what `expected.json` records of it, the exports it
//! answered, and its dump restored into a test database with `psql`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// The fixture's directory.
pub fn dir() -> PathBuf {
    Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../testdata/previous-release")
}

/// What `expected.json` records of the previous release's database.
pub struct Fixture {
    /// The key-encryption key its signing keys and API-key bindings are sealed under.
    pub kek: String,
    /// Rows per table, counted when the release's server was stopped.
    pub counts: BTreeMap<String, i64>,
    /// The organizations and their keys.
    pub orgs: Vec<Org>,
    /// Agent keys by `org name/env/agent id`.
    pub agent_keys: BTreeMap<String, String>,
    /// The JWK Set the release's server published when the exports were taken.
    pub jwks: Value,
    /// One entry per organization and environment.
    pub exports: Vec<Export>,
}

/// An organization of the fixture.
pub struct Org {
    pub id: String,
    pub name: String,
    /// Its keys by environment (`sandbox`, `live`).
    pub keys: BTreeMap<String, String>,
    /// Every organization key the fixture publishes (a second live key for Acme).
    pub all_keys: Vec<(String, String)>,
}

/// The export of one organization and environment, and its mark.
pub struct Export {
    /// `org name/env`.
    pub name: String,
    /// `sandbox` or `live`.
    pub env: String,
    /// The organization key of that environment.
    pub key: String,
    /// `GET /v1/exports/decisions` as the release answered it, line by line (no newlines).
    pub lines: Vec<String>,
    /// The last decision exported at the mark (`None`: nothing before it).
    pub after: Option<String>,
    /// The decisions made after the mark, in export order.
    pub then: Vec<String>,
}

impl Fixture {
    /// Reads `expected.json` and the export files it names.
    pub fn load() -> Fixture {
        let text = std::fs::read_to_string(dir().join("expected.json")).expect("expected.json");
        let expected: Value = serde_json::from_str(&text).expect("expected.json is JSON");
        let orgs: Vec<Org> = expected["orgs"]
            .as_array()
            .expect("orgs")
            .iter()
            .map(org)
            .collect();
        let exports = expected["exports"]
            .as_object()
            .expect("exports")
            .iter()
            .map(|(name, entry)| export(name, entry, &orgs))
            .collect();
        Fixture {
            kek: string(&expected["key_encryption_key"]),
            counts: expected["counts"]
                .as_object()
                .expect("counts")
                .iter()
                .map(|(table, n)| (table.clone(), n.as_i64().expect("a count")))
                .collect(),
            agent_keys: expected["agent_keys"]
                .as_object()
                .expect("agent_keys")
                .iter()
                .map(|(name, key)| (name.clone(), string(key)))
                .collect(),
            jwks: expected["jwks"].clone(),
            orgs,
            exports,
        }
    }

    /// The organization named `name`.
    pub fn org(&self, name: &str) -> &Org {
        self.orgs
            .iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("no organization {name} in expected.json"))
    }

    /// The export of `org name/env`.
    pub fn export(&self, name: &str) -> &Export {
        self.exports
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no export {name} in expected.json"))
    }

    /// The key of agent `agent` of `org name/env`.
    pub fn agent_key(&self, org_env: &str, agent: &str) -> &str {
        let name = format!("{org_env}/{agent}");
        self.agent_keys
            .get(&name)
            .unwrap_or_else(|| panic!("no agent key {name} in expected.json"))
    }
}

fn string(value: &Value) -> String {
    value
        .as_str()
        .unwrap_or_else(|| panic!("expected a string, found {value}"))
        .to_owned()
}

fn org(value: &Value) -> Org {
    let name = string(&value["name"]);
    let mut keys = BTreeMap::new();
    let mut all_keys = Vec::new();
    for (member, key) in value.as_object().expect("an organization") {
        let Some(env) = ["sandbox", "live"]
            .into_iter()
            .find(|env| member.starts_with(env))
        else {
            continue;
        };
        if member == env {
            keys.insert(env.to_owned(), string(key));
        }
        all_keys.push((env.to_owned(), string(key)));
    }
    Org {
        id: string(&value["id"]),
        name,
        keys,
        all_keys,
    }
}

fn export(name: &str, entry: &Value, orgs: &[Org]) -> Export {
    let (org_name, env) = name.split_once('/').expect("org/env");
    let org = orgs
        .iter()
        .find(|o| o.name == org_name)
        .unwrap_or_else(|| panic!("export {name} names no organization"));
    let file = dir().join(string(&entry["file"]));
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    Export {
        name: name.to_owned(),
        env: env.to_owned(),
        key: org.keys[env].clone(),
        lines: text.lines().map(str::to_owned).collect(),
        after: entry["after"].as_str().map(str::to_owned),
        then: entry["then"]
            .as_array()
            .expect("then")
            .iter()
            .map(string)
            .collect(),
    }
}

/// Restores `mandate.sql` into the (empty) database `url` with `psql`, as the README says:
/// every statement in one transaction, stopping at the first error.
pub fn restore(url: &str) {
    let psql = psql();
    let out = Command::new(&psql)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction"])
        .args(["-o", "/dev/null", "-d", url, "-f"])
        .arg(dir().join("mandate.sql"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", psql.display()));
    assert!(
        out.status.success(),
        "psql could not restore the previous release's dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// PostgreSQL's client: in `MANDATE_TEST_POSTGRES_BIN` when set, else on PATH, else in the
/// newest /usr/lib/postgresql/*/bin (where the test helpers find the server).
fn psql() -> PathBuf {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("MANDATE_TEST_POSTGRES_BIN") {
        candidates.push(PathBuf::from(dir));
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    candidates.extend(versions.into_iter().rev().map(|(_, bin)| bin));
    candidates
        .into_iter()
        .map(|dir| dir.join("psql"))
        .find(|psql| psql.is_file())
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL's server is here but not its client, psql, which restores the \
                 previous release's dump: install postgresql-client (or put psql on PATH)"
            )
        })
}
