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
//!
//! Three wings: [`controller`] (the live controller), [`offline`] (the drivers that run on a
//! virtual clock) and [`adapters`] (what both use to read the world). `cli` only parses flags
//! and calls into them.

#![deny(rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod adapters;
pub mod cli;
pub mod controller;
pub mod offline;
