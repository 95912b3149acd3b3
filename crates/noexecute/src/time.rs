//! Wall-clock time, jitter and duration flags: the few things every subcommand shares that
//! read the outside world (so that `cli` and `controller` need not import each other).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use noexecute_engine::Time;

use crate::scenario::Offset;

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
