//! `GET /openapi.json`: the OpenAPI 3.0 document of the API, made from the endpoint table
//! (`super::api`) and the handlers' types (their `schemars` schemas).

use axum::Json;
use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

use super::api::{endpoints, schema, Answer};
use super::error::ErrorBody;

/// The document (the same for every request; it is made on each one, which costs far
/// less than a request's round trip).
pub async fn document() -> Json<Value> {
    Json(build())
}

/// Builds the document.
pub fn build() -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let error = schema::<ErrorBody>(&mut generator).to_value();
    let json_content = |schema: Value| json!({ "application/json": { "schema": schema } });
    let mut paths = Map::new();
    for endpoint in endpoints() {
        let parameters: Vec<Value> = endpoint
            .path
            .split('/')
            .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect();
        let mut responses = Map::new();
        match endpoint.answer {
            Answer::Json(status, of) => {
                let schema = of(&mut generator).to_value();
                responses.insert(status.to_string(), json!({ "description": "done", "content": json_content(schema) }));
            }
            Answer::Nothing => {
                responses.insert("204".into(), json!({ "description": "done" }));
            }
            Answer::Bytes(media) => {
                let content = json!({ media: { "schema": { "type": "string", "format": "binary" } } });
                responses.insert("200".into(), json!({ "description": "done", "content": content }));
            }
            Answer::Events(events) => {
                let names: Vec<String> = events
                    .iter()
                    .map(|(name, of)| {
                        let title = of(&mut generator).to_value();
                        format!("`{name}`: {}", title.get("$ref").and_then(Value::as_str).unwrap_or("JSON"))
                    })
                    .collect();
                responses.insert(
                    "200".into(),
                    json!({
                        "description": format!("server-sent events, each `data` JSON: {}", names.join(", ")),
                        "content": { "text/event-stream": { "schema": { "type": "string" } } }
                    }),
                );
            }
        }
        responses.insert(
            "default".into(),
            json!({ "description": "refused or failed (400, 401, 403, 404, 408, 409, 413, 415, 422, 429, 500, 504)",
                    "content": json_content(error.clone()) }),
        );
        let mut operation = json!({
            "operationId": endpoint.operation,
            "summary": endpoint.summary,
            "parameters": parameters,
            "responses": responses,
        });
        if let Some(body) = endpoint.body {
            operation["requestBody"] =
                json!({ "required": true, "content": json_content(body(&mut generator).to_value()) });
        }
        let entry = paths.entry(endpoint.path).or_insert_with(|| json!({}));
        entry[endpoint.method] = operation;
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Trellis",
            "version": env!("CARGO_PKG_VERSION"),
            "description": format!(
                "The charms of a Trellis space and its conversation. Every request needs the session \
                 cookie the page gets from the start URL of `{name} serve`, or a bearer token from \
                 `{name} token new`. Every POST, PUT and PATCH sends \
                 `Content-Type: application/json` (415 otherwise).",
                name = crate::program::name()
            )
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer" },
                "session": { "type": "apiKey", "in": "cookie", "name": super::auth::COOKIE }
            }
        },
        "security": [{ "bearer": [] }, { "session": [] }],
        "paths": paths,
    })
}
