//! A review shown to the client's user: URL-mode elicitation. Opt-in twice: `mandate mcp` is
//! told the review console's URL (`--console-url`, for a user who approves their agent's
//! payments themselves), and the client declares URL-mode elicitation. Then an
//! `authorize_payment` that meets a review (and is not answered as a task) asks the user to
//! open the console's reviews screen, the review named in the link, before it answers the
//! review as usual.
//!
//! Under 2025-11-25 the server asks during the call (`elicitation/create`, the session's
//! back channel). 2026-07-28 has no server-to-client requests: the call answers an
//! `InputRequiredResult` holding the elicitation, with its Idempotency-Key as the request
//! state, and the client's retry (carrying the user's answer) runs the same request again,
//! which the API answers with the same decision.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequest, ElicitRequestParams,
    ElicitationAction, InputRequest, InputRequests, InputRequiredResult, ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

/// The key of the elicitation in an `InputRequiredResult`.
const KEY: &str = "console";
/// How long the call waits for the user's answer (2025-11-25) before it answers anyway.
const WAIT: Duration = Duration::from_secs(60);

/// What the user's answer tells the model.
const SHOWN: &str = "the user was asked to open the review in the console";

/// Whether the client of this request takes URL-mode elicitation.
pub fn client_takes_urls(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|caps| caps.elicitation)
        .is_some_and(|elicitation| elicitation.url.is_some())
}

/// A retry of an `authorize_payment` that asked the user (2026-07-28): the request's state
/// is the Idempotency-Key the first round sent, used again so that the API answers the same
/// decision; the user's answer, if any. `None` for a first round.
pub fn resumed(request: &mut CallToolRequestParams) -> Option<Option<ElicitationAction>> {
    let key = request.request_state.clone()?;
    let answer = request
        .input_responses
        .as_ref()
        .and_then(|responses| responses.get(KEY))
        .and_then(|result| serde_json::from_value(result["action"].clone()).ok());
    request
        .arguments
        .get_or_insert_with(Default::default)
        .insert("idempotency_key".into(), Value::String(key));
    Some(answer)
}

/// The review's page in the console at `console`: its reviews screen, the review named.
pub fn review_url(console: &str, review: &str) -> String {
    format!(
        "{}#reviews/{review}",
        console.split('#').next().unwrap_or(console)
    )
}

/// Asks the user to open the review `output` (a review answered by `authorize_payment`)
/// in the console: under 2025-11-25 at once, then the answer; under 2026-07-28 by answering
/// an `InputRequiredResult` to be retried.
pub async fn ask(
    console: &str,
    output: &Value,
    arguments: &serde_json::Map<String, Value>,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    let review = output["review"].as_str().unwrap_or_default();
    let params = ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message: message(arguments, review),
        url: review_url(console, review),
        elicitation_id: review.to_owned(),
    };
    let modern = context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    if modern {
        let key = output["idempotency_key"].as_str().unwrap_or_default();
        let requests: InputRequests = [(
            KEY.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        )]
        .into();
        return Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(requests),
            Some(key.to_owned()),
        )));
    }
    let ElicitRequestParams::UrlElicitationParams {
        message,
        url,
        elicitation_id,
        ..
    } = params
    else {
        return Ok(CallToolResponse::Complete(answered(output, None)));
    };
    let asked = context
        .peer
        .elicit_url_with_timeout(message, parse(&url)?, elicitation_id, Some(WAIT))
        .await;
    Ok(CallToolResponse::Complete(answered(output, asked.ok())))
}

/// The review's answer, its next step saying what the user answered.
pub fn answered(output: &Value, answer: Option<ElicitationAction>) -> CallToolResult {
    let mut output = output.clone();
    let said = match answer {
        Some(ElicitationAction::Accept) => format!("{SHOWN} and agreed to"),
        Some(ElicitationAction::Decline) => format!("{SHOWN} and declined"),
        _ => format!("{SHOWN} and did not answer"),
    };
    if let Some(step) = output["next_step"].as_str() {
        output["next_step"] = Value::String(format!("{step} ({said})."));
    }
    CallToolResult::structured(output)
}

/// What the user reads.
fn message(arguments: &serde_json::Map<String, Value>, review: &str) -> String {
    let text = |name: &str| match arguments.get(name) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    format!(
        "Your agent asks to pay {} {} to {} ({}). It waits for your decision: open review {review} in the Mandate console to approve or deny it.",
        text("amount"),
        text("currency"),
        text("recipient"),
        text("category"),
    )
}

fn parse(url: &str) -> Result<reqwest::Url, ErrorData> {
    reqwest::Url::parse(url)
        .map_err(|e| ErrorData::internal_error(format!("console URL {url}: {e}"), None))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_review_is_named_in_the_consoles_link() {
        assert_eq!(
            review_url("https://verdicts.example.com/console/", "rev_1"),
            "https://verdicts.example.com/console/#reviews/rev_1"
        );
        assert_eq!(
            review_url("https://v.example/console/#decisions", "rev_2"),
            "https://v.example/console/#reviews/rev_2"
        );
    }

    #[test]
    fn a_retry_runs_the_same_request_with_the_first_rounds_key() {
        let mut request: CallToolRequestParams = serde_json::from_value(serde_json::json!({
            "name": "authorize_payment", "arguments": {"amount": 80},
            "requestState": "idem_abc",
            "inputResponses": {"console": {"action": "accept"}}}))
        .unwrap();
        assert_eq!(resumed(&mut request), Some(Some(ElicitationAction::Accept)));
        assert_eq!(
            request.arguments.unwrap()["idempotency_key"],
            Value::String("idem_abc".into())
        );
        let mut first: CallToolRequestParams =
            serde_json::from_value(serde_json::json!({"name": "authorize_payment"})).unwrap();
        assert_eq!(resumed(&mut first), None);
    }
}
