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
