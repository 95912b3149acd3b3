//! The admin server: `/healthz` (the process is alive and its loop turns), `/readyz` (caches
//! synced and, with leader election, leading or standing by), `/metrics` and `/status` (the
//! pending evictions, `super::status`).
//!
//! As kube-controller-manager serves its own: over TLS, with `/metrics` and `/status` (which
//! name pods) only for callers the API server authenticates and authorizes (`super::access`);
//! the probes stay open. `--admin-insecure` serves everything over plain HTTP without
//! authentication, for local use.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::access::{Access, Decision};

/// Health as the probes see it. Written by the controller, read by the server.
#[derive(Debug)]
pub struct Health {
    /// Both watches have completed their initial list.
    pub synced: AtomicBool,
    /// Leader election is off, or the lease loop is running (leading or standing by).
    pub electing: AtomicBool,
    /// The monotonic origin of `heartbeat_ms`: both sides of the liveness comparison read the
    /// same clock, so a wall-clock jump neither fails the probe nor hides a stall.
    origin: Instant,
    /// Milliseconds after `origin` of the controller loop's last turn (0: none yet).
    heartbeat_ms: AtomicI64,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            synced: AtomicBool::new(false),
            electing: AtomicBool::new(false),
            origin: Instant::now(),
            heartbeat_ms: AtomicI64::new(0),
        }
    }
}

/// The loop wakes at least every few seconds; a minute without a turn means it is stuck.
pub const STALL: Duration = Duration::from_secs(60);

impl Health {
    pub fn ready(&self) -> bool {
        self.synced.load(Ordering::Relaxed) && self.electing.load(Ordering::Relaxed)
    }

    /// The controller loop turned (at `at`, a monotonic instant).
    pub fn beat(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.origin).as_millis() as i64;
        self.heartbeat_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// Whether the loop has not turned for longer than `limit`, as of `now`.
    pub fn stalled(&self, now: Instant, limit: Duration) -> bool {
        let last = self.heartbeat_ms.load(Ordering::Relaxed);
        if last == 0 {
            return false;
        }
        let now = now.saturating_duration_since(self.origin).as_millis() as i64;
        now - last > limit.as_millis() as i64
    }
}

/// A request for the controller loop's status (of one namespace's pods, or all).
pub struct StatusRequest {
    pub namespace: Option<String>,
    /// At most this many rows (the earliest deadlines).
    pub limit: usize,
    pub reply: oneshot::Sender<super::status::Status>,
}

/// Asks the controller loop for its status; the loop answers on the enclosed channel.
pub type StatusRequests = mpsc::Sender<StatusRequest>;

/// How the admin server is reached.
pub enum Security {
    /// Plain HTTP, nobody asked who they are.
    Insecure,
    /// TLS, and `/metrics` and `/status` only for callers `access` allows.
    Tls {
        config: Box<rustls::ServerConfig>,
        access: Arc<Access>,
    },
}

struct AdminState {
    registry: Registry,
    health: Arc<Health>,
    status: StatusRequests,
    access: Option<Arc<Access>>,
}

/// The gate in front of `/metrics` and `/status`.
async fn guard(State(state): State<Arc<AdminState>>, request: Request, next: Next) -> Response {
    if let Some(access) = &state.access {
        let decision = access
            .check(
                request.headers().get(header::AUTHORIZATION),
                request.uri().path(),
            )
            .await;
        let message = match &decision {
            Decision::Allowed => return next.run(request).await,
            Decision::Unauthenticated => {
                "Unauthorized: a bearer token the API server accepts is required\n".to_string()
            }
            Decision::Forbidden(user) => format!(
                "Forbidden: user \"{user}\" may not get path \"{}\"\n",
                request.uri().path()
            ),
            Decision::Unavailable => "the API server could not be asked who you are (or too many callers are being checked); try again\n".to_string(),
        };
        return (decision.status(), message).into_response();
    }
    next.run(request).await
}

/// Rows `/status` returns unless `?limit=` says otherwise, and the most it ever returns: the
/// controller loop formats no more than this, however many evictions are pending.
pub const STATUS_LIMIT: usize = 500;
pub const STATUS_LIMIT_MAX: usize = 5_000;

/// `/status[?namespace=NS][&limit=N]`. A few requests wait at a time; more get 503 rather than
/// queue up work for the controller loop.
async fn status(State(state): State<Arc<AdminState>>, request: Request) -> Response {
    let query = request.uri().query().unwrap_or_default().to_string();
    drop(request);
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
            .filter(|v| !v.is_empty())
    };
    let namespace = param("namespace");
    let limit = match param("limit").map(|l| l.parse::<usize>()) {
        None => STATUS_LIMIT,
        Some(Ok(n)) if n > 0 => n.min(STATUS_LIMIT_MAX),
        Some(_) => {
            return (
                StatusCode::BAD_REQUEST,
                "limit must be a positive whole number\n",
            )
                .into_response();
        }
    };
    let (reply, answer) = oneshot::channel();
    match state.status.try_send(StatusRequest {
        namespace,
        limit,
        reply,
    }) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(_)) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "too many status requests; try again\n",
            )
                .into_response();
        }
        Err(mpsc::error::TrySendError::Closed(_)) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the controller loop is not running\n",
            )
                .into_response();
        }
    }
    match tokio::time::timeout(Duration::from_secs(10), answer).await {
        Ok(Ok(status)) => match serde_json::to_string(&status) {
            Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
            Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n").into_response(),
        },
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the controller loop did not answer\n",
        )
            .into_response(),
    }
}

async fn healthz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    if state.health.stalled(Instant::now(), STALL) {
        (StatusCode::SERVICE_UNAVAILABLE, "controller loop stalled\n")
    } else {
        (StatusCode::OK, "ok\n")
    }
}

async fn readyz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    if state.health.ready() {
        (StatusCode::OK, "ok\n")
    } else if !state.health.synced.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "leader election not running\n",
        )
    }
}

async fn metrics(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            "encoding failed\n".to_string(),
        ),
    }
}

/// Bind `addr` and serve until `shutdown`. Returns the bound address (for port 0).
pub async fn serve(
    addr: SocketAddr,
    registry: Registry,
    health: Arc<Health>,
    status_requests: StatusRequests,
    security: Security,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let (tls, access) = match security {
        Security::Insecure => (None, None),
        Security::Tls { config, access } => (Some(config), Some(access)),
    };
    let state = Arc::new(AdminState {
        registry,
        health,
        status: status_requests,
        access,
    });
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route_layer(middleware::from_fn_with_state(state.clone(), guard));
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = match tls {
        Some(config) => tokio::spawn(super::tls::serve(listener, *config, app, shutdown)),
        None => tokio::spawn(async move {
            let result = axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
            if let Err(e) = result {
                tracing::error!(error = %e, "admin server failed");
            }
        }),
    };
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_uses_one_monotonic_clock() {
        let health = Health::default();
        let t0 = health.origin;
        assert!(
            !health.stalled(t0 + Duration::from_secs(3600), STALL),
            "no turn yet"
        );
        health.beat(t0 + Duration::from_secs(10));
        assert!(!health.stalled(t0 + Duration::from_secs(69), STALL));
        assert!(health.stalled(t0 + Duration::from_secs(71), STALL));
        // Nothing here reads the wall clock, so a jump of it cannot change the answer.
        health.beat(t0 + Duration::from_secs(100));
        assert!(!health.stalled(t0 + Duration::from_secs(101), STALL));
    }
}
