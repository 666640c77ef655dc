//! Where the tasks of MCP 2025-11-25 (`tasks_2025.rs`) get past rmcp 3.11, whose types
//! model only the tasks extension of 2026-07-28. Two edges, used by both transports:
//!
//! - **Bytes in.** A `tools/call`'s `task` member, which rmcp's types drop, is moved into
//!   the request's `_meta` under `TASK_META` before rmcp reads the message
//!   ([`lift_task_request`]: the HTTP guard runs it on each body, the stdio copier on each
//!   line, [`lift_task_line`]). Nothing else is touched: a client that sent no `task`
//!   is read by rmcp exactly as it wrote.
//! - **A session's messages.** [`LegacyTasks`] wraps the transport of one session (stdio's,
//!   or each HTTP session's). Once it has sent an initialize answer that settled on
//!   2025-11-25, with `capabilities.tasks` added, it hands the handler that session's
//!   `tasks/get`, `tasks/cancel` and task-augmented `tools/call` as custom requests
//!   (`tasks/result` is one already), and adds `execution.taskSupport` to its
//!   `tools/list` answers. Sessions of other versions pass through untouched.

use std::future::Future;

use rmcp::RoleServer;
use rmcp::model::{
    ClientRequest, CustomRequest, CustomResult, GetMeta as _, JsonRpcMessage, JsonRpcRequest,
    JsonRpcResponse, ProtocolVersion, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Map, Value};

use super::tasks_2025::{TASK_META, capability, with_task_support};

/// Moves the `task` member of a `tools/call` request into its `_meta`; whether it did. A
/// `null` task is removed and asks for nothing.
pub fn lift_task_request(message: &mut Value) -> bool {
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return false;
    }
    let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
        return false;
    };
    let Some(task) = params.remove("task") else {
        return false;
    };
    if task.is_null() {
        return true;
    }
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(TASK_META.into(), task);
    }
    true
}

/// [`lift_task_request`] on one line of the stdio transport: the line to pass on instead
/// (ending in a newline), or `None` to pass it as it is (most lines, which name no `task`,
/// are not even parsed).
pub fn lift_task_line(line: &[u8]) -> Option<Vec<u8>> {
    if !line.windows(6).any(|w| w == b"\"task\"") {
        return None;
    }
    let mut message: Value = serde_json::from_slice(line).ok()?;
    if !lift_task_request(&mut message) {
        return None;
    }
    let mut lifted = serde_json::to_vec(&message).ok()?;
    lifted.push(b'\n');
    Some(lifted)
}

/// The transport of one session, carrying its 2025-11-25 tasks past rmcp (see the module).
pub struct LegacyTasks<T> {
    inner: T,
    /// Whether the session settled on 2025-11-25 (set by the initialize answer it sent).
    tasks: bool,
}

impl<T> LegacyTasks<T> {
    /// Wraps the transport of a session that has not started yet.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            tasks: false,
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for LegacyTasks<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let item = match item {
            JsonRpcMessage::Response(JsonRpcResponse {
                jsonrpc,
                id,
                result,
            }) => {
                let result = self.answer(result);
                JsonRpcMessage::Response(JsonRpcResponse {
                    jsonrpc,
                    id,
                    result,
                })
            }
            other => other,
        };
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let message = self.inner.receive().await?;
        Some(match message {
            JsonRpcMessage::Request(JsonRpcRequest {
                jsonrpc,
                id,
                request,
            }) if self.tasks => JsonRpcMessage::Request(JsonRpcRequest {
                jsonrpc,
                id,
                request: handed_over(request),
            }),
            other => other,
        })
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

impl<T> LegacyTasks<T> {
    /// An answer as the session gets it: the initialize answer of 2025-11-25 declaring
    /// `capabilities.tasks` (and switching the session's tasks on), its tool lists with
    /// `execution.taskSupport`.
    fn answer(&mut self, result: ServerResult) -> ServerResult {
        let edited = match &result {
            ServerResult::InitializeResult(init)
                if init.protocol_version == ProtocolVersion::V_2025_11_25 =>
            {
                self.tasks = true;
                serde_json::to_value(init).ok().map(|mut value| {
                    value["capabilities"]["tasks"] = capability();
                    value
                })
            }
            ServerResult::ListToolsResult(list) if self.tasks => with_task_support(list).ok(),
            _ => None,
        };
        match edited {
            Some(value) => ServerResult::CustomResult(CustomResult(value)),
            None => result,
        }
    }
}

/// A request of a 2025-11-25 session as the handler gets it: `tasks/get`, `tasks/cancel`
/// and a `tools/call` that asked for a task as custom requests of the same method (their
/// `_meta` kept), anything else as it is.
fn handed_over(mut request: ClientRequest) -> ClientRequest {
    let meta = std::mem::take(request.get_meta_mut());
    let (method, params) = match &request {
        ClientRequest::GetTaskRequest(get) => ("tasks/get", serde_json::to_value(&get.params)),
        ClientRequest::CancelTaskRequest(cancel) => {
            ("tasks/cancel", serde_json::to_value(&cancel.params))
        }
        ClientRequest::CallToolRequest(call) if meta.0.0.contains_key(TASK_META) => {
            ("tools/call", serde_json::to_value(&call.params))
        }
        _ => {
            *request.get_meta_mut() = meta;
            return request;
        }
    };
    let Ok(params) = params else {
        *request.get_meta_mut() = meta;
        return request;
    };
    let mut custom = CustomRequest::new(method, Some(params));
    *custom.get_meta_mut() = meta;
    ClientRequest::CustomRequest(custom)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_task_member_of_a_tool_call_moves_into_meta() {
        let line = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"authorize_payment","arguments":{"amount":12.50},"task":{"ttl":60000}}}"#;
        let lifted: Value = serde_json::from_slice(&lift_task_line(line).unwrap()).unwrap();
        assert!(lifted["params"].get("task").is_none(), "{lifted}");
        assert_eq!(lifted["params"]["_meta"][TASK_META], json!({"ttl": 60000}));
        // The amount's text is kept exactly (serde_json's arbitrary precision).
        assert!(lifted.to_string().contains("12.50"));
        // An existing _meta keeps its members.
        let mut message = json!({"method": "tools/call", "params": {"name": "x", "task": {}, "_meta": {"progressToken": 1}}});
        assert!(lift_task_request(&mut message));
        assert_eq!(message["params"]["_meta"]["progressToken"], 1);
        // Lines that ask for no task pass as they are.
        for line in [
            &br#"{"method":"tools/call","params":{"name":"x","arguments":{"task":1}}}"#[..],
            br#"{"method":"tools/list","params":{"task":{}}}"#,
            br#"{"method":"tools/call","params":{"name":"x"}}"#,
            b"not json \"task\"",
        ] {
            assert_eq!(
                lift_task_line(line),
                None,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn a_task_request_is_handed_over_with_its_meta_and_others_as_they_came() {
        let read = |json: Value| serde_json::from_value::<ClientRequest>(json).unwrap();
        let call = read(
            json!({"method": "tools/call", "params": {"name": "authorize_payment",
            "arguments": {"amount": 1}, "_meta": {TASK_META: {"ttl": 5}, "progressToken": "p"}}}),
        );
        let ClientRequest::CustomRequest(custom) = handed_over(call) else {
            panic!("not handed over")
        };
        assert_eq!(custom.method, "tools/call");
        assert_eq!(custom.params.as_ref().unwrap()["name"], "authorize_payment");
        assert_eq!(custom.get_meta().0.0["progressToken"], "p");
        let get = handed_over(read(
            json!({"method": "tasks/get", "params": {"taskId": "dec_a"}}),
        ));
        let ClientRequest::CustomRequest(get) = get else {
            panic!("not handed over")
        };
        assert_eq!(get.params.unwrap()["taskId"], "dec_a");
        let plain = read(
            json!({"method": "tools/call", "params": {"name": "get_mandate",
            "_meta": {"progressToken": 7}}}),
        );
        let plain = handed_over(plain);
        assert!(
            matches!(plain, ClientRequest::CallToolRequest(_)),
            "{plain:?}"
        );
        assert_eq!(plain.get_meta().0.0["progressToken"], 7);
    }
}
