//! The admin server: `/healthz` (the process is alive and its loop turns), `/readyz` (caches
//! synced and, with leader election, leading or standing by) and `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

/// Health as the probes see it. Written by the controller, read by the server.
#[derive(Debug, Default)]
pub struct Health {
    /// Both watches have completed their initial list.
    pub synced: AtomicBool,
    /// Leader election is off, or the lease loop is running (leading or standing by).
    pub electing: AtomicBool,
    /// Wall-clock milliseconds of the controller loop's last turn.
    pub heartbeat_ms: AtomicI64,
}

impl Health {
    pub fn ready(&self) -> bool {
        self.synced.load(Ordering::Relaxed) && self.electing.load(Ordering::Relaxed)
    }
}

struct AdminState {
    registry: Registry,
    health: Arc<Health>,
}

async fn healthz(State(state): State<Arc<AdminState>>) -> impl IntoResponse {
    // The loop wakes at least every few seconds; a minute without a turn means it is stuck.
    let last = state.health.heartbeat_ms.load(Ordering::Relaxed);
    let now = crate::cli::wall_clock().as_millis();
    if last == 0 || now - last < 60_000 {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "controller loop stalled\n")
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
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let state = Arc::new(AdminState { registry, health });
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "admin server failed");
        }
    });
    Ok((bound, task))
}
