//! The API server's formats, as requests speak them: protobuf (`application/vnd.kubernetes.protobuf`,
//! the API server's own format, which client-go speaks for built-in types) or JSON.
//!
//! In protobuf, a request accepts protobuf and then JSON, and each answer is read by the
//! content type it declares, so a proxy that passes only JSON costs nothing. An object body
//! (a `DeleteOptions`, an `Eviction`, an `Event`) is protobuf too; a patch is JSON in any
//! case, as patches have no protobuf form.
//!
//! A refusal of protobuf (a `406` to a request that accepted it, a `415` to a protobuf body)
//! switches [`Requests`] to JSON from then on (the list-watches switch until their next full
//! list, [`super::listwatch`]). A read is sent again at once, in JSON. A write is not:
//! kube-apiserver refuses a format before it acts, but a proxy in front of it need not, so
//! the write's refusal is its answer, and the caller's retry (which reads first) is JSON.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use serde::de::DeserializeOwned;

use crate::adapters::proto::{self, Decode, DecodeError, StatusReport};

/// The format requests ask for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ContentType {
    /// `application/vnd.kubernetes.protobuf`, with JSON accepted as well.
    #[default]
    Protobuf,
    /// `application/json` only.
    Json,
}

impl ContentType {
    pub fn accept(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            ContentType::Protobuf => "application/vnd.kubernetes.protobuf, application/json",
            ContentType::Json => "application/json",
        })
    }
}

/// One failed request or response.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Request(#[from] kube::Error),
    #[error("reading the response: {0}")]
    Body(String),
    #[error("{code} {reason}: {message}")]
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    #[error("decoding: {0}")]
    Json(#[from] serde_json::Error),
    #[error("decoding: {0}")]
    Proto(#[from] DecodeError),
    #[error("unexpected content type {0:?}")]
    ContentType(String),
    #[error("timed out")]
    TimedOut,
}

impl Failure {
    pub fn gone(&self) -> bool {
        matches!(self, Failure::Status { code: 410, .. })
    }

    /// The API server's answer, when it answered with an error: its code and message.
    pub fn status(&self) -> Option<(u16, &str)> {
        match self {
            Failure::Status { code, message, .. } => Some((*code, message)),
            Failure::Request(kube::Error::Api(s)) => Some((s.code, &s.message)),
            _ => None,
        }
    }
}

impl From<StatusReport> for Failure {
    fn from(s: StatusReport) -> Self {
        Failure::Status {
            code: s.code,
            reason: s.reason,
            message: s.message,
        }
    }
}

/// The format of a response, from its content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Protobuf,
    Json,
}

pub fn wire(response: &http::Response<Body>) -> Result<Wire, Failure> {
    let ct = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if ct.starts_with(proto::MEDIA_TYPE) {
        Ok(Wire::Protobuf)
    } else if ct.starts_with("application/json") {
        Ok(Wire::Json)
    } else {
        Err(Failure::ContentType(ct.to_string()))
    }
}

/// Objects both formats decode into.
pub trait Object: Decode + DeserializeOwned + Clone + Send + 'static {}
impl<K: Decode + DeserializeOwned + Clone + Send + 'static> Object for K {}

/// A refusal of protobuf itself (not of what was asked): a `406` to a request that accepted
/// protobuf, or a `415` to a protobuf body.
pub fn refused(status: StatusCode, protobuf_body: bool) -> bool {
    status == StatusCode::NOT_ACCEPTABLE
        || (protobuf_body && status == StatusCode::UNSUPPORTED_MEDIA_TYPE)
}

/// Whether a built request carries a protobuf body.
fn has_protobuf_body(request: &http::Request<Vec<u8>>) -> bool {
    request
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(proto::MEDIA_TYPE.as_bytes()))
}

pub async fn body(response: http::Response<Body>) -> Result<Bytes, Failure> {
    response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| Failure::Body(e.to_string()))
}

/// An error response's `Status`, in whichever format it came; its HTTP code if it has none.
pub async fn error_response(response: http::Response<Body>) -> Failure {
    let code = response.status().as_u16();
    let wire = wire(&response);
    let body = match body(response).await {
        Ok(b) => b,
        Err(e) => return e,
    };
    let report = match wire {
        Ok(Wire::Protobuf) => proto::status(body.clone()).ok(),
        _ => serde_json::from_slice::<kube::core::Status>(&body)
            .ok()
            .map(|s| StatusReport {
                code: s.code,
                reason: s.reason,
                message: s.message,
            }),
    };
    let mut report = report.unwrap_or_else(|| StatusReport {
        code,
        reason: String::new(),
        message: String::from_utf8_lossy(&body).chars().take(200).collect(),
    });
    if report.code == 0 {
        report.code = code;
    }
    report.into()
}

/// A request as [`kube::core::Request`] builds it (a JSON body, if any).
pub type Built = Result<http::Request<Vec<u8>>, kube::core::request::Error>;

/// Replace a built request's body with a protobuf one.
pub fn protobuf_body(request: Built, body: Vec<u8>) -> Built {
    let mut request = request?;
    request
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(proto::MEDIA_TYPE));
    *request.body_mut() = body;
    Ok(request)
}

/// Single requests (GET, PATCH, DELETE, POST) in the configured format. Cheap to clone; the
/// clones share the switch to JSON after a refusal (the executor and the events share one).
#[derive(Clone)]
pub struct Requests {
    client: Client,
    /// JSON only: configured so, or protobuf was refused.
    json: Arc<AtomicBool>,
}

impl Requests {
    pub fn new(client: Client, content_type: ContentType) -> Requests {
        Requests {
            client,
            json: Arc::new(AtomicBool::new(content_type == ContentType::Json)),
        }
    }

    /// The format asked for now.
    pub fn content_type(&self) -> ContentType {
        if self.json.load(Ordering::Relaxed) {
            ContentType::Json
        } else {
            ContentType::Protobuf
        }
    }

    /// Send the request `build` makes for the current format. A refusal of protobuf switches
    /// to JSON; a read is then sent again, a write answers with the refusal. An error answer
    /// is a [`Failure::Status`]. The answer's format is given with its body.
    async fn send(
        &self,
        build: impl Fn(ContentType) -> Built,
    ) -> Result<(Result<Wire, Failure>, Bytes), Failure> {
        loop {
            let content_type = self.content_type();
            let mut request =
                build(content_type).map_err(|e| Failure::Request(kube::Error::BuildRequest(e)))?;
            request.headers_mut().insert(ACCEPT, content_type.accept());
            let read = request.method() == http::Method::GET;
            let protobuf_body = has_protobuf_body(&request);
            let response = self.client.send(request.map(Body::from)).await?;
            let status = response.status();
            if content_type == ContentType::Protobuf && refused(status, protobuf_body) {
                if !self.json.swap(true, Ordering::Relaxed) {
                    tracing::warn!(%status, "the API server refused protobuf; using JSON for requests from now on");
                }
                if read {
                    continue;
                }
            }
            if !status.is_success() {
                return Err(error_response(response).await);
            }
            let wire = wire(&response);
            return Ok((wire, body(response).await?));
        }
    }

    /// Send, and decode the answer as a `K`.
    pub async fn object<K: Object>(
        &self,
        build: impl Fn(ContentType) -> Built,
    ) -> Result<K, Failure> {
        let (wire, body) = self.send(build).await?;
        decode(wire?, body)
    }

    /// Send, and read the answer only for whether it succeeded (a success in a format not
    /// read here is a success).
    pub async fn done(&self, build: impl Fn(ContentType) -> Built) -> Result<(), Failure> {
        self.send(build).await.map(|_| ())
    }
}

/// An object's body, by its format.
pub fn decode<K: Object>(wire: Wire, body: Bytes) -> Result<K, Failure> {
    match wire {
        Wire::Protobuf => Ok(proto::object(body)?),
        Wire::Json => Ok(serde_json::from_slice(&body)?),
    }
}
