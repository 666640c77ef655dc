//! Tasks as MCP 2025-11-25 has them: a tool that declares `execution.taskSupport`, a
//! `tools/call` whose `task` member asks to run as one (answered with a `CreateTaskResult`),
//! `tasks/get`, `tasks/result` (which waits for the task to end), `tasks/cancel` (a working
//! task becomes `cancelled` for good, its review withdrawn on the server), and `capabilities.tasks` in the
//! initialize answer. The task is read from its decision as `tasks.rs` reads it.
//!
//! rmcp 3.11 models only the tasks extension of 2026-07-28, whose methods share these
//! names: its types drop the `task` member, the `tasks` capability and the tools'
//! `execution`, it has no `tasks/result`, and it would refuse `tasks/get` from a client
//! that did not declare the extension. `edges.rs` carries the 2025-11-25 messages past it:
//! in a 2025-11-25 session they reach the handler as custom requests, which this module
//! answers as JSON ([`MandateTools::on_2025_task_request`]), and the answers it writes for
//! `initialize` and `tools/list` get what rmcp cannot write.

use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, ListToolsResult, ProtocolVersion, ServerResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

use super::review::FRESH;
use super::tasks::{self, Outcome, TaskState};
use super::tools::MandateTools;

/// The `_meta` key that carries a `tools/call`'s `task` member past rmcp.
pub const TASK_META: &str = "io.github.mandate/task";
/// The only tool that runs as a task.
const TASK_TOOL: &str = "authorize_payment";
/// Where a message names the task it belongs to.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// What a host may hand the model at once while the task runs (2025-11-25's provisional
/// `_meta` key of `CreateTaskResult`).
const IMMEDIATE_RESPONSE: &str = "io.modelcontextprotocol/model-immediate-response";

/// The methods `edges.rs` hands over as custom requests in a 2025-11-25 session.
pub const METHODS: [&str; 4] = ["tools/call", "tasks/get", "tasks/cancel", "tasks/result"];

/// `capabilities.tasks`: cancelling, and task-augmented `tools/call`. No `tasks/list`.
pub fn capability() -> Value {
    json!({"cancel": {}, "requests": {"tools": {"call": {}}}})
}

/// `tools/list` with `execution.taskSupport: "optional"` on the tool that runs as a task.
pub fn with_task_support(list: &ListToolsResult) -> Result<Value, ErrorData> {
    let mut value = serde_json::to_value(list).map_err(encoding)?;
    if let Some(tools) = value.get_mut("tools").and_then(Value::as_array_mut) {
        for tool in tools.iter_mut().filter(|t| t["name"] == TASK_TOOL) {
            tool["execution"] = json!({"taskSupport": "optional"});
        }
    }
    Ok(value)
}

/// The task as `tasks/get` and `tasks/cancel` answer it. Its `ttl` is null: a task lasts
/// as long as its decision, which is never deleted.
pub fn task(state: &TaskState) -> Value {
    json!({
        "taskId": state.id.as_str(),
        "status": state.status(),
        "statusMessage": state.message,
        "createdAt": mandate_protocol::timefmt::format(state.created_at),
        "lastUpdatedAt": mandate_protocol::timefmt::format(state.updated_at),
        "ttl": null,
        "pollInterval": tasks::POLL_INTERVAL_MS,
    })
}

/// The `CreateTaskResult` a task-augmented `tools/call` answers: the task as it stands
/// (completed at once when no person has to decide), and the sentence for the model.
pub fn created(state: &TaskState) -> Value {
    json!({
        "task": task(state),
        "_meta": {IMMEDIATE_RESPONSE: state.message},
    })
}

/// What `tasks/result` answers for a task that ended: the `CallToolResult` the call gives
/// (an error result for a cancelled task), naming its task in `_meta`.
pub fn result(state: TaskState) -> Result<Value, ErrorData> {
    let id = state.id.clone();
    let call = match state.outcome {
        Outcome::Completed(output) => {
            CallToolResult::structured(serde_json::to_value(&output).map_err(encoding)?)
        }
        Outcome::Cancelled => CallToolResult::error(vec![ContentBlock::text(tasks::CANCELLED)]),
        Outcome::Working => {
            return Err(ErrorData::internal_error("the task is still working", None));
        }
    };
    let mut result = ServerResult::CallToolResult(call);
    result.strip_result_type_for_legacy_peer();
    let mut value = serde_json::to_value(result).map_err(encoding)?;
    value["_meta"] = json!({RELATED_TASK: {"taskId": id.as_str()}});
    Ok(value)
}

impl MandateTools {
    /// A request of [`METHODS`], handed over by `edges.rs` in a 2025-11-25 session.
    pub(super) async fn on_2025_task_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if context.protocol_version() != Some(ProtocolVersion::V_2025_11_25) {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            ));
        }
        let params = request.params.clone().unwrap_or(Value::Null);
        let task_id = || {
            params["taskId"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| ErrorData::invalid_params("params.taskId is required", None))
        };
        let answer = match request.method.as_str() {
            "tools/call" => created(&self.call_as_task(request, context).await?),
            "tasks/get" => task(&self.task(&task_id()?).await?),
            "tasks/cancel" => task(&self.cancel_2025(&task_id()?).await?),
            "tasks/result" => result(self.ended(&task_id()?, &context).await?)?,
            other => {
                return Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    other.to_owned(),
                    None,
                ));
            }
        };
        Ok(CustomResult(answer))
    }

    /// A task-augmented `tools/call`: the tool runs, and its decision is the task. A call
    /// that fails before any decision is made creates no task: its error is the answer.
    async fn call_as_task(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<TaskState, ErrorData> {
        let params: CallToolRequestParams = request
            .params_as()
            .map_err(|e| ErrorData::invalid_params(format!("tools/call: {e}"), None))?
            .ok_or_else(|| ErrorData::invalid_params("tools/call needs params", None))?;
        if params.name != TASK_TOOL {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "tool {} does not run as a task (its execution.taskSupport is forbidden): call it without task",
                    params.name
                ),
                None,
            ));
        }
        let response = self
            .tool_router
            .call(ToolCallContext::new(self, params, context))
            .await?;
        let CallToolResponse::Complete(result) = response else {
            return Err(ErrorData::internal_error(
                "the tool answered no result",
                None,
            ));
        };
        let decision = result
            .structured_content
            .as_ref()
            .filter(|_| result.is_error != Some(true))
            .and_then(|output| output["decision"].as_str());
        match decision {
            Some(decision) => self.task(decision).await,
            None => Err(no_task(&result)),
        }
    }

    /// `tasks/cancel`: a working task becomes `cancelled` for good (its review withdrawn);
    /// one that ended, before or while it was being cancelled, is `-32602`, as the
    /// specification says.
    async fn cancel_2025(&self, id: &str) -> Result<TaskState, ErrorData> {
        let already = |state: &TaskState| {
            ErrorData::invalid_params(
                format!("cannot cancel task {id}: it is already {}", state.status()),
                None,
            )
        };
        let state = self.task(id).await?;
        if state.is_terminal() {
            return Err(already(&state));
        }
        let state = self.cancel(&state).await?;
        match state.outcome {
            Outcome::Cancelled => Ok(state),
            _ => Err(already(&state)),
        }
    }

    /// The task `id` once it ended, read as often as the waits of `wait_for_review` read
    /// (through the same shared reads); `tasks/result` waits this long.
    async fn ended(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<TaskState, ErrorData> {
        loop {
            let state = self.task(id).await?;
            if state.is_terminal() {
                return Ok(state);
            }
            tokio::select! {
                () = tokio::time::sleep(FRESH) => {}
                () = context.ct.cancelled() => {
                    return Err(ErrorData::internal_error("tasks/result was cancelled", None));
                }
            }
        }
    }
}

/// The error of a task-augmented call that failed before a decision was made: the tool's
/// message, `-32602` unless the API could not be reached or failed itself.
fn no_task(result: &CallToolResult) -> ErrorData {
    let text: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    let text = text.join(" ");
    let code = if text.starts_with("cannot reach") || text.contains("refused the request (5") {
        ErrorCode::INTERNAL_ERROR
    } else {
        ErrorCode::INVALID_PARAMS
    };
    ErrorData::new(
        code,
        format!("authorize_payment made no decision, so no task was created: {text}"),
        None,
    )
}

fn encoding(e: serde_json::Error) -> ErrorData {
    ErrorData::internal_error(format!("encoding the answer: {e}"), None)
}
