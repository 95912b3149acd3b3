//! The nemesis's log: one JSON object per fault, with when it began and ended. The checker
//! reads it to know when no replica could act; the report counts faults by kind.

use crate::audit::Micros;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub kind: String,
    pub target: String,
    /// Microseconds since the epoch.
    pub start: Micros,
    pub end: Micros,
    /// The driver's view when the fault began: whether it hit the plane or the replica it saw
    /// holding the Lease. Informational: the checker decides from the Lease's history in the
    /// audit log (`check::fault_windows`).
    #[serde(default)]
    pub disruptive: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum FaultsError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a fault: {source}")]
    Line {
        path: String,
        line: usize,
        source: serde_json::Error,
    },
}

pub fn read(path: &Path) -> Result<Vec<Fault>, FaultsError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| FaultsError::Read {
        path: shown.clone(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| FaultsError::Read {
            path: shown.clone(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(&line).map_err(|source| FaultsError::Line {
                path: shown.clone(),
                line: i + 1,
                source,
            })?,
        );
    }
    Ok(out)
}

/// Faults by kind.
pub fn by_kind(faults: &[Fault]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for f in faults {
        *out.entry(f.kind.clone()).or_default() += 1;
    }
    out
}
