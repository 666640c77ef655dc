//! Interop: the server's decision log, served as C2SP tlog-tiles on its public host, read by
//! an independent client, Cloudflare's `tlog_tiles` crate (a port of Go's
//! `golang.org/x/mod/sumdb/tlog`, what Go's checksum database clients run), on SQLite,
//! PostgreSQL and Citus. The client parses the checkpoint, decides which hash tiles and
//! entry bundles to fetch, authenticates each tile against the checkpoint's root
//! (`TileHashReader`), recomputes the root, and proves and checks the inclusion of
//! entries; the proofs it builds are the ones the API serves. Only the note's signature is
//! checked with Mandate's own code (the crate has no signed-note verifier).

use std::cell::RefCell;

use mandate_core::LogKeys;
use tlog_tiles::{
    Checkpoint, HashReader as _, Tile, TileHashReader, TileReader, check_record, prove_record,
    record_hash, stored_hash_index, tree_hash,
};

use crate::support::{Engine, Env, start_on};

/// Decisions in the log: more than a full tile of 256, so that level 1 and a partial
/// level-0 tile and bundle are read.
const SIZE: u64 = 300;

/// Decisions an agent makes (an agent is denied past 10 requests a minute).
const PER_AGENT: u64 = 8;

/// The log's tiles over HTTP, as the crate asks for them: C2SP paths (the crate writes
/// Go's `tile/<H>/<L>/<N>` and `tile/<H>/data/<N>`, which tlog-tiles spells `tile/<L>/<N>`
/// and `tile/entries/<N>`) under the log's prefix, with the organization's key.
struct HttpTiles {
    prefix: String,
    key: String,
    client: reqwest::blocking::Client,
    /// The paths fetched, in order.
    fetched: RefCell<Vec<String>>,
    /// What was fetched, by path: tiles never change, and the public host limits a key's
    /// requests, so a client keeps them.
    cache: RefCell<std::collections::HashMap<String, Vec<u8>>>,
    /// A path whose first byte is flipped as it is read (a tile altered in transit).
    altered: Option<&'static str>,
}

impl HttpTiles {
    /// The C2SP path of `tile`.
    fn path(tile: &Tile) -> String {
        let go = tile.path();
        let rest = go.strip_prefix("tile/8/").unwrap();
        match rest.strip_prefix("data/") {
            Some(index) => format!("tile/entries/{index}"),
            None => format!("tile/{rest}"),
        }
    }

    fn get(&self, path: &str) -> Result<Vec<u8>, tlog_tiles::Error> {
        if let Some(bytes) = self.cache.borrow().get(path) {
            return Ok(bytes.clone());
        }
        self.fetched.borrow_mut().push(path.to_owned());
        let response = self
            .client
            .get(format!("{}/{path}", self.prefix))
            .bearer_auth(&self.key)
            .send()
            .map_err(|e| tlog_tiles::Error::InvalidInput(e.to_string()))?;
        if response.status() != 200 {
            return Err(tlog_tiles::Error::InvalidInput(format!(
                "{path}: {}",
                response.status()
            )));
        }
        let mut bytes = response
            .bytes()
            .map_err(|e| tlog_tiles::Error::InvalidInput(e.to_string()))?
            .to_vec();
        if self.altered == Some(path) {
            bytes[0] ^= 1;
        }
        self.cache
            .borrow_mut()
            .insert(path.to_owned(), bytes.clone());
        Ok(bytes)
    }
}

impl TileReader for HttpTiles {
    fn height(&self) -> u8 {
        8
    }

    fn read_tiles(&self, tiles: &[Tile]) -> Result<Vec<Vec<u8>>, tlog_tiles::Error> {
        tiles.iter().map(|t| self.get(&Self::path(t))).collect()
    }

    fn save_tiles(&self, _: &[Tile], _: &[Vec<u8>]) {}
}

/// The entries of a C2SP entry bundle: each prefixed by its length, big-endian, 2 bytes.
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

/// [`SIZE`] decisions made over the API (POST /v1/authorizations, each agent a few): their
/// tokens and ids, in order.
fn decide(env: &Env) -> Vec<(String, String)> {
    let client = reqwest::blocking::Client::new();
    let mut decided = Vec::new();
    let mut key = String::new();
    for i in 0..SIZE {
        if i % PER_AGENT == 0 {
            key = env.standard_agent(&format!("buyer{}", i / PER_AGENT));
        }
        let response = client
            .post(format!("{}/v1/authorizations", env.api))
            .bearer_auth(&key)
            .json(&serde_json::json!({
                "amount": 1,
                "currency": "USD",
                "recipient": "vendor:acme",
                "category": "software",
            }))
            .send()
            .unwrap();
        assert_eq!(response.status(), 201);
        let body: serde_json::Value = response.json().unwrap();
        let field = |name: &str| body[name].as_str().unwrap().to_owned();
        decided.push((field("verdict_token"), field("id")));
    }
    decided
}

fn the_tiles_verify_with_an_independent_client(env: Env) {
    let decided = decide(&env);
    let last = &decided.last().unwrap().1;
    let note = crate::witness::read_when(&env, last, |c| {
        c.lines().nth(1) == Some(SIZE.to_string().as_str())
    })["log"]["checkpoint"]
        .as_str()
        .unwrap()
        .to_owned();
    // The note's signature, with the log keys of the key set (Mandate's code).
    let jwks = reqwest::blocking::get(format!("{}/.well-known/jwks.json", env.public))
        .unwrap()
        .bytes()
        .unwrap();
    LogKeys::from_jwks_json(&jwks)
        .unwrap()
        .verify(&note)
        .unwrap();
    let origin = note.lines().next().unwrap();
    let prefix = format!(
        "{}/log/{}",
        env.public,
        origin.split_once("/log/").unwrap().1
    );

    // From here on, the independent client: the checkpoint's text as it parses it.
    let text = &note[..note.find("\n\n").unwrap() + 1];
    let checkpoint = Checkpoint::from_bytes(text.as_bytes()).unwrap();
    assert_eq!(
        (checkpoint.origin(), checkpoint.size()),
        (origin, SIZE),
        "{text}"
    );
    let tiles = HttpTiles {
        prefix,
        key: env.org_key.clone(),
        client: reqwest::blocking::Client::new(),
        fetched: RefCell::default(),
        cache: RefCell::default(),
        altered: None,
    };
    let reader = TileHashReader::new(SIZE, *checkpoint.hash(), &tiles);
    // The root recomputed from the tiles the client fetched, each authenticated by it.
    assert_eq!(tree_hash(SIZE, &reader).unwrap(), *checkpoint.hash());
    // Every leaf hash read is its entry's record hash, and every entry is the token
    // answered, in order; the client's inclusion proof of each, built from the tiles,
    // checks against the root (which authenticates the tiles it read: see below why not
    // TileHashReader alone). The bundles are fetched by the crate's tile paths.
    let leaves = reader
        .read_hashes(
            &(0..SIZE)
                .map(|n| stored_hash_index(0, n))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let mut logged = Vec::new();
    for index in 0..SIZE.div_ceil(256) {
        let width = u32::try_from((SIZE - index * 256).min(256)).unwrap();
        let bundle = Tile::new(8, 0, index, width, true);
        logged.extend(entries(&tiles.read_tiles(&[bundle]).unwrap()[0]));
    }
    assert_eq!(logged.len() as u64, SIZE);
    for (n, ((entry, leaf), (token, _))) in logged.iter().zip(&leaves).zip(&decided).enumerate() {
        assert_eq!(entry, token.as_bytes(), "entry {n}");
        assert_eq!(record_hash(entry), *leaf, "leaf {n}");
        let n = n as u64;
        let proof = prove_record(SIZE, n, &reader).unwrap();
        check_record(&proof, SIZE, *checkpoint.hash(), n, record_hash(entry)).unwrap();
    }
    // The proofs it builds are those the API serves with each decision (the RFC 9162
    // path from the leaf up).
    for n in [0, 1, 255, 256, 299] {
        let proof = prove_record(SIZE, n, &reader).unwrap();
        let read = env.org(&["decisions", "get", &decided[n as usize].1, "--json"]);
        read.ok();
        let served: Vec<String> = read.json()["log"]["inclusion_proof"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().to_owned())
            .collect();
        let built: Vec<String> = proof.iter().map(|h| h.to_string()).collect();
        assert_eq!(served, built, "leaf {n}");
    }
    // What it read: level-0 tiles (a full one and a partial one), level 1, the bundles.
    let fetched = tiles.fetched.borrow().clone();
    for path in [
        "tile/0/000",
        "tile/0/001.p/44",
        "tile/1/000.p/1",
        "tile/entries/000",
        "tile/entries/001.p/44",
    ] {
        assert!(fetched.iter().any(|p| p == path), "{path}: {fetched:?}");
    }
    // The same client refuses a tile altered in transit: it does not lead to the root.
    let altered = HttpTiles {
        altered: Some("tile/0/001.p/44"),
        fetched: RefCell::default(),
        cache: RefCell::default(),
        ..tiles
    };
    let reader = TileHashReader::new(SIZE, *checkpoint.hash(), &altered);
    assert!(reader.read_hashes(&[stored_hash_index(0, 256)]).is_err());
    two_leaves_swapped_under_a_level_8_node(env, altered.prefix);
}

/// Two leaves swapped in a strip of the first 256 leaves, which a level-8 node covers: the
/// log worker does not see it (the edge it checks against its checkpoint takes that node
/// from its tile, not from the strips), logs on and signs the next checkpoint, which is
/// right; but the level-0 tile it serves no longer hashes to the level-8 node, and the
/// independent client refuses it.
fn two_leaves_swapped_under_a_level_8_node(mut env: Env, prefix: String) {
    let org = prefix.rsplit('/').nth(1).unwrap().to_owned();
    let sql = crate::tamper::swap_two_leaves(env.engine(), &org, "start < 256");
    env.tamper(&sql);
    let key = env.standard_agent("late");
    let out = env.authorize(&key, "1", "USD", "software");
    out.ok();
    let id = out.json()["id"].as_str().unwrap().to_owned();
    let next = SIZE + 1;
    let note = crate::witness::read_when(&env, &id, |c| {
        c.lines().nth(1) == Some(next.to_string().as_str())
    })["log"]["checkpoint"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = &note[..note.find("\n\n").unwrap() + 1];
    let checkpoint = Checkpoint::from_bytes(text.as_bytes()).unwrap();
    let tiles = HttpTiles {
        prefix: prefix.replace(prefix.split("/log/").next().unwrap(), &env.public),
        key: env.org_key.clone(),
        client: reqwest::blocking::Client::new(),
        fetched: RefCell::default(),
        cache: RefCell::default(),
        altered: None,
    };
    let reader = TileHashReader::new(next, *checkpoint.hash(), &tiles);
    // The root, from the level-8 node and the leaves after it, holds.
    assert_eq!(tree_hash(next, &reader).unwrap(), *checkpoint.hash());
    // The first 256 leaves do not: the level-0 tile served no longer hashes to the level-8
    // node, and no inclusion proof of its entries, built by the client from the tiles,
    // checks. (Its TileHashReader alone lets that tile through: tlog_tiles 0.2.0, as the
    // Go code it ports, authenticates full tiles against their parents from the position
    // of the tree hash's subtree count in its list of tiles, which skips this one when
    // those subtrees share tiles; the checks below do not depend on it.)
    let tile = tiles.get("tile/0/000").unwrap();
    let node = tiles.get("tile/1/000.p/1").unwrap();
    assert_ne!(Tile::subtree_hash(&tile).0[..], node[..]);
    let bundle = entries(&tiles.get("tile/entries/000").unwrap());
    for (n, entry) in bundle.iter().enumerate() {
        let n = n as u64;
        let proof = prove_record(next, n, &reader).unwrap();
        let checked = check_record(&proof, next, *checkpoint.hash(), n, record_hash(entry));
        assert!(checked.is_err(), "leaf {n}");
    }
}

#[test]
fn an_independent_tlog_tiles_client_verifies_the_log() {
    the_tiles_verify_with_an_independent_client(start_on(Engine::Sqlite).unwrap());
}

#[test]
fn on_postgres_an_independent_tlog_tiles_client_verifies_the_log() {
    if let Some(env) = start_on(Engine::Postgres) {
        the_tiles_verify_with_an_independent_client(env);
    }
}

#[test]
fn on_citus_an_independent_tlog_tiles_client_verifies_the_log() {
    if let Some(env) = start_on(Engine::Citus) {
        the_tiles_verify_with_an_independent_client(env);
    }
}
