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
/// types from the parser's events, never a whole document's worth of them), as serde_yaml
/// read it before (a blank or `~` string value is that text, booleans are only `true` and
/// `false`; a blank list or map is empty, with [`or_default`] on the field), and with the size
/// limits lifted so that a 150,000-pod snapshot or scenario is read. Anchors and aliases may
/// be used freely up to 20 replayed events a byte of input (`input_len`; a million at least),
/// which keeps a billion-laughs document from expanding without bound; nesting stays limited
/// to 64 levels.
pub fn yaml_options(input_len: u64) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = None;
    budget.max_events = usize::MAX;
    budget.max_nodes = usize::MAX;
    budget.max_total_scalar_bytes = usize::MAX;
    budget.max_aliases = usize::MAX;
    budget.max_anchors = usize::MAX;
    budget.enforce_alias_anchor_ratio = false;
    let replay = usize::try_from(input_len.saturating_mul(20)).unwrap_or(usize::MAX);
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = replay.max(1_000_000);
    options.alias_limits.max_alias_expansions_per_anchor = usize::MAX;
    options.null_as_string = true;
    options.strict_booleans = true;
    options
}

/// A JSON value read into `T`; an error says at which field (`spec.devices[0].taints[0]`,
/// empty for the value itself) and what is wrong there.
pub fn from_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." { String::new() } else { path };
        (at, e.into_inner().to_string())
    })
}

/// Joins a field's path to a path within it: `items[3]` and `spec.pool` make
/// `items[3].spec.pool`.
pub fn joined(field: &str, within: &str) -> String {
    match (field.is_empty(), within.is_empty()) {
        (_, true) => field.to_string(),
        (true, false) => within.to_string(),
        (false, false) => format!("{field}.{within}"),
    }
}

/// For `#[serde(default, deserialize_with = "…")]` lists and maps: a blank (null) value is
/// the empty one, as YAML users write `tolerations:` with nothing after it.
pub fn or_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(d)?.unwrap_or_default())
}

/// Line, column and message of a YAML error, followed by the source lines it points at (as
/// the library draws them, under its own header, which is dropped: the caller says
/// `file:line:column` itself).
pub fn yaml_error(e: &serde_saphyr::Error) -> (usize, usize, String) {
    let plain = e.without_snippet();
    let (line, column) = plain
        .location()
        .map_or((0, 0), |l| (l.line() as usize, l.column() as usize));
    // The library's own message carries no position of its own.
    let mut message = plain.to_string();
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
