//! Positions for parse errors of user-supplied files (scenarios, snapshots, policy files), so
//! every message can say `file:line:column: what`.

use std::path::PathBuf;

/// A user-supplied file could not be used. Every variant names the file; syntax and type
/// errors carry the position, semantic ones the offending field.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The cause is in the message, and deliberately not a `source`: error chains would
    /// print it twice.
    #[error("{path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {field}: {message}")]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
}

/// Line, column and message of a YAML error, without the library's own " at line …" suffix.
pub fn yaml_error(e: &serde_yaml_ng::Error) -> (usize, usize, String) {
    let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
    (line, column, strip_position(e.to_string()))
}

/// Line, column and message of a JSON error, likewise.
pub fn json_error(e: &serde_json::Error) -> (usize, usize, String) {
    (e.line(), e.column(), strip_position(e.to_string()))
}

fn strip_position(message: String) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message,
    }
}
