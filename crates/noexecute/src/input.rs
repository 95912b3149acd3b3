//! Positions for parse errors of user-supplied files (scenarios, snapshots, policy files), so
//! every message can say `file:line:column: what`.

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
