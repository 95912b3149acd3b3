//! The one place a kube client is built: from an explicit kubeconfig (and context), or the
//! default chain ($KUBECONFIG, ~/.kube/config, the in-cluster service account).

use std::time::Duration;

use anyhow::{Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The client configuration for `kubeconfig` and `context`.
pub async fn config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<kube::Config> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    Ok(match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig or in-cluster config")?,
    })
}

/// A client for `kubeconfig` and `context`, speaking the HTTP versions of `version`.
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    version: HttpVersion,
) -> Result<kube::Client> {
    Ok(build(config(kubeconfig, context).await?, version)?)
}

/// The HTTP versions a connection to the API server may speak (`--api-http-version`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum HttpVersion {
    /// HTTP/2 when the server offers it (TLS ALPN `h2`), else HTTP/1.1: client-go's default.
    #[default]
    Auto,
    /// HTTP/1.1 only (TLS offers no ALPN protocol, as kube-rs's own client): a connection of
    /// the pool per request in flight, as client-go with `DISABLE_HTTP2` set.
    #[value(name = "http1")]
    Http1,
}

/// How long an HTTP/2 connection may go without a frame from the server before we ping it, and
/// how long the ping may go unanswered before the connection is closed: client-go's
/// `ReadIdleTimeout` and `PingTimeout`, the figures every other component of the cluster uses.
const PING_AFTER_IDLE: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// HTTP/2 flow control: how much the server may send before we have read it, on the whole
/// connection and on each stream. client-go's figures (1 GiB and 4 MiB; hyper's defaults are
/// 5 and 2 MiB): a watch whose reader is busy holds up at most its own stream, never the
/// connection's evictions and other watches.
const CONNECTION_WINDOW: u32 = 1 << 30;
const STREAM_WINDOW: u32 = 4 << 20;

/// TCP keep-alive: idle time before the first probe and time between probes (client-go's).
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// A client for `config` that speaks HTTP/2 when the API server offers it, as client-go does
/// (with `version` [`HttpVersion::Http1`], HTTP/1.1 only). Every command that talks to the API
/// server builds its client here.
///
/// kube's own stack speaks HTTP/1.1 only: one TCP and TLS connection for every request in
/// flight, so a burst of evictions opens tens of new connections on a busy machine, each
/// a TLS handshake before its request can start (`docs/benchmarks.md`). Here TLS offers `h2`
/// and `http/1.1` (ALPN) and every request is a stream of one connection; a server or proxy
/// that picks HTTP/1.1 gets HTTP/1.1. What kube's stack does is kept: the connect timeout over
/// TCP and TLS and the read and write timeouts (`hyper-timeout`, as kube), the TLS server name,
/// the layers for the cluster URL, the credentials (tokens refreshed as kube refreshes them),
/// extra and impersonation headers, and kube's retries if `config.default_retry` is set. Left
/// out: kube's trace layer (debug spans per request, an error log on every 5xx: the executor
/// logs its own outcomes), the expiry of exec-plugin client certificates (nothing reads it),
/// and client-go's environment overrides of the ping timings.
///
/// A dead HTTP/2 connection is found by pings: after [`PING_AFTER_IDLE`] without a frame,
/// unanswered within [`PING_TIMEOUT`]; every stream on it then fails and the watches start
/// again on a new connection. The server's limit on streams per connection (1,000 for
/// kube-apiserver) is a queue here, not a second connection.
///
/// With a proxy in `config` this is kube's own client: its proxy tunnels are not rebuilt here.
pub fn build(config: kube::Config, version: HttpVersion) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt as _;

    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    // TCP keep-alive as client-go's dialer sets it (30 s idle, then probes 30 s apart): it keeps
    // NAT and load balancer state alive, and over HTTP/1.1, which has no pings, the kernel
    // finds a peer that has gone (after about 5 minutes, the kernel's 9 probes).
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http.set_keepalive_interval(Some(TCP_KEEPALIVE));
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| {
            kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
        })?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let tls = match version {
        HttpVersion::Auto => tls.enable_all_versions().wrap_connector(http),
        HttpVersion::Http1 => tls.enable_http1().wrap_connector(http),
    };
    let mut connector = hyper_timeout::TimeoutConnector::new(tls);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .http2_keep_alive_interval(PING_AFTER_IDLE)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .http2_initial_connection_window_size(CONNECTION_WINDOW)
            .http2_initial_stream_window_size(STREAM_WINDOW)
            .build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| {
            tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())
        }))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http_client);
    Ok(kube::client::ClientBuilder::new(service, config.default_namespace).build())
}

/// The live controller's two clients, each with its own connection: `api` for the watches, the
/// lists and the evictions, `lease` for leader election alone, so that a renewal never waits
/// behind a relist's pages or a burst of evictions on a shared connection (or, over HTTP/1.1,
/// for a connection of the pool).
pub struct RunClients {
    pub api: kube::Client,
    pub lease: kube::Client,
}

impl RunClients {
    pub fn new(config: kube::Config, version: HttpVersion) -> Result<RunClients, kube::Error> {
        Ok(RunClients {
            api: build(config.clone(), version)?,
            lease: build(config, version)?,
        })
    }
}

/// Which DRA resources the API server serves: ResourceSlices and ResourceClaims in
/// `resource.k8s.io/v1` (Kubernetes 1.34 and later), DeviceTaintRules in `v1beta2` (with the
/// `DRADeviceTaintRules` gate). A group or version that is not served is a `false`, not an error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DraServed {
    pub slices_and_claims: bool,
    pub rules: bool,
}

pub async fn dra_served(client: &kube::Client) -> Result<DraServed, kube::Error> {
    async fn resources(
        client: &kube::Client,
        group_version: &str,
    ) -> Result<Vec<String>, kube::Error> {
        match client.list_api_group_resources(group_version).await {
            Ok(list) => Ok(list.resources.into_iter().map(|r| r.name).collect()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
    let v1 = resources(client, "resource.k8s.io/v1").await?;
    let served = |names: &[String], name: &str| names.iter().any(|n| n == name);
    Ok(DraServed {
        slices_and_claims: served(&v1, "resourceslices") && served(&v1, "resourceclaims"),
        rules: served(
            &resources(client, "resource.k8s.io/v1beta2").await?,
            "devicetaintrules",
        ),
    })
}
