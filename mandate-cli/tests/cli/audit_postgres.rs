//! The attacks of `audit.rs` on PostgreSQL: a decision row deleted, one changed, two
//! swapped in seq order, the database restored from a copy taken before more decisions
//! were checkpointed (then two checkpoints of one size), each through a real server on a
//! database of its own on the tests' throwaway cluster, caught by the real `mandate audit`
//! and `mandate verify --log`. Without PostgreSQL they say so and pass, unless
//! MANDATE_REQUIRE_POSTGRES=1.

use crate::audit;
use crate::support::{Engine, start_on};

#[test]
fn on_postgres_audit_names_a_deleted_decision() {
    if let Some(env) = start_on(Engine::Postgres) {
        audit::a_deleted_decision_is_named(env);
    }
}

#[test]
fn on_postgres_audit_names_a_changed_decision() {
    if let Some(env) = start_on(Engine::Postgres) {
        audit::a_changed_decision_is_named(env);
    }
}

#[test]
fn on_postgres_audit_refuses_two_decisions_swapped() {
    if let Some(env) = start_on(Engine::Postgres) {
        audit::two_swapped_decisions_are_refused(env);
    }
}

#[test]
fn on_postgres_audit_refuses_a_database_restored_from_a_backup() {
    if let Some(env) = start_on(Engine::Postgres) {
        audit::a_database_restored_from_a_backup_is_refused(env);
    }
}
