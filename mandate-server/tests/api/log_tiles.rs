//! The decision logs on the public host as C2SP tlog-tiles (docs/audit.md): who may read
//! them, the tiles and entry bundles read back and the checkpoint's root recomputed from
//! them (with the project's tlog code, and independently by a small Python script), and the
//! log keeping its entries when a decision's row is changed or deleted afterwards.

use std::time::{Duration, Instant};

use mandate_core::LogKeys;
use mandate_protocol::tlog::{self, LogHash, TileId, TreeEdge, hashes_from_tiles};
use serde_json::Value;

use crate::helpers::{TestApp, spawn_app, spawn_app_with};

/// Agents made by [`TestApp::decide`] so far, for fresh names.
static AGENTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A resource read from the public host.
struct Read {
    status: u16,
    cache: String,
    content_type: String,
    bytes: Vec<u8>,
}

impl TestApp {
    /// GETs `path` under the live log of `acme` on the public host, with `key` if any.
    async fn log_read(&self, key: Option<&str>, path: &str) -> Read {
        let origin = format!("{}/log/{}/live/{path}", self.public, self.org_id("acme"));
        let mut request = self.client.get(origin);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let r = request.send().await.unwrap();
        let header = |name: &str| {
            r.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default()
        };
        let (cache, content_type) = (header("cache-control"), header("content-type"));
        Read {
            status: r.status().as_u16(),
            cache,
            content_type,
            bytes: r.bytes().await.unwrap().to_vec(),
        }
    }

    /// Waits until the live log's checkpoint covers `size` leaves; its note (bounded: 20 s).
    async fn checkpoint_of(&self, key: Option<&str>, size: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let read = self.log_read(key, "checkpoint").await;
            if read.status == 200 {
                let note = String::from_utf8(read.bytes).unwrap();
                if note.lines().nth(1) == Some(size.to_string().as_str()) {
                    return note;
                }
            }
            assert!(Instant::now() < deadline, "no checkpoint of {size} leaves");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `count` decisions of the live environment, spread over agents: their tokens in order.
    async fn decide(&self, count: usize) -> Vec<String> {
        let mut tokens = Vec::new();
        let agents = count.div_ceil(20);
        for a in 0..agents {
            // A name no earlier call took.
            let n = AGENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let agent = self
                .standard_agent(&self.org.live, &format!("t{n}x{a}"))
                .await;
            for _ in 0..(count - tokens.len()).min(20) {
                let r = self.authorize(&agent, "1", "software").await;
                assert_eq!(r.status, 201, "{}", r.text);
                tokens.push(r.body["verdict_token"].as_str().unwrap().to_owned());
            }
        }
        tokens
    }
}

/// The entries of an entry bundle.
fn entries(bundle: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = bundle;
    while !rest.is_empty() {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        out.push(rest[2..2 + len].to_vec());
        rest = &rest[2 + len..];
    }
    out
}

fn hashes(tile: &[u8]) -> Vec<LogHash> {
    assert_eq!(tile.len() % 32, 0);
    tile.chunks(32)
        .map(|c| LogHash::from_bytes(c.try_into().unwrap()))
        .collect()
}

/// The root hash of a signed checkpoint, verified with the published log keys.
async fn verified_root(app: &TestApp, note: &str) -> (u64, LogHash) {
    let url = format!("{}/.well-known/jwks.json", app.public);
    let jwks = app
        .client
        .get(url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let checkpoint = LogKeys::from_jwks_json(&jwks)
        .unwrap()
        .verify(note)
        .unwrap();
    (checkpoint.size(), *tlog::root_of(&checkpoint))
}

/// RFC 6962's root of the entries of the bundles in `path` (concatenated), recomputed by
/// Python's hashlib alone: base64 on stdout.
const PYTHON_ROOT: &str = r#"
import base64, hashlib, sys
data = open(sys.argv[1], "rb").read()
leaves, i = [], 0
while i < len(data):
    n = int.from_bytes(data[i:i + 2], "big")
    leaves.append(hashlib.sha256(b"\x00" + data[i + 2:i + 2 + n]).digest())
    i += 2 + n
def mth(hs):
    if len(hs) == 1:
        return hs[0]
    k = 1
    while k * 2 < len(hs):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(hs[:k]) + mth(hs[k:])).digest()
print(base64.b64encode(mth(leaves)).decode())
"#;

fn python_root(bundles: &[u8]) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let (script, data) = (dir.path().join("root.py"), dir.path().join("bundles"));
    std::fs::write(&script, PYTHON_ROOT).unwrap();
    std::fs::write(&data, bundles).unwrap();
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(&data)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

/// 260 decisions: a full level-0 tile and entry bundle, a partial one of 4, a partial
/// level-1 tile of 1. Read back with the organization's live key, they hold the tokens
/// answered, hash to the checkpoint's root (the project's tlog code and Python's hashlib
/// agree), and a full tile is cached as immutable while a path past the checkpoint is a 404.
#[mandate_test_macros::on_each_engine]
async fn the_tiles_read_back_recompute_the_checkpoints_root() {
    let app = spawn_app().await;
    let tokens = app.decide(260).await;
    let key = Some(app.org.live.as_str());
    let note = app.checkpoint_of(key, 260).await;
    let (size, root) = verified_root(&app, &note).await;
    assert_eq!(size, 260);
    let checkpoint = app.log_read(key, "checkpoint").await;
    assert_eq!(checkpoint.content_type, "text/plain; charset=utf-8");
    assert_eq!(checkpoint.cache, "private, max-age=5");

    let full = app.log_read(key, "tile/0/000").await;
    assert_eq!(full.status, 200);
    assert_eq!(full.content_type, "application/octet-stream");
    assert_eq!(full.cache, "private, max-age=31536000, immutable");
    assert_eq!(full.bytes.len(), 256 * 32);
    let partial = app.log_read(key, "tile/0/001.p/4").await;
    assert_eq!((partial.status, partial.bytes.len()), (200, 4 * 32));
    assert_eq!(partial.cache, "private, max-age=60");
    let level1 = app.log_read(key, "tile/1/000.p/1").await;
    assert_eq!((level1.status, level1.bytes.len()), (200, 32));
    let bundle0 = app.log_read(key, "tile/entries/000").await;
    let bundle1 = app.log_read(key, "tile/entries/001.p/4").await;
    assert_eq!((bundle0.status, bundle1.status), (200, 200));
    assert_eq!(bundle0.cache, "private, max-age=31536000, immutable");

    // The entries are the tokens answered, in order, and hash to the level-0 tiles.
    let data: Vec<Vec<u8>> = entries(&bundle0.bytes)
        .into_iter()
        .chain(entries(&bundle1.bytes))
        .collect();
    assert_eq!(data.len(), 260);
    for (i, token) in tokens.iter().enumerate() {
        assert_eq!(data[i], token.as_bytes(), "entry {i}");
    }
    let mut leaves = hashes(&full.bytes);
    leaves.extend(hashes(&partial.bytes));
    let from_entries: Vec<LogHash> = data.iter().map(|d| tlog::leaf_hash(d)).collect();
    assert_eq!(leaves, from_entries);

    // The root, from the entries, and from the tiles' nodes as a client reads them.
    let edge = TreeEdge::from_leaves(&leaves).unwrap();
    assert_eq!(edge.root(), root);
    let tiles = [
        (TileId::new(0, 0), hashes(&full.bytes)),
        (TileId::new(0, 1), hashes(&partial.bytes)),
        (TileId::new(1, 0), hashes(&level1.bytes)),
    ]
    .into_iter()
    .collect();
    let nodes = hashes_from_tiles(&TreeEdge::node_ids(260), &tiles).unwrap();
    assert_eq!(TreeEdge::from_parts(260, nodes).unwrap().root(), root);
    let mut bundles = bundle0.bytes.clone();
    bundles.extend_from_slice(&bundle1.bytes);
    if let Some(python) = python_root(&bundles) {
        assert_eq!(python, root.to_base64(), "Python's RFC 6962 root");
    }

    // Nothing past the checkpoint, nothing but canonical paths.
    for path in [
        "tile/0/001.p/5",
        "tile/0/001",
        "tile/entries/002",
        "tile/0/1",
        "tile/8/000",
    ] {
        assert_eq!(app.log_read(key, path).await.status, 404, "{path}");
    }
}

/// Without `--public-logs` a log needs its organization's secret key of its environment;
/// with it, anyone reads it, cached publicly.
#[mandate_test_macros::on_each_engine]
async fn a_log_is_read_with_its_organizations_key_unless_logs_are_public() {
    let app = spawn_app().await;
    app.decide(1).await;
    let note = app.checkpoint_of(Some(&app.org.live), 1).await;
    let anonymous = app.log_read(None, "checkpoint").await;
    assert_eq!(anonymous.status, 401);
    let body: Value = serde_json::from_slice(&anonymous.bytes).unwrap();
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    assert_eq!(
        app.log_read(Some(&app.org.sandbox), "checkpoint")
            .await
            .status,
        403
    );
    let other = app.onboard("globex").await;
    let read = app.log_read(Some(&other.live), "checkpoint").await;
    assert_eq!(read.status, 404);
    let body: Value = serde_json::from_slice(&read.bytes).unwrap();
    assert_eq!(body["error"]["code"], "not_found", "{body}");

    let public = spawn_app_with(|c| c.public_logs = true).await;
    public.decide(1).await;
    let note_public = public.checkpoint_of(None, 1).await;
    assert!(note_public.contains("/log/"), "{note_public}");
    let tile = public.log_read(None, "tile/0/000.p/1").await;
    assert_eq!(tile.status, 200);
    assert_eq!(tile.cache, "public, max-age=60");
    assert!(note.contains("/live\n"), "{note}");
}

/// A decision's row changed, then deleted, after it was logged: the log still holds its
/// token as answered and proves it, and goes on appending the decisions after it.
#[mandate_test_macros::on_each_engine]
async fn a_row_changed_or_deleted_after_logging_leaves_the_entry_and_its_proof() {
    let app = spawn_app().await;
    let tokens = app.decide(2).await;
    let key = Some(app.org.live.as_str());
    app.checkpoint_of(key, 2).await;
    let first_id = app
        .db
        .query_value("SELECT id FROM decisions ORDER BY seq LIMIT 1", &[])
        .unwrap();
    app.db.execute(
        "UPDATE decisions SET amount = '99' WHERE id = $1",
        &[&first_id],
    );
    let more = app.decide(1).await;
    app.checkpoint_of(key, 3).await;
    app.db
        .execute("DELETE FROM decisions WHERE id = $1", &[&first_id]);
    let more_still = app.decide(1).await;
    let note = app.checkpoint_of(key, 4).await;
    let (_, root) = verified_root(&app, &note).await;
    let bundle = app.log_read(key, "tile/entries/000.p/4").await;
    assert_eq!(bundle.status, 200);
    let data = entries(&bundle.bytes);
    let answered: Vec<&String> = tokens.iter().chain(&more).chain(&more_still).collect();
    for (i, token) in answered.iter().enumerate() {
        assert_eq!(data[i], token.as_bytes(), "entry {i}");
    }
    let tile = app.log_read(key, "tile/0/000.p/4").await;
    let leaves = hashes(&tile.bytes);
    assert_eq!(leaves[0], tlog::leaf_hash(tokens[0].as_bytes()));
    assert_eq!(TreeEdge::from_leaves(&leaves).unwrap().root(), root);
    // The first token's inclusion in the newest checkpoint, from the tiles alone.
    let plan = tlog::ProofPlan::inclusion(0, 4).unwrap();
    let tiles = [(TileId::new(0, 0), leaves.clone())].into_iter().collect();
    let proof = plan
        .assemble(&hashes_from_tiles(plan.nodes(), &tiles).unwrap())
        .unwrap();
    tlog::verify_inclusion(&tlog::leaf_hash(tokens[0].as_bytes()), 0, 4, &proof, &root).unwrap();
}
