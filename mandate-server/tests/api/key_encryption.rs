//! Signing keys encrypted at rest (#28), through the real binary: onboard and serve with a
//! key-encryption key (KEK) leave no signing key readable in the database files; a wrong
//! or missing KEK stops the start with a message naming the key; SQLite without a KEK warns
//! and works, and one start with a KEK seals the keys in place; a KEK rotation keeps the
//! JWK Set and retires the old KEK; a PostgreSQL URL without a KEK is refused before any
//! connection.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mandate_core::Signer;
use mandate_server::model::Env;
use mandate_server::signing::at_rest::{Kek, KeyEncryption, SEALED_LEN};
use mandate_server::signing::fast::AwsLcSigner;
use mandate_server::storage::keys::StoredKey;
use serde_json::Value;

use crate::process::{Client, Server, binary, free_port};

/// A fresh KEK written to `dir/name` (mode 0600, with a trailing newline as `openssl rand
/// -base64 32 > file` leaves it); returns the file and the base64 text.
fn new_kek(dir: &Path, name: &str) -> (PathBuf, String) {
    let mut bytes = [0u8; 32];
    mandate_server::clock::fill_random(&mut bytes);
    let text = STANDARD.encode(bytes);
    let path = dir.join(name);
    std::fs::write(&path, format!("{text}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    (path, text)
}

fn keys_of(text: &str) -> KeyEncryption {
    KeyEncryption::new(Kek::from_base64(text.as_bytes(), "test").unwrap(), None)
}

/// Runs the binary with `args` and the variables `env` (and no KEK variable of the test's
/// own environment) to its end, within 30 s.
fn run<S: AsRef<OsStr>>(args: &[S], env: &[(&str, &str)], cwd: Option<&Path>) -> Output {
    let mut command = Command::new(binary());
    command
        .args(args)
        .env_remove("MANDATE_KEY_ENCRYPTION_KEY")
        .env_remove("MANDATE_KEY_ENCRYPTION_KEY_FILE")
        .env_remove("MANDATE_PREVIOUS_KEY_ENCRYPTION_KEY")
        .env_remove("MANDATE_PREVIOUS_KEY_ENCRYPTION_KEY_FILE")
        .env_remove("MANDATE_DB")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = cwd {
        command.current_dir(dir);
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{args:?} did not end within 30 s",
                args = command.get_args()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Onboards `org` on `db` with `kek_args`; returns the sandbox key.
fn onboard(db: &Path, org: &str, kek_args: &[&str], env: &[(&str, &str)]) -> String {
    let mut args = vec!["onboard", "--org", org, "--db", db.to_str().unwrap()];
    args.extend_from_slice(kek_args);
    let out = run(&args, env, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("sandbox key: "))
        .unwrap()
        .trim()
        .to_owned()
}

/// Every stored signing key, read from the file.
fn stored_keys(db: &Path) -> Vec<StoredKey> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT kid, env, secret, retired_ms FROM signing_keys ORDER BY kid")
        .unwrap();
    stmt.query_map([], |r| {
        Ok(StoredKey {
            kid: r.get(0)?,
            env: Env::parse(&r.get::<_, String>(1)?).unwrap(),
            secret: r.get(2)?,
            retired_ms: r.get(3)?,
        })
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Asserts that none of the database's files (with its WAL and shared memory) holds
/// `needle`.
fn assert_not_in_files(db: &Path, needle: &[u8], what: &str) {
    for suffix in ["", "-wal", "-shm"] {
        let mut path = db.as_os_str().to_owned();
        path.push(suffix);
        let Ok(mut file) = std::fs::File::open(&path) else {
            continue;
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).unwrap();
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "{what} is in {}",
            Path::new(&path).display()
        );
    }
}

async fn jwks(server: &Server) -> Value {
    reqwest::get(format!("{}/.well-known/jwks.json", server.public))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// An agent with a mandate, then one authorization: the server signs with its key.
async fn authorize(server: &Server, org: &str, name: &str) -> String {
    let client = Client::new(&server.api);
    let agent = client
        .post(org, "/v1/agents", &format!(r#"{{"name": "{name}"}}"#))
        .await;
    assert_eq!(agent.status, 201, "{}", agent.text);
    let mandate = crate::helpers::standard_mandate(name).replace("2026-12-31", "2099-12-31");
    let created = client.post(org, "/v1/mandates", &mandate).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let body =
        r#"{"amount": 7, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#;
    let allowed = client
        .post(
            agent.body["agent_key"].as_str().unwrap(),
            "/v1/authorizations",
            body,
        )
        .await;
    assert_eq!(allowed.status, 201, "{}", allowed.text);
    allowed.body["verdict_token"].as_str().unwrap().to_owned()
}

/// Opens every stored key with `keys`, checks that each is sealed, that the opened scalar
/// is the key the JWK Set publishes under its kid, and that no database file holds the
/// scalar; returns the scalars.
fn check_sealed(db: &Path, keys: &KeyEncryption, published: &Value) -> Vec<[u8; 32]> {
    let stored = stored_keys(db);
    assert!(stored.len() >= 2, "a signing key per environment");
    let mut scalars = Vec::new();
    for key in &stored {
        assert_eq!(key.secret.len(), SEALED_LEN, "{} is not sealed", key.kid);
        assert!(key.secret.starts_with(b"mk1"), "{}", key.kid);
        let scalar = *keys.open(key).unwrap().expose();
        let public = AwsLcSigner::from_secret_bytes(key.kid.clone(), &scalar)
            .unwrap()
            .public_jwk();
        let listed = published["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kid"] == key.kid.as_str())
            .unwrap_or_else(|| panic!("{} is not published", key.kid));
        assert_eq!(
            &serde_json::to_value(public).unwrap(),
            listed,
            "{}",
            key.kid
        );
        assert_not_in_files(db, &scalar, &format!("the secret scalar of {}", key.kid));
        scalars.push(scalar);
    }
    scalars
}

/// Sends SIGTERM and waits (bounded) for the process to end.
fn stop(mut server: Server) {
    let status = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `serve` on `db` that must refuse to start; returns what it said on stderr.
fn refused_serve(db: &Path, extra: &[&str], env: &[(&str, &str)]) -> String {
    let mut args = vec![
        "serve",
        "--api-addr",
        "127.0.0.1:0",
        "--public-addr",
        "127.0.0.1:0",
        "--db",
        db.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = run(&args, env, None);
    assert!(!out.status.success(), "it started: {}", text(&out.stdout));
    assert!(
        !text(&out.stdout).contains("listening"),
        "{}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

#[tokio::test]
async fn with_a_kek_no_signing_key_is_readable_in_the_database_and_a_wrong_kek_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sealed.db");
    let (kek_file, kek) = new_kek(dir.path(), "kek");
    let kek_arg = ["--key-encryption-key-file", kek_file.to_str().unwrap()];
    let org = onboard(&db, "sealers", &kek_arg, &[]);
    // Onboarding made both keys, sealed.
    assert_eq!(stored_keys(&db).len(), 2);
    assert!(
        stored_keys(&db)
            .iter()
            .all(|k| k.secret.len() == SEALED_LEN)
    );

    let server = Server::start_with_env(&db, free_port(), &kek_arg, Stdio::null(), &[]);
    let token = authorize(&server, &org, "sealed").await;
    let published = jwks(&server).await;
    assert!(token.starts_with("eyJ"));
    // A rotation through the operator command with the KEK is sealed too, and the running
    // server picks it up (within 2 s) with the same KEK.
    let mut args = vec!["rotate-signing-key", "--env", "sandbox", "--db"];
    args.push(db.to_str().unwrap());
    let out = run(&args, &[("MANDATE_KEY_ENCRYPTION_KEY", kek.as_str())], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut published = published;
    for _ in 0..200 {
        published = jwks(&server).await;
        if published.to_string().contains("sandbox-2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(published.to_string().contains("sandbox-2"), "{published}");
    let scalars = check_sealed(&db, &keys_of(&kek), &published);
    assert_eq!(scalars.len(), 3);
    // Neither is the KEK stored, in any form.
    let raw_kek = STANDARD.decode(&kek).unwrap();
    assert_not_in_files(&db, &raw_kek, "the KEK");
    assert_not_in_files(&db, kek.as_bytes(), "the KEK's base64");
    stop(server);
    check_sealed(&db, &keys_of(&kek), &published);

    // Another KEK: the server refuses to start, naming the key and both KEK ids, and
    // showing neither KEK.
    let (other_file, other) = new_kek(dir.path(), "other");
    let said = refused_serve(
        &db,
        &["--key-encryption-key-file", other_file.to_str().unwrap()],
        &[],
    );
    let kek_id = keys_of(&kek).current_id().unwrap().to_string();
    let other_id = keys_of(&other).current_id().unwrap().to_string();
    assert!(said.contains("signing key live-1"), "{said}");
    assert!(said.contains(&kek_id) && said.contains(&other_id), "{said}");
    assert!(said.contains("does not match"), "{said}");
    assert!(!said.contains(&kek) && !said.contains(&other), "{said}");
    // No KEK at all: refused too, saying which variable or flag to set.
    let said = refused_serve(&db, &[], &[]);
    assert!(
        said.contains("signing key live-1 is encrypted at rest"),
        "{said}"
    );
    assert!(
        said.contains("MANDATE_KEY_ENCRYPTION_KEY") && said.contains("--key-encryption-key-file"),
        "{said}"
    );
    // An operator command without the KEK does not add a plaintext key to an encrypted
    // database; with the wrong one it does not either.
    for env in [vec![], vec![("MANDATE_KEY_ENCRYPTION_KEY", other.as_str())]] {
        let out = run(&args, &env, None);
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("signing key live-1"),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(stored_keys(&db).len(), 3);
    // The key given twice is refused.
    let out = run(
        &args.iter().copied().chain(kek_arg).collect::<Vec<_>>(),
        &[("MANDATE_KEY_ENCRYPTION_KEY", kek.as_str())],
        None,
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("given twice"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn sqlite_without_a_kek_warns_and_seal_signing_keys_seals_them_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("plain.db");
    let org = onboard(&db, "plainly", &[], &[]);
    let log = dir.path().join("plain.log");
    let server = Server::start_with_env(
        &db,
        free_port(),
        &[],
        Stdio::from(std::fs::File::create(&log).unwrap()),
        &[("RUST_LOG", "info")],
    );
    authorize(&server, &org, "plain").await;
    let published = jwks(&server).await;
    stop(server);
    let said = std::fs::read_to_string(&log).unwrap();
    // The warning names the file, its mode (owner-only, as the database was created) and
    // the key-encryption key as the fix.
    assert!(
        said.contains(&format!(
            "signing keys are stored unencrypted in {}, mode 0600: readable by its owner only, keep it so; to encrypt them at rest, set MANDATE_KEY_ENCRYPTION_KEY or --key-encryption-key-file",
            db.display()
        )),
        "{said}"
    );
    // As before encryption at rest: the 32 raw bytes.
    let plain: Vec<Vec<u8>> = stored_keys(&db).into_iter().map(|k| k.secret).collect();
    assert_eq!(plain.len(), 2);
    assert!(plain.iter().all(|s| s.len() == 32));

    // A start with a KEK refuses plaintext keys rather than sealing them (anyone with
    // write access to the database could have put them there): sealing is the operator's
    // explicit command.
    let (kek_file, kek) = new_kek(dir.path(), "kek");
    let kek_arg = ["--key-encryption-key-file", kek_file.to_str().unwrap()];
    let said = refused_serve(&db, &kek_arg, &[]);
    assert!(said.contains("is stored in plaintext"), "{said}");
    assert!(said.contains("mandate-server seal-signing-keys"), "{said}");
    assert_eq!(
        stored_keys(&db)
            .iter()
            .filter(|k| k.secret.len() == 32)
            .count(),
        2,
        "nothing sealed by a refused start"
    );
    let db_arg = db.to_str().unwrap();
    let out = run(
        &["seal-signing-keys", "--db", db_arg, kek_arg[0], kek_arg[1]],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("2 of 2 signing keys sealed now"),
        "{}",
        text(&out.stdout)
    );
    // Sealed in place: same keys, same JWK Set, and the raw bytes are gone from the files
    // (overwritten, the WAL emptied).
    let log = dir.path().join("sealing.log");
    let server = Server::start_with_env(
        &db,
        free_port(),
        &["--key-encryption-key-file", kek_file.to_str().unwrap()],
        Stdio::from(std::fs::File::create(&log).unwrap()),
        &[("RUST_LOG", "info")],
    );
    assert_eq!(jwks(&server).await, published);
    // The organization's keys and its agent's, stored without the KEK, are refused until
    // the operator binds them (`bind-api-keys`), which names what it binds.
    let refused = Client::new(&server.api).get(&org, "/v1/agents").await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    let out = run(
        &["bind-api-keys", "--db", db_arg, kek_arg[0], kek_arg[1]],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("3 of 3 API keys bound now"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        text(&out.stdout)
            .matches("bound: organization org_")
            .count(),
        3,
        "{}",
        text(&out.stdout)
    );
    assert!(!text(&out.stdout).contains(&org), "no key is shown");
    authorize(&server, &org, "sealed").await;
    let scalars = check_sealed(&db, &keys_of(&kek), &published);
    let mut sorted_plain = plain.clone();
    sorted_plain.sort();
    let mut sorted_scalars: Vec<Vec<u8>> = scalars.iter().map(|s| s.to_vec()).collect();
    sorted_scalars.sort();
    assert_eq!(sorted_scalars, sorted_plain);
    // Killed, not stopped: what is on disk at any moment holds no raw key.
    server.kill();
    check_sealed(&db, &keys_of(&kek), &published);
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("signing keys are sealed under key-encryption key"),
        "{said}"
    );
    assert!(!said.contains("stored unencrypted"), "{said}");
    // That start said it refused the keys stored without the KEK, and bound none.
    assert!(
        said.contains("3 API keys are not bound to the key-encryption key and are refused"),
        "{said}"
    );
    // The refused request's warning names the key by its fingerprint, never the key.
    assert!(said.contains("refused: its row is not bound"), "{said}");
    assert!(!said.contains(&org), "{said}");

    // From now on the database needs its KEK.
    let said = refused_serve(&db, &[], &[]);
    assert!(said.contains("is encrypted at rest"), "{said}");
}

#[tokio::test]
async fn a_kek_rotation_keeps_the_jwk_set_and_retires_the_old_kek() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rotating.db");
    let (old_file, old) = new_kek(dir.path(), "old");
    let (new_file, new) = new_kek(dir.path(), "new");
    let old_env = [("MANDATE_KEY_ENCRYPTION_KEY", old.as_str())];
    let org = onboard(&db, "rotators", &[], &old_env);
    let server = Server::start_with_env(&db, free_port(), &[], Stdio::null(), &old_env);
    authorize(&server, &org, "before").await;
    let before = jwks(&server).await;

    // The rollout: a process given the new KEK and the old one as previous opens keys
    // sealed under the old one, and leaves them so (processes with only the old KEK keep
    // working meanwhile).
    let old_id = keys_of(&old).current_id().unwrap().to_string();
    let new_id = keys_of(&new).current_id().unwrap().to_string();
    let header_id = |secret: &[u8]| {
        secret[3..7]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let rolling_log = dir.path().join("rolling.log");
    let rolling = Server::start_with_env(
        &db,
        free_port(),
        &[
            "--key-encryption-key-file",
            new_file.to_str().unwrap(),
            "--previous-key-encryption-key-file",
            old_file.to_str().unwrap(),
        ],
        Stdio::from(std::fs::File::create(&rolling_log).unwrap()),
        &[("RUST_LOG", "info")],
    );
    assert_eq!(jwks(&rolling).await, before);
    assert!(
        stored_keys(&db)
            .iter()
            .all(|k| header_id(&k.secret) == old_id)
    );
    rolling.kill();
    // Its start-up line names the KEK the keys are sealed under (still the old one), not
    // the one given as current.
    let said = std::fs::read_to_string(&rolling_log).unwrap();
    assert!(
        said.contains(&format!(
            "signing keys are sealed under key-encryption key {old_id};"
        )),
        "{said}"
    );
    assert!(
        !said.contains(&format!("sealed under key-encryption key {new_id}")),
        "{said}"
    );

    // The rotation, with the old KEK from the variable as for any command.
    let mut args = vec![
        "rotate-key-encryption-key",
        "--db",
        db.to_str().unwrap(),
        "--new-key-file",
    ];
    args.push(new_file.to_str().unwrap());
    let out = run(&args, &old_env, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!(
            "2 of 2 signing keys sealed again under key-encryption key {new_id}"
        )),
        "{said}"
    );
    // The organization's two keys and the agent's, bound again under the new KEK.
    assert!(
        said.contains("3 of 3 API keys bound again under it;"),
        "{said}"
    );
    assert!(
        stored_keys(&db)
            .iter()
            .all(|k| header_id(&k.secret) == new_id)
    );
    // Run again: nothing left to do.
    let out = run(&args, &old_env, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("0 of 2"),
        "{}",
        text(&out.stdout)
    );
    // The new KEK as the current one too is refused (an operator mix-up).
    let out = run(&args, &[("MANDATE_KEY_ENCRYPTION_KEY", new.as_str())], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is the one given as current"),
        "{}",
        text(&out.stderr)
    );

    // The running server (old KEK) keeps the signing keys it holds, past its next reload
    // (every 2 s), which cannot open them any more; the API key rows, bound again under
    // the new KEK, it refuses: hence the rollout's order, every process given the new KEK
    // (and the old one as previous) before the rotation. Such a process serves throughout.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(jwks(&server).await, before);
    let refused = Client::new(&server.api).get(&org, "/v1/agents").await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    stop(server);
    let rolling = Server::start_with_env(
        &db,
        free_port(),
        &[
            "--key-encryption-key-file",
            new_file.to_str().unwrap(),
            "--previous-key-encryption-key-file",
            old_file.to_str().unwrap(),
        ],
        Stdio::null(),
        &[],
    );
    authorize(&rolling, &org, "during").await;
    assert_eq!(jwks(&rolling).await, before);
    stop(rolling);

    // The old KEK no longer opens anything; the new one does, with the same JWK Set.
    let said = refused_serve(&db, &[], &old_env);
    assert!(
        said.contains(&format!("sealed under key-encryption key {new_id}")),
        "{said}"
    );
    assert!(said.contains(&old_id) && !said.contains(&old), "{said}");
    let server = Server::start_with_env(
        &db,
        free_port(),
        &["--key-encryption-key-file", new_file.to_str().unwrap()],
        Stdio::null(),
        &[],
    );
    let after = jwks(&server).await;
    assert_eq!(after, before);
    authorize(&server, &org, "after").await;
    check_sealed(&db, &keys_of(&new), &after);
    let raw_old = STANDARD.decode(&old).unwrap();
    assert_not_in_files(&db, &raw_old, "the old KEK");
}

#[test]
fn a_postgresql_database_without_a_kek_is_refused_before_any_connection() {
    // A listener where the URL points: nothing may connect to it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let cwd = tempfile::tempdir().unwrap();
    let url = format!("postgres://mandate:hunter2@127.0.0.1:{port}/mandate");
    let url2 = format!("postgresql://mandate:hunter2@127.0.0.1:{port}/mandate");
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "serve",
            "--api-addr",
            "127.0.0.1:0",
            "--public-addr",
            "127.0.0.1:0",
            "--db",
            &url,
        ],
        vec![
            "serve",
            "--demo",
            "--api-addr",
            "127.0.0.1:0",
            "--public-addr",
            "127.0.0.1:0",
            "--db",
            &url2,
        ],
        vec!["onboard", "--org", "pg", "--db", &url],
        vec!["rotate-signing-key", "--env", "live", "--db", &url2],
        vec!["list-keys", "--org", "pg", "--db", &url],
    ];
    for args in cases {
        let out = run(&args, &[], Some(cwd.path()));
        let said = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {said}");
        assert!(
            said.contains("a PostgreSQL database keeps its signing keys encrypted"),
            "{args:?}: {said}"
        );
        assert!(
            said.contains("MANDATE_KEY_ENCRYPTION_KEY")
                && said.contains("--key-encryption-key-file"),
            "{said}"
        );
        assert!(!said.contains("hunter2"), "{said}");
        assert!(
            matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{args:?} connected to the database"
        );
    }
    // Nothing was created where a file path would have been.
    assert_eq!(std::fs::read_dir(cwd.path()).unwrap().count(), 0);
    // Through the variable too.
    let out = run(
        &["list-keys", "--org", "pg"],
        &[("MANDATE_DB", url.as_str())],
        Some(cwd.path()),
    );
    assert!(
        text(&out.stderr).contains("no key-encryption key is given"),
        "{}",
        text(&out.stderr)
    );
}

/// A malformed KEK: extra arguments, variables, what the error says, what it must not show.
type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str, &'a str);

#[test]
fn a_malformed_kek_is_refused_without_being_shown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let short = STANDARD.encode([0x42u8; 16]);
    let long_file = dir.path().join("long");
    let long = STANDARD.encode([0x43u8; 48]);
    std::fs::write(&long_file, &long).unwrap();
    let cases: [Case<'_>; 4] = [
        (
            vec![],
            vec![("MANDATE_KEY_ENCRYPTION_KEY", short.as_str())],
            "MANDATE_KEY_ENCRYPTION_KEY decodes to 16 bytes",
            &short,
        ),
        (
            vec![],
            vec![("MANDATE_KEY_ENCRYPTION_KEY", "s3cr3t-but-not-base64!")],
            "MANDATE_KEY_ENCRYPTION_KEY is not standard base64",
            "s3cr3t",
        ),
        (
            vec!["--key-encryption-key-file", long_file.to_str().unwrap()],
            vec![],
            "decodes to 48 bytes",
            &long,
        ),
        (
            vec![],
            vec![("MANDATE_KEY_ENCRYPTION_KEY", "")],
            "MANDATE_KEY_ENCRYPTION_KEY is empty",
            "\u{0}",
        ),
    ];
    for (extra, env, says, secret) in cases {
        let mut args = vec!["onboard", "--org", "m", "--db", db.to_str().unwrap()];
        args.extend(extra);
        let out = run(&args, &env, None);
        let said = text(&out.stderr);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains(says), "{said}");
        assert!(said.contains("32 random bytes"), "{said}");
        assert!(!said.contains(secret), "{said}");
    }
    // Nothing was created: the KEK is read before the database is opened.
    assert!(!db.exists());
}

/// Database write access is not enough to have a key published: with a KEK, a signing key
/// written in plaintext into a running server's database (here the live key's row
/// overwritten, and a new row) is refused by the reload (the JWK Set stays as it was, the
/// log says why) and stops the next start.
#[tokio::test]
async fn with_a_kek_a_plaintext_signing_key_planted_in_the_database_is_never_published() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("planted.db");
    let (kek_file, _kek) = new_kek(dir.path(), "kek");
    let kek_arg = ["--key-encryption-key-file", kek_file.to_str().unwrap()];
    let org = onboard(&db, "planted", &kek_arg, &[]);
    let log = dir.path().join("planted.log");
    let server = Server::start_with_env(
        &db,
        free_port(),
        &kek_arg,
        Stdio::from(std::fs::File::create(&log).unwrap()),
        &[("RUST_LOG", "info")],
    );
    authorize(&server, &org, "before").await;
    let published = jwks(&server).await;
    // A P-256 scalar of the attacker's: any 32 bytes below the group order.
    let planted = [7u8; 32];
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            "INSERT INTO signing_keys (kid, env, n, secret, created_ms) VALUES ('live-9', 'live', 9, ?1, 0)",
            [&planted[..]],
        )
        .unwrap();
    }
    // The ring is reloaded every 2 s: three reloads later, still the JWK Set of before.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let now = jwks(&server).await;
    assert_eq!(now, published, "a planted plaintext key was published");
    authorize(&server, &org, "after").await;
    stop(server);
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("signing key live-9 is stored in plaintext"),
        "{said}"
    );
    let said = refused_serve(&db, &kek_arg, &[]);
    assert!(
        said.contains("signing key live-9 is stored in plaintext"),
        "{said}"
    );
}
