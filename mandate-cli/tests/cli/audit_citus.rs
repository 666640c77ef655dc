//! The attacks of `audit.rs` on Citus (a coordinator and two workers; the schema
//! distributed by organization, so the log's tables live on the worker that holds the
//! organization): a decision row deleted, one changed, two swapped in seq order (each as
//! statements to the coordinator, as an attacker with the database would send them), and
//! every node restored from a copy taken before more decisions were checkpointed, each
//! caught by the real `mandate audit` and `mandate verify --log`. Without Citus they say so
//! and pass, unless MANDATE_REQUIRE_CITUS=1 (CI).

use crate::audit;
use crate::support::{Engine, start_on};

#[test]
fn on_citus_audit_names_a_deleted_decision() {
    if let Some(env) = start_on(Engine::Citus) {
        audit::a_deleted_decision_is_named(env);
    }
}

#[test]
fn on_citus_audit_names_a_changed_decision() {
    if let Some(env) = start_on(Engine::Citus) {
        audit::a_changed_decision_is_named(env);
    }
}

#[test]
fn on_citus_audit_refuses_two_decisions_swapped() {
    if let Some(env) = start_on(Engine::Citus) {
        audit::two_swapped_decisions_are_refused(env);
    }
}

#[test]
fn on_citus_audit_refuses_every_node_restored_from_a_backup() {
    if let Some(env) = start_on(Engine::Citus) {
        audit::a_database_restored_from_a_backup_is_refused(env);
    }
}
