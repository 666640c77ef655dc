//! Making decisions: the per-agent locks and cached state ([`agents`]) and the stored
//! decision with its API shape ([`record`]).

pub mod agents;
pub mod record;
