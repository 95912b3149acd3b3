//! Device taints (DRA, KEP-5055): which pods upstream's `device-taint-eviction-controller`
//! evicts, and when (`docs/parity.md` §22).
//!
//! [`Devices`] is a pure state machine, like the [`Engine`](crate::Engine). ResourceSlices,
//! DeviceTaintRules, ResourceClaims and pods go in as slim observations. Out come
//! [`DeviceAction`]s: a pod is due at a time because of these taints, or it no longer is.
//! [`Devices::pending`] is upstream's `deletePodAt`. Nothing here reads a clock: times come
//! from the taints' `timeAdded`, and a time in the past means "at once" to the driver.
//!
//! Unlike a node taint's deadline, a device eviction's time follows the objects (§22.4):
//! when a slice, rule or claim changes it, the pending eviction is replaced, earlier or later.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use crate::observe::Uid;
use crate::taint::{Taint, TaintEffect};
use crate::time::Time;
use crate::toleration::{MAX_TOLERATION_SECONDS, Toleration};

/// A device in a ResourceSlice, with its taints (all effects: only `NoExecute` evicts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    pub taints: Vec<Taint>,
}

/// A ResourceSlice: part of a driver's pool at one generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    pub name: String,
    pub driver: String,
    pub pool: String,
    pub generation: i64,
    pub devices: Vec<Device>,
}

/// A DeviceTaintRule's selector. Each field that is set must equal the allocated device's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub driver: Option<String>,
    pub pool: Option<String>,
    pub device: Option<String>,
}

impl Selector {
    fn matches(&self, device: &AllocatedDevice) -> bool {
        self.selects(&device.driver, &device.pool, &device.device)
    }

    /// Whether it selects this device: each criterion it has is met.
    pub fn selects(&self, driver: &str, pool: &str, device: &str) -> bool {
        let ok = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        ok(&self.driver, driver) && ok(&self.pool, pool) && ok(&self.device, device)
    }
}

/// A DeviceTaintRule: one taint on every device its selector matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub uid: Uid,
    /// No selector matches nothing.
    pub selector: Option<Selector>,
    pub taint: Taint,
}

/// One device of a claim's allocation, with the tolerations copied from its request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatedDevice {
    pub driver: String,
    pub pool: String,
    pub device: String,
    pub tolerations: Vec<Toleration>,
}

/// An entry of a claim's `status.reservedFor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    /// Empty for pods.
    pub api_group: String,
    pub resource: String,
    pub name: String,
    pub uid: Uid,
}

impl Consumer {
    /// A pod consumer.
    pub fn pod(name: impl Into<String>, uid: Uid) -> Consumer {
        Consumer {
            api_group: String::new(),
            resource: "pods".into(),
            name: name.into(),
            uid,
        }
    }

    fn is_pod(&self) -> bool {
        self.api_group.is_empty() && self.resource == "pods"
    }
}

/// A ResourceClaim, as far as eviction cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub namespace: String,
    pub name: String,
    pub uid: Uid,
    /// The UID of the controlling owner, if any (a pod, for claims made from a template).
    pub owner: Option<Uid>,
    /// `status.allocation.devices.results`; `None` while unallocated.
    pub allocation: Option<Vec<AllocatedDevice>>,
    pub reserved_for: Vec<Consumer>,
}

/// An entry of a pod's `spec.resourceClaims`, resolved to a claim name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodClaim {
    /// `resourceClaimName`: that claim, whoever owns it.
    Named(String),
    /// `resourceClaimTemplateName`: the name in `status.resourceClaimStatuses` (`None` while
    /// there is no entry or it has no name); the claim counts only if the pod controls it.
    FromTemplate(Option<String>),
}

/// A pod, as far as device taints care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevicePod {
    pub namespace: String,
    pub name: String,
    pub uid: Uid,
    /// `spec.nodeName`; an unscheduled pod is never evicted.
    pub node: Option<String>,
    pub claims: Vec<PodClaim>,
    /// It has a `deletionTimestamp`: a rule's status does not count it as pending.
    pub deleting: bool,
}

impl DevicePod {
    pub fn key(&self) -> PodKey {
        PodKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }
}

/// A pod instance: name and UID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: Uid,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where an evicting taint comes from. Rules sort before slice taints, as upstream orders them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaintSource {
    Rule {
        name: String,
        uid: Uid,
    },
    /// The `index`th taint of `device` in `slice`.
    Slice {
        driver: String,
        pool: String,
        device: String,
        index: usize,
        slice: String,
    },
}

impl fmt::Display for TaintSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaintSource::Rule { name, .. } => write!(f, "DeviceTaintRule {name}"),
            TaintSource::Slice {
                driver,
                pool,
                device,
                index,
                slice,
            } => write!(
                f,
                "taint {index} of device {driver}/{pool}/{device} (ResourceSlice {slice})"
            ),
        }
    }
}

/// One `NoExecute` taint on a device allocated to a pod ([`Devices::pod_taints`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDeviceTaint {
    /// The ResourceClaim (in the pod's namespace) the device is allocated to.
    pub claim: String,
    /// `driver/pool/device`.
    pub device: String,
    pub taint: Taint,
    pub source: TaintSource,
    /// The tolerations of the claim's request for this device.
    pub tolerations: Vec<Toleration>,
    /// When it makes the pod due; `None` when tolerated forever.
    pub at: Option<Time>,
}

/// When a pod is due because of its devices, and the taints that make it so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEviction {
    pub at: Time,
    /// Sorted, without duplicates.
    pub reasons: Vec<TaintSource>,
}

/// "device taints: DeviceTaintRule r; taint 0 of device d/p/x (ResourceSlice s)".
impl fmt::Display for DeviceEviction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("device taints: ")?;
        for (i, reason) in self.reasons.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{reason}")?;
        }
        Ok(())
    }
}

impl DeviceEviction {
    /// The earlier time and the union of the reasons.
    fn join(&self, other: &DeviceEviction) -> DeviceEviction {
        let reasons: BTreeSet<TaintSource> =
            self.reasons.iter().chain(&other.reasons).cloned().collect();
        DeviceEviction {
            at: self.at.min(other.at),
            reasons: reasons.into_iter().collect(),
        }
    }
}

/// What [`Devices`] tells its driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceAction {
    /// The pod is due at `eviction.at` (now, if that has passed). Replaces any earlier
    /// `Evict` for the same pod.
    Evict {
        pod: PodKey,
        eviction: DeviceEviction,
    },
    /// The pod is no longer due. `event` says whether upstream records "Cancelling deletion":
    /// yes when its devices stopped making it due, no when the pod was deleted.
    Cancel { pod: PodKey, event: bool },
}

/// Where a device stands in its pool's slices ([`Devices::publication`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publication {
    /// The pool's newest generation publishes it.
    Current,
    /// Only an older generation does, and older generations are ignored.
    Older,
    /// No slice of its pool names it (or the pool is unknown).
    Unknown,
}

/// The slices of one driver's pool.
#[derive(Clone, Debug, Default)]
struct Pool {
    /// By slice name.
    slices: BTreeMap<String, Slice>,
}

impl Pool {
    fn generation(&self) -> Option<i64> {
        self.slices.values().map(|s| s.generation).max()
    }

    /// The slices of the newest generation; older ones are ignored whole.
    fn current(&self) -> impl Iterator<Item = &Slice> {
        let generation = self.generation();
        self.slices
            .values()
            .filter(move |s| Some(s.generation) == generation)
    }

    /// The first device of that name in the current slices.
    fn device(&self, name: &str) -> Option<(&Slice, &Device)> {
        self.current()
            .find_map(|s| s.devices.iter().find(|d| d.name == name).map(|d| (s, d)))
    }

    /// Every tainted device of the current generation and its taints.
    fn tainted(&self) -> BTreeMap<&str, &[Taint]> {
        let mut out = BTreeMap::new();
        for slice in self.current() {
            for device in slice.devices.iter().filter(|d| !d.taints.is_empty()) {
                out.entry(device.name.as_str())
                    .or_insert(device.taints.as_slice());
            }
        }
        out
    }
}

type PoolId = (String, String);
type Name = (String, String);

#[derive(Clone, Debug)]
struct ClaimState {
    claim: Claim,
    /// Only for allocated claims.
    eviction: Option<DeviceEviction>,
}

/// The device-taint decision core (`docs/parity.md` §22).
#[derive(Clone, Debug, Default)]
pub struct Devices {
    pools: BTreeMap<PoolId, Pool>,
    /// Which pool each slice is in, by slice name.
    slice_pool: BTreeMap<String, PoolId>,
    rules: BTreeMap<String, Rule>,
    claims: BTreeMap<Name, ClaimState>,
    pods: BTreeMap<Name, DevicePod>,
    pending: BTreeMap<PodKey, DeviceEviction>,
    /// Pods already evicted, until they are deleted: they are not due again.
    fired: BTreeSet<PodKey>,
    /// Pods evicted for each rule (by UID) since the start, for its status.
    rule_evictions: BTreeMap<Uid, u64>,
    actions: VecDeque<DeviceAction>,
    /// A slice or rule changed since [`Devices::take_counts_changed`] last said so.
    counts_changed: bool,
}

impl Devices {
    pub fn new() -> Devices {
        Devices::default()
    }

    /// The next action, oldest first.
    pub fn poll_action(&mut self) -> Option<DeviceAction> {
        self.actions.pop_front()
    }

    /// Every action so far, oldest first.
    pub fn drain_actions(&mut self) -> Vec<DeviceAction> {
        self.actions.drain(..).collect()
    }

    /// Every pod due because of its devices (upstream's `deletePodAt`).
    pub fn pending(&self) -> &BTreeMap<PodKey, DeviceEviction> {
        &self.pending
    }

    /// The pod the core knows under that name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&DevicePod> {
        self.pods.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Every pod known, by (namespace, name).
    pub fn pod_names(&self) -> impl Iterator<Item = &(String, String)> {
        self.pods.keys()
    }

    /// Every ResourceSlice known, by name.
    pub fn slice_names(&self) -> impl Iterator<Item = &String> {
        self.slice_pool.keys()
    }

    /// Every ResourceClaim known, by (namespace, name).
    pub fn claim_names(&self) -> impl Iterator<Item = &(String, String)> {
        self.claims.keys()
    }

    /// Every DeviceTaintRule known, by name.
    pub fn rule_names(&self) -> impl Iterator<Item = &String> {
        self.rules.keys()
    }

    /// The earliest pending time.
    pub fn next_due(&self) -> Option<Time> {
        self.pending.values().map(|e| e.at).min()
    }

    /// The pods due at `now` or before, earliest first.
    pub fn due(&self, now: Time) -> Vec<PodKey> {
        let mut due: Vec<_> = self
            .pending
            .iter()
            .filter(|(_, e)| e.at <= now)
            .map(|(k, e)| (e.at, k.clone()))
            .collect();
        due.sort();
        due.into_iter().map(|(_, k)| k).collect()
    }

    /// The pod was evicted: it is no longer pending and will not be due again while it exists.
    /// Each rule among its reasons counts one more evicted pod (§22.7).
    pub fn evicted(&mut self, pod: &PodKey) {
        if let Some(eviction) = self.pending.remove(pod) {
            for reason in eviction.reasons {
                if let TaintSource::Rule { uid, .. } = reason {
                    *self.rule_evictions.entry(uid).or_default() += 1;
                }
            }
        }
        self.fired.insert(pod.clone());
    }

    /// An eviction of a pod the core no longer knows (deleted while its attempt was in
    /// flight) went through: each rule among its reasons counts one more evicted pod.
    pub fn count_eviction(&mut self, eviction: &DeviceEviction) {
        for reason in &eviction.reasons {
            if let TaintSource::Rule { uid, .. } = reason {
                *self.rule_evictions.entry(uid.clone()).or_default() += 1;
            }
        }
    }

    /// The eviction found the pod gone (404, or another pod under its name): as
    /// [`Devices::evicted`], but no rule counts it (§22.5).
    pub fn gone(&mut self, pod: &PodKey) {
        self.pending.remove(pod);
        self.fired.insert(pod.clone());
    }

    /// Whether the device counts may have changed since the last call (a slice or a rule was
    /// added, changed or deleted).
    pub fn take_counts_changed(&mut self) -> bool {
        std::mem::take(&mut self.counts_changed)
    }

    /// Where the device stands in its pool's slices: only the pool's newest generation counts.
    pub fn publication(&self, driver: &str, pool: &str, device: &str) -> Publication {
        let Some(p) = self.pools.get(&(driver.to_owned(), pool.to_owned())) else {
            return Publication::Unknown;
        };
        if p.device(device).is_some() {
            Publication::Current
        } else if p
            .slices
            .values()
            .any(|s| s.devices.iter().any(|d| d.name == device))
        {
            Publication::Older
        } else {
            Publication::Unknown
        }
    }

    /// Every device its pool's newest generation publishes, as (driver, pool, device).
    pub fn published(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.pools.iter().flat_map(|((driver, pool), p)| {
            p.current().flat_map(move |s| {
                s.devices
                    .iter()
                    .map(move |d| (driver.as_str(), pool.as_str(), d.name.as_str()))
            })
        })
    }

    /// (published devices, devices with a `NoExecute` taint from their slice or a rule): the
    /// devices of every pool's newest generation. O(devices × rules).
    pub fn device_counts(&self) -> (usize, usize) {
        let rules: Vec<&Rule> = self
            .rules
            .values()
            .filter(|r| r.taint.effect == TaintEffect::NoExecute)
            .collect();
        let (mut published, mut tainted) = (0, 0);
        for pool in self.pools.values() {
            for slice in pool.current() {
                for device in &slice.devices {
                    published += 1;
                    let by_slice = device
                        .taints
                        .iter()
                        .any(|t| t.effect == TaintEffect::NoExecute);
                    let by_rule = || {
                        let at = AllocatedDevice {
                            driver: slice.driver.clone(),
                            pool: slice.pool.clone(),
                            device: device.name.clone(),
                            tolerations: Vec::new(),
                        };
                        rules
                            .iter()
                            .any(|r| r.selector.as_ref().is_some_and(|s| s.matches(&at)))
                    };
                    if by_slice || by_rule() {
                        tainted += 1;
                    }
                }
            }
        }
        (published, tainted)
    }

    /// A ResourceSlice was added or changed.
    pub fn upsert_slice(&mut self, slice: Slice) {
        self.counts_changed = true;
        let id = (slice.driver.clone(), slice.pool.clone());
        let name = slice.name.clone();
        if let Some(old) = self.slice_pool.get(&name).cloned()
            && old != id
        {
            self.change_pool(&old, |pool| {
                pool.slices.remove(&name);
            });
        }
        self.slice_pool.insert(name.clone(), id.clone());
        self.change_pool(&id, |pool| {
            pool.slices.insert(name, slice);
        });
    }

    /// A ResourceSlice was deleted.
    pub fn delete_slice(&mut self, name: &str) {
        self.counts_changed = true;
        if let Some(id) = self.slice_pool.remove(name) {
            self.change_pool(&id, |pool| {
                pool.slices.remove(name);
            });
        }
    }

    fn change_pool(&mut self, id: &PoolId, change: impl FnOnce(&mut Pool)) {
        let pool = self.pools.entry(id.clone()).or_default();
        let before: BTreeMap<String, Vec<Taint>> = pool
            .tainted()
            .into_iter()
            .map(|(d, t)| (d.to_owned(), t.to_vec()))
            .collect();
        change(pool);
        let after = pool.tainted();
        let mut modified: BTreeSet<String> = BTreeSet::new();
        for (device, taints) in &before {
            if after.get(device.as_str()) != Some(&taints.as_slice()) {
                modified.insert(device.clone());
            }
        }
        for device in after.keys() {
            if !before.contains_key(*device) {
                modified.insert((*device).to_owned());
            }
        }
        if pool.slices.is_empty() {
            self.pools.remove(id);
        }
        if modified.is_empty() {
            return;
        }
        let affected: Vec<Name> = self
            .claims
            .iter()
            .filter(|(_, c)| {
                c.claim.allocation.as_ref().is_some_and(|devices| {
                    devices
                        .iter()
                        .any(|d| d.driver == id.0 && d.pool == id.1 && modified.contains(&d.device))
                })
            })
            .map(|(k, _)| k.clone())
            .collect();
        self.redecide_claims(affected);
    }

    /// A DeviceTaintRule was added or changed.
    pub fn upsert_rule(&mut self, rule: Rule) {
        self.counts_changed = true;
        if let Some(old) = self.rules.get(&rule.name)
            && old.uid == rule.uid
            && old.selector == rule.selector
            && old.taint == rule.taint
        {
            return;
        }
        self.rules.insert(rule.name.clone(), rule);
        self.redecide_all_claims();
    }

    /// A DeviceTaintRule was deleted.
    pub fn delete_rule(&mut self, name: &str) {
        self.counts_changed = true;
        if let Some(rule) = self.rules.remove(name) {
            self.rule_evictions.remove(&rule.uid);
            self.redecide_all_claims();
        }
    }

    /// The `EvictionInProgress` condition upstream writes on the rule now (§22.7), or `None`
    /// for a rule it does not know. When to write it (at most every 10 s, only if it changed)
    /// is the driver's.
    pub fn rule_condition(&self, name: &str) -> Option<RuleCondition> {
        let rule = self.rules.get(name)?;
        let evicted = self.rule_evictions.get(&rule.uid).copied().unwrap_or(0);
        let (status, reason, mut message) = match &rule.taint.effect {
            TaintEffect::NoExecute => {
                let (pods, namespaces) = self.pending_for(&rule.uid);
                if pods > 0 {
                    let message = format!(
                        "{} to be evicted in {}.",
                        count(pods, "pod needs", "pods need"),
                        in_namespaces(namespaces)
                    );
                    (true, "PodsPendingEviction", message)
                } else if evicted > 0 {
                    (false, "Completed", String::new())
                } else {
                    (false, "NotStarted", String::new())
                }
            }
            TaintEffect::Other(effect) if &**effect == "None" => {
                let mut simulation = self.clone();
                let mut as_no_execute = rule.clone();
                as_no_execute.taint.effect = TaintEffect::NoExecute;
                simulation.upsert_rule(as_no_execute);
                let (pods, namespaces) = simulation.pending_for(&rule.uid);
                let (published, allocated) = self.selected_devices(rule);
                let message = format!(
                    "{} selected. {} selected. {} evicted in {} if the effect was NoExecute. \
                     This information will not be updated again. Recreate the DeviceTaintRule \
                     to trigger an update.",
                    count(published, "published device", "published devices"),
                    count(allocated, "allocated device", "allocated devices"),
                    count(pods, "pod would be", "pods would be"),
                    in_namespaces(namespaces)
                );
                (false, "NoEffect", message)
            }
            _ => (
                false,
                "OtherEffect",
                "Eviction only happens for the NoExecute effect.".to_owned(),
            ),
        };
        if evicted > 0 {
            if !message.is_empty() {
                message.push(' ');
            }
            message.push_str(&format!(
                "{} since starting the controller.",
                count(evicted, "pod evicted", "pods evicted")
            ));
        }
        Some(RuleCondition {
            status,
            reason,
            message,
        })
    }

    /// Pods not being deleted whose devices make them due because of this rule, and their
    /// namespaces.
    fn pending_for(&self, rule: &Uid) -> (u64, u64) {
        let mut pods = 0;
        let mut namespaces = BTreeSet::new();
        for pod in self.pods.values().filter(|p| !p.deleting) {
            let hit = self.pod_eviction(pod).is_some_and(|e| {
                e.reasons
                    .iter()
                    .any(|r| matches!(r, TaintSource::Rule { uid, .. } if uid == rule))
            });
            if hit {
                pods += 1;
                namespaces.insert(pod.namespace.as_str());
            }
        }
        (pods, namespaces.len() as u64)
    }

    /// The devices of the current slices the rule selects, and the allocated ones.
    fn selected_devices(&self, rule: &Rule) -> (u64, u64) {
        let Some(selector) = &rule.selector else {
            return (0, 0);
        };
        let mut published = 0;
        for pool in self.pools.values() {
            for slice in pool.current() {
                for device in &slice.devices {
                    let at = AllocatedDevice {
                        driver: slice.driver.clone(),
                        pool: slice.pool.clone(),
                        device: device.name.clone(),
                        tolerations: Vec::new(),
                    };
                    published += u64::from(selector.matches(&at));
                }
            }
        }
        let allocated = self
            .claims
            .values()
            .flat_map(|c| c.claim.allocation.iter().flatten())
            .filter(|d| selector.matches(d))
            .count() as u64;
        (published, allocated)
    }

    fn redecide_all_claims(&mut self) {
        let all: Vec<Name> = self.claims.keys().cloned().collect();
        self.redecide_claims(all);
    }

    /// Computes the claims' times again and re-decides the pods of those that changed.
    fn redecide_claims(&mut self, names: Vec<Name>) {
        for name in names {
            let Some(state) = self.claims.get(&name) else {
                continue;
            };
            if state.claim.allocation.is_none() {
                continue;
            }
            let eviction = self.claim_eviction(&state.claim);
            if eviction == state.eviction {
                continue;
            }
            let claim = state.claim.clone();
            if let Some(state) = self.claims.get_mut(&name) {
                state.eviction = eviction;
            }
            self.handle_pods(&claim);
        }
    }

    /// A ResourceClaim was added or changed.
    pub fn upsert_claim(&mut self, claim: Claim) {
        let name = (claim.namespace.clone(), claim.name.clone());
        let Some(old) = self.claims.get(&name).map(|s| s.claim.clone()) else {
            let eviction = claim
                .allocation
                .as_ref()
                .and_then(|_| self.claim_eviction(&claim));
            let allocated = claim.allocation.is_some();
            self.claims.insert(
                name,
                ClaimState {
                    claim: claim.clone(),
                    eviction,
                },
            );
            if allocated {
                self.handle_pods(&claim);
            }
            return;
        };
        if old.uid != claim.uid {
            self.delete_claim(&claim.namespace, &claim.name);
            self.upsert_claim(claim);
            return;
        }
        let eviction = match (&old.allocation, &claim.allocation) {
            (None, None) => {
                if let Some(state) = self.claims.get_mut(&name) {
                    state.claim = claim;
                }
                return;
            }
            (None, Some(_)) => self.claim_eviction(&claim),
            (Some(_), None) => None,
            // The allocation is immutable: the time stays.
            (Some(_), Some(_)) => self.claims.get(&name).and_then(|s| s.eviction.clone()),
        };
        self.claims.insert(
            name,
            ClaimState {
                claim: claim.clone(),
                eviction,
            },
        );
        if old.reserved_for != claim.reserved_for {
            self.handle_pods(&old);
        }
        self.handle_pods(&claim);
    }

    /// A ResourceClaim was deleted.
    pub fn delete_claim(&mut self, namespace: &str, name: &str) {
        if let Some(state) = self.claims.remove(&(namespace.to_owned(), name.to_owned())) {
            self.handle_pods(&state.claim);
        }
    }

    /// A pod was added or changed.
    pub fn upsert_pod(&mut self, pod: DevicePod) {
        let name = (pod.namespace.clone(), pod.name.clone());
        let unchanged = match self.pods.get(&name) {
            Some(old) if old.uid != pod.uid => {
                self.delete_pod(&name.0, &name.1);
                false
            }
            Some(old) => old.node == pod.node && old.claims == pod.claims,
            None => false,
        };
        // Kept whatever changed (its deletion state counts for a rule's status); decided
        // again only when its node or claims changed.
        self.pods.insert(name, pod.clone());
        if !unchanged {
            self.handle_pod(&pod);
        }
    }

    /// A pod was deleted: its eviction is dropped without an event.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        if let Some(pod) = self.pods.remove(&(namespace.to_owned(), name.to_owned())) {
            let key = pod.key();
            self.fired.remove(&key);
            if self.pending.remove(&key).is_some() {
                self.actions.push_back(DeviceAction::Cancel {
                    pod: key,
                    event: false,
                });
            }
        }
    }

    /// Upstream's `handlePods`: the claim's pod consumers that exist as that instance
    /// (`docs/parity.md` §22.2).
    fn handle_pods(&mut self, claim: &Claim) {
        for consumer in claim.reserved_for.iter().filter(|c| c.is_pod()) {
            let name = (claim.namespace.clone(), consumer.name.clone());
            let Some(pod) = self.pods.get(&name).filter(|p| p.uid == consumer.uid) else {
                continue;
            };
            let pod = pod.clone();
            self.handle_pod(&pod);
        }
    }

    fn handle_pod(&mut self, pod: &DevicePod) {
        let key = pod.key();
        if self.fired.contains(&key) {
            return;
        }
        match self.pod_eviction(pod) {
            None => {
                if self.pending.remove(&key).is_some() {
                    self.actions.push_back(DeviceAction::Cancel {
                        pod: key,
                        event: true,
                    });
                }
            }
            Some(eviction) => {
                if self.pending.get(&key) != Some(&eviction) {
                    self.pending.insert(key.clone(), eviction.clone());
                    self.actions
                        .push_back(DeviceAction::Evict { pod: key, eviction });
                }
            }
        }
    }

    /// The claims that count for the pod: allocated, reserved for it and (from a template)
    /// owned by it. None for an unscheduled pod.
    fn usable_claims<'a>(&'a self, pod: &'a DevicePod) -> impl Iterator<Item = &'a ClaimState> {
        let scheduled = pod.node.is_some();
        pod.claims
            .iter()
            .filter(move |_| scheduled)
            .filter_map(move |entry| {
                let (name, check_owner) = match entry {
                    PodClaim::Named(n) => (n, false),
                    PodClaim::FromTemplate(Some(n)) => (n, true),
                    PodClaim::FromTemplate(None) => return None,
                };
                let state = self.claims.get(&(pod.namespace.clone(), name.clone()))?;
                let claim = &state.claim;
                let usable = claim.allocation.is_some()
                    && (!check_owner || claim.owner.as_ref() == Some(&pod.uid))
                    && claim.reserved_for.iter().any(|c| c.uid == pod.uid);
                usable.then_some(state)
            })
    }

    /// The pod's time: the earliest of its usable claims', with all their reasons.
    pub fn pod_eviction(&self, pod: &DevicePod) -> Option<DeviceEviction> {
        let mut out: Option<DeviceEviction> = None;
        for state in self.usable_claims(pod) {
            if let Some(eviction) = &state.eviction {
                out = Some(match out {
                    None => eviction.clone(),
                    Some(o) => o.join(eviction),
                });
            }
        }
        out
    }

    /// Every `NoExecute` taint on the devices allocated to the pod's usable claims, with the
    /// tolerations of the request and the time it makes the pod due (`None`: tolerated
    /// forever, or no `timeAdded`). What `explain` and `plan` show.
    pub fn pod_taints(&self, pod: &DevicePod) -> Vec<PodDeviceTaint> {
        let mut out = Vec::new();
        for state in self.usable_claims(pod) {
            for (allocated, taint, source) in self.claim_taints(&state.claim) {
                out.push(PodDeviceTaint {
                    claim: state.claim.name.clone(),
                    device: format!(
                        "{}/{}/{}",
                        allocated.driver, allocated.pool, allocated.device
                    ),
                    taint: taint.clone(),
                    source,
                    tolerations: allocated.tolerations.clone(),
                    at: taint_time(taint, &allocated.tolerations),
                });
            }
        }
        out
    }

    /// The `NoExecute` taints of each device allocated to the claim: the slice's, then the
    /// matching rules'.
    fn claim_taints<'a>(
        &'a self,
        claim: &'a Claim,
    ) -> impl Iterator<Item = (&'a AllocatedDevice, &'a Taint, TaintSource)> + 'a {
        claim
            .allocation
            .iter()
            .flatten()
            .flat_map(move |allocated| {
                let pool = self
                    .pools
                    .get(&(allocated.driver.clone(), allocated.pool.clone()));
                let device = pool.and_then(|p| p.device(&allocated.device));
                let slice_taints = device.into_iter().flat_map(|(slice, device)| {
                    device.taints.iter().enumerate().map(move |(index, taint)| {
                        (
                            taint,
                            TaintSource::Slice {
                                driver: slice.driver.clone(),
                                pool: slice.pool.clone(),
                                device: device.name.clone(),
                                index,
                                slice: slice.name.clone(),
                            },
                        )
                    })
                });
                let rule_taints = self
                    .rules
                    .values()
                    .filter(|r| r.selector.as_ref().is_some_and(|s| s.matches(allocated)))
                    .map(|r| {
                        (
                            &r.taint,
                            TaintSource::Rule {
                                name: r.name.clone(),
                                uid: r.uid.clone(),
                            },
                        )
                    });
                slice_taints
                    .chain(rule_taints)
                    .filter(|(taint, _)| taint.effect == TaintEffect::NoExecute)
                    .map(move |(taint, source)| (allocated, taint, source))
            })
    }

    /// Upstream's `claimEvictionTime` (`docs/parity.md` §22.3–§22.4).
    fn claim_eviction(&self, claim: &Claim) -> Option<DeviceEviction> {
        let mut at: Option<Time> = None;
        let mut reasons = BTreeSet::new();
        for (allocated, taint, source) in self.claim_taints(claim) {
            if let Some(time) = taint_time(taint, &allocated.tolerations) {
                at = Some(at.map_or(time, |a| a.min(time)));
                reasons.insert(source);
            }
        }
        at.map(|at| DeviceEviction {
            at,
            reasons: reasons.into_iter().collect(),
        })
    }
}

/// A DeviceTaintRule's `EvictionInProgress` condition, as upstream computes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleCondition {
    /// `True` while pods are pending eviction for the rule.
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

/// `1 one` or `N many`.
fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn in_namespaces(n: u64) -> String {
    if n == 1 {
        "1 namespace".to_owned()
    } else {
        format!("{n} different namespaces")
    }
}

/// One `NoExecute` taint against a device's tolerations (`docs/parity.md` §22.4): `None` when
/// it is tolerated forever, else `timeAdded` plus the smallest matching `tolerationSeconds`
/// (negatives count as 0). Seconds above [`MAX_TOLERATION_SECONDS`] count as forever
/// (`docs/deviations.md` #21). A taint without `timeAdded` (the API server always sets one) is
/// ignored.
pub fn taint_time(taint: &Taint, tolerations: &[Toleration]) -> Option<Time> {
    let added = taint.time_added?;
    let mut seconds: Option<i64> = None;
    for toleration in tolerations {
        if toleration.effect != Some(TaintEffect::NoExecute) || !toleration.tolerates(taint, false)
        {
            continue;
        }
        let s = toleration
            .toleration_seconds
            .filter(|s| *s <= MAX_TOLERATION_SECONDS)?
            .max(0);
        seconds = Some(seconds.map_or(s, |m| m.min(s)));
    }
    Some(seconds.map_or(added, |s| added.plus_secs(s)))
}
