//! The HTTP API through its router, on every backend: routes, answers,
//! and every kind of bad input.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tern_advisor::api::{ROUTES, router};
use tern_advisor::service::{AdvisorOptions, Service};
use tern_advisor::store::Store;
use tern_drs::HostCaps;
use tower::ServiceExt;

use crate::fixtures::{self, every_db, quick};

fn caps() -> HostCaps {
    HostCaps {
        tcp_rmem: [4096, 131072, 6 << 20],
        tcp_wmem: [4096, 16384, 4 << 20],
        rmem_max: 212992,
        wmem_max: 212992,
        ..HostCaps::default()
    }
}

async fn service(db: &fixtures::TestDb) -> Service {
    service_at(&db.url).await
}

/// A service over the archive at `url`.
async fn service_at(url: &str) -> Service {
    let mut opts = AdvisorOptions::new(url);
    opts.store = quick();
    opts.body_limit = 4096;
    let store = Store::open(url, quick()).await.expect("open store");
    Service::new(store, caps(), opts)
}

async fn call(s: &Service, method: Method, uri: &str, body: Option<&str>) -> (StatusCode, Value) {
    call_with(s, method, uri, body, "application/json").await
}

async fn call_with(
    s: &Service,
    method: Method,
    uri: &str,
    body: Option<&str>,
    content_type: &str,
) -> (StatusCode, Value) {
    let (status, _, value) = send(s, method, uri, body, content_type).await;
    (status, value)
}

/// One request through the router: status, headers and JSON body.
async fn send(
    s: &Service,
    method: Method,
    uri: &str,
    body: Option<&str>,
    content_type: &str,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if body.is_some() {
        req = req.header(header::CONTENT_TYPE, content_type);
    }
    let req = req
        .body(Body::from(body.unwrap_or("").to_string()))
        .unwrap();
    let resp = router(s.clone()).oneshot(req).await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("JSON body")
    };
    (status, headers, value)
}

/// A request the store cannot serve now: 503 with `Retry-After: 5` and a
/// JSON error.
async fn assert_unavailable(s: &Service, method: Method, uri: &str, body: Option<&str>) {
    let (status, headers, got) = send(s, method, uri, body, "application/json").await;
    assert_error(
        status,
        &got,
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
    );
    assert_eq!(headers[header::RETRY_AFTER], "5", "{got}");
}

/// The RTT values in a host's history, newest first.
async fn rtt_history(s: &Service, host: &str) -> Vec<f64> {
    let uri = format!("/api/v1/history/{host}?kind=rtt");
    let (status, h) = call(s, Method::GET, &uri, None).await;
    assert_eq!(status, StatusCode::OK, "{h}");
    h["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["value"].as_f64().unwrap())
        .collect()
}

/// Reports an RTT of `ms` to `host`: the answer's status.
async fn report_rtt(s: &Service, host: &str, ms: f64) -> StatusCode {
    let body = json!({"host": host, "rtt_ms": ms}).to_string();
    call(s, Method::POST, "/api/v1/report", Some(&body)).await.0
}

fn assert_error(status: StatusCode, body: &Value, want: StatusCode, code: &str) {
    assert_eq!(status, want, "{body}");
    assert_eq!(body["error"], code, "{body}");
    assert_eq!(body["status"], want.as_u16(), "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn every_route_is_served() {
    let db = fixtures::sqlite();
    let s = service(&db).await;
    for (method, path) in ROUTES {
        let uri = path.replace("{host}", "nothing.example");
        let body = (*method == "POST").then_some("{}");
        let (status, body) = call(&s, method.parse().unwrap(), &uri, body).await;
        assert_ne!(body["error"], "no_route", "{method} {path}");
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
    }
    let (status, body) = call(&s, Method::GET, "/api/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["paths"]["/api/v1/advice/{host}"]["get"].is_object());
}

#[tokio::test]
async fn targets_can_be_added_listed_and_removed() {
    for db in every_db().await {
        let s = service(&db).await;
        let n = db.name;
        let (status, t) = call(
            &s,
            Method::POST,
            "/api/v1/targets",
            Some(r#"{"host":"127.0.0.1","port":5000,"interval_s":60}"#),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{n}: {t}");
        assert_eq!(
            (t["host"].as_str(), t["port"].as_u64(), t["source"].as_str()),
            (Some("127.0.0.1"), Some(5000), Some("api")),
            "{n}"
        );
        assert_eq!(t["address"], "127.0.0.1", "{n}");
        let (status, list) = call(&s, Method::GET, "/api/v1/targets", None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["targets"].as_array().unwrap().len(), 1, "{n}");
        let (status, body) = call(&s, Method::DELETE, "/api/v1/targets/127.0.0.1", None).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{n}: {body}");
        let (status, body) = call(&s, Method::DELETE, "/api/v1/targets/127.0.0.1", None).await;
        assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    }
}

#[tokio::test]
async fn a_report_becomes_advice_and_history() {
    for db in every_db().await {
        let s = service(&db).await;
        let n = db.name;
        let report = json!({
            "host": "198.51.100.7", "throughput_bps": 4.8e8, "rtt_ms": 180.0,
            "bytes": 2_000_000_000u64, "duration_s": 33.3, "streams": 4, "window": "auto",
            "limit": "network", "command": "tern cp", "direction": "send"
        });
        let (status, out) = call(
            &s,
            Method::POST,
            "/api/v1/report",
            Some(&report.to_string()),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{n}: {out}");
        assert_eq!(out["stored"], 2, "{n}");
        let (status, a) = call(&s, Method::GET, "/api/v1/advice/198.51.100.7", None).await;
        assert_eq!(status, StatusCode::OK, "{n}: {a}");
        // 180 ms × 480 Mbit/s = 10.8 MB; a socket gets 2 MiB here (6
        // streams), and the ramp on 180 ms asks for the cap of 8.
        assert_eq!(a["bdp_bytes"], 10_800_000, "{n}");
        assert_eq!(a["streams"], 8, "{n}");
        assert_eq!(a["source"], "passive", "{n}");
        assert_eq!(a["capacity_basis"], "throughput", "{n}");
        assert_eq!(a["samples"], 2, "{n}");
        assert!(a["host_limit"]["limited"].as_bool().unwrap(), "{n}");
        let (status, h) = call(
            &s,
            Method::GET,
            "/api/v1/history/198.51.100.7?kind=throughput",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{n}");
        let m = &h["measurements"][0];
        assert_eq!(
            (
                m["kind"].as_str(),
                m["origin"].as_str(),
                m["producer"].as_str()
            ),
            (Some("throughput"), Some("passive"), Some("tern cp")),
            "{n}"
        );
        assert_eq!(m["details"]["streams"], 4, "{n}");
        let (_, targets) = call(&s, Method::GET, "/api/v1/targets", None).await;
        assert_eq!(targets["targets"][0]["source"], "discovered", "{n}");
    }
}

#[tokio::test]
async fn advice_names_the_other_paths_a_transfer_took() {
    for db in every_db().await {
        let s = service(&db).await;
        let n = db.name;
        // A multi-path copy: path 0 under the daemon's name, naming the
        // other address, which reports under its own.
        let post = |body: Value| {
            let s = &s;
            async move { call(s, Method::POST, "/api/v1/report", Some(&body.to_string())).await }
        };
        let (status, out) = post(json!({
            "host": "dtn.example", "throughput_bps": 9.0e8, "rtt_ms": 50.0,
            "bytes": 2_000_000_000u64, "duration_s": 18.0, "paths": ["192.0.2.9"]
        }))
        .await;
        assert_eq!(status, StatusCode::CREATED, "{n}: {out}");
        let (status, out) = post(json!({
            "host": "192.0.2.9", "throughput_bps": 2.2e8, "rtt_ms": 75.0,
            "bytes": 500_000_000u64, "duration_s": 18.0
        }))
        .await;
        assert_eq!(status, StatusCode::CREATED, "{n}: {out}");
        let (status, a) = call(&s, Method::GET, "/api/v1/advice/dtn.example", None).await;
        assert_eq!(status, StatusCode::OK, "{n}: {a}");
        let paths = a["paths"].as_array().expect("the other paths");
        assert_eq!(paths.len(), 1, "{n}: {a}");
        assert_eq!(paths[0]["host"], "192.0.2.9", "{n}");
        assert_eq!(paths[0]["rtt_ms"], 75.0, "{n}");
        assert_eq!(paths[0]["capacity_bps"], 2.2e8, "{n}");
        // The path's own advice names no paths; a path with no numbers yet
        // is still named.
        let (_, own) = call(&s, Method::GET, "/api/v1/advice/192.0.2.9", None).await;
        assert!(own.get("paths").is_none(), "{n}: {own}");
        let (status, _) = post(json!({
            "host": "dtn.example", "rtt_ms": 50.0, "paths": ["192.0.2.9", "198.51.100.3"]
        }))
        .await;
        assert_eq!(status, StatusCode::CREATED, "{n}");
        let (_, a) = call(&s, Method::GET, "/api/v1/advice/dtn.example", None).await;
        let hosts: Vec<&str> = a["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["host"].as_str().unwrap())
            .collect();
        assert_eq!(hosts, ["192.0.2.9", "198.51.100.3"], "{n}: {a}");
        assert!(a["paths"][1]["rtt_ms"].is_null(), "{n}: {a}");
        // Removing the target forgets its paths.
        let (status, _) = call(&s, Method::DELETE, "/api/v1/targets/dtn.example", None).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{n}");
        let (status, out) = post(json!({"host": "dtn.example", "rtt_ms": 50.0})).await;
        assert_eq!(status, StatusCode::CREATED, "{n}: {out}");
        let (_, a) = call(&s, Method::GET, "/api/v1/advice/dtn.example", None).await;
        assert!(a.get("paths").is_none(), "{n}: {a}");
    }
}

#[tokio::test]
async fn bad_input_gets_a_clear_json_error() {
    for db in every_db().await {
        let s = service(&db).await;
        let cases: Vec<(Method, &str, Option<&str>, StatusCode, &str)> = vec![
            (
                Method::POST,
                "/api/v1/targets",
                Some("{not json"),
                StatusCode::BAD_REQUEST,
                "bad_json",
            ),
            (
                Method::POST,
                "/api/v1/targets",
                Some(r#"{"host": 5}"#),
                StatusCode::BAD_REQUEST,
                "bad_json",
            ),
            (
                Method::POST,
                "/api/v1/targets",
                Some(r#"{"host":"h","colour":"red"}"#),
                StatusCode::BAD_REQUEST,
                "bad_json",
            ),
            (
                Method::POST,
                "/api/v1/targets",
                Some(r#"{"host":"no such host!"}"#),
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                Method::POST,
                "/api/v1/targets",
                Some(r#"{"host":"h","port":0}"#),
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                Method::POST,
                "/api/v1/targets",
                Some(r#"{"host":"h","interval_s":0}"#),
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                Method::POST,
                "/api/v1/report",
                Some(r#"{"host":"h"}"#),
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                Method::POST,
                "/api/v1/report",
                Some(r#"{"host":"h","rtt_ms":-4}"#),
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                Method::GET,
                "/api/v1/advice/unknown.example",
                None,
                StatusCode::NOT_FOUND,
                "not_found",
            ),
            (
                Method::GET,
                "/api/v1/advice/a%20b",
                None,
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                Method::GET,
                "/api/v1/history/unknown.example",
                None,
                StatusCode::NOT_FOUND,
                "not_found",
            ),
            (
                Method::GET,
                "/api/v1/history/h?kind=colour",
                None,
                StatusCode::BAD_REQUEST,
                "bad_request",
            ),
            (
                Method::GET,
                "/api/v1/history/h?limit=-1",
                None,
                StatusCode::BAD_REQUEST,
                "bad_query",
            ),
            (
                Method::GET,
                "/api/v1/nothing",
                None,
                StatusCode::NOT_FOUND,
                "no_route",
            ),
            (
                Method::PUT,
                "/api/v1/targets",
                Some("{}"),
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
            ),
        ];
        for (method, uri, body, want, code) in cases {
            let (status, got) = call(&s, method.clone(), uri, body).await;
            assert_error(status, &got, want, code);
            let _ = (method, db.name);
        }
        let (status, got) = call_with(
            &s,
            Method::POST,
            "/api/v1/targets",
            Some(r#"{"host":"h"}"#),
            "text/plain",
        )
        .await;
        assert_error(
            status,
            &got,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        );
        let huge = format!(r#"{{"host":"h","command":"{}"}}"#, "x".repeat(10_000));
        let (status, got) = call(&s, Method::POST, "/api/v1/report", Some(&huge)).await;
        assert_error(status, &got, StatusCode::PAYLOAD_TOO_LARGE, "too_large");
        // A host known but not measured: 404 that says what is missing.
        call(
            &s,
            Method::POST,
            "/api/v1/targets",
            Some(r#"{"host":"192.0.2.44"}"#),
        )
        .await;
        let (status, got) = call(&s, Method::GET, "/api/v1/advice/192.0.2.44", None).await;
        assert_error(status, &got, StatusCode::NOT_FOUND, "not_found");
        assert!(got["message"].as_str().unwrap().contains("no RTT"), "{got}");
        // Nothing of the refused requests was stored.
        assert_eq!(
            s.store().measurement_count().await.unwrap(),
            0,
            "{}",
            db.name
        );
        assert_eq!(s.store().targets().await.unwrap().len(), 1, "{}", db.name);
    }
}

/// Every number a report may carry is bounded by what a network can do:
/// beyond the bound it is a 400 whose message names the field and the
/// bound (in a few words, not a 300-digit number), and nothing is stored.
#[tokio::test]
async fn values_no_network_can_have_are_refused_naming_field_and_bound() {
    for db in every_db().await {
        let s = service(&db).await;
        let n = db.name;
        let base = r#""host":"192.0.2.9","bytes":1000000000"#;
        let cases: &[(&str, &str, &str)] = &[
            (r#""throughput_bps":1e300"#, "throughput_bps", "10 Tbit/s"),
            (
                r#""throughput_bps":1.0000001e13"#,
                "throughput_bps",
                "10 Tbit/s",
            ),
            (r#""throughput_bps":0"#, "throughput_bps", "above 0"),
            (r#""rtt_ms":1e300"#, "rtt_ms", "10 min"),
            (r#""rtt_ms":600000.001"#, "rtt_ms", "10 min"),
            (r#""rtt_ms":-1e300"#, "rtt_ms", "above 0"),
            (r#""rtt_ms":5,"duration_s":1e300"#, "duration_s", "a year"),
            (
                r#""rtt_ms":5,"duration_s":31622400.5"#,
                "duration_s",
                "a year",
            ),
            (r#""rtt_ms":5,"port":0"#, "port", "1 to 65535"),
        ];
        for (fields, field, bound) in cases {
            let body = format!("{{{base},{fields}}}");
            let (status, got) = call(&s, Method::POST, "/api/v1/report", Some(&body)).await;
            assert_error(status, &got, StatusCode::BAD_REQUEST, "bad_request");
            let message = got["message"].as_str().unwrap();
            assert!(message.contains(field), "{n}: {body}: {message}");
            assert!(message.contains(bound), "{n}: {body}: {message}");
            assert!(message.len() < 200, "{n}: {body}: {message}");
        }
        // Integers out of their type's range fail to decode, naming the
        // field.
        for (fields, field) in [
            (r#""bytes":-1"#, "bytes"),
            (r#""bytes":1e300"#, "bytes"),
            (r#""streams":70000"#, "streams"),
            (r#""port":1e300"#, "port"),
        ] {
            let body = format!(r#"{{"host":"192.0.2.9","rtt_ms":5,{fields}}}"#);
            let (status, got) = call(&s, Method::POST, "/api/v1/report", Some(&body)).await;
            assert_error(status, &got, StatusCode::BAD_REQUEST, "bad_json");
            let message = got["message"].as_str().unwrap();
            assert!(message.contains(field), "{n}: {body}: {message}");
        }
        assert_eq!(s.store().measurement_count().await.unwrap(), 0, "{n}");

        // At the bounds: accepted, and the advice stays within them.
        let edge = json!({
            "host": "192.0.2.9", "throughput_bps": 1e13, "rtt_ms": 600000.0,
            "bytes": u64::MAX, "duration_s": 31622400.0, "limit": "network"
        });
        let (status, out) = call(&s, Method::POST, "/api/v1/report", Some(&edge.to_string())).await;
        assert_eq!(status, StatusCode::CREATED, "{n}: {out}");
        assert_eq!(out["stored"], 2, "{n}: {out}");
        let (status, a) = call(&s, Method::GET, "/api/v1/advice/192.0.2.9", None).await;
        assert_eq!(status, StatusCode::OK, "{n}: {a}");
        // 10 min x 10 Tbit/s.
        assert_eq!(a["bdp_bytes"], 750_000_000_000_000u64, "{n}: {a}");
        assert_eq!(a["capacity_bps"], 1e13, "{n}: {a}");
        assert_eq!(a["rtt_ms"], 600000.0, "{n}: {a}");
        assert!(
            a["expected_throughput_bps"].as_f64().unwrap() <= 1e13,
            "{n}: {a}"
        );
        let buffer = a["buffer_bytes"].as_u64().unwrap();
        assert_eq!(
            a["tern_window_bytes"].as_u64(),
            Some(2 * buffer),
            "{n}: {a}"
        );
        let advice: tern_advisor::Advice = serde_json::from_value(a.clone()).unwrap();
        advice.check().unwrap();
    }
}

/// The advice for `asked`, which must be `from`'s, shared through `by`.
async fn answered_from(s: &Service, asked: &str, from: &str, by: &str) -> Value {
    let (status, a) = call(s, Method::GET, &format!("/api/v1/advice/{asked}"), None).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    assert_eq!(a["aggregated_from"], from, "{a}");
    assert_eq!(a["aggregated_by"], by, "{a}");
    a
}

#[tokio::test]
async fn a_neighbour_on_the_subnet_answers_until_a_host_has_its_own_numbers() {
    for db in every_db().await {
        let s = service(&db).await;
        let n = db.name;
        let report = |host: &str, rtt: f64| {
            json!({"host": host, "throughput_bps": 1e8, "rtt_ms": rtt, "bytes": 100_000_000u64,
                   "duration_s": 8.0, "limit": "network"})
            .to_string()
        };
        call(
            &s,
            Method::POST,
            "/api/v1/report",
            Some(&report("203.0.113.10", 40.0)),
        )
        .await;
        call(
            &s,
            Method::POST,
            "/api/v1/targets",
            Some(r#"{"host":"203.0.113.99"}"#),
        )
        .await;
        let a = answered_from(&s, "203.0.113.99", "203.0.113.10", "subnet 203.0.113.0/24").await;
        assert_eq!(a["host"], "203.0.113.99", "{n}");
        assert_eq!(a["rtt_ms"], 40.0, "{n}");
        call(
            &s,
            Method::POST,
            "/api/v1/report",
            Some(&report("203.0.113.99", 60.0)),
        )
        .await;
        let (_, a) = call(&s, Method::GET, "/api/v1/advice/203.0.113.99", None).await;
        assert_eq!(a["aggregated_from"], Value::Null, "{n}");
        assert_eq!(a["rtt_ms"], 60.0, "{n}");
        // Another subnet is not a neighbour.
        call(
            &s,
            Method::POST,
            "/api/v1/targets",
            Some(r#"{"host":"203.0.114.1"}"#),
        )
        .await;
        let (status, _) = call(&s, Method::GET, "/api/v1/advice/203.0.114.1", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{n}");
    }
}

#[tokio::test]
async fn a_declared_bottleneck_group_answers_across_subnets() {
    for db in every_db().await {
        let s = service(&db).await;
        let n = db.name;
        for host in ["203.0.113.10", "198.51.100.20"] {
            let body = json!({"host": host, "group": "wan-east"}).to_string();
            let (status, t) = call(&s, Method::POST, "/api/v1/targets", Some(&body)).await;
            assert_eq!(status, StatusCode::CREATED, "{n}: {t}");
            assert_eq!(t["group"], "wan-east", "{n}");
        }
        let report = json!({"host": "203.0.113.10", "throughput_bps": 1e8, "rtt_ms": 40.0,
                            "bytes": 100_000_000u64, "duration_s": 8.0, "limit": "network"});
        call(
            &s,
            Method::POST,
            "/api/v1/report",
            Some(&report.to_string()),
        )
        .await;
        // Another subnet, the same declared bottleneck: answered for.
        let by = "bottleneck group wan-east";
        let a = answered_from(&s, "198.51.100.20", "203.0.113.10", by).await;
        assert_eq!(a["rtt_ms"], 40.0, "{n}");
        // The report (a weaker source) left the group alone.
        let (_, list) = call(&s, Method::GET, "/api/v1/targets", None).await;
        assert!(
            list["targets"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t["group"] == "wan-east"),
            "{n}: {list}"
        );
        // Out of the group (posted again without one), it has no answer.
        let (status, t) = call(
            &s,
            Method::POST,
            "/api/v1/targets",
            Some(r#"{"host":"198.51.100.20"}"#),
        )
        .await;
        assert_eq!((status, &t["group"]), (StatusCode::CREATED, &Value::Null));
        let (status, _) = call(&s, Method::GET, "/api/v1/advice/198.51.100.20", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{n}");
        let (status, body) = call(
            &s,
            Method::POST,
            "/api/v1/targets",
            Some(r#"{"host":"h","group":"no spaces"}"#),
        )
        .await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_request");
    }
}

#[tokio::test]
async fn a_locked_database_is_503_the_service_keeps_running_and_nothing_is_lost() {
    use sqlx::Connection;
    let db = fixtures::sqlite();
    let s = service(&db).await;
    assert_eq!(report_rtt(&s, "h.example", 12.0).await, StatusCode::CREATED);
    let url = format!("sqlite://{}", db.sqlite_path().unwrap().display());
    let mut other = sqlx::AnyConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut other)
        .await
        .unwrap();
    let refused = json!({"host": "h.example", "rtt_ms": 13.0}).to_string();
    assert_unavailable(&s, Method::POST, "/api/v1/report", Some(&refused)).await;
    // Reads still work meanwhile, advice too, and the service answers.
    let (status, _) = call(&s, Method::GET, "/api/v1/history/h.example", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(&s, Method::GET, "/api/v1/advice/h.example", None).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    assert!(
        body["message"].as_str().unwrap().contains("12.0 ms"),
        "{body}"
    );
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    assert_eq!(report_rtt(&s, "h.example", 14.0).await, StatusCode::CREATED);
    assert_eq!(
        rtt_history(&s, "h.example").await,
        [14.0, 12.0],
        "the refused report left nothing, the others are all there"
    );
}

/// While the archive is gone, writes and reads answer 503 and the
/// service keeps answering what needs no archive; once it is back,
/// everything works again and nothing was lost.
async fn gone_then_back(s: &Service, gone: impl AsyncFnOnce(), back: impl AsyncFnOnce()) {
    assert_eq!(report_rtt(s, "h.example", 12.0).await, StatusCode::CREATED);
    gone().await;
    let refused = json!({"host": "h.example", "rtt_ms": 13.0}).to_string();
    assert_unavailable(s, Method::POST, "/api/v1/report", Some(&refused)).await;
    assert_unavailable(s, Method::GET, "/api/v1/targets", None).await;
    let (status, body) = call(s, Method::GET, "/api/v1/schedule", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = call(s, Method::GET, "/api/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    back().await;
    let status = fixtures::within_5_s(async || {
        let status = report_rtt(s, "h.example", 14.0).await;
        (status != StatusCode::SERVICE_UNAVAILABLE).then_some(status)
    })
    .await;
    assert_eq!(
        status,
        Some(StatusCode::CREATED),
        "works again once it is back"
    );
    assert_eq!(rtt_history(s, "h.example").await, [14.0, 12.0]);
}

#[tokio::test]
async fn an_sqlite_archive_whose_directory_is_gone_is_503_until_it_is_back() {
    // A rename works as root too, where taking permissions away would not.
    let db = fixtures::sqlite();
    let dir = db.sqlite_path().unwrap().parent().unwrap().to_path_buf();
    let away = dir.with_extension("away");
    let s = service(&db).await;
    gone_then_back(
        &s,
        async || std::fs::rename(&dir, &away).unwrap(),
        async || std::fs::rename(&away, &dir).unwrap(),
    )
    .await;
}

#[tokio::test]
async fn a_postgres_archive_cut_off_is_503_until_it_is_back() {
    let test = "a_postgres_archive_cut_off_is_503_until_it_is_back";
    let Some((relay, url, upstream)) = fixtures::relayed_postgres(test).await else {
        return;
    };
    let via = relay.addr;
    let s = service_at(&url).await;
    let mut restored = None;
    gone_then_back(
        &s,
        async || relay.stop().await,
        async || restored = Some(fixtures::Relay::start(via, upstream).await),
    )
    .await;
    assert!(restored.is_some(), "the database came back through a relay");
}

#[tokio::test]
async fn asked_about_its_own_host_the_advisor_answers_for_the_caller() {
    use axum::extract::ConnectInfo;
    let db = fixtures::sqlite();
    let s = service(&db).await;
    let caller: std::net::SocketAddr = "198.51.100.9:50000".parse().unwrap();
    let send = |method: Method, uri: &str, body: Option<String>| {
        let mut req = Request::builder().method(method).uri(uri);
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let mut req = req.body(Body::from(body.unwrap_or_default())).unwrap();
        req.extensions_mut().insert(ConnectInfo(caller));
        let s = s.clone();
        async move {
            let resp = router(s).oneshot(req).await.unwrap();
            let status = resp.status();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    // A client reports a transfer with "the server" (this machine).
    let report = json!({"host": "127.0.0.1", "port": 4747, "rtt_ms": 30.0, "throughput_bps": 2e8,
                        "bytes": 500_000_000u64, "duration_s": 20.0, "limit": "network"});
    let (status, out) = send(Method::POST, "/api/v1/report", Some(report.to_string())).await;
    assert_eq!(status, StatusCode::CREATED, "{out}");
    assert_eq!(out["host"], "198.51.100.9", "filed under the caller: {out}");
    assert_eq!(out["stored"], 2);
    let (status, a) = send(Method::GET, "/api/v1/advice/127.0.0.1", None).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    assert_eq!(a["host"], "198.51.100.9");
    assert!(a["notes"].to_string().contains("own host"), "{a}");
    // Asked by nobody in particular, 127.0.0.1 is just a host it does not know.
    let (status, _) = call(&s, Method::GET, "/api/v1/advice/127.0.0.1", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Beside a daemon, the daemon records the transfer: no double count.
    s.fed_by_daemon();
    let (status, out) = send(Method::POST, "/api/v1/report", Some(report.to_string())).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(out["stored"], 0, "{out}");
    assert!(
        out["ignored"][0].as_str().unwrap().contains("daemon"),
        "{out}"
    );
    assert_eq!(s.store().measurement_count().await.unwrap(), 2);
}
