//! The MCP server: the tools of `tools.rs` served through the SDK's handler, with the
//! server's identity and instructions, and a review as a task (`tasks.rs`) for clients
//! that declared the tasks extension.

use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CustomRequest, CustomResult,
    ErrorCode, GetTaskParams, GetTaskResult, Implementation, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool_handler};

use super::console;
use super::review::urlencode;
use super::tasks::{self, TaskState};
use super::tasks_2025;
use super::tools::MandateTools;
use crate::client::new_idempotency_key;

/// What the server tells the model about itself.
const INSTRUCTIONS: &str = "Mandate decides whether this agent may spend money. Before any \
    payment call authorize_payment and pay only on verdict allow, handing the payee the \
    verdict_token. On review, a person decides: wait for the task, or call wait_for_review. \
    get_mandate tells what is still allowed; list_decisions shows past decisions; \
    verify_verdict checks a token someone hands you.";

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MandateTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("mandate", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    /// A tool call. `authorize_payment` that meets a review answers a task when the client
    /// declared the tasks extension on this request; otherwise, when `mandate mcp` knows the
    /// console and the client takes URL-mode elicitation, it asks the user to open the
    /// review there (`console.rs`).
    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let takes_tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        let authorize = request.name == "authorize_payment";
        // A retry after the user was asked (2026-07-28): the same request again.
        let resumed = authorize.then(|| console::resumed(&mut request)).flatten();
        let console = self
            .console_url
            .as_deref()
            .filter(|_| authorize && !takes_tasks && console::client_takes_urls(&context));
        let arguments = request.arguments.clone().unwrap_or_default();
        let response = self
            .tool_router
            .call(ToolCallContext::new(self, request, context.clone()))
            .await?;
        let CallToolResponse::Complete(result) = &response else {
            return Ok(response);
        };
        let Some(output) = result
            .structured_content
            .as_ref()
            .filter(|output| output["verdict"] == "review" && result.is_error != Some(true))
        else {
            return Ok(response);
        };
        match (console, resumed) {
            _ if takes_tasks && authorize => {
                let decision = output["decision"].as_str().unwrap_or_default();
                Ok(CallToolResponse::Task(tasks::created(
                    self.task(decision).await?,
                )?))
            }
            (Some(_), Some(answer)) => Ok(CallToolResponse::Complete(console::answered(
                output, answer,
            ))),
            (Some(console), None) => console::ask(console, output, &arguments, &context).await,
            (None, _) => Ok(response),
        }
    }

    /// The task methods of a 2025-11-25 session (`tasks_2025.rs`); no other.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if tasks_2025::METHODS.contains(&request.method.as_str()) {
            self.on_2025_task_request(request, context).await
        } else {
            Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            ))
        }
    }

    /// `tasks/get`: the task read from its decision.
    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(tasks::detailed(
            self.task(&request.task_id).await?,
        )?))
    }

    /// `tasks/cancel`: a working task becomes `cancelled` for good, its review withdrawn
    /// on the server; one that ended stays as it ended (cancellation is cooperative, the
    /// acknowledgement the same). The agent is told not to pay.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let state = self.task(&request.task_id).await?;
        if !state.is_terminal() {
            self.cancel(&state).await?;
        }
        Ok(())
    }
}

/// The reason the agent gives when it withdraws a review, which the person who holds it
/// reads on the decision (`review_reason`).
const WITHDRAWAL_REASON: &str = "withdrawn by the agent: its MCP client cancelled the task";

impl MandateTools {
    /// The task `id`, read from its decision.
    pub(super) async fn task(&self, id: &str) -> Result<TaskState, ErrorData> {
        tasks::read(&self.reviews, id).await
    }

    /// Cancels the working task `state`: withdraws its review on the server (`POST
    /// /v1/reviews/{id}/deny` with the agent's key), so that no approval can follow and
    /// every `mandate mcp` of this agent reads the task as cancelled; the task as it
    /// stands then, read again from the API. A review resolved meanwhile (approved,
    /// denied, expired, or withdrawn by another `mandate mcp`) refuses the withdrawal, and
    /// the task reads as it ended; any other failure is the error.
    pub(super) async fn cancel(&self, state: &TaskState) -> Result<TaskState, ErrorData> {
        let id = state.id.as_str();
        let Some(review) = &state.review else {
            return Err(ErrorData::internal_error(
                format!("task {id} is working but its decision names no review"),
                None,
            ));
        };
        let key =
            new_idempotency_key().map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let body = serde_json::json!({ "reason": WITHDRAWAL_REASON }).to_string();
        let path = format!("/reviews/{}/deny", urlencode(review));
        let withdrawn = self.api.post(&path, body, &key).await;
        self.reviews.forget(id);
        let now = self.task(id).await?;
        match withdrawn {
            Err(failure) if !now.is_terminal() => Err(ErrorData::internal_error(
                format!("cannot cancel task {id}: withdrawing review {review} failed: {failure}"),
                None,
            )),
            _ => Ok(now),
        }
    }
}
