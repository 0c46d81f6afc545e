//! A request whose method MCP has but whose `params` do not fit it reaches the handler as a
//! custom request (rmcp reads it as one of those, for want of a better fit), and would be
//! answered "method not found". It is answered "invalid params", saying what does not fit.

use rmcp::model::{
    CallToolRequest, CustomRequest, ErrorCode, ListResourcesRequest, ListToolsRequest, ReadResourceRequest,
};
use rmcp::ErrorData;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

/// The methods a client may call, as MCP names them.
const METHODS: &[&str] = &[
    "ping",
    "initialize",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/directory/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// The error answering `request`: "invalid params" for a method MCP has, and what does not
/// fit where this server can tell; "method not found" for any other.
pub(super) fn refusal(request: &CustomRequest) -> ErrorData {
    let method = request.method.as_str();
    if !METHODS.contains(&method) {
        return ErrorData::new(ErrorCode::METHOD_NOT_FOUND, format!("no method `{method}`"), None);
    }
    let asked = json!({"method": method, "params": request.params.clone().unwrap_or(Value::Null)});
    let detail = match method {
        "tools/call" => misfit::<CallToolRequest>(asked),
        "tools/list" => misfit::<ListToolsRequest>(asked),
        "resources/list" => misfit::<ListResourcesRequest>(asked),
        "resources/read" => misfit::<ReadResourceRequest>(asked),
        _ => None,
    };
    let message = match detail {
        Some(detail) => format!("the params of `{method}` do not fit it: {detail}"),
        None => format!("the params of `{method}` do not fit it"),
    };
    ErrorData::invalid_params(message, None)
}

/// Why `asked` is no `T`, if it is not.
fn misfit<T: DeserializeOwned>(asked: Value) -> Option<String> {
    serde_json::from_value::<T>(asked).err().map(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn custom(method: &str, params: Value) -> CustomRequest {
        CustomRequest::new(method, Some(params))
    }

    #[test]
    fn a_known_method_with_params_that_do_not_fit_is_invalid_params_and_says_why() {
        let error = refusal(&custom("tools/call", json!({"name": 5})));
        assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
        assert!(
            error.message.contains("the params of `tools/call` do not fit it: invalid type: integer `5`"),
            "{}",
            error.message
        );
        let error = refusal(&custom("prompts/get", json!({"name": []})));
        assert_eq!(
            (error.code, error.message.as_ref()),
            (ErrorCode::INVALID_PARAMS, "the params of `prompts/get` do not fit it")
        );
        let error = refusal(&custom("tools/explode", json!({})));
        assert_eq!((error.code, error.message.as_ref()), (ErrorCode::METHOD_NOT_FOUND, "no method `tools/explode`"));
    }
}
