//! The escrow state machine.
//!
//! An escrow locks a buyer's funds for a seller. It starts `funded`; the seller's work is
//! marked `delivered`, and the funds are then `released` to the seller or `refunded` to
//! the buyer. Either party may `dispute` a funded or delivered escrow once; from then on
//! only `release` or `refund` can end it. `released` and `refunded` are final.
//!
//! [`transition`] is the whole rule set as one pure function. The server applies it,
//! moves the money through its settlement adapter, appends a [`HistoryEntry`] and emits
//! the `escrow.*` event.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Where an escrow's money stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscrowState {
    /// The buyer's funds are locked.
    Funded,
    /// The seller delivered; the funds are still locked.
    Delivered,
    /// The funds went to the seller. Final.
    Released,
    /// The funds went back to the buyer. Final.
    Refunded,
}

impl EscrowState {
    /// The state as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Funded => "funded",
            Self::Delivered => "delivered",
            Self::Released => "released",
            Self::Refunded => "refunded",
        }
    }

    /// Whether no action can move the escrow any more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Released | Self::Refunded)
    }
}

impl fmt::Display for EscrowState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a caller asks of an escrow (`POST /v1/escrows/{id}/<action>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscrowAction {
    /// Mark the seller's work delivered.
    Deliver,
    /// Pay the funds to the seller.
    Release,
    /// Return the funds to the buyer.
    Refund,
    /// Raise a dispute.
    Dispute,
}

impl EscrowAction {
    /// Every action, in the order of the API paths.
    pub const ALL: [EscrowAction; 4] = [Self::Deliver, Self::Release, Self::Refund, Self::Dispute];

    /// The action as it appears in the path.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deliver => "deliver",
            Self::Release => "release",
            Self::Refund => "refund",
            Self::Dispute => "dispute",
        }
    }
}

impl fmt::Display for EscrowAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An escrow's state together with its dispute flag: what event data carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EscrowStatus {
    /// Where the money stands.
    pub state: EscrowState,
    /// Whether a dispute was raised. It stays set once raised, also after the escrow ends.
    pub disputed: bool,
}

impl EscrowStatus {
    /// A freshly funded escrow.
    pub const FUNDED: EscrowStatus = EscrowStatus {
        state: EscrowState::Funded,
        disputed: false,
    };

    /// Applies `action`, or says why it is refused and what is allowed instead.
    pub fn apply(self, action: EscrowAction) -> Result<EscrowStatus, EscrowError> {
        transition(self.state, self.disputed, action)
    }

    /// The actions allowed from here, in [`EscrowAction::ALL`] order.
    pub fn allowed_actions(self) -> Vec<EscrowAction> {
        EscrowAction::ALL
            .into_iter()
            .filter(|&action| self.apply(action).is_ok())
            .collect()
    }
}

/// Why an escrow action is refused. Each message says what is allowed from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EscrowError {
    /// The escrow is released or refunded; nothing moves it any more.
    #[error("escrow is {state}, which is final")]
    Final {
        /// The final state.
        state: EscrowState,
    },
    /// The escrow is disputed: deliver and dispute are refused.
    #[error("escrow is disputed, so it cannot {action}; only release or refund can end it")]
    Disputed {
        /// The refused action.
        action: EscrowAction,
    },
    /// Deliver on an escrow that is already delivered.
    #[error("escrow is already delivered; release, refund or dispute it")]
    AlreadyDelivered,
    /// Release on a funded escrow that is neither delivered nor disputed.
    #[error("escrow is funded but not delivered; deliver it first, or refund or dispute it")]
    NotDelivered,
}

/// The escrow rules: from `state` with the dispute flag `disputed`, what `action` leads to.
///
/// | from | deliver | release | refund | dispute |
/// |---|---|---|---|---|
/// | funded | delivered | refused unless disputed | refunded | disputed |
/// | delivered | refused | released | refunded | disputed |
/// | funded or delivered, disputed | refused | released | refunded | refused |
/// | released, refunded | final | final | final | final |
pub fn transition(
    state: EscrowState,
    disputed: bool,
    action: EscrowAction,
) -> Result<EscrowStatus, EscrowError> {
    use EscrowAction::{Deliver, Dispute, Refund, Release};
    use EscrowState::{Delivered, Funded, Refunded, Released};

    let to = |state| Ok(EscrowStatus { state, disputed });
    match (state, action) {
        (Released | Refunded, _) => Err(EscrowError::Final { state }),
        (_, Deliver | Dispute) if disputed => Err(EscrowError::Disputed { action }),
        (_, Dispute) => Ok(EscrowStatus {
            state,
            disputed: true,
        }),
        (Funded, Deliver) => to(Delivered),
        (Delivered, Deliver) => Err(EscrowError::AlreadyDelivered),
        (Funded, Release) if !disputed => Err(EscrowError::NotDelivered),
        (Funded | Delivered, Release) => to(Released),
        (Funded | Delivered, Refund) => to(Refunded),
    }
}

/// One line of an escrow's public history: the status it reached, when and by whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The state reached.
    pub state: EscrowState,
    /// The dispute flag after the step.
    pub disputed: bool,
    /// When the step happened.
    #[serde(with = "crate::timefmt")]
    pub at: OffsetDateTime,
    /// Who took the step, by its role in the contract (for example `funder`), never by an
    /// organization's id.
    pub actor: String,
}

impl HistoryEntry {
    /// The entry for reaching `status` at `at` by `actor`.
    pub fn new(status: EscrowStatus, at: OffsetDateTime, actor: impl Into<String>) -> Self {
        Self {
            state: status.state,
            disputed: status.disputed,
            at,
            actor: actor.into(),
        }
    }

    /// The status this entry records.
    pub fn status(&self) -> EscrowStatus {
        EscrowStatus {
            state: self.state,
            disputed: self.disputed,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use time::macros::datetime;

    use super::EscrowAction::{Deliver, Dispute, Refund, Release};
    use super::EscrowState::{Delivered, Funded, Refunded, Released};
    use super::*;

    fn ok(state: EscrowState, disputed: bool) -> Result<EscrowStatus, EscrowError> {
        Ok(EscrowStatus { state, disputed })
    }

    /// Every (state, disputed, action) combination and its expected outcome.
    fn table() -> Vec<(
        EscrowState,
        bool,
        EscrowAction,
        Result<EscrowStatus, EscrowError>,
    )> {
        let final_released = Err(EscrowError::Final { state: Released });
        let final_refunded = Err(EscrowError::Final { state: Refunded });
        vec![
            (Funded, false, Deliver, ok(Delivered, false)),
            (Funded, false, Release, Err(EscrowError::NotDelivered)),
            (Funded, false, Refund, ok(Refunded, false)),
            (Funded, false, Dispute, ok(Funded, true)),
            (
                Funded,
                true,
                Deliver,
                Err(EscrowError::Disputed { action: Deliver }),
            ),
            (Funded, true, Release, ok(Released, true)),
            (Funded, true, Refund, ok(Refunded, true)),
            (
                Funded,
                true,
                Dispute,
                Err(EscrowError::Disputed { action: Dispute }),
            ),
            (
                Delivered,
                false,
                Deliver,
                Err(EscrowError::AlreadyDelivered),
            ),
            (Delivered, false, Release, ok(Released, false)),
            (Delivered, false, Refund, ok(Refunded, false)),
            (Delivered, false, Dispute, ok(Delivered, true)),
            (
                Delivered,
                true,
                Deliver,
                Err(EscrowError::Disputed { action: Deliver }),
            ),
            (Delivered, true, Release, ok(Released, true)),
            (Delivered, true, Refund, ok(Refunded, true)),
            (
                Delivered,
                true,
                Dispute,
                Err(EscrowError::Disputed { action: Dispute }),
            ),
            (Released, false, Deliver, final_released),
            (Released, false, Release, final_released),
            (Released, false, Refund, final_released),
            (Released, false, Dispute, final_released),
            (Released, true, Deliver, final_released),
            (Released, true, Release, final_released),
            (Released, true, Refund, final_released),
            (Released, true, Dispute, final_released),
            (Refunded, false, Deliver, final_refunded),
            (Refunded, false, Release, final_refunded),
            (Refunded, false, Refund, final_refunded),
            (Refunded, false, Dispute, final_refunded),
            (Refunded, true, Deliver, final_refunded),
            (Refunded, true, Release, final_refunded),
            (Refunded, true, Refund, final_refunded),
            (Refunded, true, Dispute, final_refunded),
        ]
    }

    #[test]
    fn every_combination_matches_the_table() {
        let table = table();
        assert_eq!(table.len(), 4 * 2 * 4);
        let mut seen = std::collections::HashSet::new();
        for (state, disputed, action, expected) in table {
            assert!(seen.insert((state, disputed, action)), "duplicate row");
            assert_eq!(
                transition(state, disputed, action),
                expected,
                "{state} disputed={disputed} {action}"
            );
            assert_eq!(
                EscrowStatus { state, disputed }.apply(action),
                expected,
                "{state} disputed={disputed} {action}"
            );
        }
    }

    #[test]
    fn allowed_actions() {
        assert_eq!(
            EscrowStatus::FUNDED.allowed_actions(),
            vec![Deliver, Refund, Dispute]
        );
        let delivered = EscrowStatus::FUNDED.apply(Deliver).unwrap();
        assert_eq!(delivered.allowed_actions(), vec![Release, Refund, Dispute]);
        let disputed = delivered.apply(Dispute).unwrap();
        assert_eq!(disputed.allowed_actions(), vec![Release, Refund]);
        let released = disputed.apply(Release).unwrap();
        assert!(released.allowed_actions().is_empty());
        assert!(released.state.is_final());
    }

    #[test]
    fn messages_say_what_is_allowed() {
        assert_eq!(
            EscrowError::Final { state: Released }.to_string(),
            "escrow is released, which is final"
        );
        assert_eq!(
            EscrowError::Disputed { action: Deliver }.to_string(),
            "escrow is disputed, so it cannot deliver; only release or refund can end it"
        );
        assert_eq!(
            EscrowError::NotDelivered.to_string(),
            "escrow is funded but not delivered; deliver it first, or refund or dispute it"
        );
    }

    #[test]
    fn wire_forms() {
        let status = serde_json::to_value(EscrowStatus {
            state: Delivered,
            disputed: true,
        })
        .unwrap();
        assert_eq!(
            status,
            serde_json::json!({"state": "delivered", "disputed": true})
        );
        assert_eq!(serde_json::to_value(Dispute).unwrap(), "dispute");
        let entry = HistoryEntry::new(
            EscrowStatus::FUNDED,
            datetime!(2025-06-01 12:00:00 UTC),
            "funder",
        );
        let json = serde_json::to_value(&entry).unwrap();
        assert_eq!(json["at"], "2025-06-01T12:00:00Z");
        assert_eq!(json["state"], "funded");
        let back: HistoryEntry = serde_json::from_value(json).unwrap();
        assert_eq!(back, entry);
        assert_eq!(back.status(), EscrowStatus::FUNDED);
    }
}
