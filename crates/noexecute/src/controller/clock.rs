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

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
