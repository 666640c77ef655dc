//! AP2 (issue #36) at the boundary: the issuer keys each organization trusts to sign the
//! open payment mandates it imports, and the SD-JWT each imported mandate was made from.
//! The engines only store: which key is acceptable and what a mandate means is decided
//! above (`operator.rs`, `routes/ap2.rs`, `mandate_core::ap2`).

use mandate_core::id::{AgentId, MandateId};
use mandate_core::mandate::Mandate;

use super::StoreFuture;
use crate::model::Env;

/// An AP2 issuer key an organization trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ap2Issuer {
    /// Its key id, unique in the organization (the `kid` of the SD-JWTs it signs).
    pub kid: String,
    /// The public JWK, JSON text (EC P-256, ES256; checked before it is stored).
    pub jwk: String,
    /// When it was added, unix ms.
    pub created_ms: i64,
}

/// What a mandate imported from an AP2 open payment mandate keeps of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ap2Source {
    /// The SD-JWT as presented (issuer JWT and disclosures).
    pub open_mandate: String,
    /// Its digest (`mandate_core::ap2::OpenMandate::digest`), the verdicts' `ap2_mandate`.
    pub digest: String,
}

/// AP2's stored data. The operator's changes are in [`super::AdminStore`].
pub trait Ap2Store {
    /// The issuer keys the organization trusts, oldest first.
    fn ap2_issuers(&self, org_id: &str) -> StoreFuture<'_, Vec<Ap2Issuer>>;

    /// Stores `mandate` as its agent's current one (as `MandateStore::insert_mandate`)
    /// with the AP2 open mandate it was imported from, in one transaction.
    fn insert_ap2_mandate(
        &self,
        org_id: &str,
        env: Env,
        mandate: &Mandate,
        source: &Ap2Source,
    ) -> StoreFuture<'_, ()>;

    /// The AP2 sources of those of `ids` that were imported (the others are left out).
    fn ap2_sources(
        &self,
        org_id: &str,
        env: Env,
        ids: &[MandateId],
    ) -> StoreFuture<'_, Vec<(MandateId, Ap2Source)>>;

    /// The agent's current mandate's id (its newest, whatever its status) and, if it was
    /// imported from AP2, its source.
    fn current_ap2_source(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
    ) -> StoreFuture<'_, Option<(MandateId, Option<Ap2Source>)>>;
}
