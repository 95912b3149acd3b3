//! The API server's audit log, one JSON object per line, read into the few fields the checker
//! uses. Everything else in an entry is ignored; a line that is not an audit event is an error
//! that names the line.

use serde::Deserialize;
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;

/// Microseconds since the Unix epoch (the audit log's resolution).
pub type Micros = i64;

/// Parses an RFC 3339 time (`2026-12-02T04:46:00.123456Z`, or whole seconds as in a taint's
/// `timeAdded`).
pub fn parse_time(text: &str) -> Option<Micros> {
    let ts: jiff::Timestamp = text.parse().ok()?;
    Some(ts.as_microsecond())
}

/// Formats microseconds since the epoch as RFC 3339, for reports.
pub fn show_time(at: Micros) -> String {
    match jiff::Timestamp::from_microsecond(at) {
        Ok(ts) => ts.to_string(),
        Err(_) => format!("{at}µs"),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: not an audit event: {reason}")]
    Line {
        path: String,
        line: usize,
        reason: String,
    },
}

/// One completed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub user: String,
    pub user_agent: String,
    pub code: u16,
    /// When the API server received the request.
    pub received: Micros,
    /// When the response was complete: the write, if any, is committed by then.
    pub completed: Micros,
    pub request: Option<Value>,
    pub response: Option<Value>,
}

impl Entry {
    /// A 2xx answer: the write happened.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// A body's string field at a JSON pointer.
    pub fn request_str(&self, pointer: &str) -> Option<&str> {
        self.request.as_ref()?.pointer(pointer)?.as_str()
    }

    pub fn response_str(&self, pointer: &str) -> Option<&str> {
        self.response.as_ref()?.pointer(pointer)?.as_str()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    kind: String,
    #[serde(default)]
    stage: String,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: RawUser,
    #[serde(default)]
    user_agent: String,
    #[serde(default)]
    object_ref: RawRef,
    #[serde(default)]
    response_status: RawStatus,
    #[serde(default)]
    request_received_timestamp: String,
    #[serde(default)]
    stage_timestamp: String,
    request_object: Option<Value>,
    response_object: Option<Value>,
}

#[derive(Deserialize, Default)]
struct RawUser {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
struct RawRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize, Default)]
struct RawStatus {
    #[serde(default)]
    code: u16,
}

/// Parses one line. `Ok(None)` for an entry of another stage than `ResponseComplete` (a policy
/// that keeps more stages records each request more than once).
pub fn parse_line(line: &str) -> Result<Option<Entry>, String> {
    let raw: Raw = serde_json::from_str(line).map_err(|e| e.to_string())?;
    if raw.kind != "Event" {
        return Err(format!("kind is {:?}, not Event", raw.kind));
    }
    if raw.stage != "ResponseComplete" {
        return Ok(None);
    }
    let received = parse_time(&raw.request_received_timestamp).ok_or_else(|| {
        format!(
            "requestReceivedTimestamp {:?} is not a time",
            raw.request_received_timestamp
        )
    })?;
    let completed = parse_time(&raw.stage_timestamp)
        .ok_or_else(|| format!("stageTimestamp {:?} is not a time", raw.stage_timestamp))?;
    Ok(Some(Entry {
        verb: raw.verb,
        resource: raw.object_ref.resource,
        subresource: raw.object_ref.subresource,
        namespace: raw.object_ref.namespace,
        name: raw.object_ref.name,
        user: raw.user.username,
        user_agent: raw.user_agent,
        code: raw.response_status.code,
        received,
        completed,
        request: raw.request_object,
        response: raw.response_object,
    }))
}

/// The audit logs of a plane's directory, oldest first: kube-apiserver's rotated files
/// (`audit-<time>.log`) and then `audit.log`.
pub fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut rotated: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("audit-") && n.ends_with(".log"))
                })
                .collect()
        })
        .unwrap_or_default();
    rotated.sort();
    rotated.push(dir.join("audit.log"));
    rotated
}

/// What the logs held: the entries, sorted by completion time, and the lines that could not
/// be read (a line torn by a killed writer), with where they are.
#[derive(Debug, Default)]
pub struct Log {
    pub entries: Vec<Entry>,
    pub unreadable: Vec<String>,
}

/// Reads audit logs in order. A line that is not an audit event is counted, not fatal; a file
/// with none that is, is an error.
pub fn read(paths: &[&Path]) -> Result<Log, AuditError> {
    let mut out = Log::default();
    for path in paths {
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| AuditError::Read {
            path: shown.clone(),
            source,
        })?;
        let mut good = 0usize;
        let mut first_bad: Option<AuditError> = None;
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|source| AuditError::Read {
                path: shown.clone(),
                source,
            })?;
            if line.trim().is_empty() {
                continue;
            }
            match parse_line(&line) {
                Ok(Some(entry)) => {
                    good += 1;
                    out.entries.push(entry);
                }
                Ok(None) => good += 1,
                Err(reason) => {
                    out.unreadable.push(format!("{shown}:{}: {reason}", i + 1));
                    if first_bad.is_none() {
                        first_bad = Some(AuditError::Line {
                            path: shown.clone(),
                            line: i + 1,
                            reason,
                        });
                    }
                }
            }
        }
        if good == 0
            && let Some(e) = first_bad
        {
            return Err(e);
        }
    }
    out.entries.sort_by_key(|e| (e.completed, e.received));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_with_and_without_fractions() {
        assert_eq!(parse_time("1970-01-01T00:00:01Z"), Some(1_000_000));
        assert_eq!(parse_time("1970-01-01T00:00:01.000250Z"), Some(1_000_250));
        assert_eq!(parse_time("yesterday"), None);
    }

    #[test]
    fn a_line_that_is_not_an_audit_event_is_named() {
        assert!(parse_line("{\"kind\":\"Pod\"}").is_err());
        assert!(parse_line("not json").is_err());
        let bad_time = r#"{"kind":"Event","stage":"ResponseComplete","requestReceivedTimestamp":"x","stageTimestamp":"x"}"#;
        assert!(
            parse_line(bad_time)
                .err()
                .is_some_and(|e| e.contains("requestReceivedTimestamp"))
        );
    }
}
