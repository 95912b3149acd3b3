//! Wall-clock time, jitter and duration flags: the few things every subcommand shares that
//! read the outside world (so that `cli` and `controller` need not import each other).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use noexecute_engine::Time;

use std::fmt;

use serde::Deserialize;

/// Wall-clock now, as an engine time (Unix milliseconds).
pub fn wall_clock() -> Time {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Time::from_millis(ms)
}

/// A uniformly random number in [0, 1), for jitter and seeds. Not for anything that needs
/// real randomness.
pub fn random_fraction() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A random 64-bit number from the standard library's per-process hash keys.
pub fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x9e37_79b9_7f4a_7c15);
    h.finish()
}

/// A duration flag: `90s`, `5m`, `1h30m`, `250ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    Offset::parse(s).map(|o| Duration::from_millis(o.0.unsigned_abs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_in_range() {
        for _ in 0..1000 {
            let f = random_fraction();
            assert!((0.0..1.0).contains(&f));
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("soon").is_err());
    }
}

/// A duration in a scenario: `90s`, `5m`, `1h30m`, `1.5s`, or plain (possibly fractional)
/// seconds. Held as milliseconds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Offset(pub i64);

impl Offset {
    pub fn time(self) -> Time {
        Time::from_millis(self.0)
    }

    pub fn parse(text: &str) -> Result<Offset, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty duration".into());
        }
        if let Ok(secs) = text.parse::<f64>() {
            return Offset::from_secs(secs);
        }
        let mut total = 0f64;
        let mut number = String::new();
        let mut chars = text.chars().peekable();
        let mut any_unit = false;
        while let Some(c) = chars.next() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
                continue;
            }
            let unit = if c == 'm' && chars.peek() == Some(&'s') {
                chars.next();
                0.001
            } else {
                match c {
                    'h' => 3600.0,
                    'm' => 60.0,
                    's' => 1.0,
                    _ => return Err(format!("unexpected {c:?} in duration {text:?}")),
                }
            };
            let value: f64 = number
                .parse()
                .map_err(|_| format!("missing number before unit in duration {text:?}"))?;
            total += value * unit;
            number.clear();
            any_unit = true;
        }
        if !number.is_empty() || !any_unit {
            return Err(format!(
                "duration {text:?} needs a unit after every number (h, m, s, ms), e.g. 90s or 1h30m"
            ));
        }
        Offset::from_secs(total)
    }

    fn from_secs(secs: f64) -> Result<Offset, String> {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!(
                "duration must be a non-negative number of seconds, got {secs}"
            ));
        }
        if secs > 1e12 {
            return Err(format!("duration of {secs} seconds is too long"));
        }
        Ok(Offset((secs * 1000.0).round() as i64))
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        if ms % 1000 == 0 {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{:.3}s", ms as f64 / 1000.0)
        }
    }
}

impl<'de> Deserialize<'de> for Offset {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        let parsed = match Raw::deserialize(d)? {
            Raw::Number(n) => Offset::from_secs(n),
            Raw::Text(t) => Offset::parse(&t),
        };
        parsed.map_err(serde::de::Error::custom)
    }
}

/// The wall clock now, to the second (truncated, as a `metav1.Time` is written), in RFC 3339.
pub fn rfc3339_now_seconds() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .map_or_else(|_| now.to_string(), |t| t.to_string())
}

/// RFC 3339 for a wall-clock engine time.
pub fn timestamp(t: Time) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(t.as_millis())
        .map_or_else(|_| format!("{}ms", t.as_millis()), |ts| ts.to_string())
}

/// How far `t` is after `now`, for people: `+42s`, `+5m00s`, `+1h30m`.
pub fn relative(t: Time, now: Time) -> String {
    let s = t.since(now).as_secs();
    if s >= 3600 {
        format!("+{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("+{}m{:02}s", s / 60, s % 60)
    } else {
        format!("+{s}s")
    }
}
