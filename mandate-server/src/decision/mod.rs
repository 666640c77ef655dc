//! Making decisions: the one service both `POST /v1/authorizations` and an approval call
//! ([`service`]), the per-agent locks and cached state it works under ([`agents`]), the
//! enforcement modes it decides in ([`modes`]), and the changes of an agent's mandate, made
//! under the same lock ([`mandates`]).
//!
//! Arrows point one way: routes call this, this calls the core, signing and storage;
//! nothing here knows HTTP.

pub mod agents;
pub mod mandates;
pub mod modes;
pub mod service;
