//! The one place a kube client is built: from an explicit kubeconfig (and context), or the
//! default chain ($KUBECONFIG, ~/.kube/config, the in-cluster service account).

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

/// A client for `kubeconfig` and `context`.
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<kube::Client> {
    Ok(kube::Client::try_from(config(kubeconfig, context).await?)?)
}
