//! toxiproxy (Shopify's fault-injecting TCP proxy), driven through its HTTP API: one proxy per
//! replica between it and kube-apiserver, cut, delayed or slowed on the nemesis's word.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct Toxiproxy {
    child: tokio::process::Child,
    api: std::net::SocketAddr,
}

impl Toxiproxy {
    /// Starts `toxiproxy-server` on a free loopback port and waits for its API.
    pub async fn start(binary: &Path, log: &Path) -> Result<Toxiproxy> {
        let port = free_port()?;
        let out = std::fs::File::create(log)?;
        let child = tokio::process::Command::new(binary)
            .args(["-host", "127.0.0.1", "-port", &port.to_string()])
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let proxy = Toxiproxy {
            child,
            api: ([127, 0, 0, 1], port).into(),
        };
        for _ in 0..100 {
            if proxy.call("GET", "/version", None).await.is_ok() {
                return Ok(proxy);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("toxiproxy did not answer on {} within 10 s", proxy.api)
    }

    /// One HTTP/1.1 request (Connection: close); the body of a 2xx answer.
    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<String> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect(self.api),
        )
        .await??;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: toxiproxy\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
            .await??;
        let status: u16 = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let text = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        if !(200..300).contains(&status) {
            bail!("toxiproxy {method} {path}: {status} {text}");
        }
        Ok(text)
    }

    /// Creates proxy `name` to `upstream` on a free loopback port; returns that port.
    pub async fn proxy(&self, name: &str, upstream: &str) -> Result<u16> {
        let port = free_port()?;
        self.call(
            "POST",
            "/proxies",
            Some(&json!({"name": name, "listen": format!("127.0.0.1:{port}"), "upstream": upstream, "enabled": true})),
        )
        .await?;
        Ok(port)
    }

    /// Enables or disables a proxy: disabled, it closes every connection and refuses new ones.
    pub async fn enable(&self, name: &str, enabled: bool) -> Result<()> {
        self.call(
            "POST",
            &format!("/proxies/{name}"),
            Some(&json!({"enabled": enabled})),
        )
        .await
        .map(|_| ())
    }

    /// Adds a toxic (`latency`, `bandwidth`, `reset_peer`, `timeout`, ...) downstream or
    /// upstream.
    pub async fn toxic(
        &self,
        proxy: &str,
        name: &str,
        kind: &str,
        stream: &str,
        attributes: Value,
    ) -> Result<()> {
        self.call(
            "POST",
            &format!("/proxies/{proxy}/toxics"),
            Some(&json!({"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes})),
        )
        .await
        .map(|_| ())
    }

    /// Removes every toxic of a proxy and enables it.
    pub async fn heal(&self, proxy: &str) -> Result<()> {
        let text = self
            .call("GET", &format!("/proxies/{proxy}/toxics"), None)
            .await?;
        let toxics: Vec<Value> = serde_json::from_str(&text).unwrap_or_default();
        for t in toxics {
            if let Some(name) = t.get("name").and_then(Value::as_str) {
                self.call("DELETE", &format!("/proxies/{proxy}/toxics/{name}"), None)
                    .await?;
            }
        }
        self.enable(proxy, true).await
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
