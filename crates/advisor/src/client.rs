//! A small client of the advisor's API, for `tern advise`, `tern cp
//! --advisor` and tests: plain HTTP/1.1 over hyper (already in the tree
//! under axum), one connection per request, a deadline on each.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::advice::Advice;
use crate::model::{Measurement, ReportOutcome, Target, TargetRequest};
use crate::report::TransferReport;

/// Where the advisor listens unless told: loopback, tern's port + 1.
pub const DEFAULT_URL: &str = "http://127.0.0.1:4748";

/// A client of one advisor.
#[derive(Debug, Clone)]
pub struct AdvisorClient {
    /// `host:port` to connect to.
    authority: String,
    /// Path prefix before `/api/v1` (empty unless behind a proxy).
    prefix: String,
    /// The URL as given, for messages.
    url: String,
    /// Deadline of one request.
    timeout: Duration,
}

/// Escapes what a path segment cannot carry (`%` in IPv6 zones).
fn segment(host: &str) -> String {
    host.replace('%', "%25")
}

impl AdvisorClient {
    /// A client for `url` (`http://HOST[:PORT][/PREFIX]`).
    pub fn new(url: &str) -> Result<AdvisorClient, Error> {
        let bad = |why: &str| Error::Config(format!("advisor URL '{url}': {why}"));
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// is supported"))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let has_port = match authority.rfind(']') {
            Some(close) => authority[close..].contains(':'),
            None => authority.contains(':'),
        };
        let authority = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(AdvisorClient {
            authority,
            prefix: prefix.to_string(),
            url: url.trim_end_matches('/').to_string(),
            timeout: Duration::from_secs(10),
        })
    }

    /// The same client with another per-request deadline.
    pub fn with_timeout(mut self, timeout: Duration) -> AdvisorClient {
        self.timeout = timeout;
        self
    }

    /// The URL it talks to.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn fail(&self, message: impl Into<String>, status: Option<u16>) -> Error {
        Error::Client {
            url: self.url.clone(),
            message: message.into(),
            status,
        }
    }

    /// Sends one request; returns the status and the body.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), Error> {
        tokio::time::timeout(self.timeout, self.exchange(method, path, body))
            .await
            .map_err(|_| self.fail(format!("no answer within {:?}", self.timeout), None))?
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), Error> {
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| self.fail(format!("cannot connect: {e}"), None))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.fail(format!("HTTP handshake: {e}"), None))?;
        let driver = tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header(header::HOST, &self.authority)
            .header(header::ACCEPT, "application/json");
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| self.fail(format!("request: {e}"), None))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| self.fail(format!("request failed: {e}"), None))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| self.fail(format!("reading the answer: {e}"), Some(status.as_u16())))?
            .to_bytes();
        driver.abort();
        Ok((status, bytes))
    }

    /// Sends a request and decodes a JSON answer; an error status becomes
    /// [`Error::Client`] with the server's message.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, Error> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| self.fail(format!("encoding: {e}"), None))?;
        let (status, bytes) = self.raw(method, path, body).await?;
        if !status.is_success() {
            let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(200).collect());
            return Err(self.fail(format!("{status}: {message}"), Some(status.as_u16())));
        }
        let body: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
        serde_json::from_slice(body)
            .map_err(|e| self.fail(format!("unexpected answer: {e}"), Some(status.as_u16())))
    }

    /// Advice as the server sent it (JSON), for printing unchanged.
    pub async fn advice_json(&self, host: &str) -> Result<serde_json::Value, Error> {
        self.call(
            Method::GET,
            &format!("/api/v1/advice/{}", segment(host)),
            None::<&()>,
        )
        .await
    }

    /// Advice for a host; advice whose figures no network can have
    /// ([`Advice::check`]) is refused.
    pub async fn advice(&self, host: &str) -> Result<Advice, Error> {
        let advice: Advice = self
            .call(
                Method::GET,
                &format!("/api/v1/advice/{}", segment(host)),
                None::<&()>,
            )
            .await?;
        self.checked(advice)
    }

    /// `advice` if its figures are ones a network can have, else an error
    /// that says which is not.
    pub fn checked(&self, advice: Advice) -> Result<Advice, Error> {
        let why = match advice.check() {
            Ok(()) => return Ok(advice),
            Err(Error::BadRequest(why)) => why,
            Err(e) => e.to_string(),
        };
        Err(self.fail(format!("advice out of range: {why}"), Some(200)))
    }

    /// Reports a finished transfer.
    pub async fn report(&self, report: &TransferReport) -> Result<ReportOutcome, Error> {
        self.call(Method::POST, "/api/v1/report", Some(report))
            .await
    }

    /// Adds a target.
    pub async fn add_target(&self, req: &TargetRequest) -> Result<Target, Error> {
        self.call(Method::POST, "/api/v1/targets", Some(req)).await
    }

    /// Every target.
    pub async fn targets(&self) -> Result<Vec<Target>, Error> {
        let v: serde_json::Value = self
            .call(Method::GET, "/api/v1/targets", None::<&()>)
            .await?;
        serde_json::from_value(v["targets"].clone())
            .map_err(|e| self.fail(format!("unexpected answer: {e}"), None))
    }

    /// Measurements of a host, newest first.
    pub async fn history(&self, host: &str, limit: u32) -> Result<Vec<Measurement>, Error> {
        let path = format!("/api/v1/history/{}?limit={limit}", segment(host));
        let v: serde_json::Value = self.call(Method::GET, &path, None::<&()>).await?;
        serde_json::from_value(v["measurements"].clone())
            .map_err(|e| self.fail(format!("unexpected answer: {e}"), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let c = AdvisorClient::new("http://127.0.0.1:4748").unwrap();
        assert_eq!(
            (c.authority.as_str(), c.prefix.as_str()),
            ("127.0.0.1:4748", "")
        );
        let c = AdvisorClient::new("http://advisor.example.org/tern/").unwrap();
        assert_eq!(
            (c.authority.as_str(), c.prefix.as_str()),
            ("advisor.example.org:80", "/tern")
        );
        let c = AdvisorClient::new("http://[::1]:9000").unwrap();
        assert_eq!(c.authority, "[::1]:9000");
        let c = AdvisorClient::new("http://[::1]").unwrap();
        assert_eq!(c.authority, "[::1]:80");
        assert!(AdvisorClient::new("https://x").is_err());
        assert!(AdvisorClient::new("http://").is_err());
        assert_eq!(segment("fe80::1%eth0"), "fe80::1%25eth0");
    }

    #[tokio::test]
    async fn nothing_listening_is_a_retryable_client_error() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let c = AdvisorClient::new(&format!("http://{addr}")).unwrap();
        let e = c.advice("h").await.unwrap_err();
        assert!(matches!(e, Error::Client { status: None, .. }), "{e}");
        assert!(e.is_retryable());
    }
}
