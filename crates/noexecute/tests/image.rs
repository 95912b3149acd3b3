//! The image, built here by `scripts/build-image` (no container daemon), run as it would run
//! in a cluster: its own entrypoint and command from its unpacked root filesystem, in a chroot
//! (nothing of the host's files reaches it), as its user 65532, against a real kube-apiserver
//! with the controller's RBAC. It must evict an untolerated pod and keep a tolerating one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use noexecute_testkit::*;

const PLANE: &str = "image";

/// Build the image (once per test binary) and return its output directory.
fn image() -> Result<PathBuf> {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image");
    let built = Command::new(repo_root().join("scripts/build-image"))
        .arg(&out)
        .current_dir(repo_root())
        .output()
        .context("running scripts/build-image")?;
    ensure!(
        built.status.success(),
        "scripts/build-image failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    Ok(out)
}

/// The image config's entrypoint + cmd, and its user.
fn entrypoint(config: &serde_json::Value) -> (Vec<String>, String) {
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let c = &config["config"];
    let mut argv = strings(&c["Entrypoint"]);
    argv.extend(strings(&c["Cmd"]));
    (argv, c["User"].as_str().unwrap_or("").to_string())
}

#[tokio::test]
async fn the_image_s_own_entrypoint_evicts_a_pod_from_a_chroot() -> Result<()> {
    let out = image()?;
    let reference = std::fs::read_to_string(out.join("reference"))?;
    ensure!(
        reference
            .trim()
            .starts_with(&format!("noexecute:{}@sha256:", env!("CARGO_PKG_VERSION"))),
        "reference {reference:?}"
    );
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json"))?)?;
    let (argv, user) = entrypoint(&config);
    assert_eq!(argv, ["/noexecute", "run"]);
    assert_eq!(user, "65532:65532");
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");

    // The root filesystem is the image's and nothing else: the binary, the CA bundle.
    let rootfs = out.join("rootfs");
    let mut files: Vec<String> = walk(&rootfs)?
        .iter()
        .map(|p| {
            p.strip_prefix(&rootfs)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    assert_eq!(files, ["etc/ssl/certs/ca-certificates.crt", "noexecute"]);

    let plane = Plane::shared(PLANE, &[])?;
    plane.install_rbac()?;
    // The kubeconfig is mounted into the pod in a cluster; here it is copied into a scratch
    // copy of the root filesystem, readable by the image's user.
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image-root");
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    copy_tree(&rootfs, &root)?;
    std::fs::create_dir_all(root.join("etc/noexecute"))?;
    let kubeconfig = root.join("etc/noexecute/kubeconfig");
    std::fs::copy(&plane.controller_kubeconfig, &kubeconfig)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644))?;
    }
    let ns = TestNamespace::create(&plane.admin_client().await?, "image").await?;
    let selector = ns.node_selector();
    let root_arg = root.to_string_lossy().into_owned();
    let userspec_arg = format!("--userspec={user}");
    // The image's entrypoint, then `run` (its Cmd), then the flags a Deployment adds.
    let launcher = ["chroot", &userspec_arg, &root_arg, argv[0].as_str()];
    let mut controller = Controller::start_via(
        plane,
        &launcher,
        Path::new("/etc/noexecute/kubeconfig"),
        "image",
        &[
            "--admin-insecure",
            "--leader-elect=false",
            "--node-selector",
            &selector,
        ],
    )?;
    controller.wait_ready(Duration::from_secs(30)).await?;

    let node = ns.create_node("n", vec![]).await?;
    ns.create_pod(&pod("victim", &node, vec![], None)).await?;
    ns.create_pod(&pod(
        "stays",
        &node,
        vec![tolerate("example.com/t", None)],
        None,
    ))
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "x")).await?;
    let evicted = wait_evicted(&ns.pods(), "victim", Duration::from_secs(10)).await?;
    ensure!(evicted.last.is_some(), "the victim was never seen");
    // The tolerating pod stays over a whole window after the victim went.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let stays = ns.pods().get_opt("stays").await?;
        if stays
            .as_ref()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
        {
            bail!(
                "the tolerating pod was evicted; log: {}",
                controller.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // It ran as the image's user, not as root.
    let pid = controller.pid().context("the controller's pid")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or("");
    assert_eq!(uid, "65532", "{status}");
    controller.terminate(Duration::from_secs(10)).await?;
    Ok(())
}

fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(walk(&path)?);
        } else {
            files.push(path);
        }
    }
    Ok(files)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        let target = to.join(path.file_name().context("a file name")?);
        if path.is_dir() {
            copy_tree(&path, &target)?;
        } else {
            std::fs::copy(&path, &target)?;
        }
    }
    Ok(())
}
