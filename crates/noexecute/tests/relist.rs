//! A list-watch that falls out of the API server's history relists, in protobuf and in JSON,
//! read in pages or as a streaming list, against a real server: a `410 Gone` for the watch, then `Init`, the objects as they are now
//! (what was deleted meanwhile gone, what was created there), `InitDone`, and the watch again.
//!
//! A real server serves a watch from an old resource version out of its watch cache, so this
//! plane runs without one (`--watch-cache=false`: watches go to etcd) and compacts etcd every
//! second (`--etcd-compaction-interval=1s`): a resource version a few seconds old is then gone.
//! The server answers such a watch with `200` and an ERROR event holding a `410` `Status`
//! (a mutation that keeps watching after it fails this test); the watch's own answer being
//! a `410` is accepted too.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, PostParams, VersionMatch};
use kube::runtime::watcher::Event;
use noexecute::adapters::slim::SlimPod;
use noexecute::controller::listwatch::{self, ContentType, Error, InitialList};
use noexecute_testkit::{Plane, TestNamespace, pod};

const APISERVER_ARGS: &str = "--watch-cache=false --etcd-compaction-interval=1s";

fn plane() -> Result<Plane> {
    Plane::up_with_env(
        "relist",
        &[],
        &[("NOEXECUTE_APISERVER_ARGS", APISERVER_ARGS)],
    )
}

/// A client through `real` that counts the streaming lists asked for
/// (`sendInitialEvents=true`).
fn counting_streams(real: kube::Client) -> (kube::Client, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (real, counter) = (real.clone(), counter.clone());
        async move {
            if req
                .uri()
                .query()
                .unwrap_or_default()
                .contains("sendInitialEvents=true")
            {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            real.send(req).await
        }
    });
    (kube::Client::new(service, "default"), count)
}

async fn next(
    stream: &mut (impl Stream<Item = Result<Event<SlimPod>, Error>> + Unpin),
) -> Result<Result<Event<SlimPod>, Error>> {
    tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .context("nothing from the list-watch within 30 s")?
        .ok_or_else(|| anyhow!("the list-watch ended"))
}

/// The names of the pods listed, through `InitDone` (which must follow `Init`).
async fn listed(
    stream: &mut (impl Stream<Item = Result<Event<SlimPod>, Error>> + Unpin),
) -> Result<BTreeSet<String>> {
    ensure!(
        matches!(next(stream).await?, Ok(Event::Init)),
        "a list starts with Init"
    );
    let mut names = BTreeSet::new();
    loop {
        match next(stream).await? {
            Ok(Event::InitApply(p)) => {
                names.insert(p.metadata.name.clone().context("a listed pod's name")?);
            }
            Ok(Event::InitDone) => return Ok(names),
            other => bail!("while listing: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_older_than_etcds_history_relists_in_both_formats() -> Result<()> {
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let modes = [ContentType::Protobuf, ContentType::Json]
        .into_iter()
        .flat_map(|f| [InitialList::Pages, InitialList::Stream].map(|i| (f, i)));
    for (format, initial) in modes {
        let format = (format, initial);
        let ns = TestNamespace::create(&admin, "relist").await?;
        let node = ns.create_node("n", vec![]).await?;
        for name in ["a", "b"] {
            ns.create_pod(&pod(name, &node, vec![], None)).await?;
        }
        let (client, streamed) = counting_streams(admin.clone());
        let mut stream = listwatch::list_watch::<SlimPod>(
            client,
            listwatch::Config {
                path: format!("/api/v1/namespaces/{}/pods", ns.name),
                page_size: 500,
                labels: None,
                fields: None,
                content_type: format.0,
                // Short, so that a streaming list's watch (which goes on from the list
                // unpolled) ends and is started again from where it stood.
                timeout_secs: 2,
                initial,
            },
        )
        .boxed();
        let first = listed(&mut stream).await?;
        ensure!(
            first == BTreeSet::from(["a".into(), "b".into()]),
            "{first:?}"
        );
        // While the stream is not polled (its watch not yet started, or a streaming list's
        // watch running on unread): `a` goes, `c` comes.
        ns.pods()
            .delete(
                "a",
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
            )
            .await?;
        ns.create_pod(&pod("c", &node, vec![], None)).await?;
        // A resource version at least as new as any the stream will watch from.
        let listed_at = ns
            .pods()
            .list_metadata(&ListParams::default())
            .await?
            .metadata
            .resource_version
            .context("the list's resource version")?;

        // Then etcd's history moves past the list: writes, until a list at that exact
        // resource version is refused as too old (bounded).
        let churn: kube::Api<ConfigMap> = kube::Api::namespaced(admin.clone(), &ns.name);
        let exact = ListParams {
            resource_version: Some(listed_at.clone()),
            version_match: Some(VersionMatch::Exact),
            ..ListParams::default()
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut writes = 0;
        loop {
            match ns.pods().list_metadata(&exact).await {
                Err(kube::Error::Api(s)) if s.code == 410 => break,
                Err(e) => return Err(e).context("the exact list"),
                Ok(_) if Instant::now() > deadline => {
                    bail!(
                        "resource version {listed_at} not compacted within 60 s ({writes} writes)"
                    )
                }
                Ok(_) => {}
            }
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(format!("churn-{writes}"));
            churn.create(&PostParams::default(), &cm).await?;
            writes += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // The watch starts from the compacted version: 410, then a fresh list. (A streaming
        // list's watch first gives what it saw before it ended: `a` gone, `c` come.)
        let mut seen = Vec::new();
        loop {
            match next(&mut stream).await? {
                Err(Error::WatchStart(f) | Error::Watch(f)) if f.gone() => break,
                Ok(Event::Apply(p)) if initial == InitialList::Stream && seen.len() < 4 => {
                    seen.push(format!("apply {}", p.metadata.name.unwrap_or_default()));
                }
                Ok(Event::Delete(p)) if initial == InitialList::Stream && seen.len() < 4 => {
                    seen.push(format!("delete {}", p.metadata.name.unwrap_or_default()));
                }
                other => bail!("{format:?}: expected the watch's 410, got {other:?}"),
            }
        }
        // (Or nothing, if its watch timed out before `a` went: then it started again from
        // before, and met the 410 at once.)
        // What it saw is a beginning of `a`'s deletion (perhaps first as an update) and
        // `c`'s creation: the watch may have timed out at any point among them.
        let expected = ["apply a", "delete a", "apply c"];
        let tail = ["delete a", "apply c"];
        let seen: Vec<&str> = seen.iter().map(String::as_str).collect();
        ensure!(
            initial == InitialList::Pages || expected.starts_with(&seen) || tail.starts_with(&seen),
            "{format:?}: the streaming list's watch saw {seen:?}"
        );
        let relisted = listed(&mut stream).await?;
        ensure!(
            relisted == BTreeSet::from(["b".into(), "c".into()]),
            "{format:?}: relisted {relisted:?}"
        );
        // And it watches again: a new pod arrives as an update.
        ns.create_pod(&pod("d", &node, vec![], None)).await?;
        match next(&mut stream).await? {
            Ok(Event::Apply(p)) if p.metadata.name.as_deref() == Some("d") => {}
            other => bail!("{format:?}: expected d's creation, got {other:?}"),
        }
        // Both listings were streamed (the relist too), or neither was.
        let streams = streamed.load(Ordering::SeqCst);
        ensure!(
            streams == if initial == InitialList::Stream { 2 } else { 0 },
            "{format:?}: {streams} streaming lists asked for"
        );
        ns.cleanup().await?;
    }
    plane.down()?;
    Ok(())
}
