//! The errors of the layers below HTTP, as the envelope answers them: the one place where
//! the decision service's and each service's error meets [`ApiError`]. The HTTP layers know
//! no service and no service knows HTTP; the routes, which call both, hold the mapping.
//! (`http/error.rs` maps what the HTTP layers and the core's parsers give: storage,
//! fields, cursors, paths.)

use crate::decision::service::DecisionError;
use crate::http::error::ApiError;
use crate::services::EncodingError;
use crate::services::acp::AcpError;
use crate::services::ap2::Ap2Error;
use crate::services::authorizations::AuthorizeError;
use crate::services::escrows::EscrowError;
use crate::services::exports::ExportError;
use crate::services::mandates::MandateError;
use crate::services::webhooks::WebhookError;

/// A decision that could not be made or stored.
impl From<DecisionError> for ApiError {
    fn from(e: DecisionError) -> Self {
        match e {
            DecisionError::Storage(e) => e.into(),
            DecisionError::Contended(_) | DecisionError::MandateReplaced { .. } => {
                Self::Unavailable(e.to_string())
            }
            DecisionError::ClaimLost => Self::IdempotencyConflict(e.to_string()),
            DecisionError::AlreadyResolved(_) => Self::InvalidRequest(e.to_string()),
            DecisionError::Encoding(_) | DecisionError::Signing(_) => Self::Server(e.to_string()),
        }
    }
}

/// An authorization refused (the body, a field, a protocol member) or not made.
impl From<AuthorizeError> for ApiError {
    fn from(e: AuthorizeError) -> Self {
        match e {
            AuthorizeError::Body(e) => e.into(),
            AuthorizeError::Field(e) => e.into(),
            AuthorizeError::Acp(e) => e.into(),
            AuthorizeError::Ap2(e) => e.into(),
            AuthorizeError::Decision(e) => e.into(),
        }
    }
}

/// An answer that could not be encoded: the server's fault.
impl From<EncodingError> for ApiError {
    fn from(e: EncodingError) -> Self {
        Self::Server(e.to_string())
    }
}

/// An `ap2` member refused (400), or one that could not be checked.
impl From<Ap2Error> for ApiError {
    fn from(e: Ap2Error) -> Self {
        match e {
            Ap2Error::Storage(e) => e.into(),
            Ap2Error::Encoding(e) => e.into(),
            Ap2Error::StoredIssuerKey { .. } => Self::Server(e.to_string()),
            Ap2Error::Shape { .. }
            | Ap2Error::UnknownMember { .. }
            | Ap2Error::SetByOpenMandate(_)
            | Ap2Error::NoTrustedIssuer
            | Ap2Error::InForceElsewhere
            | Ap2Error::OpenMandate(_)
            | Ap2Error::ClosedMandate(_)
            | Ap2Error::NotImported { .. }
            | Ap2Error::NoMandate(_)
            | Ap2Error::Amount { .. }
            | Ap2Error::Currency { .. }
            | Ap2Error::Payee { .. } => Self::InvalidRequest(e.to_string()),
        }
    }
}

/// An `acp` member refused (400), or one that could not be checked.
impl From<AcpError> for ApiError {
    fn from(e: AcpError) -> Self {
        match e {
            AcpError::Storage(e) => e.into(),
            AcpError::Shape
            | AcpError::UnknownMember(_)
            | AcpError::Allowance(_)
            | AcpError::Mismatch(_)
            | AcpError::WithAp2 => Self::InvalidRequest(e.to_string()),
        }
    }
}

/// A mandate request refused or failed.
impl From<MandateError> for ApiError {
    fn from(e: MandateError) -> Self {
        match e {
            MandateError::NoMandate(id) => Self::not_found("mandate", &id),
            MandateError::NoAgent(_) => Self::NotFound(e.to_string()),
            MandateError::Terms(_)
            | MandateError::NotActive { .. }
            | MandateError::UnknownStatus => Self::InvalidRequest(e.to_string()),
            MandateError::Ap2(e) => e.into(),
            MandateError::Storage(e) => e.into(),
            MandateError::Encoding(e) => e.into(),
        }
    }
}

/// An export that could not start (or, in its stream, stopped).
impl From<ExportError> for ApiError {
    fn from(e: ExportError) -> Self {
        match e {
            ExportError::UnknownAfter(_) => Self::NotFound(e.to_string()),
            ExportError::Storage(e) => e.into(),
            ExportError::Encoding(_) => Self::Server(e.to_string()),
        }
    }
}

/// An escrow request refused or failed.
impl From<EscrowError> for ApiError {
    fn from(e: EscrowError) -> Self {
        match e {
            EscrowError::NoEscrow(id) => Self::not_found("escrow", &id),
            EscrowError::NoDecision(id) => Self::not_found("decision", &id),
            EscrowError::Funding(_) | EscrowError::Transition(_) => {
                Self::InvalidRequest(e.to_string())
            }
            EscrowError::Storage(e) => e.into(),
            EscrowError::Settlement(_) | EscrowError::Encoding(_) => Self::Server(e.to_string()),
        }
    }
}

/// A webhook request refused or failed.
impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            WebhookError::NoWebhook(id) => Self::not_found("webhook", &id),
            WebhookError::Url(_) => Self::InvalidRequest(e.to_string()),
            WebhookError::Storage(e) => e.into(),
            WebhookError::Encoding(_) => Self::Server(e.to_string()),
        }
    }
}
