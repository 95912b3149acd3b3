//! The admin server's TLS: a certificate and key from files (a cert-manager Secret, say), or a
//! self-signed pair made at start (as kube-controller-manager makes one when given none), and
//! the accept loop that serves the router over it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// A handshake that takes longer than this is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's TLS configuration from PEM files, or self-signed for `names` when none are
/// given.
pub fn server_config(
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
    names: Vec<String>,
) -> Result<rustls::ServerConfig> {
    let (certs, key) = match (cert_file, key_file) {
        (Some(cert), Some(key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .with_context(|| format!("--admin-tls-cert-file {}", cert.display()))?;
            anyhow::ensure!(
                !certs.is_empty(),
                "--admin-tls-cert-file {}: no certificate in it",
                cert.display()
            );
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("--admin-tls-key-file {}", key.display()))?;
            (certs, key)
        }
        (None, None) => {
            let made = rcgen::generate_simple_self_signed(names)
                .context("making a self-signed certificate for the admin server")?;
            let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
                .map_err(|e| anyhow::anyhow!("the self-signed key: {e}"))?;
            (vec![made.cert.der().clone()], key)
        }
        _ => anyhow::bail!("--admin-tls-cert-file and --admin-tls-key-file go together"),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the admin server's certificate and key do not fit together")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The names a self-signed certificate is made for: localhost, the loopback addresses, this
/// host's name and the pod's IP when known.
pub fn self_signed_names() -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    for var in ["POD_IP", "POD_NAME", "HOSTNAME"] {
        if let Ok(v) = std::env::var(var)
            && !v.is_empty()
            && !names.contains(&v)
        {
            names.push(v);
        }
    }
    names
}

/// Serve `app` over TLS on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    config: rustls::ServerConfig,
    app: Router,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(Arc::new(config));
    loop {
        let (tcp, peer): (_, SocketAddr) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "admin server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "admin server: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = TowerToHyperService::new(app);
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection(TokioIo::new(tls), service);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                result = connection => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "admin server: connection ended");
                    }
                }
            }
        });
    }
}
