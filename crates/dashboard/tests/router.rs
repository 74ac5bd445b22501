//! The dashboard's routes through the router, no sockets: the page and
//! its embedded files, `/metrics` of a daemon and its content type, and
//! the live view with and without a daemon.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tern_dashboard::Dashboard;
use tern_engine::server::{LiveSessions, LiveTuning, WatchedStream};
use tern_engine::transfer::Progress;
use tower::ServiceExt;

async fn get(d: &Dashboard, path: &str) -> (StatusCode, String, Vec<u8>) {
    let resp = d
        .clone()
        .router()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let ctype = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, ctype, body)
}

#[tokio::test]
async fn the_page_and_every_file_it_names_are_served_from_the_binary() {
    let d = Dashboard::default();
    let (status, ctype, page) = get(&d, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(ctype.starts_with("text/html"), "{ctype}");
    let page = String::from_utf8(page).unwrap();
    // Every asset the page loads is embedded, nothing points off the host.
    for needle in ["src=\"/assets/", "href=\"/assets/"] {
        for (i, _) in page.match_indices(needle) {
            let rest = &page[i + needle.len() - "/assets/".len()..];
            let path = &rest[..rest.find('"').unwrap()];
            let (status, _, body) = get(&d, path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert!(!body.is_empty(), "{path}");
        }
    }
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "nothing fetched from elsewhere"
    );
    let (status, ctype, _) = get(&d, "/assets/vendor/uPlot.iife.min.js").await;
    assert_eq!(status, StatusCode::OK);
    assert!(ctype.starts_with("text/javascript"));
    let (status, _, _) = get(&d, "/assets/../Cargo.toml").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = get(&d, "/assets/nothing.js").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn metrics_and_the_live_view_follow_the_daemons_sessions() {
    let live = Arc::new(LiveSessions::default());
    let d = Dashboard {
        advisor: None,
        live: Some(live.clone()),
    };
    let progress = Arc::new(Progress::per_stream(4));
    progress
        .bytes
        .store(4096, std::sync::atomic::Ordering::Relaxed);
    progress.stream_moved(0, 3000);
    progress.stream_moved(1, 1096);
    // Stream 0 on a real TCP connection (its path and TCP_INFO are read),
    // the others without a socket.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let socket = std::os::fd::OwnedFd::from(client);
    let watched = (0..4)
        .map(|i| WatchedStream::of(i, (i == 0).then_some(&socket)))
        .collect();
    let tuning = LiveTuning {
        congestion: "bbr".into(),
        window: "auto".into(),
        auto_streams: true,
        max_streams: 8,
        block_size: 1 << 20,
        streams_asked: 2,
    };
    let peer: SocketAddr = "192.0.2.7:50000".parse().unwrap();
    let guard = live.begin(peer, (false, None), watched, tuning, progress);
    let (status, ctype, body) = get(&d, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains("tern_sessions_active 1\n"), "{text}");
    assert!(text.contains("tern_streams_active 4\n"), "{text}");
    assert!(text.contains("tern_transfers_started_total 1\n"), "{text}");
    assert!(
        !text.contains("192.0.2.7"),
        "no peer addresses as labels: {text}"
    );
    let (_, _, body) = get(&d, "/api/v1/live").await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["sessions"][0]["bytes"], 4096);
    assert_eq!(v["sessions"][0]["direction"], "receive");
    assert_eq!(v["sessions"][0]["third_party"], serde_json::Value::Null);
    let s0 = &v["sessions"][0];
    assert_eq!(s0["tuning"]["congestion"], "bbr");
    assert_eq!(s0["stream_detail"][0]["path"], "127.0.0.1 ↔ 127.0.0.1");
    assert_eq!(s0["stream_detail"][0]["bytes"], 3000);
    assert!(s0["stream_detail"][0]["rtt_ms"].is_number(), "{s0}");
    assert!(
        s0["stream_detail"][0]["send_buffer_bytes"].as_u64() > Some(0),
        "{s0}"
    );
    assert_eq!(s0["stream_detail"][1]["path"], "local");
    assert!(s0["stream_detail"][1]["rtt_ms"].is_null());
    assert_eq!(s0["paths"][0]["streams"], 1);
    assert_eq!(s0["paths"][1]["streams"], 3);
    assert_eq!(s0["paths"][1]["bytes"], 1096);
    // Dropped without completing: a failed session, gone from the list.
    drop(guard);
    let (_, _, body) = get(&d, "/metrics").await;
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains("tern_transfers_failed_total 1\n"), "{text}");
    assert!(text.contains("tern_sessions_active 0\n"), "{text}");
    let (_, _, body) = get(&d, "/api/v1/live").await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["sessions"].as_array().map(Vec::len), Some(0));
    assert_eq!(v["recent"][0]["outcome"], "failed");
    assert_eq!(v["recent"][0]["bytes"], 4096);
    assert_eq!(v["recent"][0]["per_stream_bytes"][0], 3000);
    let (_, _, body) = get(&Dashboard::default(), "/api/v1/live").await;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["daemon"], false);
}
