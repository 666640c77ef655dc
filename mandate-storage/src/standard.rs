//! The SQL of the statements of the boundary that every engine speaks alike, written once
//! (`?1` for `$1`): each engine runs it as it is or renumbered, and writes the others in
//! its own dialect (`sqlite/statements.rs`, `postgres/statements.rs`).

use super::statements::*;

/// The SQL of `stmt` that every engine speaks alike, with `locked` the clause that holds a
/// row a write transaction reads (nothing where writes are serialized); `None` for a
/// statement each engine writes in its own dialect.
pub fn standard(stmt: Stmt, locked: fn(Lock) -> &'static str) -> Option<Sql> {
    match stmt {
        Stmt::Agent(s) => agents(s),
        Stmt::Ap2(s) => ap2(s, locked),
        Stmt::Decision(s) => decisions(s),
        Stmt::Delivery(s) => deliveries(s),
        Stmt::Escrow(s) => escrows(s),
        Stmt::Event(s) => events(s),
        Stmt::Idempotency(s) => idempotency(s, locked),
        Stmt::Key(s) => keys(s, locked),
        Stmt::Log(s) => super::standard_log::log(s, locked),
        Stmt::Mandate(s) => mandates(s, locked),
        Stmt::Org(s) => Some(orgs(s)),
        Stmt::Process(s) => processes(s),
        Stmt::Review(s) => Some(reviews(s, locked)),
        Stmt::Signing(s) => signing(s, locked),
        Stmt::Timer(s) => timers(s),
        Stmt::Webhook(s) => webhooks(s, locked),
    }
}

fn agents(s: AgentSql) -> Option<Sql> {
    Some(match s {
        AgentSql::Insert => one(
            "INSERT INTO agents (org_id, env, id, created_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT DO NOTHING",
        ),
        AgentSql::Get => {
            one("SELECT seq, id, created_ms FROM agents WHERE org_id = ?1 AND env = ?2 AND id = ?3")
        }
        // The id is a plain condition when given, so that the plan uses the unique key.
        AgentSql::Page { only } => built(format!(
            "SELECT seq, id, created_ms FROM agents
             WHERE org_id = ?1 AND env = ?2 AND {} AND seq < ?4
             ORDER BY seq DESC LIMIT ?5",
            if only {
                "id = ?3"
            } else {
                "CAST(?3 AS TEXT) IS NULL"
            }
        )),
        // An engine that one process opens serializes an agent's changes: nothing to move.
        AgentSql::Changed => none(),
    })
}

fn ap2(s: Ap2Sql, locked: fn(Lock) -> &'static str) -> Option<Sql> {
    Some(match s {
        Ap2Sql::AddIssuer => one(
            "INSERT INTO ap2_issuers (org_id, kid, jwk, created_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (org_id, kid) DO NOTHING",
        ),
        Ap2Sql::Issuers => one(
            "SELECT kid, jwk, created_ms FROM ap2_issuers WHERE org_id = ?1 ORDER BY created_ms, kid",
        ),
        Ap2Sql::RemoveIssuer => one("DELETE FROM ap2_issuers WHERE org_id = ?1 AND kid = ?2"),
        Ap2Sql::SetSource => one("UPDATE mandates
             SET ap2_open_mandate = ?4, ap2_digest = ?5, ap2_consent = ?6, ap2_spent = ?7
             WHERE org_id = ?1 AND env = ?2 AND id = ?3"),
        Ap2Sql::Sources => return None,
        Ap2Sql::CurrentSource => one(
            "SELECT id, ap2_open_mandate, ap2_digest, ap2_spent FROM mandates
             WHERE org_id = ?1 AND env = ?2 AND agent_id = ?3 ORDER BY seq DESC LIMIT 1",
        ),
        Ap2Sql::Unkeyed => one("SELECT id, ap2_open_mandate, ap2_digest FROM mandates
             WHERE org_id = ?1 AND env = ?2 AND ap2_open_mandate IS NOT NULL
               AND ap2_consent IS NULL"),
        Ap2Sql::SetConsent => {
            one("UPDATE mandates SET ap2_consent = ?4 WHERE org_id = ?1 AND env = ?2 AND id = ?3")
        }
        Ap2Sql::Carriers { lock } => built(format!(
            "SELECT id, agent_id, status, created_ms FROM mandates
             WHERE org_id = ?1 AND env = ?2 AND ap2_consent = ?3 ORDER BY seq{}",
            locked(lock)
        )),
        Ap2Sql::SupersedeCarrier => one("UPDATE mandates SET status = 'superseded'
             WHERE org_id = ?1 AND env = ?2 AND id = ?3 AND status = 'active'"),
        Ap2Sql::SpentBefore => {
            one("SELECT ap2_spent FROM mandates WHERE org_id = ?1 AND env = ?2 AND id = ?3")
        }
        // Keyed by the open mandate's consent key, not by an organization: only an import
        // reads and writes it.
        Ap2Sql::BindConsent => one(
            "INSERT INTO ap2_consents (consent_key, org_id, env, created_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (consent_key) DO NOTHING",
        ),
        Ap2Sql::ConsentPlace => one("SELECT org_id, env FROM ap2_consents WHERE consent_key = ?1"),
    })
}

fn decisions(s: DecisionSql) -> Option<Sql> {
    let columns = super::decisions::COLUMNS;
    Some(match s {
        DecisionSql::Get => built(format!(
            "SELECT {columns} FROM decisions
             WHERE org_id = ?1 AND env = ?2 AND id = ?3
               AND (CAST(?4 AS TEXT) IS NULL OR agent_id = ?4)"
        )),
        DecisionSql::Seq => one("SELECT seq FROM decisions
             WHERE id = ?3 AND org_id = ?1 AND env = ?2
               AND (CAST(?4 AS TEXT) IS NULL OR agent_id = ?4)"),
    })
}

fn deliveries(s: DeliverySql) -> Option<Sql> {
    Some(match s {
        DeliverySql::Backlog => one(
            "SELECT (SELECT COUNT(*) FROM deliveries WHERE state = 'pending'),
                    (SELECT COUNT(*) FROM reviews WHERE status = 'pending')",
        ),
        // A delivery is keyed by its organization on PostgreSQL, by its row on SQLite.
        _ => return None,
    })
}

fn escrows(s: EscrowSql) -> Option<Sql> {
    Some(match s {
        // The unique keys (its decision, that decision's nonce) decide: of two racing
        // fundings exactly one inserts.
        EscrowSql::Insert => one(
            "INSERT INTO escrows (org_id, env, id, amount, currency, buyer, seller, decision_id,
                nonce, arbiter, state, disputed, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
             ON CONFLICT DO NOTHING",
        ),
        EscrowSql::Advance => one("UPDATE escrows SET state = ?4, disputed = ?5
             WHERE org_id = ?1 AND env = ?2 AND id = ?3 AND state = ?6 AND disputed = ?7"),
        EscrowSql::Get => built(format!(
            "SELECT {} FROM escrows
             WHERE id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR org_id = ?2)
               AND (CAST(?3 AS TEXT) IS NULL OR env = ?3)",
            super::escrows::COLUMNS
        )),
        // Keyed by the escrow's organization on PostgreSQL, by the escrow on SQLite.
        EscrowSql::PushHistory
        | EscrowSql::History
        | EscrowSql::RecordMovement
        | EscrowSql::Movements => return None,
    })
}

/// An event's row, `$1..$6` of [`EventSql::Append`].
pub const INSERT_EVENT: &str = "INSERT INTO events (org_id, env, id, type, data, created_ms)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

fn events(s: EventSql) -> Option<Sql> {
    let columns = super::events::COLUMNS;
    Some(match s {
        // The event's seq and its deliveries' keys are each engine's.
        EventSql::Append | EventSql::AppendFor => return None,
        EventSql::Get => built(format!(
            "SELECT {columns} FROM events WHERE org_id = ?1 AND env = ?2 AND id = ?3"
        )),
        EventSql::Page { by_type } => built(events_page(by_type, "TRUE")),
    })
}

/// A page of events ([`EventSql::Page`]), read only where `settled` holds (an engine whose
/// events may commit out of seq order keeps the read below those not yet settled).
pub fn events_page(by_type: bool, settled: &str) -> String {
    let columns = super::events::COLUMNS;
    // The type is a plain condition when given, so that the plan walks `events_by_type`
    // (an `OR ?3 IS NULL` form walked every event of the environment on SQLite).
    let of_type = if by_type {
        "type = ?3"
    } else {
        "CAST(?3 AS TEXT) IS NULL"
    };
    format!(
        "SELECT {columns} FROM events
         WHERE org_id = ?1 AND env = ?2 AND {of_type} AND seq < ?4 AND {settled}
         ORDER BY seq DESC LIMIT ?5"
    )
}

fn idempotency(s: IdempotencySql, _locked: fn(Lock) -> &'static str) -> Option<Sql> {
    Some(match s {
        // Claims still running belong to other live processes and stay.
        IdempotencySql::ExpiredOrgs => one("SELECT DISTINCT org_id FROM idempotency
             WHERE created_ms < ?1
                OR (status IS NULL AND (claimed_until IS NULL OR claimed_until <= ?2))"),
        IdempotencySql::SweepOrg => one("DELETE FROM idempotency
             WHERE org_id = ?3 AND (created_ms < ?1
                OR (status IS NULL AND (claimed_until IS NULL OR claimed_until <= ?2)))"),
        // Keyed by the key's organization on PostgreSQL, by the key on SQLite.
        _ => return None,
    })
}

fn keys(s: KeySql, locked: fn(Lock) -> &'static str) -> Option<Sql> {
    Some(match s {
        KeySql::Insert => one(
            "INSERT INTO api_keys (org_id, env, hash, fingerprint, class, agent_id, created_ms, binding)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        ),
        KeySql::Caller => one(CALLER),
        KeySql::AllUnrevoked => one(
            "SELECT hash, org_id, env, class, agent_id, binding FROM api_keys
             WHERE revoked_ms IS NULL ORDER BY created_ms, hash",
        ),
        KeySql::BindingLocked => built(format!(
            "SELECT binding FROM api_keys WHERE hash = ?1 AND revoked_ms IS NULL{}",
            locked(Lock::Wait)
        )),
        KeySql::SetBinding => one("UPDATE api_keys SET binding = ?2 WHERE hash = ?1"),
        KeySql::HashByFingerprint => one("SELECT hash FROM api_keys WHERE fingerprint = ?1"),
        KeySql::Revoke => one(
            "UPDATE api_keys SET revoked_ms = ?2, binding = NULL WHERE hash = ?1 AND revoked_ms IS NULL",
        ),
        KeySql::SetRate => one("UPDATE api_keys SET rate_per_sec = ?2 WHERE hash = ?1"),
        KeySql::List => one(
            "SELECT fingerprint, env, class, agent_id, rate_per_sec, revoked_ms IS NOT NULL
             FROM api_keys WHERE org_id = ?1 ORDER BY created_ms, fingerprint",
        ),
        KeySql::BumpGeneration | KeySql::Generation => return None,
    })
}

/// The caller of a key: every key's first request runs it.
pub const CALLER: &str = "SELECT k.org_id, k.env, k.agent_id, k.rate_per_sec, o.policy_version,
        k.class, k.binding, k.revoked_ms IS NOT NULL
    FROM api_keys k JOIN orgs o ON o.id = k.org_id WHERE k.hash = ?1";

fn mandates(s: MandateSql, locked: fn(Lock) -> &'static str) -> Option<Sql> {
    use mandate_core::MandateStatus;
    let columns = super::mandates::COLUMNS;
    Some(match s {
        MandateSql::Turn => return None,
        MandateSql::Supersede => one("UPDATE mandates SET status = 'superseded'
             WHERE org_id = ?1 AND env = ?2 AND agent_id = ?3 AND status = 'active'"),
        MandateSql::Insert => one(
            "INSERT INTO mandates (org_id, env, id, agent_id, terms, expires, status, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        ),
        MandateSql::Get { lock } => built(format!(
            "SELECT {columns} FROM mandates WHERE org_id = ?1 AND env = ?2 AND id = ?3{}",
            locked(lock)
        )),
        MandateSql::Page { agent, status } => {
            // `today` ($4) matters to the active and expired statuses only.
            let status = match status {
                None => "CAST(?4 AS TEXT) IS NOT NULL",
                Some(MandateStatus::Active) => "status = 'active' AND expires >= ?4",
                Some(MandateStatus::Expired) => "status = 'active' AND expires < ?4",
                Some(MandateStatus::Revoked) => {
                    "status = 'revoked' AND CAST(?4 AS TEXT) IS NOT NULL"
                }
                Some(MandateStatus::Superseded) => {
                    "status = 'superseded' AND CAST(?4 AS TEXT) IS NOT NULL"
                }
            };
            // The agent is a plain condition when given, so that the plan walks the
            // agent's index.
            let agent = if agent {
                "agent_id = ?3"
            } else {
                "CAST(?3 AS TEXT) IS NULL"
            };
            built(format!(
                "SELECT {columns} FROM mandates
                 WHERE org_id = ?1 AND env = ?2 AND {agent} AND ({status}) AND seq < ?5
                 ORDER BY seq DESC LIMIT ?6"
            ))
        }
        MandateSql::Revoke => one("UPDATE mandates SET status = 'revoked', revoked_ms = ?4
             WHERE org_id = ?1 AND env = ?2 AND id = ?3 AND status = 'active'"),
    })
}

fn orgs(s: OrgSql) -> Sql {
    match s {
        OrgSql::Insert => {
            one("INSERT INTO orgs (id, name, policy_version, created_ms) VALUES (?1, ?2, ?3, ?4)")
        }
        OrgSql::InsertEnvironment => {
            one("INSERT INTO environments (org_id, env, mode, since_ms) VALUES (?1, ?2, ?3, ?4)")
        }
        OrgSql::IdByName => one("SELECT id FROM orgs WHERE name = ?1"),
        OrgSql::CountPolicyVersions => {
            one("SELECT COUNT(*) FROM orgs WHERE substr(policy_version, 1, length(?1)) = ?1")
        }
        OrgSql::SetPolicyVersion => one("UPDATE orgs SET policy_version = ?2 WHERE id = ?1"),
        OrgSql::Name => one("SELECT name FROM orgs WHERE id = ?1"),
        OrgSql::Mode => {
            one("SELECT mode, since_ms FROM environments WHERE org_id = ?1 AND env = ?2")
        }
        OrgSql::SetMode => one("UPDATE environments SET mode = ?3, since_ms = ?4
             WHERE org_id = ?1 AND env = ?2 AND mode <> ?3"),
    }
}

fn processes(s: ProcessSql) -> Option<Sql> {
    match s {
        ProcessSql::Applied => Some(one(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
        )),
        ProcessSql::Heartbeat | ProcessSql::Leave | ProcessSql::Probe => None,
    }
}

fn reviews(s: ReviewSql, locked: fn(Lock) -> &'static str) -> Sql {
    let resolve = "UPDATE reviews SET status = ?4, resolved_ms = ?5, resolution = ?6, reason = ?7
        WHERE org_id = ?1 AND env = ?2 AND id = ?3";
    match s {
        ReviewSql::Insert => one(
            "INSERT INTO reviews (org_id, env, id, decision_id, agent_id, status, created_ms, expires_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        ),
        ReviewSql::Get { lock } => built(format!(
            "SELECT id, decision_id, status, created_ms, expires_ms, resolved_ms, resolution, reason,
                    agent_id
             FROM reviews WHERE org_id = ?1 AND env = ?2 AND id = ?3{}",
            locked(lock)
        )),
        ReviewSql::Resolve { pending: true } => built(format!("{resolve} AND status = 'pending'")),
        ReviewSql::Resolve { pending: false } => built(resolve.to_owned()),
        ReviewSql::CredentialAccepted => one(
            "SELECT EXISTS (SELECT 1 FROM accepted_credentials
                            WHERE org_id = ?1 AND env = ?2 AND id = ?3)",
        ),
        ReviewSql::AcceptCredential => one(
            "INSERT INTO accepted_credentials (org_id, env, id, decision_id, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
        ),
    }
}

fn signing(s: SigningSql, locked: fn(Lock) -> &'static str) -> Option<Sql> {
    Some(match s {
        SigningSql::Published => one("SELECT kid, env, secret, retired_ms FROM signing_keys
             WHERE retired_ms IS NULL OR retired_ms > ?1 ORDER BY env, n"),
        // Two rotations at once take turns on the current key's row.
        SigningSql::LockCurrent => built(format!(
            "SELECT kid FROM signing_keys WHERE env = ?1 AND retired_ms IS NULL{}",
            locked(Lock::Wait)
        )),
        SigningSql::NextNumber => {
            one("SELECT COALESCE(MAX(n), 0) + 1 FROM signing_keys WHERE env = ?1")
        }
        SigningSql::Retire => {
            one("UPDATE signing_keys SET retired_ms = ?2 WHERE env = ?1 AND retired_ms IS NULL")
        }
        SigningSql::Insert => one(
            "INSERT INTO signing_keys (env, kid, n, secret, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        ),
        SigningSql::HasCurrent => {
            one("SELECT EXISTS (SELECT 1 FROM signing_keys WHERE env = ?1 AND retired_ms IS NULL)")
        }
        // The first key's kid is the same for every process starting at once: one inserts.
        SigningSql::InsertFirst => one("INSERT INTO signing_keys (env, kid, n, secret, created_ms)
             SELECT ?1, ?2, 1, ?3, ?4
             WHERE NOT EXISTS (SELECT 1 FROM signing_keys WHERE env = ?1)
             ON CONFLICT DO NOTHING"),
        SigningSql::Secrets => built(format!(
            "SELECT kid, secret FROM signing_keys{}",
            locked(Lock::Wait)
        )),
        SigningSql::SetSecret => one("UPDATE signing_keys SET secret = ?2 WHERE kid = ?1"),
        SigningSql::Setting => one("SELECT value FROM settings WHERE name = ?1"),
        SigningSql::InsertSetting => {
            one("INSERT INTO settings (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING")
        }
        SigningSql::SecureDelete { .. } | SigningSql::Compact => return None,
    })
}

fn timers(s: TimerSql) -> Option<Sql> {
    Some(match s {
        TimerSql::DueReviews => one("SELECT id, org_id, env FROM reviews
             WHERE status = 'pending' AND expires_ms <= ?1 ORDER BY expires_ms LIMIT ?2"),
        // The marks are keyed by the mandate's organization on PostgreSQL.
        TimerSql::DueExpiring | TimerSql::ExpiringFired | TimerSql::MarkExpiringFired => {
            return None;
        }
    })
}

fn webhooks(s: WebhookSql, locked: fn(Lock) -> &'static str) -> Option<Sql> {
    let columns = super::webhooks::COLUMNS;
    Some(match s {
        WebhookSql::Insert => one(
            "INSERT INTO webhooks (org_id, env, id, url, events, status, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6)",
        ),
        WebhookSql::Get { lock } => built(format!(
            "SELECT {columns} FROM webhooks
             WHERE org_id = ?1 AND env = ?2 AND id = ?3 AND status = 'active'{}",
            locked(lock)
        )),
        WebhookSql::Page => built(format!(
            "SELECT {columns} FROM webhooks
             WHERE org_id = ?1 AND env = ?2 AND status = 'active' AND seq < ?3
             ORDER BY seq DESC LIMIT ?4"
        )),
        WebhookSql::Delete => one("UPDATE webhooks SET status = 'deleted', deleted_ms = ?4
             WHERE org_id = ?1 AND env = ?2 AND id = ?3"),
        // Deliveries are keyed by their organization on PostgreSQL.
        WebhookSql::FailDeliveries => return None,
    })
}
