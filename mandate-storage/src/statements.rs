//! The statements of the boundary ([`Stmt`]), one enum a resource: what each takes
//! (`$1`, `$2`, ...) and returns (its columns, in order) is documented on its variant, the
//! contract between the use cases that run them (beside the boundary's traits) and the
//! engines' SQL. Most are SQL that every engine speaks alike, written once
//! (`standard.rs`); each engine writes the others in its own dialect
//! (`sqlite/statements.rs`, `postgres/statements.rs`). A leaf of the boundary: it imports
//! none of its files.

use std::borrow::Cow;

use mandate_core::MandateStatus;

/// A statement of the boundary, named by its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stmt {
    /// Agents.
    Agent(AgentSql),
    /// AP2 issuers and sources.
    Ap2(Ap2Sql),
    /// The decision log.
    Decision(DecisionSql),
    /// Webhook deliveries.
    Delivery(DeliverySql),
    /// Escrows and the settlement ledger.
    Escrow(EscrowSql),
    /// The event log.
    Event(EventSql),
    /// Idempotency records.
    Idempotency(IdempotencySql),
    /// API keys and the keys generation.
    Key(KeySql),
    /// The decision log's Merkle tree, its checkpoints and its keys.
    Log(LogSql),
    /// Mandates.
    Mandate(MandateSql),
    /// Organizations and their environments.
    Org(OrgSql),
    /// Processes and the readiness probe.
    Process(ProcessSql),
    /// Reviews and single-use credentials.
    Review(ReviewSql),
    /// Signing keys and settings.
    Signing(SigningSql),
    /// Timers.
    Timer(TimerSql),
    /// Webhook endpoints.
    Webhook(WebhookSql),
}

/// Each resource's statements are statements of the boundary.
macro_rules! statements {
    ($($variant:ident($resource:ty)),* $(,)?) => {
        $(impl From<$resource> for Stmt {
            fn from(stmt: $resource) -> Self {
                Stmt::$variant(stmt)
            }
        })*
    };
}

statements!(
    Agent(AgentSql),
    Ap2(Ap2Sql),
    Decision(DecisionSql),
    Delivery(DeliverySql),
    Escrow(EscrowSql),
    Event(EventSql),
    Idempotency(IdempotencySql),
    Key(KeySql),
    Log(LogSql),
    Mandate(MandateSql),
    Org(OrgSql),
    Process(ProcessSql),
    Review(ReviewSql),
    Signing(SigningSql),
    Timer(TimerSql),
    Webhook(WebhookSql),
);

/// How a write transaction holds a row it reads. Engines whose writes are serialized
/// anyway (SQLite's one writer) read it plainly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// Not locked.
    No,
    /// Locked until the transaction ends, waiting for another transaction that holds it.
    Wait,
    /// Locked until the transaction ends, or left out (read as absent) when another
    /// transaction holds it: a timer leaves the row to the process that has it.
    Skip,
}

/// An engine's SQL for one statement: none (nothing to do on this engine), or statements
/// run in order with the same values.
pub type Sql = Vec<Cow<'static, str>>;

/// One statement of SQL.
pub fn one(text: &'static str) -> Sql {
    vec![Cow::Borrowed(text)]
}

/// One statement of SQL, built for the case at hand.
pub fn built(text: String) -> Sql {
    vec![Cow::Owned(text)]
}

/// Statements run one after the other.
pub fn each(texts: &[&'static str]) -> Sql {
    texts.iter().map(|text| Cow::Borrowed(*text)).collect()
}

/// Nothing to do on this engine.
pub fn none() -> Sql {
    Vec::new()
}

/// The agents' statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentSql {
    /// Inserts an agent, or nothing (no row changed) when its name is taken in the
    /// environment: `$1` org, `$2` env, `$3` id, `$4` created_ms.
    Insert,
    /// One agent: `$1` org, `$2` env, `$3` id → `agents::COLUMNS`.
    Get,
    /// A page of agents, newest first: `$1` org, `$2` env, `$3` the one agent (with `only`)
    /// or `NULL`, `$4` before (a seq), `$5` limit → `agents::COLUMNS`.
    Page {
        /// `$3` names one agent.
        only: bool,
    },
    /// Marks a change the agent's next decision depends on (its mandate stored or
    /// revoked): `$1` org, `$2` env, `$3` agent. An engine without agent versions (one
    /// process) runs nothing.
    Changed,
}

/// AP2's statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ap2Sql {
    /// Adds an issuer key, or nothing (no row changed) when the organization has its kid:
    /// `$1` org, `$2` kid, `$3` jwk, `$4` created_ms.
    AddIssuer,
    /// The organization `$1`'s issuer keys, oldest first → kid, jwk, created_ms.
    Issuers,
    /// Removes an issuer key: `$1` org, `$2` kid.
    RemoveIssuer,
    /// Keeps the AP2 source of a mandate: `$1` org, `$2` env, `$3` mandate, `$4` open
    /// mandate, `$5` digest, `$6` consent key, `$7` what the open mandate had spent under
    /// the mandates that carried it before (JSON) or `NULL`.
    SetSource,
    /// The sources of the mandates in the list `$3` that have one: `$1` org, `$2` env →
    /// id, open mandate, digest, spent before or `NULL`.
    Sources,
    /// The agent `$3`'s newest mandate: `$1` org, `$2` env → id, open mandate or `NULL`,
    /// digest or `NULL`, spent before or `NULL`.
    CurrentSource,
    /// The mandates of `$1` org, `$2` env imported from AP2 before their consent key was
    /// kept → id, open mandate, digest.
    Unkeyed,
    /// Keeps mandate `$3`'s consent key `$4`: `$1` org, `$2` env.
    SetConsent,
    /// The mandates of `$1` org, `$2` env carrying the open mandate of consent key `$3`,
    /// oldest first → id, agent, status, created_ms.
    Carriers {
        /// How a write transaction holds their rows.
        lock: Lock,
    },
    /// Supersedes mandate `$3` if it is active: `$1` org, `$2` env.
    SupersedeCarrier,
    /// What the open mandate had spent before mandate `$3` was imported: `$1` org, `$2`
    /// env → spent before or `NULL` (no row for another mandate).
    SpentBefore,
    /// Binds an open mandate to a place, or nothing when it is bound already: `$1` consent
    /// key, `$2` org, `$3` env, `$4` created_ms.
    BindConsent,
    /// Where the open mandate `$1` (consent key) is in force → org, env.
    ConsentPlace,
}

/// The statements of reviews and single-use credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewSql {
    /// Stores a newly opened review: `$1` org, `$2` env, `$3` id, `$4` decision, `$5` agent,
    /// `$6` status, `$7` created_ms, `$8` expires_ms.
    Insert,
    /// One review: `$1` org, `$2` env, `$3` id → id, decision_id, status, created_ms,
    /// expires_ms, resolved_ms, resolution, reason, agent_id.
    Get {
        /// How a write transaction holds its row.
        lock: Lock,
    },
    /// Writes a resolution: `$1` org, `$2` env, `$3` id, `$4` status, `$5` resolved_ms,
    /// `$6` resolution or `NULL`, `$7` reason or `NULL`; with `pending`, only while the
    /// review is still pending (otherwise no row changes; of two transactions resolving
    /// it at once, the second waits on the row and finds it resolved).
    Resolve {
        /// Only a pending review (always, but under `deciding::planted_unchecked_resolution`).
        pending: bool,
    },
    /// Whether credential `$3` was accepted in `$1` org, `$2` env → accepted.
    CredentialAccepted,
    /// Records that decision `$4` (at `$5`) accepts credential `$3` of `$1` org, `$2` env,
    /// or nothing (no row changed) when a decision accepted it before.
    AcceptCredential,
}

/// The decision log's statements (the rest of its reads and writes are each engine's
/// own: [`super::engine::Tx`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionSql {
    /// One decision, of agent `$4` only when it is not `NULL`: `$1` org, `$2` env, `$3` id
    /// → `decisions::COLUMNS`.
    Get,
    /// The seq of one decision, as [`DecisionSql::Get`] → seq.
    Seq,
}

/// The statements of the decision log's tree (`log_strips`, `log_tiles`, `log_heads`), of
/// its entries (`log_entries`) and of the log keys (`log_keys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogSql {
    /// The logs with news: environments with decisions above their head's `scanned_seq`
    /// (none: 0) whose checkpoint was signed before `$2` (unix ms) or never, or whose
    /// newest checkpoint is not shown yet: `$1` limit → org, env.
    WithNews,
    /// Makes the head of a log that has none (size 0, nothing scanned): `$1` org, `$2` env.
    EnsureHead,
    /// A log's head: `$1` org, `$2` env → size, scanned_seq, checkpoint, shown_size,
    /// signed_ms.
    Head {
        /// How a write transaction holds the row (the worker: [`Lock::Skip`]).
        lock: Lock,
    },
    /// The checkpoint readers are shown: `$1` org, `$2` env → shown_size, shown_checkpoint.
    Shown,
    /// Moves a head: `$1` org, `$2` env, `$3` size, `$4` scanned_seq, `$5` checkpoint,
    /// `$6` signed_ms.
    SetHead,
    /// Shows a stored checkpoint to readers, only if it is still the head's and bigger than
    /// the one shown: `$1` org, `$2` env, `$3` size, `$4` checkpoint as stored, `$5` as
    /// shown (with the witnesses' cosignatures; it replaces the stored one).
    Show,
    /// Appends a strip of level 0: `$1` org, `$2` env, `$3` start, `$4` first_seq, `$5`
    /// seqs (the later seqs as LEB128 deltas), `$6` hashes.
    AppendStrip,
    /// The strips starting in [`$3`, `$4`): `$1` org, `$2` env → start, hashes, in order.
    StripRange,
    /// Appends the entries of a strip (`log_entries`): `$1` org, `$2` env, `$3` start,
    /// `$4` the strip's tokens, each length-prefixed (big-endian u16).
    AppendEntries,
    /// The entries of the strips starting in [`$3`, `$4`): `$1` org, `$2` env → start,
    /// entries, in order.
    EntryRange,
    /// The decisions of a log after its head: `$1` org, `$2` env, seqs above `$3` and below
    /// `$4`, at most `$5` → seq, id, the stored leaf hash (or NULL), oldest first.
    Ids,
    /// The strip that holds each of the list of seqs `$3` (the one with the greatest
    /// `first_seq` not above it): `$1` org, `$2` env → start, first_seq, seqs.
    StripsOf,
    /// One tile: `$1` org, `$2` env, `$3` level, `$4` idx → hashes.
    Tile,
    /// Stores a tile whole: `$1` org, `$2` env, `$3` level, `$4` idx, `$5` hashes.
    PutTile,
    /// The heads of many logs (`$1` orgs, `$2` envs, in pairs) → the pair's position
    /// (from 1), size, scanned_seq, checkpoint, shown_size, signed_ms; a log without a head is left
    /// out. With `lock`, each row held to the transaction's end, those another transaction
    /// holds left out (`SKIP LOCKED`).
    HeadsOf {
        /// Whether the rows are held.
        lock: bool,
    },
    /// Makes the heads of those of many logs (`$1` orgs, `$2` envs) that have none.
    EnsureHeadsOf,
    /// [`LogSql::Ids`] of many logs: `$1` orgs, `$2` envs, seqs above `$3` and below `$4`
    /// (lists, one each a log), at most `$5` a log → the log's position (from 1), seq, id,
    /// leaf, by log then seq.
    IdsOf,
    /// The decisions of many logs in ranges, as [`LogSql::Ids`] reads them but whole: `$1`
    /// orgs, `$2` envs, seqs above `$3` and below `$4`, at most `$5` (lists, one each a
    /// range) → the range's position (from 1), then the columns of
    /// [`crate::decisions::COLUMNS`].
    TokensOf,
    /// [`LogSql::StripRange`] of many logs: `$1` orgs, `$2` envs, the strips starting in
    /// [`$3`, `$3` + 256) → the log's position, start, hashes, by log then start.
    StripRangesOf,
    /// [`LogSql::Tile`] of many: `$1` orgs, `$2` envs, `$3` levels, `$4` idxs → the
    /// tile's position (from 1), hashes.
    TilesOf,
    /// [`LogSql::AppendStrip`] of many strips: `$1` orgs, `$2` envs, `$3` starts, `$4`
    /// first_seqs, `$5` seqs, `$6` hashes.
    AppendStripsOf,
    /// [`LogSql::AppendEntries`] of many strips: `$1` orgs, `$2` envs, `$3` starts, `$4`
    /// entries.
    AppendEntriesOf,
    /// [`LogSql::PutTile`] of many tiles: `$1` orgs, `$2` envs, `$3` levels, `$4` idxs,
    /// `$5` hashes.
    PutTilesOf,
    /// [`LogSql::SetHead`] of many logs: `$1` orgs, `$2` envs, `$3` sizes, `$4`
    /// scanned_seqs, `$5` checkpoints (empty: none), `$6` signed_ms.
    SetHeadsOf,
    /// [`LogSql::Show`] of many logs: `$1` orgs, `$2` envs, `$3` sizes, `$4` checkpoints
    /// as stored, `$5` as shown → the position (from 1) of each shown.
    ShowOf,
    /// Every log key current or retired after `$1` → kid, env, secret, retired_ms.
    KeysPublished,
    /// Whether `$1` env has a current log key → exists.
    KeyHasCurrent,
    /// The current log key of `$1` env, held until the transaction ends → kid.
    KeyLockCurrent,
    /// The next key number of `$1` env → n.
    KeyNextNumber,
    /// Retires the current log key of `$1` env at `$2`.
    KeyRetire,
    /// Replaces log key `$1`'s secret by `$3` if it is still `$2`.
    KeySetSecret,
    /// Adds a log key: `$1` env, `$2` kid, `$3` n, `$4` secret, `$5` created_ms; with
    /// `first`, only when `$1` env has none.
    KeyInsert {
        /// Only the environment's first key.
        first: bool,
    },
}

/// The deliveries' statements. A delivery is its organization, event and endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliverySql {
    /// Up to `$3` pending deliveries due at `$1` (unix ms), the longest-waiting first, at
    /// most `$2` of any one endpoint, and (an engine shared by processes) held by no other
    /// process's claim, read without a lock (across every organization) → org_id, event_id,
    /// webhook_id, attempts, url, env, type, data, the event's created_ms.
    Due,
    /// [`DeliverySql::Due`] of organization `$4` only.
    DueOf,
    /// Claims delivery `$1` org, `$2` event, `$3` endpoint found due at `$4` until `$5`, if
    /// it is still due and held by no other process → one row when claimed (an engine that
    /// one process opens claims nothing and answers one row).
    Claim,
    /// Lets go of the claim on delivery `$1` org, `$2` event, `$3` endpoint (nothing where
    /// deliveries are not claimed).
    Release,
    /// Records an attempt, or nothing when its number was recorded already: `$1` org, `$2`
    /// event, `$3` endpoint, `$4` attempt, `$5` at_ms, `$6` status or `NULL`, `$7`
    /// latency_ms, `$8` error or `NULL`.
    InsertAttempt,
    /// Writes a delivery's new state while it is pending (and ends its claim): `$1` org,
    /// `$2` event, `$3` endpoint, `$4` attempts, `$5` state, `$6` next_attempt_ms, `$7`
    /// last_error, `$8` finished_ms.
    Update,
    /// How many deliveries and reviews are pending → deliveries, reviews.
    Backlog,
    /// The deliveries of event `$2` of org `$1`, first queued first → webhook_id,
    /// attempts, state, next_attempt_ms, last_error.
    OfEvent,
    /// The attempts of delivery `$1` org, `$2` event, `$3` endpoint, first first →
    /// attempt, at_ms, status, latency_ms, error.
    Attempts,
}

/// The escrows' statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscrowSql {
    /// Stores a funded escrow, or nothing (no row changed) when its decision or nonce
    /// funded one already: `$1` org, `$2` env, `$3` id, `$4` amount, `$5` currency, `$6`
    /// buyer, `$7` seller, `$8` decision, `$9` nonce, `$10` arbiter or `NULL`, `$11` state,
    /// `$12` disputed, `$13` created_ms.
    Insert,
    /// Appends a history step: `$1` org, `$2` escrow, `$3` step, `$4` state, `$5`
    /// disputed, `$6` at_ms, `$7` actor.
    PushHistory,
    /// Moves an escrow of `$1` org, `$2` env, `$3` id to state `$4` and disputed `$5`, only
    /// if it stands at state `$6`, disputed `$7`.
    Advance,
    /// An escrow by id `$1`, whoever funded it, or only of org `$2` and env `$3` when they
    /// are not `NULL` → `escrows::COLUMNS`.
    Get,
    /// The history of escrow `$2` of org `$1`, oldest step first → state, disputed, at_ms,
    /// actor.
    History,
    /// Records a money movement unless one of its kind exists for the escrow (no row
    /// changed then): `$1` org, `$2` escrow, `$3` kind, `$4` amount, `$5` currency, `$6`
    /// from, `$7` to, `$8` created_ms.
    RecordMovement,
    /// The movements of escrow `$2` of org `$1`, in the order recorded → escrow_id, kind,
    /// amount, currency, from_party, to_party, created_ms.
    Movements,
}

/// The event log's statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSql {
    /// Appends an event with a pending delivery, due at once, to every active endpoint of
    /// the organization and environment subscribed to its type: `$1` org, `$2` env, `$3`
    /// id, `$4` type, `$5` data (JSON text), `$6` created_ms.
    Append,
    /// Appends an event delivered to endpoint `$7` only, whatever its subscriptions (a
    /// ping): the values of [`EventSql::Append`], then `$7`.
    AppendFor,
    /// One event: `$1` org, `$2` env, `$3` id → `events::COLUMNS`.
    Get,
    /// A page of events, newest first: `$1` org, `$2` env, `$3` the type (with `by_type`)
    /// or `NULL`, `$4` before (a seq), `$5` limit → `events::COLUMNS`.
    Page {
        /// `$3` names a type.
        by_type: bool,
    },
}

/// The statements of the processes sharing the database and of the readiness probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessSql {
    /// Records that process `$1` is alive for [`super::peers::PEER_LEASE_MS`] from now (by
    /// the database's clock) → how many processes are alive, itself included (an engine
    /// that one process opens: 1), and whether no live process has a lower id (it sweeps:
    /// `peers::Peers`).
    Heartbeat,
    /// Process `$1` stops (nothing where one process opens the database).
    Leave,
    /// A write through the path every change takes that leaves nothing changed.
    Probe,
    /// The highest migration applied → version.
    Applied,
}

/// The idempotency records' statements (by the organization of the API key, its hash and
/// the Idempotency-Key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdempotencySql {
    /// Claims a key never used, or nothing (no row changed) when it has a record: `$1` org,
    /// `$2` key hash, `$3` Idempotency-Key, `$4` request digest, `$5` created_ms, `$6`
    /// claimed_until, `$7` claim token.
    ClaimFresh,
    /// The key's record: `$1` org, `$2` key hash, `$3` Idempotency-Key → request_digest,
    /// created_ms, status, body, request_id, claimed_until.
    Read {
        /// How a write transaction holds its row.
        lock: Lock,
    },
    /// Claims the key again, its record replaced: the values of
    /// [`IdempotencySql::ClaimFresh`].
    Reclaim,
    /// The key's claim if it is still `$4` and unfinished (its row locked for the
    /// transaction): `$1` org, `$2` key hash, `$3` Idempotency-Key → any one column.
    Owned,
    /// Stores the response of the request whose claim `$7` still holds the key,
    /// unfinished: `$1` org, `$2` key hash, `$3` Idempotency-Key, `$4` status, `$5` sealed
    /// body, `$6` request id.
    Complete,
    /// Releases the claim `$4` of `$1` org, `$2` key hash, `$3` Idempotency-Key, if
    /// unfinished.
    Release,
    /// Drops records created before `$1` and unfinished claims that ran out by `$2` (an
    /// engine that one process opens: every unfinished claim, none being in flight when it
    /// starts). Nothing on an engine that keeps records by organization, which sweeps one
    /// organization at a time ([`Self::SweepOrg`]).
    Sweep,
    /// The organizations that have records [`Self::Sweep`] would drop (`$1`, `$2` as there):
    /// on an engine that keeps records by organization; none elsewhere.
    ExpiredOrgs,
    /// [`Self::Sweep`] of organization `$3` alone: on an engine that keeps records by
    /// organization (on Citus one worker's statement, with no two-phase commit); nothing
    /// elsewhere.
    SweepOrg,
}

/// The API keys' statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySql {
    /// Stores a new key: `$1` org, `$2` env, `$3` hash, `$4` fingerprint, `$5` class, `$6`
    /// agent or `NULL`, `$7` created_ms, `$8` binding or `NULL`.
    Insert,
    /// The key of hash `$1`, revoked or not, with its organization's policy version →
    /// org_id, env, agent_id, rate_per_sec, policy_version, class, binding, revoked.
    Caller,
    /// Every unrevoked key, oldest first → hash, org_id, env, class, agent_id, binding.
    AllUnrevoked,
    /// The binding of the unrevoked key of hash `$1` (its row locked for the transaction)
    /// → binding.
    BindingLocked,
    /// Sets the binding of the key of hash `$1` to `$2`.
    SetBinding,
    /// The hash of the key with fingerprint `$1` → hash.
    HashByFingerprint,
    /// Revokes the live key of hash `$1` at `$2` (unix ms) and drops its binding.
    Revoke,
    /// Sets the request rate of the key of hash `$1` to `$2` a second.
    SetRate,
    /// The keys of organization `$1`, oldest first → fingerprint, env, class, agent_id,
    /// rate_per_sec, revoked.
    List,
    /// Moves the keys generation on.
    BumpGeneration,
    /// The keys generation (0 before any change) → generation.
    Generation,
}

/// The signing keys' and the settings' statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningSql {
    /// Every key current or retired after `$1` (unix ms), by environment and number → kid,
    /// env, secret, retired_ms.
    Published,
    /// The current key of environment `$1`, its row locked for the transaction (two
    /// rotations take turns) → kid.
    LockCurrent,
    /// The number of environment `$1`'s next key → n.
    NextNumber,
    /// Retires the current key of environment `$1` at `$2`.
    Retire,
    /// Stores a key: `$1` env, `$2` kid, `$3` n, `$4` secret, `$5` created_ms.
    Insert,
    /// Whether environment `$1` has a current key → has.
    HasCurrent,
    /// Stores environment `$1`'s first key (`$2` kid, `$3` secret, `$4` created_ms) unless
    /// it has a key already (no row changed then).
    InsertFirst,
    /// Every key's kid and secret, the rows locked for the transaction → kid, secret.
    Secrets,
    /// Sets the secret of key `$1` to `$2`.
    SetSecret,
    /// Whether what the next statements overwrite is overwritten in the database file
    /// too, not left in free space (SQLite's `secure_delete`; nothing elsewhere).
    SecureDelete {
        /// On, or back off.
        on: bool,
    },
    /// Rewrites what holds replaced secrets, outside any transaction, best effort (SQLite:
    /// the WAL copied into the file and emptied; PostgreSQL: the table rewritten).
    Compact,
    /// The setting `$1` → value.
    Setting,
    /// Stores setting `$1` as `$2` unless it exists.
    InsertSetting,
}

/// The mandates' statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MandateSql {
    /// Waits for, then holds to the end of the transaction, organization `$1`'s turn to
    /// store mandates, taken before any mandate's row: its AP2 imports take turns, each
    /// reading the mandates the one before it stored (no statement where one writer
    /// serializes every write).
    Turn,
    /// Supersedes the agent's active mandate: `$1` org, `$2` env, `$3` agent.
    Supersede,
    /// Stores a mandate: `$1` org, `$2` env, `$3` id, `$4` agent, `$5` terms
    /// (`mandates::terms_json`), `$6` expires (`YYYY-MM-DD`), `$7` status, `$8` created_ms.
    Insert,
    /// One mandate: `$1` org, `$2` env, `$3` id → `mandates::COLUMNS`.
    Get {
        /// How a write transaction holds its row.
        lock: Lock,
    },
    /// A page of mandates, newest first: `$1` org, `$2` env, `$3` the agent (with
    /// `agent`) or `NULL`, `$4` today (`YYYY-MM-DD`, for `expired`), `$5` before (a seq),
    /// `$6` limit → `mandates::COLUMNS`.
    Page {
        /// `$3` names the agent.
        agent: bool,
        /// Only this status as read on `$4`.
        status: Option<MandateStatus>,
    },
    /// Revokes an active mandate: `$1` org, `$2` env, `$3` id, `$4` revoked_ms; changes no
    /// row when it is not active.
    Revoke,
}

/// The organizations' statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrgSql {
    /// Creates an organization: `$1` id, `$2` name, `$3` policy version, `$4` created_ms.
    Insert,
    /// Creates one of its environments: `$1` org, `$2` env, `$3` mode, `$4` since_ms.
    InsertEnvironment,
    /// The id of the organization named `$1` → id.
    IdByName,
    /// How many organizations have a policy version starting with `$1` → count.
    CountPolicyVersions,
    /// Sets an organization's policy version: `$1` org, `$2` version.
    SetPolicyVersion,
    /// An organization's name: `$1` org → name.
    Name,
    /// An environment's mode: `$1` org, `$2` env → mode, since_ms.
    Mode,
    /// Switches an environment's mode, unless it is in force already: `$1` org, `$2` env,
    /// `$3` mode, `$4` since_ms.
    SetMode,
}

/// The timers' statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerSql {
    /// Up to `$2` pending reviews whose expiry is at or before `$1` (unix ms), soonest
    /// first → id, org_id, env.
    DueReviews,
    /// Up to `$3` active mandates expiring from `$1` to `$2` (`YYYY-MM-DD`, inclusive)
    /// whose `mandate.expiring` has not fired, soonest first → id, org_id, env.
    DueExpiring,
    /// Whether `mandate.expiring` fired for mandate `$2` of org `$1` → fired.
    ExpiringFired,
    /// Marks `mandate.expiring` fired for mandate `$2` of org `$1` with event `$3` at `$4`.
    MarkExpiringFired,
}

/// The endpoints' statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookSql {
    /// Stores a new active endpoint: `$1` org, `$2` env, `$3` id, `$4` url, `$5` events
    /// (`webhooks::stored_events`), `$6` created_ms.
    Insert,
    /// An active endpoint: `$1` org, `$2` env, `$3` id → `webhooks::COLUMNS`.
    Get {
        /// How a write transaction holds its row.
        lock: Lock,
    },
    /// A page of active endpoints, newest first: `$1` org, `$2` env, `$3` before (a seq),
    /// `$4` limit → `webhooks::COLUMNS`.
    Page,
    /// Marks an endpoint deleted: `$1` org, `$2` env, `$3` id, `$4` deleted_ms.
    Delete,
    /// Ends the pending deliveries of endpoint `$2` of org `$1` (failed at `$3`, with error
    /// `$4`).
    FailDeliveries,
}
