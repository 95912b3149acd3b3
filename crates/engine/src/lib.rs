//! # noexecute-engine
//!
//! The decision core of noexecute, Kubernetes' `NoExecute` taint eviction rebuilt in Rust. It
//! decides, for every pod bound to a node with `NoExecute` taints, whether and when the pod
//! must be evicted, with exactly the semantics of upstream's `taint-eviction-controller`
//! (`pkg/controller/tainteviction`), apart from the bug fixes listed in `docs/deviations.md`.
//!
//! ```text
//!  watches ──► observations ──► ┌────────────┐ ──► actions ──► executor ──► API server
//!  (nodes, pods)   + now        │   Engine   │   (Schedule,     (patch condition,
//!                               │ taints     │    Cancel,        delete, events,
//!  clock ──► advance(now) ────► │ pods/node  │    Evict, Skip)   metrics)
//!                               │ deadlines  │                      │
//!                               └────────────┘ ◄── reports ◄────────┘
//! ```
//!
//! **What goes in:** node observations (name and taints) and pod observations (namespace,
//! name, UID, node, tolerations, phase, deletion state), each an add/update or a delete; the
//! executor's reports on evictions; and the current time, which every call takes as an
//! argument.
//!
//! **What comes out:** [`Action`]s (schedule an eviction at a deadline, cancel it, evict now,
//! skip) appended to a caller's buffer, [`Engine::next_deadline`] for the driver to sleep on,
//! and queries of what is pending for whom and why.
//!
//! **What it never does:** I/O, reading a clock, spawning tasks or timers. The live
//! controller, the simulator, the planner and the conformance tests all drive this same
//! engine, so there is one source of truth for every decision.

#![deny(warnings, rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod action;
pub mod device;
pub mod engine;
mod intern;
pub mod observe;
pub mod pace;
pub mod pipeline;
pub mod schedule;
mod slab;
pub mod taint;
pub mod time;
pub mod toleration;
pub mod workload;

pub use action::{Action, CancelReason, Cause, PodRef, SkipReason};
pub use engine::{Config, Engine, EvictionView, Input, PodView, Stage};
pub use observe::{EvictionId, NodeObservation, Outcome, Phase, PodObservation, Report, Uid};
pub use pace::{BrakeChange, PaceConfig, Pacer};
pub use pipeline::{
    Attempt, AttemptId, AttemptReport, AttemptResult, Countdown, Effect as PipelineEffect, Held,
    Pipeline, PipelineConfig,
};
pub use schedule::DeadlineQueue;
pub use taint::{Taint, TaintEffect};
pub use time::Time;
pub use toleration::{Operator, Toleration, TolerationTime, Verdict};
