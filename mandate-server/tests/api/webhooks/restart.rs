//! A real kill: the binary, SIGKILLed between attempts, on the system clock.

use super::*;

/// A `mandate-server serve` process, killed when dropped.
struct Process {
    child: std::process::Child,
    api: String,
    public: String,
    // Kept open: a closed pipe would make the server's next line of output fail.
    _stdout: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const BIN: &str = env!("CARGO_BIN_EXE_mandate-server");

fn serve(db: &TestDatabase) -> Process {
    use std::io::BufRead;
    let mut child = std::process::Command::new(BIN)
        .arg("serve")
        .arg("--db")
        .arg(db.arg())
        .envs(db.env())
        .args(["--api-addr", "127.0.0.1:0", "--public-addr", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut find = |label: &str| loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(url) = line.trim().strip_prefix(label) {
            return url.trim().to_owned();
        }
    };
    let api = find("api:");
    let public = find("public:");
    find("db:");
    Process {
        child,
        api,
        public,
        _stdout: lines,
    }
}

async fn jwks_of(public: &str) -> JwkSet {
    let bytes = reqwest::get(format!("{public}/.well-known/jwks.json"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    JwkSet::from_json(&bytes).unwrap()
}

#[mandate_test_macros::on_each_engine(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_between_attempts_delivers_after_it_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "mandate.db").await;
    let onboard = std::process::Command::new(BIN)
        .arg("onboard")
        .arg("--db")
        .arg(db.arg())
        .envs(db.env())
        .args(["--org", "acme"])
        .output()
        .unwrap();
    assert!(onboard.status.success());
    let stdout = String::from_utf8(onboard.stdout).unwrap();
    let key = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sandbox key:"))
        .unwrap()
        .trim()
        .to_owned();

    let receiver = Receiver::start(1).await;
    let first = serve(&db);
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{}/v1/webhooks", first.api))
        .bearer_auth(&key)
        .json(&json!({"url": receiver.url, "events": ["ping"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let webhook: Value = r.json().await.unwrap();
    let r = client
        .post(format!(
            "{}/v1/webhooks/{}/ping",
            first.api,
            webhook["webhook"].as_str().unwrap()
        ))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let event = r.json::<Value>().await.unwrap()["event"]
        .as_str()
        .unwrap()
        .to_owned();

    // The first attempt fails and is recorded with a retry about a second later: kill -9.
    let read = |db: &TestDatabase| stored_deliveries(db, &event).remove(0);
    eventually("the failed attempt to be recorded", || {
        (read(&db).attempts == 1).then_some(())
    })
    .await;
    let first_issuer = first.public.clone();
    drop(first);
    assert_eq!(read(&db).state, DeliveryState::Pending);

    let second = serve(&db);
    let seen = receiver.wait_for(2).await;
    let row = eventually("the delivery to be acknowledged", || {
        let row = read(&db);
        (row.state == DeliveryState::Delivered).then_some(row)
    })
    .await;
    assert_eq!(row.attempts, 2);
    let jwks = jwks_of(&second.public).await;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    for (received, issuer) in seen.iter().zip([first_issuer, second.public.clone()]) {
        assert_eq!(
            verify(&jwks, &issuer, now, &received.body).jti.as_str(),
            event
        );
    }
}
