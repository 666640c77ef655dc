//! Background work started by `serve`: webhook delivery ([`delivery`]), with the rules a
//! delivery URL must pass ([`ssrf`]), and time-driven state (review expiry,
//! `mandate.expiring`: [`timers`]) on the same tick.

pub mod delivery;
pub mod ssrf;
pub mod timers;
