//! # noexecute
//!
//! The shell around [`noexecute_engine`]: the `noexecute` command and everything that touches
//! the outside world. Each subcommand drives the same engine:
//!
//! - `simulate` ([`simulate`]): a scenario file on a virtual clock, printed as a timeline
//!   ([`report`]) or drawn ([`plot`]).
//! - `plan` and `explain`: a real cluster's state (a snapshot file or a read-only live read) with
//!   hypothetical taints.
//! - `run`: the production controller.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod controller;
pub mod convert;
pub mod explain;
pub mod input;
pub mod plan;
pub mod plot;
pub mod policy;
pub mod report;
pub mod scenario;
pub mod selector;
pub mod simulate;
pub mod slim;
pub mod state;
pub mod time;
