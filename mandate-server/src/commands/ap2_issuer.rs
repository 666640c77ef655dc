//! `ap2-issuer add | list | remove`: the AP2 issuer keys an organization trusts.

use mandate_server::operator;
use time::OffsetDateTime;

use super::{open, ops};
use crate::cli::Ap2IssuerAction;

/// Runs one `ap2-issuer` subcommand at `now`.
pub(super) async fn run(action: Ap2IssuerAction, now: OffsetDateTime) -> Result<(), String> {
    match action {
        Ap2IssuerAction::Add { db, org, key, kid } => {
            let text = std::fs::read_to_string(&key)
                .map_err(|e| format!("reading {}: {e}", key.display()))?;
            let jwk =
                operator::read_issuer_key(&text, kid.as_deref()).map_err(|e| e.to_string())?;
            let store = open(&db).await?;
            operator::add_ap2_issuer(ops(&store), &org, &jwk, now).map_err(|e| e.to_string())?;
            println!("organization {org} trusts AP2 issuer key {}", jwk.kid());
        }
        Ap2IssuerAction::List { db, org } => {
            let store = open(&db).await?;
            for issuer in
                operator::list_ap2_issuers(ops(&store), &org).map_err(|e| e.to_string())?
            {
                println!("{}  {}", issuer.kid, issuer.jwk);
            }
        }
        Ap2IssuerAction::Remove { db, org, kid } => {
            let store = open(&db).await?;
            operator::remove_ap2_issuer(ops(&store), &org, &kid).map_err(|e| e.to_string())?;
            println!("organization {org} no longer trusts AP2 issuer key {kid}");
        }
    }
    Ok(())
}
