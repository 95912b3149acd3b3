//! The live controller's clock: wall-clock milliseconds (so that a taint's `timeAdded` means
//! something to the engine) advanced by the monotonic clock (so that a wall-clock jump cannot
//! fire or delay evictions).

use std::time::{Duration, Instant};

use noexecute_engine::Time;

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
    start_wall: Time,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            start: Instant::now(),
            start_wall: crate::adapters::time::wall_clock(),
        }
    }

    pub fn now(&self) -> Time {
        self.at(Instant::now())
    }

    pub fn at(&self, instant: Instant) -> Time {
        let elapsed = instant.saturating_duration_since(self.start);
        self.start_wall.plus(elapsed)
    }

    /// A wall-clock timestamp on this clock, by the wall clock's offset now: a step of the wall
    /// clock after start is followed.
    pub fn from_wall(&self, wall: Time) -> Time {
        Time::from_wall(wall, crate::adapters::time::wall_clock(), self.now())
    }

    /// The monotonic instant at which engine time `t` arrives.
    pub fn instant(&self, t: Time) -> Instant {
        let ms = (t.as_millis() - self.start_wall.as_millis()).max(0);
        self.start + Duration::from_millis(ms as u64)
    }
}

/// The wall clock's offset from a [`Clock`], kept steady: it moves only when the wall clock
/// is stepped (by more than a second). Device taints' times are compared for equality: a
/// `timeAdded` converted twice must come out the same, which a fresh offset (read to the
/// millisecond, twice) does not promise.
#[derive(Clone, Copy, Debug, Default)]
pub struct WallOffset {
    ms: Option<i64>,
}

impl WallOffset {
    /// `wall` on `clock`.
    pub fn from_wall(&mut self, clock: &Clock, wall: Time) -> Time {
        let fresh = crate::adapters::time::wall_clock().as_millis() - clock.now().as_millis();
        Time::from_millis(wall.as_millis() - self.update(fresh))
    }

    fn update(&mut self, fresh: i64) -> i64 {
        match self.ms {
            Some(ms) if (fresh - ms).abs() <= 1000 => ms,
            _ => {
                self.ms = Some(fresh);
                fresh
            }
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offset holds through millisecond jitter, and follows a step of the wall clock.
    #[test]
    fn a_wall_offset_moves_only_with_a_step() {
        let mut o = WallOffset::default();
        assert_eq!(o.update(5), 5);
        assert_eq!(o.update(6), 5);
        assert_eq!(o.update(4), 5);
        assert_eq!(o.update(1_005), 5);
        assert_eq!(o.update(60_000), 60_000);
        assert_eq!(o.update(59_999), 60_000);
    }
}
