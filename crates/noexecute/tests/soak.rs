//! A short fault soak in CI (`docs/soak.md`): two replicas on the whole plane, seeded churn and
//! every kind of fault for a few minutes, and every write in the audit log judged by the
//! independent checker (crates/soak). Any violation fails the test, and the report (with the
//! seed and the first violating write's history) is its message. `scripts/soak` runs the same
//! soak for longer, or against upstream's controller.

use anyhow::{Context, Result};
use noexecute_soak::drive::{DriveArgs, drive, judge};
use noexecute_soak::history::Controller;
use noexecute_testkit::Plane;
use std::path::PathBuf;
use std::time::Duration;

const SEED: u64 = 7;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_with_every_fault_has_no_violation() -> Result<()> {
    Plane::reset("soak")?;
    let plane = Plane::full_with_env("soak", 3, 3, false, &[("NOEXECUTE_AUDIT", "bodies")])?;
    let out = plane.state_dir.join("soak-out");
    let args = DriveArgs {
        duration: Duration::from_secs(150),
        seed: SEED,
        controller: Controller::Noexecute,
        replicas: 2,
        shards: 1,
        faults: "all".into(),
        fault_every: 5.0,
        binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_noexecute"))),
        plane: plane.state_dir.clone(),
        out: out.clone(),
        settle: Duration::from_secs(25),
        max_pods: 200,
        controller_args: String::new(),
        eviction_rate: 25,
        pdb_timeout: None,
    };
    let code = drive(args).await.context("the soak did not run")?;
    let (report, text) = judge(&out, &plane.state_dir)?;
    let faults = noexecute_soak::faults::read(&out.join("nemesis.jsonl"))?;
    let kinds = noexecute_soak::faults::by_kind(&faults);
    assert_eq!(
        code, 0,
        "the checker found violations (seed {SEED}):\n{text}"
    );
    assert_eq!(report.total(), 0, "{text}");
    // The soak did something worth judging: faults of many kinds, evictions, failovers.
    assert!(faults.len() >= 12, "only {} faults:\n{text}", faults.len());
    assert!(
        kinds.len() >= 6,
        "only {} fault kinds:\n{text}",
        kinds.len()
    );
    assert!(
        report.evictions >= 60,
        "only {} evictions:\n{text}",
        report.evictions
    );
    assert!(
        report.deadlines >= 60,
        "only {} deadlines:\n{text}",
        report.deadlines
    );
    assert!(report.terms >= 2, "no failover:\n{text}");
    plane.down()
}
