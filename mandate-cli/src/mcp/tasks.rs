//! A review as a task: `authorize_payment` that meets a `review` answers a task (or, under
//! MCP 2025-11-25, runs as one when the client asks), `working` while a person has not
//! decided, `completed` once they have, its result the call's result as it ends (the
//! signed allow, the denial with the reviewer's reason, or the expiry), and `cancelled`
//! once the client cancelled it while it was working.
//!
//! The task's id is the decision's id, and its state is read from the decision with the
//! agent's key each time: any `mandate mcp` of this agent, on any host, a restarted one
//! too, answers for it, and nothing is kept in memory. Cancelling withdraws the review on
//! the server (`POST /v1/reviews/{id}/deny` with the agent's key): the decision then reads
//! `denied` with `review_withdrawn`, which is the task's `cancelled`, and no approval can
//! follow it.
//! A task id of another agent's decision is not found (the API answers 404 to this
//! agent's key).
//!
//! This module reads a task ([`TaskState`]) and writes it as the tasks extension
//! (`io.modelcontextprotocol/tasks`) of MCP 2026-07-28 has it; `tasks_2025.rs` writes the
//! same state as MCP 2025-11-25 has it.

use mandate_core::DecisionId;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, JsonObject, Task, TaskPayload, TaskStatus,
};
use time::OffsetDateTime;

use super::outputs::AuthorizeOutput;
use super::review::{ReviewState, Reviews};

/// How often a client should ask, in milliseconds.
pub const POLL_INTERVAL_MS: u64 = 2_000;

/// Where a task stands.
#[derive(Debug)]
pub enum Outcome {
    /// A person has not decided yet.
    Working,
    /// Decided (or answered at once): what `authorize_payment` answers now.
    Completed(Box<AuthorizeOutput>),
    /// The client cancelled it while it was working.
    Cancelled,
}

/// A task, as read from its decision.
#[derive(Debug)]
pub struct TaskState {
    /// The decision's id.
    pub id: DecisionId,
    /// The review the decision opened, if any: what cancelling withdraws.
    pub review: Option<String>,
    /// Where it stands.
    pub outcome: Outcome,
    /// What it says about itself, in a sentence.
    pub message: String,
    /// When the decision was made.
    pub created_at: OffsetDateTime,
    /// When its status last changed.
    pub updated_at: OffsetDateTime,
}

impl TaskState {
    /// Whether it ended (`completed` or `cancelled`).
    pub fn is_terminal(&self) -> bool {
        !matches!(self.outcome, Outcome::Working)
    }

    /// The status's name in both protocol versions.
    pub fn status(&self) -> &'static str {
        match self.outcome {
            Outcome::Working => "working",
            Outcome::Completed(_) => "completed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// What a cancelled task says.
pub const CANCELLED: &str = "Cancelled by request: do not pay. The review was withdrawn, so no one can approve it any more; ask again if the payment is still needed.";

/// The task `id`: `-32602` naming it when it is no decision of this agent.
pub async fn read(reviews: &Reviews, id: &str) -> Result<TaskState, ErrorData> {
    let Ok(decision_id) = DecisionId::parse(id) else {
        return Err(not_found(id));
    };
    let (decision, state) = reviews.state(id).await.map_err(|message| {
        if message.contains("(404 ") {
            not_found(id)
        } else {
            ErrorData::internal_error(message, None)
        }
    })?;
    let created_at = decision.created_at;
    let review = decision.review.as_ref().map(|r| r.id().to_string());
    let updated_at = match &state {
        ReviewState::Approved(fresh) => fresh.created_at,
        ReviewState::Denied(denial) | ReviewState::Withdrawn(denial) => {
            denial.at.unwrap_or(created_at)
        }
        ReviewState::Expired => decision.review_expires_at.unwrap_or(created_at),
        ReviewState::None | ReviewState::Pending => created_at,
    };
    let (outcome, message) = match &state {
        ReviewState::Pending => (
            Outcome::Working,
            format!(
                "a person reviews the payment (review {}); the task completes when they decide",
                decision
                    .review
                    .as_ref()
                    .map(|r| r.id().to_string())
                    .unwrap_or_default()
            ),
        ),
        // Withdrawn by this agent: only cancelling a working task does that.
        ReviewState::Withdrawn(_) => (Outcome::Cancelled, CANCELLED.into()),
        settled => {
            let output = AuthorizeOutput::settled(&decision, settled);
            let message = output.next_step.clone();
            (Outcome::Completed(Box::new(output)), message)
        }
    };
    Ok(TaskState {
        id: decision_id,
        review,
        outcome,
        message,
        created_at,
        updated_at,
    })
}

/// The task a review became, as `tools/call` answers it under the tasks extension.
pub fn created(state: TaskState) -> Result<CreateTaskResult, ErrorData> {
    Ok(CreateTaskResult::new(detailed(state)?.task))
}

/// The task as `tasks/get` answers it under the tasks extension.
pub fn detailed(state: TaskState) -> Result<DetailedTask, ErrorData> {
    let task = Task::new(
        state.id.as_str(),
        TaskStatus::Working,
        mandate_protocol::timefmt::format(state.created_at),
        mandate_protocol::timefmt::format(state.updated_at),
    )
    .with_status_message(state.message)
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    let payload = match state.outcome {
        Outcome::Working => TaskPayload::Working,
        Outcome::Cancelled => TaskPayload::Cancelled,
        Outcome::Completed(output) => TaskPayload::Completed {
            result: call_result(&output)?,
        },
    };
    Ok(DetailedTask::new(task, payload))
}

/// A tool's structured result as the JSON object of a `CallToolResult`.
pub fn call_result(output: &AuthorizeOutput) -> Result<JsonObject, ErrorData> {
    let value = serde_json::to_value(output)
        .map_err(|e| ErrorData::internal_error(format!("encoding the result: {e}"), None))?;
    match serde_json::to_value(CallToolResult::structured(value)) {
        Ok(serde_json::Value::Object(object)) => Ok(object),
        _ => Err(ErrorData::internal_error("encoding the result", None)),
    }
}

/// `-32602` for a task id that is no decision of this agent.
pub fn not_found(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "no task {id}: a task's id is the decision id authorize_payment answered, of this agent"
        ),
        None,
    )
}
