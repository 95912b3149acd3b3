//! The offline wing: what runs without a controller, on a virtual clock. `simulate` drives the
//! pipeline through a scenario file; `plan` and `explain` through a cluster's state (a snapshot
//! or a read-only live list) with hypothetical taints. Each is a thin driver of the same
//! pipeline the controller runs; none writes to a cluster.

pub mod explain;
pub mod plan;
pub mod plot;
pub mod report;
pub mod scenario;
pub mod simulate;
pub mod state;
