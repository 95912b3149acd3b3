//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics and
//! timings (lease duration 15 s, renew deadline 10 s, retry period 2 s by default).
//!
//! Fencing: a leader that cannot renew within the renew deadline stops leading *before*
//! another replica may take the lease (which it can only do a full lease duration after it
//! last saw the lease change). The executor checks [`Leadership::is_leading`] before every
//! mutating request, and bounds each request by the gap between the two durations.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Whether this replica leads, and how many times it has become the leader. The count lets a
/// reader that polls notice a term it never saw: leading and losing the lease between two
/// polls leaves `leading` false but `term` higher.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Term {
    pub leading: bool,
    pub term: u64,
}

impl Term {
    /// Whether, going from `seen` to `self`, leadership was lost (a term ended).
    pub fn lost_since(self, seen: Term) -> bool {
        (seen.leading && (!self.leading || self.term != seen.term))
            || (!self.leading && self.term > seen.term)
    }
}

/// Shared view of whether this replica leads.
#[derive(Clone, Debug)]
pub struct Leadership {
    leading: Arc<AtomicBool>,
    changes: watch::Receiver<Term>,
}

impl Leadership {
    /// Always leading: leader election is off.
    pub fn always() -> (Leadership, watch::Sender<Term>) {
        let (tx, rx) = watch::channel(Term {
            leading: true,
            term: 1,
        });
        (
            Leadership {
                leading: Arc::new(AtomicBool::new(true)),
                changes: rx,
            },
            tx,
        )
    }

    pub fn new() -> (Leadership, LeadershipWriter) {
        let (tx, rx) = watch::channel(Term::default());
        let leading = Arc::new(AtomicBool::new(false));
        (
            Leadership {
                leading: leading.clone(),
                changes: rx,
            },
            LeadershipWriter { leading, tx },
        )
    }

    /// The fence: read before every mutating request.
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// The latest state, marked as seen.
    pub fn current(&mut self) -> Term {
        *self.changes.borrow_and_update()
    }

    /// Resolves when leadership changes, with the latest state.
    pub async fn changed(&mut self) -> Term {
        if self.changes.changed().await.is_err() {
            // The writer is gone: leadership never changes again.
            std::future::pending::<()>().await;
        }
        *self.changes.borrow_and_update()
    }
}

pub struct LeadershipWriter {
    leading: Arc<AtomicBool>,
    tx: watch::Sender<Term>,
}

impl LeadershipWriter {
    pub fn set(&self, leading: bool) {
        // The flag first: the executor's fence reads it.
        self.leading.store(leading, Ordering::SeqCst);
        self.tx.send_modify(|t| {
            if leading && !t.leading {
                t.term += 1;
            }
            t.leading = leading;
        });
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lost the lease {namespace}/{name}: could not renew within {deadline:?}")]
    Lost {
        namespace: String,
        name: String,
        deadline: Duration,
    },
}

/// The parts of a Lease that decide who may hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub holder: String,
    pub lease_duration_seconds: i32,
    pub transitions: i32,
    pub acquire_time: Option<String>,
    pub renew_time: Option<String>,
}

impl Record {
    fn from_lease(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            transitions: spec.lease_transitions.unwrap_or(0),
            acquire_time: spec.acquire_time.map(|t| t.0.to_string()),
            renew_time: spec.renew_time.map(|t| t.0.to_string()),
        }
    }
}

/// client-go's rule: another holder's lease is valid until a full lease duration after we
/// last *observed it change* (our own clock; the holder's timestamps are not trusted).
pub fn may_take(
    record: &Record,
    me: &str,
    observed_change: Instant,
    fallback: Duration,
    now: Instant,
) -> bool {
    // The duration the holder recorded counts (replicas may run with different flags, e.g.
    // during a rollout); ours only when the record has none.
    let duration = u64::try_from(record.lease_duration_seconds)
        .ok()
        .filter(|s| *s > 0)
        .map_or(fallback, Duration::from_secs);
    record.holder.is_empty() || record.holder == me || now >= observed_change + duration
}

fn micro_now() -> Option<MicroTime> {
    Some(MicroTime(k8s_openapi::jiff::Timestamp::now()))
}

struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    observed: Option<(Record, Instant)>,
}

impl Elector {
    /// One `tryAcquireOrRenew`: true when we hold the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> kube::Result<bool> {
        let now = Instant::now();
        let secs = self.cfg.lease_duration.as_secs().max(1) as i32;
        let existing = match self.api.get_opt(&self.cfg.name).await? {
            Some(lease) => lease,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.cfg.identity.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: micro_now(),
                        renew_time: micro_now(),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                };
            }
        };
        let record = Record::from_lease(&existing);
        match &self.observed {
            Some((seen, _)) if *seen == record => {}
            _ => self.observed = Some((record.clone(), now)),
        }
        let observed_at = self.observed.as_ref().map_or(now, |(_, at)| *at);
        if !may_take(
            &record,
            &self.cfg.identity,
            observed_at,
            self.cfg.lease_duration,
            now,
        ) {
            return Ok(false);
        }
        let mine = record.holder == self.cfg.identity;
        let mut lease = existing;
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.cfg.identity.clone());
        spec.lease_duration_seconds = Some(secs);
        spec.renew_time = micro_now();
        if !mine {
            spec.acquire_time = micro_now();
            spec.lease_transitions = Some(record.transitions + 1);
        }
        // `replace` carries the resourceVersion we read: a concurrent writer makes it fail.
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observed = Some((Record::from_lease(&updated), Instant::now()));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Give the lease up on a clean shutdown, so a standby takes over at once.
    async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = micro_now();
        if let Err(e) = self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(error = %e, "could not release the lease");
        } else {
            tracing::info!(lease = %self.cfg.name, "released the lease");
        }
    }
}

/// Campaign for the lease, then hold it. Returns `Ok(())` on shutdown (after releasing the
/// lease) and `Err(Lost)` when leadership is lost; the caller must then stop acting.
pub async fn run(
    client: Client,
    cfg: LeaseConfig,
    writer: LeadershipWriter,
    shutdown: CancellationToken,
    metrics: super::metrics::Metrics,
) -> Result<(), LeaseError> {
    let mut elector = Elector {
        api: Api::namespaced(client, &cfg.namespace),
        cfg: cfg.clone(),
        observed: None,
    };
    // Each attempt must end well within the renew deadline so that the fence is checked.
    let attempt_timeout = cfg.retry_period.max(Duration::from_millis(500));
    tracing::info!(identity = %cfg.identity, lease = %format!("{}/{}", cfg.namespace, cfg.name), "campaigning for the lease");
    // Acquire.
    loop {
        let attempt = tokio::time::timeout(attempt_timeout, elector.try_acquire_or_renew());
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            result = attempt => match result {
                Ok(Ok(true)) => break,
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    metrics.api_error("lease");
                    tracing::warn!(error = %e, "lease acquire attempt failed");
                }
                Err(_) => {
                    metrics.api_error("lease");
                    tracing::warn!("lease acquire attempt timed out");
                }
            },
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(jittered(cfg.retry_period)) => {}
        }
    }
    let mut last_renew = Instant::now();
    writer.set(true);
    tracing::info!(identity = %cfg.identity, "became the leader");
    // Renew.
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                writer.set(false);
                elector.release().await;
                return Ok(());
            }
            // Never sleep past the renew deadline: the fence must drop on time.
            _ = tokio::time::sleep(cfg.retry_period.min(
                (last_renew + cfg.renew_deadline).saturating_duration_since(Instant::now()),
            )) => {}
        }
        let remaining = (last_renew + cfg.renew_deadline).saturating_duration_since(Instant::now());
        let attempt = tokio::time::timeout(
            attempt_timeout.min(remaining.max(Duration::from_millis(1))),
            elector.try_acquire_or_renew(),
        );
        match attempt.await {
            Ok(Ok(true)) => last_renew = Instant::now(),
            Ok(Ok(false)) => tracing::warn!("the lease was taken by another replica"),
            Ok(Err(e)) => {
                metrics.api_error("lease");
                tracing::warn!(error = %e, "lease renewal failed");
            }
            Err(_) => {
                metrics.api_error("lease");
                tracing::warn!("lease renewal timed out");
            }
        }
        if Instant::now() >= last_renew + cfg.renew_deadline {
            writer.set(false);
            return Err(LeaseError::Lost {
                namespace: cfg.namespace.clone(),
                name: cfg.name.clone(),
                deadline: cfg.renew_deadline,
            });
        }
    }
}

/// client-go jitters the retry period by up to 20%.
fn jittered(d: Duration) -> Duration {
    d + d.mul_f64(0.2 * crate::time::random_fraction())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_term_won_and_lost_between_two_polls_is_noticed() {
        let (mut leadership, writer) = Leadership::new();
        let seen = leadership.current();
        writer.set(true);
        writer.set(false);
        let now = leadership.changed().await;
        assert!(!now.leading);
        assert!(now.lost_since(seen), "{seen:?} -> {now:?}");
        // Standing by with no term in between is not a loss.
        let (mut standby, _w) = Leadership::new();
        let seen = standby.current();
        assert!(!seen.lost_since(seen));
        assert!(
            !Term {
                leading: true,
                term: 1
            }
            .lost_since(seen)
        );
    }

    fn record(holder: &str) -> Record {
        Record {
            holder: holder.into(),
            lease_duration_seconds: 15,
            transitions: 0,
            acquire_time: None,
            renew_time: None,
        }
    }

    #[test]
    fn another_holder_is_respected_for_a_full_lease_duration() {
        let t0 = Instant::now();
        let d = Duration::from_secs(15);
        assert!(!may_take(
            &record("b"),
            "a",
            t0,
            d,
            t0 + Duration::from_secs(14)
        ));
        assert!(may_take(
            &record("b"),
            "a",
            t0,
            d,
            t0 + Duration::from_secs(15)
        ));
        assert!(may_take(&record("a"), "a", t0, d, t0), "our own lease");
        assert!(may_take(&record(""), "a", t0, d, t0), "a released lease");
        let mut short = record("b");
        short.lease_duration_seconds = 4;
        assert!(
            may_take(&short, "a", t0, d, t0 + Duration::from_secs(4)),
            "the holder's recorded duration counts, not ours"
        );
    }
}
