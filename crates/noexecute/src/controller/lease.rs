//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics and
//! timings (lease duration 15 s, renew deadline 10 s, retry period 2 s by default).
//!
//! Fencing: leadership is a *term with a deadline*, not a flag. Each renewal that succeeds
//! extends the term until `request start + renew deadline` on the monotonic clock; a standby
//! may take the lease only a full lease duration after it saw the last change, so every
//! request that starts before the deadline (each bounded by the gap between the two) ends
//! before a standby can write. The executor and the event sender check
//! [`Leadership::may_write`] for their term before every write, so a leader that stalls
//! (SIGSTOP, a long pause) past its deadline writes nothing when it wakes, even before its
//! election loop notices. Seeing another holder, or the Lease gone, ends the term at once.

use std::sync::{Arc, Mutex, PoisonError};
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

/// Whether this replica leads, in which term, and until when unless renewed. The term count
/// lets a reader that polls notice a term it never saw: leading and losing the lease between
/// two polls leaves `leading` false but `term` higher.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Term {
    pub leading: bool,
    pub term: u64,
    /// The term's deadline on the monotonic clock; `None` while leading means no deadline
    /// (leader election off).
    pub until: Option<Instant>,
}

impl Term {
    /// Whether, going from `seen` to `self`, leadership was lost (a term ended).
    pub fn lost_since(self, seen: Term) -> bool {
        (seen.leading && (!self.leading || self.term != seen.term))
            || (!self.leading && self.term > seen.term)
    }

    /// Whether a write of term `term` may go at `now`.
    pub fn allows(&self, term: u64, now: Instant) -> bool {
        self.leading && self.term == term && self.until.is_none_or(|until| now < until)
    }
}

/// Shared view of whether this replica leads.
#[derive(Clone, Debug)]
pub struct Leadership {
    fence: Arc<Mutex<Term>>,
    changes: watch::Receiver<Term>,
}

impl Leadership {
    /// Always leading, in term 1 without a deadline: leader election is off.
    pub fn always() -> (Leadership, watch::Sender<Term>) {
        let term = Term {
            leading: true,
            term: 1,
            until: None,
        };
        let (tx, rx) = watch::channel(term);
        (
            Leadership {
                fence: Arc::new(Mutex::new(term)),
                changes: rx,
            },
            tx,
        )
    }

    pub fn new() -> (Leadership, LeadershipWriter) {
        let (tx, rx) = watch::channel(Term::default());
        let fence = Arc::new(Mutex::new(Term::default()));
        (
            Leadership {
                fence: fence.clone(),
                changes: rx,
            },
            LeadershipWriter { fence, tx },
        )
    }

    /// The fence: read before every write. True only while this replica leads in `term` and
    /// the term's deadline has not passed on the monotonic clock.
    pub fn may_write(&self, term: u64) -> bool {
        let fence = *self.fence.lock().unwrap_or_else(PoisonError::into_inner);
        fence.allows(term, Instant::now())
    }

    /// The latest state if it changed since last seen (marked as seen), without waiting.
    pub fn poll_change(&mut self) -> Option<Term> {
        match self.changes.has_changed() {
            Ok(true) => Some(*self.changes.borrow_and_update()),
            _ => None,
        }
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
    fence: Arc<Mutex<Term>>,
    tx: watch::Sender<Term>,
}

impl LeadershipWriter {
    /// Lead until `until`: a new term if not leading, else the same term renewed.
    pub fn lead(&self, until: Instant) {
        self.update(|t| {
            if !t.leading {
                t.term += 1;
            }
            t.leading = true;
            t.until = Some(until);
        });
    }

    /// The term is over.
    pub fn stop(&self) {
        self.update(|t| {
            t.leading = false;
            t.until = None;
        });
    }

    fn update(&self, change: impl Fn(&mut Term)) {
        // The fence first: the executor and the event sender read it.
        let term = {
            let mut fence = self.fence.lock().unwrap_or_else(PoisonError::into_inner);
            change(&mut fence);
            *fence
        };
        self.tx.send_replace(term);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lost the lease {namespace}/{name} (renew deadline {deadline:?})")]
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
    /// When the Lease was first seen missing after another holder had it.
    missing_since: Option<Instant>,
}

/// What one `tryAcquireOrRenew` found.
#[derive(Debug, PartialEq, Eq)]
enum Claim {
    /// We hold the lease now.
    Held,
    /// Another replica holds it (its identity).
    Taken(String),
    /// Not ours yet: someone else's is still valid, or a write raced ours.
    NotYet,
}

impl Elector {
    /// One `tryAcquireOrRenew`. `holding`: we hold the lease, so a missing Lease or another
    /// holder means someone else changed it, and our term is over.
    async fn try_acquire_or_renew(&mut self, holding: bool) -> kube::Result<Claim> {
        let secs = self.cfg.lease_duration.as_secs().max(1) as i32;
        let read = self.api.get_opt(&self.cfg.name).await?;
        // When the read *returned* (as client-go stamps it): a holder's renewal may have been
        // written just before our read arrived, and its lease runs from then.
        let now = Instant::now();
        let existing = match read {
            Some(lease) => {
                self.missing_since = None;
                lease
            }
            None if holding => return Ok(Claim::Taken("(the Lease was deleted)".into())),
            None => {
                // Deleted under a live holder: that holder acts until its next renewal
                // notices. Wait a lease duration, as for a holder that stopped renewing.
                if let Some((record, _)) = &self.observed
                    && !record.holder.is_empty()
                    && record.holder != self.cfg.identity
                {
                    let since = *self.missing_since.get_or_insert(now);
                    if !may_take(
                        record,
                        &self.cfg.identity,
                        since,
                        self.cfg.lease_duration,
                        now,
                    ) {
                        return Ok(Claim::NotYet);
                    }
                }
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
                    Ok(created) => {
                        self.observed = Some((Record::from_lease(&created), Instant::now()));
                        self.missing_since = None;
                        Ok(Claim::Held)
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(Claim::NotYet),
                    Err(e) => Err(e),
                };
            }
        };
        let record = Record::from_lease(&existing);
        match &self.observed {
            Some((seen, _)) if *seen == record => {}
            _ => self.observed = Some((record.clone(), now)),
        }
        let mine = record.holder == self.cfg.identity;
        if holding && !mine {
            // Edited by someone (an operator, or a replica that thought it expired).
            return Ok(Claim::Taken(if record.holder.is_empty() {
                "(nobody: the holder was cleared)".into()
            } else {
                record.holder
            }));
        }
        let observed_at = self.observed.as_ref().map_or(now, |(_, at)| *at);
        if !may_take(
            &record,
            &self.cfg.identity,
            observed_at,
            self.cfg.lease_duration,
            now,
        ) {
            return Ok(Claim::NotYet);
        }
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
                Ok(Claim::Held)
            }
            Err(kube::Error::Api(s)) if s.code == 409 && holding => {
                Ok(Claim::Taken("(written by someone else meanwhile)".into()))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Claim::NotYet),
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
/// lease) and `Err(Lost)` when leadership is lost; the term has ended by then.
///
/// On shutdown the caller ends the term first ([`LeadershipWriter::stop`] through `stop`) and
/// waits for every write of it to end; only then does it cancel `shutdown`, and the lease is
/// released.
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
        missing_since: None,
    };
    // Each attempt must end well within the renew deadline so that the fence is checked.
    let attempt_timeout = cfg.retry_period.max(Duration::from_millis(500));
    tracing::info!(identity = %cfg.identity, lease = %format!("{}/{}", cfg.namespace, cfg.name), "campaigning for the lease");
    // Acquire.
    let mut last_renew;
    loop {
        let started = Instant::now();
        let attempt = tokio::time::timeout(attempt_timeout, elector.try_acquire_or_renew(false));
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            result = attempt => match result {
                Ok(Ok(Claim::Held)) => {
                    last_renew = started;
                    break;
                }
                Ok(Ok(_)) => {}
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
    // The term runs from when the winning request was sent: a standby measures from no
    // earlier than that.
    writer.lead(last_renew + cfg.renew_deadline);
    tracing::info!(identity = %cfg.identity, "became the leader");
    // Renew.
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                writer.stop();
                elector.release().await;
                return Ok(());
            }
            // Never sleep past the renew deadline: the term must end on time.
            _ = tokio::time::sleep(cfg.retry_period.min(
                (last_renew + cfg.renew_deadline).saturating_duration_since(Instant::now()),
            )) => {}
        }
        let started = Instant::now();
        let remaining = (last_renew + cfg.renew_deadline).saturating_duration_since(started);
        let attempt = tokio::time::timeout(
            attempt_timeout.min(remaining.max(Duration::from_millis(1))),
            elector.try_acquire_or_renew(true),
        );
        match attempt.await {
            Ok(Ok(Claim::Held)) => {
                // Past the deadline (a stall), the term is over even if the write went
                // through: a standby may have taken over meanwhile.
                if started >= last_renew + cfg.renew_deadline {
                    break;
                }
                last_renew = started;
                writer.lead(last_renew + cfg.renew_deadline);
            }
            Ok(Ok(Claim::Taken(holder))) => {
                writer.stop();
                tracing::error!(%holder, "another holder has the lease: this term is over");
                break;
            }
            Ok(Ok(Claim::NotYet)) => tracing::warn!("could not renew the lease"),
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
            break;
        }
    }
    writer.stop();
    Err(LeaseError::Lost {
        namespace: cfg.namespace.clone(),
        name: cfg.name.clone(),
        deadline: cfg.renew_deadline,
    })
}

/// client-go jitters the retry period by up to 20%.
fn jittered(d: Duration) -> Duration {
    d + d.mul_f64(0.2 * crate::adapters::time::random_fraction())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_term_won_and_lost_between_two_polls_is_noticed() {
        let (mut leadership, writer) = Leadership::new();
        let seen = leadership.current();
        writer.lead(Instant::now() + Duration::from_secs(10));
        writer.stop();
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
                term: 1,
                until: None,
            }
            .lost_since(seen)
        );
    }

    #[test]
    fn a_term_allows_writes_only_in_itself_and_before_its_deadline() {
        let t0 = Instant::now();
        let term = Term {
            leading: true,
            term: 3,
            until: Some(t0 + Duration::from_secs(10)),
        };
        assert!(term.allows(3, t0));
        assert!(!term.allows(2, t0), "an earlier term's write");
        assert!(
            !term.allows(3, t0 + Duration::from_secs(10)),
            "past the deadline (a stalled leader waking up)"
        );
        let (leadership, writer) = Leadership::new();
        assert!(!leadership.may_write(0), "standing by");
        writer.lead(Instant::now() + Duration::from_secs(60));
        assert!(leadership.may_write(1));
        writer.lead(Instant::now() + Duration::from_secs(60));
        assert!(leadership.may_write(1), "a renewal keeps the term");
        writer.stop();
        assert!(!leadership.may_write(1), "stopped");
        writer.lead(Instant::now() + Duration::from_secs(60));
        assert!(
            !leadership.may_write(1),
            "a new term: the old one's writes are fenced"
        );
        assert!(leadership.may_write(2));
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
