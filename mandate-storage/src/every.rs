//! Every statement of the boundary, each variant with each of its choices: what the
//! engines' tests prepare, so that a statement an engine cannot run fails there and then
//! rather than when a use case first runs it. Listed by hand: a statement added to
//! `statements.rs` is added here too.

use super::statements::*;
use mandate_core::MandateStatus;

/// Every statement of the boundary.
pub fn every() -> Vec<Stmt> {
    let mut all = with_choices();
    plain_first(&mut all);
    plain_second(&mut all);
    all
}

/// The statements with choices, once a choice.
fn with_choices() -> Vec<Stmt> {
    let locks = [Lock::No, Lock::Wait, Lock::Skip];
    let statuses = [
        None,
        Some(MandateStatus::Active),
        Some(MandateStatus::Expired),
        Some(MandateStatus::Revoked),
        Some(MandateStatus::Superseded),
    ];
    let mut all: Vec<Stmt> = Vec::new();
    for flag in [false, true] {
        all.push(AgentSql::Page { only: flag }.into());
        all.push(EventSql::Page { by_type: flag }.into());
        all.push(ReviewSql::Resolve { pending: flag }.into());
        all.push(SigningSql::SecureDelete { on: flag }.into());
        for status in statuses {
            all.push(
                MandateSql::Page {
                    agent: flag,
                    status,
                }
                .into(),
            );
        }
    }
    for lock in locks {
        all.push(IdempotencySql::Read { lock }.into());
        all.push(MandateSql::Get { lock }.into());
        all.push(ReviewSql::Get { lock }.into());
        all.push(WebhookSql::Get { lock }.into());
        all.push(Ap2Sql::Carriers { lock }.into());
    }
    all
}

/// The statements without choices, of agents to keys.
fn plain_first(all: &mut Vec<Stmt>) {
    all.extend([AgentSql::Insert, AgentSql::Get, AgentSql::Changed].map(Stmt::from));
    all.extend(
        [
            Ap2Sql::AddIssuer,
            Ap2Sql::Issuers,
            Ap2Sql::RemoveIssuer,
            Ap2Sql::SetSource,
            Ap2Sql::Sources,
            Ap2Sql::CurrentSource,
            Ap2Sql::BindConsent,
            Ap2Sql::ConsentPlace,
            Ap2Sql::Unkeyed,
            Ap2Sql::SetConsent,
            Ap2Sql::SupersedeCarrier,
            Ap2Sql::SpentBefore,
        ]
        .map(Stmt::from),
    );
    all.extend([DecisionSql::Get, DecisionSql::Seq].map(Stmt::from));
    all.extend(
        [
            DeliverySql::Due,
            DeliverySql::DueOf,
            DeliverySql::Release,
            DeliverySql::InsertAttempt,
            DeliverySql::Update,
            DeliverySql::Backlog,
            DeliverySql::OfEvent,
            DeliverySql::Attempts,
        ]
        .map(Stmt::from),
    );
    all.extend(
        [
            EscrowSql::Insert,
            EscrowSql::PushHistory,
            EscrowSql::Advance,
            EscrowSql::Get,
            EscrowSql::History,
            EscrowSql::RecordMovement,
            EscrowSql::Movements,
        ]
        .map(Stmt::from),
    );
    all.extend([EventSql::Append, EventSql::AppendFor, EventSql::Get].map(Stmt::from));
    all.extend(
        [
            IdempotencySql::ClaimFresh,
            IdempotencySql::Reclaim,
            IdempotencySql::Owned,
            IdempotencySql::Complete,
            IdempotencySql::Release,
            IdempotencySql::Sweep,
            IdempotencySql::ExpiredOrgs,
            IdempotencySql::SweepOrg,
        ]
        .map(Stmt::from),
    );
}

/// The statements without choices, of keys to webhooks.
fn plain_second(all: &mut Vec<Stmt>) {
    all.extend(
        [
            KeySql::Insert,
            KeySql::Caller,
            KeySql::AllUnrevoked,
            KeySql::BindingLocked,
            KeySql::SetBinding,
            KeySql::HashByFingerprint,
            KeySql::Revoke,
            KeySql::SetRate,
            KeySql::List,
            KeySql::BumpGeneration,
            KeySql::Generation,
        ]
        .map(Stmt::from),
    );
    all.extend(
        [
            MandateSql::Turn,
            MandateSql::Supersede,
            MandateSql::Insert,
            MandateSql::Revoke,
        ]
        .map(Stmt::from),
    );
    all.extend(
        [
            OrgSql::Insert,
            OrgSql::InsertEnvironment,
            OrgSql::IdByName,
            OrgSql::CountPolicyVersions,
            OrgSql::SetPolicyVersion,
            OrgSql::Name,
            OrgSql::Mode,
            OrgSql::SetMode,
        ]
        .map(Stmt::from),
    );
    all.extend(
        [
            ProcessSql::Heartbeat,
            ProcessSql::Leave,
            ProcessSql::Probe,
            ProcessSql::Applied,
        ]
        .map(Stmt::from),
    );
    all.extend(
        [
            ReviewSql::Insert,
            ReviewSql::CredentialAccepted,
            ReviewSql::AcceptCredential,
        ]
        .map(Stmt::from),
    );
    all.extend(
        [
            SigningSql::Published,
            SigningSql::LockCurrent,
            SigningSql::NextNumber,
            SigningSql::Retire,
            SigningSql::Insert,
            SigningSql::HasCurrent,
            SigningSql::InsertFirst,
            SigningSql::Secrets,
            SigningSql::SetSecret,
            SigningSql::Compact,
            SigningSql::Setting,
            SigningSql::InsertSetting,
        ]
        .map(Stmt::from),
    );
    all.extend(
        [
            TimerSql::DueReviews,
            TimerSql::DueExpiring,
            TimerSql::ExpiringFired,
            TimerSql::MarkExpiringFired,
        ]
        .map(Stmt::from),
    );
    all.extend(
        [
            WebhookSql::Insert,
            WebhookSql::Page,
            WebhookSql::Delete,
            WebhookSql::FailDeliveries,
        ]
        .map(Stmt::from),
    );
}
