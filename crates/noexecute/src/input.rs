//! Reading user-supplied files (scenarios, snapshots, policy files): how YAML is read, and
//! positions for parse errors, so every message can say `file:line:column: what`.

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

/// How user-supplied YAML is read: streamed (serde-saphyr decodes straight into the target
/// types from the parser's events, never a whole document's worth of them), and with its size
/// limits lifted so that a 150,000-pod snapshot or scenario is read; the limits on nesting,
/// anchors and aliases (billion-laughs documents) stay.
pub fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = None;
    budget.max_events = usize::MAX;
    budget.max_nodes = usize::MAX;
    budget.max_total_scalar_bytes = usize::MAX;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options
}

/// Line, column and message of a YAML error, followed by the source lines it points at (as
/// the library draws them, under its own header, which is dropped: the caller says
/// `file:line:column` itself).
pub fn yaml_error(e: &serde_saphyr::Error) -> (usize, usize, String) {
    let plain = e.without_snippet();
    let (line, column) = plain
        .location()
        .map_or((0, 0), |l| (l.line() as usize, l.column() as usize));
    let mut message = strip_position(plain.to_string());
    let drawn = e.to_string();
    if let Some((_, snippet)) = drawn
        .split_once('\n')
        .and_then(|(_, rest)| rest.split_once('\n'))
        .filter(|(header, _)| header.trim_start().starts_with("-->"))
    {
        message.push('\n');
        message.push_str(snippet.trim_end());
    }
    (line, column, message)
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
