//! The HTTP API (axum): a thin translation between JSON over HTTP and
//! [`Service`].
//!
//! Every error is a JSON object `{"error": CODE, "message": TEXT,
//! "status": N}` with a fitting status: 400 for malformed JSON or bad
//! values, 404 for unknown hosts and routes, 405, 413 for bodies over the
//! limit, 415 without a JSON content type, 503 (with `Retry-After`) when
//! the store is locked or unreachable, 500 otherwise. A failed request
//! changes nothing (the store works in transactions) and the service
//! keeps serving.
//!
//! [`ROUTES`] lists every route; the router is built from the same
//! method/path pairs and a test checks that the OpenAPI document
//! (`openapi.json`, served at `/api/v1/openapi.json`) describes exactly
//! these.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};

use axum::extract::rejection::JsonRejection;
use axum::extract::{
    ConnectInfo, DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, Request, State,
};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::model::{Kind, TargetSource};
use crate::report::TransferReport;
use crate::service::{Service, TargetRequest};

/// Every route: method and path (axum's `{param}` syntax, as in OpenAPI).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/api/v1/advice/{host}"),
    ("GET", "/api/v1/history/{host}"),
    ("GET", "/api/v1/targets"),
    ("POST", "/api/v1/targets"),
    ("DELETE", "/api/v1/targets/{host}"),
    ("POST", "/api/v1/report"),
    ("GET", "/api/v1/schedule"),
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/api/v1/series"),
    ("GET", "/api/v1/pairs"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/routes"),
    ("GET", "/api/v1/groups"),
    ("GET", "/api/v1/meshes"),
    ("PUT", "/api/v1/meshes/{name}"),
    ("DELETE", "/api/v1/meshes/{name}"),
    ("GET", "/api/v1/latest"),
];

/// The OpenAPI 3 document of this API.
pub const OPENAPI: &str = include_str!("openapi.json");

/// An error as the API answers it.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let (status, code) = match &e {
            Error::BadRequest(_) | Error::Config(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            Error::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            Error::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            Error::Store(_) | Error::Client { .. } | Error::Io { .. } => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
        };
        if status.is_server_error() {
            tracing::warn!("advisor API: {e}");
        }
        ApiError::new(status, code, e.to_string())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        let status = r.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "bad_json",
        };
        // Unprocessable (valid JSON of the wrong shape) is a bad request
        // here too: one status for "fix your body".
        let status = if status == StatusCode::UNPROCESSABLE_ENTITY {
            StatusCode::BAD_REQUEST
        } else {
            status
        };
        ApiError::new(status, code, r.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": self.code,
            "message": self.message,
            "status": self.status.as_u16(),
        });
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        response
    }
}

/// `Json` whose rejections are [`ApiError`]s.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    fn from_request(
        req: Request,
        state: &S,
    ) -> impl Future<Output = Result<Self, ApiError>> + Send {
        let parsed = Json::<T>::from_request(req, state);
        async move {
            match parsed.await {
                Ok(Json(v)) => Ok(ApiJson(v)),
                Err(r) => Err(ApiError::from(r)),
            }
        }
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The router over a service; requests over `body_limit` bytes get 413.
pub fn router(service: Service) -> Router {
    let limit = service.options().body_limit;
    Router::new()
        .route(ROUTES[0].1, get(advice))
        .route(ROUTES[1].1, get(history))
        .route(ROUTES[2].1, get(targets).post(add_target))
        .route(ROUTES[4].1, delete(delete_target))
        .route(ROUTES[5].1, post(report))
        .route(ROUTES[6].1, get(schedule))
        .route(ROUTES[7].1, get(openapi))
        .route(ROUTES[8].1, get(series))
        .route(ROUTES[9].1, get(pairs))
        .route(ROUTES[10].1, get(events))
        .route(ROUTES[11].1, get(routes))
        .route(ROUTES[12].1, get(groups))
        .route(ROUTES[13].1, get(meshes))
        .route(ROUTES[14].1, put(put_mesh).delete(delete_mesh))
        .route(ROUTES[16].1, get(latest))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no_route",
                "no such route; see /api/v1/openapi.json",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(service)
}

/// Serves the API on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Service,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    serve_router(listener, router(service), shutdown).await
}

/// Serves `app` (the API's router, perhaps merged with others) on
/// `listener` until `shutdown` completes, telling handlers the caller's
/// address.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| Error::io("advisor HTTP server", e))
}

/// The address a request came from, when the server knows it.
#[derive(Debug, Clone, Copy)]
pub struct Caller(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> impl Future<Output = Result<Self, Self::Rejection>> + Send {
        let ip = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        std::future::ready(Ok(Caller(ip)))
    }
}

async fn advice(
    State(s): State<Service>,
    Caller(caller): Caller,
    Path(host): Path<String>,
) -> ApiResult<Response> {
    Ok(Json(s.advice_for(&host, caller).await?).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    kind: Option<String>,
    limit: Option<u32>,
}

async fn history(
    State(s): State<Service>,
    Path(host): Path<String>,
    query: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) =
        query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", e.body_text()))?;
    let kind = q.kind.as_deref().map(str::parse::<Kind>).transpose()?;
    let measurements = s.history(&host, kind, q.limit.unwrap_or(100)).await?;
    Ok(Json(serde_json::json!({ "host": host, "measurements": measurements })).into_response())
}

async fn targets(State(s): State<Service>) -> ApiResult<Response> {
    Ok(Json(serde_json::json!({ "targets": s.targets().await? })).into_response())
}

async fn add_target(
    State(s): State<Service>,
    ApiJson(req): ApiJson<TargetRequest>,
) -> ApiResult<Response> {
    let t = s.add_target(&req, TargetSource::Api).await?;
    Ok((StatusCode::CREATED, Json(t)).into_response())
}

async fn delete_target(State(s): State<Service>, Path(host): Path<String>) -> ApiResult<Response> {
    s.delete_target(&host).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn report(
    State(s): State<Service>,
    Caller(caller): Caller,
    ApiJson(r): ApiJson<TransferReport>,
) -> ApiResult<Response> {
    let outcome = s.report_from(&r, caller).await?;
    Ok((StatusCode::CREATED, Json(outcome)).into_response())
}

async fn schedule(State(s): State<Service>) -> Json<crate::scheduler::ScheduleStatus> {
    Json(s.schedule())
}

type QueryResult<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

fn query<T>(q: QueryResult<T>) -> ApiResult<T> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", e.body_text()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeriesQuery {
    from: Option<String>,
    to: String,
    kind: String,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    limit: Option<u32>,
    ewma: Option<f64>,
}

async fn series(State(s): State<Service>, q: QueryResult<SeriesQuery>) -> ApiResult<Response> {
    let q = query(q)?;
    let kind: Kind = q.kind.parse()?;
    let answer = s
        .pair_series(
            q.from.as_deref(),
            &q.to,
            kind,
            q.since_ms,
            q.until_ms,
            q.limit,
            q.ewma,
        )
        .await?;
    Ok(Json(answer).into_response())
}

async fn pairs(State(s): State<Service>) -> ApiResult<Response> {
    Ok(Json(serde_json::json!({ "pairs": s.pairs().await? })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    from: Option<String>,
    to: Option<String>,
    since_ms: Option<i64>,
    limit: Option<u32>,
}

async fn events(State(s): State<Service>, q: QueryResult<EventsQuery>) -> ApiResult<Response> {
    let q = query(q)?;
    let events = s
        .events(q.from.as_deref(), q.to.as_deref(), q.since_ms, q.limit)
        .await?;
    Ok(Json(serde_json::json!({ "events": events })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoutesQuery {
    from: Option<String>,
    to: Option<String>,
}

async fn routes(State(s): State<Service>, q: QueryResult<RoutesQuery>) -> ApiResult<Response> {
    let q = query(q)?;
    let routes = s.routes(q.from.as_deref(), q.to.as_deref()).await?;
    Ok(Json(serde_json::json!({ "routes": routes })).into_response())
}

async fn latest(State(s): State<Service>) -> ApiResult<Response> {
    Ok(Json(serde_json::json!({ "latest": s.latest().await? })).into_response())
}

async fn groups(State(s): State<Service>) -> ApiResult<Response> {
    Ok(Json(serde_json::json!({ "groups": s.bottleneck_groups().await? })).into_response())
}

async fn meshes(State(s): State<Service>) -> ApiResult<Response> {
    Ok(Json(serde_json::json!({ "meshes": s.meshes().await? })).into_response())
}

async fn put_mesh(
    State(s): State<Service>,
    Path(name): Path<String>,
    ApiJson(mesh): ApiJson<crate::mesh::Mesh>,
) -> ApiResult<Response> {
    if mesh.name != name {
        return Err(Error::BadRequest(format!(
            "the mesh is named '{}' but was put at '{name}'",
            mesh.name
        ))
        .into());
    }
    s.put_mesh(&mesh).await?;
    Ok((StatusCode::OK, Json(mesh)).into_response())
}

async fn delete_mesh(State(s): State<Service>, Path(name): Path<String>) -> ApiResult<Response> {
    s.delete_mesh(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// The property names of a schema in the OpenAPI document, sorted.
#[cfg(test)]
pub(crate) fn schema_fields(schema: &str) -> Vec<String> {
    let doc: serde_json::Value = serde_json::from_str(OPENAPI).unwrap();
    sorted_keys(&doc["components"]["schemas"][schema]["properties"])
        .unwrap_or_else(|| panic!("no schema {schema}"))
}

/// The field names of a value as JSON, sorted.
#[cfg(test)]
pub(crate) fn json_fields(value: impl serde::Serialize) -> Vec<String> {
    sorted_keys(&serde_json::to_value(value).unwrap()).expect("a JSON object")
}

/// The keys of a JSON object, sorted; `None` for anything else.
#[cfg(test)]
fn sorted_keys(object: &serde_json::Value) -> Option<Vec<String>> {
    let mut names: Vec<String> = object.as_object()?.keys().cloned().collect();
    names.sort();
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_describes_exactly_the_routes() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("openapi.json parses");
        assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
        let paths = doc["paths"].as_object().unwrap();
        let mut documented = Vec::new();
        for (path, ops) in paths {
            for method in ops.as_object().unwrap().keys() {
                if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                    documented.push((method.to_uppercase(), path.clone()));
                }
            }
        }
        let mut routes: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        documented.sort();
        routes.sort();
        assert_eq!(documented, routes);
        // Every operation documents its error body.
        for (path, ops) in paths {
            for (method, op) in ops.as_object().unwrap() {
                assert!(op["responses"].is_object(), "{method} {path}: no responses");
                assert!(
                    op["operationId"].is_string(),
                    "{method} {path}: no operationId"
                );
            }
        }
    }

    #[test]
    fn the_openapi_schemas_name_exactly_the_fields_of_targets() {
        use crate::model::Target;
        let req = TargetRequest {
            host: "h".into(),
            port: Some(1),
            interval_s: Some(1),
            group: Some("g".into()),
        };
        assert_eq!(json_fields(&req), schema_fields("TargetRequest"));
        let target = Target {
            host: "h".into(),
            port: 1,
            address: None,
            group: Some("g".into()),
            probes: Some(vec!["rtt".into()]),
            source: TargetSource::Api,
            interval_s: 1,
            added_ms: 0,
            last_used_ms: 0,
        };
        assert_eq!(json_fields(&target), schema_fields("Target"));
    }
}
