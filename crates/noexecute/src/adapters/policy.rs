//! The opt-in safety policies, from flags and an optional config file (flags win). With none
//! set, behaviour is upstream's.
//!
//! ```yaml
//! # noexecute.yaml
//! deadlineFrom: taint-time-added   # or: controller (upstream, the default)
//! maxClockSkew: 5s
//! excludeNamespaces: [kube-system]
//! excludeSelector: "noexecute.io/exclude=true"
//! skipTerminalPods: true
//! dryRun: false
//! staleCacheGuard: true            # on by default
//! evictionMode: evict              # or: delete (upstream, the default)
//! pdbTimeout: 10m
//! maxEvictionsPerSecond: 5         # overall; unset: no limit (upstream)
//! evictionBurst: 10
//! maxNodeEvictionsPerSecond: 1     # on any one node
//! nodeEvictionBurst: 5
//! brakeThreshold: 50               # pause while more than 50% of nodes are NoExecute-tainted
//! brakeMinNodes: 3                 # ... and at least 3 are
//! releaseBrake: false
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use noexecute_engine::Config;
use noexecute_engine::pace::{Brake, PaceConfig, Rate};

/// The node annotation that releases a node's evictions while the brake holds.
pub use noexecute_engine::pipeline::RELEASE_ANNOTATION;

/// Whether a node carries the release annotation (`noexecute.io/release-brake=true`).
pub fn release_annotated(meta: &kube::core::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(RELEASE_ANNOTATION))
        .is_some_and(|v| v == "true")
}
use serde::Deserialize;

use crate::adapters::selector::Selector;
use crate::adapters::time::Offset;

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeadlineFrom {
    /// When the controller first sees the taint (upstream; a restart restarts the count).
    #[default]
    Controller,
    /// The taint's `timeAdded` (restart-safe), guarded against clock skew; a taint without
    /// `timeAdded` falls back to when the controller first saw it.
    TaintTimeAdded,
}

/// How a pod is removed: the pipeline's own type (`delete` or `evict`).
pub use noexecute_engine::pipeline::EvictionMode;

fn eviction_mode(s: &str) -> Result<EvictionMode, String> {
    s.parse()
}

fn eviction_mode_file<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<EvictionMode>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    s.map(|s| s.parse().map_err(serde::de::Error::custom))
        .transpose()
}

use crate::adapters::time::parse_duration as duration;

/// Switches of the engine shared by every subcommand that decides.
#[derive(Debug, Args, Clone, Default)]
pub struct EngineArgs {
    /// Honour the Lt/Gt toleration operators (upstream's alpha TaintTolerationComparisonOperators gate).
    #[arg(long, env = "NOEXECUTE_COMPARISON_OPERATORS")]
    pub comparison_operators: bool,
}

/// Policy flags that change what is decided and when, shared by `run`, `simulate`, `plan`
/// and `explain`.
#[derive(Debug, Args, Clone, Default)]
pub struct PolicyArgs {
    /// A YAML file with any of the policies below (flags override it).
    #[arg(long, env = "NOEXECUTE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Count finite tolerations from `controller` (upstream) or `taint-time-added`.
    #[arg(long, env = "NOEXECUTE_DEADLINE_FROM", value_enum)]
    pub deadline_from: Option<DeadlineFrom>,
    /// With taint-time-added: a timeAdded further in the future than this is clock skew and
    /// is replaced by the controller's now.
    #[arg(long, env = "NOEXECUTE_MAX_CLOCK_SKEW", value_parser = duration)]
    pub max_clock_skew: Option<Duration>,
    /// Never evict pods in this namespace (repeatable, or comma-separated).
    #[arg(
        long = "exclude-namespace",
        env = "NOEXECUTE_EXCLUDE_NAMESPACES",
        value_delimiter = ','
    )]
    pub exclude_namespaces: Vec<String>,
    /// Never evict pods whose labels match this selector (k=v, k!=v, k, !k, comma-joined).
    #[arg(long, env = "NOEXECUTE_EXCLUDE_SELECTOR")]
    pub exclude_selector: Option<String>,
    /// Never evict pods in phase Succeeded or Failed (upstream deletes them too).
    #[arg(long, env = "NOEXECUTE_SKIP_TERMINAL_PODS")]
    pub skip_terminal_pods: bool,
    /// Start at most this many evictions per second overall (a token bucket; unset: no
    /// limit, as upstream).
    #[arg(long, env = "NOEXECUTE_MAX_EVICTIONS_PER_SECOND")]
    pub max_evictions_per_second: Option<f64>,
    /// Evictions that may start at once after a quiet spell (default: the rate, at least 1).
    #[arg(long, env = "NOEXECUTE_EVICTION_BURST")]
    pub eviction_burst: Option<u32>,
    /// Start at most this many evictions per second on any one node.
    #[arg(long, env = "NOEXECUTE_MAX_NODE_EVICTIONS_PER_SECOND")]
    pub max_node_evictions_per_second: Option<f64>,
    /// Per-node burst (default: the per-node rate, at least 1).
    #[arg(long, env = "NOEXECUTE_NODE_EVICTION_BURST")]
    pub node_eviction_burst: Option<u32>,
    /// The mass-eviction brake: while more than this percentage of nodes carry NoExecute
    /// taints, no eviction starts (unset: no brake).
    #[arg(long, env = "NOEXECUTE_BRAKE_THRESHOLD", value_name = "PERCENT")]
    pub brake_threshold: Option<f64>,
    /// The brake only holds while at least this many nodes are tainted (default 1).
    #[arg(long, env = "NOEXECUTE_BRAKE_MIN_NODES")]
    pub brake_min_nodes: Option<usize>,
    /// Let evictions go although the brake holds (it is still reported). To release single
    /// nodes instead, annotate them `noexecute.io/release-brake=true`.
    #[arg(long, env = "NOEXECUTE_RELEASE_BRAKE")]
    pub release_brake: bool,
}

/// Policy flags that change only how a decided eviction is carried out: `run` and
/// `simulate` take them, `plan` and `explain` (which only decide) do not. A policy file may
/// still set them (the controller's own file can be given to `plan`); they are read and
/// change nothing there.
#[derive(Debug, Args, Clone, Default)]
pub struct ActionArgs {
    /// Decide, log, count and record events, but patch and delete nothing.
    #[arg(long, env = "NOEXECUTE_DRY_RUN")]
    pub dry_run: bool,
    /// `delete` (upstream) or `evict` (the Eviction API, honouring PodDisruptionBudgets).
    #[arg(
        long,
        env = "NOEXECUTE_EVICTION_MODE",
        value_parser = eviction_mode,
        value_name = "delete|evict"
    )]
    pub eviction_mode: Option<EvictionMode>,
    /// With --eviction-mode=evict: when a PodDisruptionBudget has blocked a pod's eviction
    /// for this long, delete it anyway (so an outage cannot block recovery forever). Unset:
    /// never fall back.
    #[arg(long, env = "NOEXECUTE_PDB_TIMEOUT", value_parser = duration)]
    pub pdb_timeout: Option<Duration>,
    /// Before an eviction a pod event found due at once, and before every eviction while the
    /// node watch is down, confirm it against a fresh read of the node (closes
    /// kubernetes/kubernetes#119862). On by default.
    #[arg(long, env = "NOEXECUTE_STALE_CACHE_GUARD", action = clap::ArgAction::Set)]
    pub stale_cache_guard: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyFile {
    deadline_from: Option<DeadlineFrom>,
    max_clock_skew: Option<Offset>,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    exclude_namespaces: Vec<String>,
    exclude_selector: Option<String>,
    skip_terminal_pods: Option<bool>,
    dry_run: Option<bool>,
    stale_cache_guard: Option<bool>,
    #[serde(default, deserialize_with = "eviction_mode_file")]
    eviction_mode: Option<EvictionMode>,
    pdb_timeout: Option<Offset>,
    max_evictions_per_second: Option<f64>,
    eviction_burst: Option<u32>,
    max_node_evictions_per_second: Option<f64>,
    node_eviction_burst: Option<u32>,
    brake_threshold: Option<f64>,
    brake_min_nodes: Option<usize>,
    release_brake: Option<bool>,
}

/// The policies in force.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub deadline_from: DeadlineFrom,
    pub max_clock_skew: Duration,
    pub exclude_namespaces: BTreeSet<String>,
    pub exclude_selector: Option<Selector>,
    pub skip_terminal_pods: bool,
    pub dry_run: bool,
    pub stale_cache_guard: bool,
    pub eviction_mode: EvictionMode,
    pub pdb_timeout: Option<Duration>,
    /// Rate limits and the mass-eviction brake.
    pub pace: PaceConfig,
    /// The brake is reported but does not hold.
    pub release_brake: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl PolicyArgs {
    /// The policies of these flags and the file, for a command that only decides (the
    /// action policies at their defaults, whatever the file says).
    pub fn resolve(&self) -> Result<Policy, PolicyError> {
        let mut policy = self.resolve_with(&ActionArgs::default())?;
        policy.dry_run = false;
        policy.eviction_mode = EvictionMode::default();
        policy.pdb_timeout = None;
        policy.stale_cache_guard = true;
        Ok(policy)
    }

    /// The policies of these flags, the action flags and the file.
    pub fn resolve_with(&self, actions: &ActionArgs) -> Result<Policy, PolicyError> {
        let file = match &self.config {
            Some(path) => load(path)?,
            None => PolicyFile::default(),
        };
        let selector = self
            .exclude_selector
            .clone()
            .or(file.exclude_selector)
            .map(|s| Selector::parse(&s).map_err(PolicyError::Invalid))
            .transpose()?;
        let mut namespaces: BTreeSet<String> = file.exclude_namespaces.into_iter().collect();
        namespaces.extend(
            self.exclude_namespaces
                .iter()
                .filter(|n| !n.is_empty())
                .cloned(),
        );
        Ok(Policy {
            deadline_from: self
                .deadline_from
                .or(file.deadline_from)
                .unwrap_or_default(),
            max_clock_skew: self
                .max_clock_skew
                .or(file
                    .max_clock_skew
                    .map(|o| Duration::from_millis(o.0.unsigned_abs())))
                .unwrap_or(Duration::from_secs(5)),
            exclude_namespaces: namespaces,
            exclude_selector: selector,
            skip_terminal_pods: self.skip_terminal_pods || file.skip_terminal_pods.unwrap_or(false),
            dry_run: actions.dry_run || file.dry_run.unwrap_or(false),
            stale_cache_guard: actions
                .stale_cache_guard
                .or(file.stale_cache_guard)
                .unwrap_or(true),
            eviction_mode: actions
                .eviction_mode
                .or(file.eviction_mode)
                .unwrap_or_default(),
            pdb_timeout: actions.pdb_timeout.or(file
                .pdb_timeout
                .map(|o| Duration::from_millis(o.0.unsigned_abs()))),
            pace: PaceConfig {
                rate: rate(
                    "max-evictions-per-second (maxEvictionsPerSecond)",
                    self.max_evictions_per_second
                        .or(file.max_evictions_per_second),
                    self.eviction_burst.or(file.eviction_burst),
                )?,
                node_rate: rate(
                    "max-node-evictions-per-second (maxNodeEvictionsPerSecond)",
                    self.max_node_evictions_per_second
                        .or(file.max_node_evictions_per_second),
                    self.node_eviction_burst.or(file.node_eviction_burst),
                )?,
                brake: match self.brake_threshold.or(file.brake_threshold) {
                    None => None,
                    Some(p) if (0.0..100.0).contains(&p) => Some(Brake {
                        threshold_percent: p,
                        min_tainted_nodes: self
                            .brake_min_nodes
                            .or(file.brake_min_nodes)
                            .unwrap_or(1)
                            .max(1),
                    }),
                    Some(p) => {
                        return Err(PolicyError::Invalid(format!(
                            "brake-threshold (brakeThreshold) must be a percentage from 0 up to (not including) 100, got {p}"
                        )));
                    }
                },
            },
            release_brake: self.release_brake || file.release_brake.unwrap_or(false),
        })
    }
}

fn rate(
    name: &str,
    per_second: Option<f64>,
    burst: Option<u32>,
) -> Result<Option<Rate>, PolicyError> {
    let Some(per_second) = per_second else {
        return Ok(None);
    };
    if !(per_second.is_finite() && per_second > 0.0) {
        return Err(PolicyError::Invalid(format!(
            "{name} must be a positive number, got {per_second}"
        )));
    }
    if burst == Some(0) {
        return Err(PolicyError::Invalid(format!(
            "the burst of {name} must be at least 1"
        )));
    }
    Ok(Some(Rate {
        per_second,
        burst: burst.unwrap_or_else(|| per_second.ceil().clamp(1.0, f64::from(u32::MAX)) as u32),
    }))
}

fn load(path: &Path) -> Result<PolicyFile, PolicyError> {
    let text = std::fs::read_to_string(path).map_err(|e| PolicyError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    serde_saphyr::from_str_with_options(
        &text,
        crate::adapters::input::yaml_options(text.len() as u64),
    )
    .map_err(|e| {
        let (line, column, message) = crate::adapters::input::yaml_error(&e);
        PolicyError::File {
            path: path.to_path_buf(),
            message: format!("{line}:{column}: {message}"),
        }
    })
}

impl Policy {
    /// The engine's configuration under this policy.
    pub fn engine_config(&self, comparison_operators: bool) -> Config {
        Config {
            comparison_operators,
            skip_terminal_pods: self.skip_terminal_pods,
            deadline_from_time_added: self.deadline_from == DeadlineFrom::TaintTimeAdded,
            max_clock_skew_ms: self.max_clock_skew.as_millis().min(i64::MAX as u128) as i64,
        }
    }

    /// The pipeline's configuration under this policy: the engine's, pacing, and how
    /// attempts are made. `concurrency` is the executor's (`usize::MAX` for an executor that
    /// answers at once, as in `simulate` and `plan`).
    pub fn pipeline_config(
        &self,
        comparison_operators: bool,
        concurrency: usize,
        seed: u64,
    ) -> noexecute_engine::PipelineConfig {
        noexecute_engine::PipelineConfig {
            engine: self.engine_config(comparison_operators),
            pace: self.pace,
            release_brake: self.release_brake,
            concurrency,
            mode: self.eviction_mode,
            pdb_timeout: self.pdb_timeout,
            dry_run: self.dry_run,
            stale_cache_guard: self.stale_cache_guard,
            backoff: noexecute_engine::pipeline::Backoff::default(),
            seed,
            tick_batch: noexecute_engine::pipeline::TICK_BATCH,
            lease: None,
            refuse_if_foreign: false,
            handover: None,
            device_taints: false,
        }
    }

    /// The pod labels this policy reads: what `plan` and `explain` keep of each pod's labels.
    pub fn pod_labels(&self) -> crate::adapters::slim::PodLabels {
        crate::adapters::slim::PodLabels::Only(
            self.exclude_selector
                .iter()
                .flat_map(|s| s.keys())
                .map(str::to_string)
                .collect(),
        )
    }

    /// Whether a pod is excluded from eviction.
    pub fn excludes(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        if self.exclude_namespaces.contains(namespace) {
            return true;
        }
        match (&self.exclude_selector, labels) {
            (Some(selector), Some(labels)) => selector.matches(labels),
            (Some(selector), None) => selector.matches(&BTreeMap::new()),
            (None, _) => false,
        }
    }

    /// A one-line summary for logs; "upstream" when nothing is set.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.deadline_from == DeadlineFrom::TaintTimeAdded {
            parts.push(format!(
                "deadline-from=taint-time-added (max skew {:?})",
                self.max_clock_skew
            ));
        }
        if !self.exclude_namespaces.is_empty() {
            let ns: Vec<&str> = self.exclude_namespaces.iter().map(String::as_str).collect();
            parts.push(format!("exclude-namespaces={}", ns.join(",")));
        }
        if let Some(s) = &self.exclude_selector {
            parts.push(format!("exclude-selector={s}"));
        }
        if self.skip_terminal_pods {
            parts.push("skip-terminal-pods".into());
        }
        if self.dry_run {
            parts.push("dry-run".into());
        }
        if self.eviction_mode == EvictionMode::Evict {
            match self.pdb_timeout {
                Some(t) => parts.push(format!("eviction-mode=evict (pdb-timeout {t:?})")),
                None => parts.push("eviction-mode=evict".into()),
            }
        }
        if !self.stale_cache_guard {
            parts.push("stale-cache-guard=false".into());
        }
        if let Some(r) = &self.pace.rate {
            parts.push(format!(
                "max-evictions-per-second={} (burst {})",
                r.per_second, r.burst
            ));
        }
        if let Some(r) = &self.pace.node_rate {
            parts.push(format!(
                "max-node-evictions-per-second={} (burst {})",
                r.per_second, r.burst
            ));
        }
        if let Some(b) = &self.pace.brake {
            parts.push(format!(
                "brake-threshold={}% (min {} nodes){}",
                b.threshold_percent,
                b.min_tainted_nodes,
                if self.release_brake { ", released" } else { "" }
            ));
        }
        if parts.is_empty() {
            "upstream".into()
        } else {
            parts.join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_and_errors_name_the_place() {
        let dir = std::env::temp_dir().join(format!("noexecute-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let file = dir.join("p.yaml");
        std::fs::write(
            &file,
            "deadlineFrom: taint-time-added\nexcludeNamespaces: [kube-system]\nexcludeSelector: app=db\n",
        )
        .unwrap_or_default();
        let args = PolicyArgs {
            config: Some(file.clone()),
            exclude_namespaces: vec!["monitoring".into()],
            ..PolicyArgs::default()
        };
        let p = args.resolve().unwrap_or_default();
        assert_eq!(p.deadline_from, DeadlineFrom::TaintTimeAdded);
        assert!(p.excludes("kube-system", None));
        assert!(p.excludes("monitoring", None));
        let labels: BTreeMap<String, String> = [("app".to_string(), "db".to_string())].into();
        assert!(p.excludes("shop", Some(&labels)));
        assert!(!p.excludes("shop", None));

        std::fs::write(&file, "deadlineFrom: sometime\n").unwrap_or_default();
        let err = args
            .resolve()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("p.yaml: 1:"), "{err}");
        std::fs::write(&file, "dryrun: true\n").unwrap_or_default();
        let err = args
            .resolve()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown field `dryrun`"), "{err}");
        // A list left blank is empty, as serde_yaml read it; `off` is no boolean.
        std::fs::write(&file, "excludeNamespaces:\ndryRun: false\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let p = args.resolve().unwrap_or_else(|e| panic!("{e}"));
        assert!(p.excludes("monitoring", None) && !p.excludes("kube-system", None));
        std::fs::write(&file, "dryRun: off\n").unwrap_or_else(|e| panic!("{e}"));
        let err = args
            .resolve()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("p.yaml: 1:"), "{err}");
    }

    #[test]
    fn pacing_comes_from_the_file_and_the_flags() {
        let dir = std::env::temp_dir().join(format!("noexecute-pace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let file = dir.join("p.yaml");
        std::fs::write(
            &file,
            "maxEvictionsPerSecond: 2.5\nmaxNodeEvictionsPerSecond: 0.1\nnodeEvictionBurst: 3\nbrakeThreshold: 40\nbrakeMinNodes: 5\nreleaseBrake: true\n",
        )
        .unwrap_or_default();
        let args = PolicyArgs {
            config: Some(file.clone()),
            eviction_burst: Some(7),
            ..PolicyArgs::default()
        };
        let p = args.resolve().unwrap_or_default();
        assert_eq!(
            p.pace.rate,
            Some(Rate {
                per_second: 2.5,
                burst: 7
            })
        );
        assert_eq!(
            p.pace.node_rate,
            Some(Rate {
                per_second: 0.1,
                burst: 3
            })
        );
        assert_eq!(
            p.pace.brake,
            Some(Brake {
                threshold_percent: 40.0,
                min_tainted_nodes: 5
            })
        );
        assert!(p.release_brake);
        assert!(
            p.describe()
                .contains("brake-threshold=40% (min 5 nodes), released")
        );
        // Without a burst, the rate rounded up (at least 1).
        let p = PolicyArgs {
            max_evictions_per_second: Some(0.2),
            ..PolicyArgs::default()
        }
        .resolve()
        .unwrap_or_default();
        assert_eq!(p.pace.rate.map(|r| r.burst), Some(1));
        std::fs::write(&file, "brakeThreshold: 150\n").unwrap_or_default();
        let err = args
            .resolve()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("brakeThreshold"), "{err}");
    }
}
