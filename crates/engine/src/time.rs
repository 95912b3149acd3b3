//! The engine's notion of time. The engine never reads a clock: every input carries `now`.

use std::fmt;
use std::time::Duration;

/// An instant on the driver's clock, in milliseconds since an epoch the driver chooses.
///
/// The live controller uses Unix time (so that a taint's `timeAdded` can be compared with it);
/// the simulator starts at zero. Millisecond resolution is far below anything Kubernetes can
/// observe (object timestamps have one-second resolution) and keeps every toleration the API
/// accepts representable without overflow.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(i64);

impl Time {
    /// The earliest representable instant.
    pub const MIN: Time = Time(i64::MIN);
    /// The latest representable instant; additions saturate here.
    pub const MAX: Time = Time(i64::MAX);

    pub const fn from_millis(ms: i64) -> Self {
        Time(ms)
    }

    pub const fn from_secs(s: i64) -> Self {
        Time(s.saturating_mul(1000))
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// Seconds since the epoch, with millisecond precision.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    /// Truncated to a whole second, as the API server keeps an object's timestamps (a
    /// taint's `timeAdded`, say).
    pub const fn whole_second(self) -> Time {
        Time(self.0.saturating_sub(self.0.rem_euclid(1000)))
    }

    /// `self + d`, saturating at [`Time::MAX`].
    pub fn plus(self, d: Duration) -> Time {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Time(self.0.saturating_add(ms))
    }

    /// `self + seconds`, saturating.
    pub const fn plus_secs(self, seconds: i64) -> Time {
        Time(self.0.saturating_add(seconds.saturating_mul(1000)))
    }

    /// A wall-clock timestamp (a taint's `timeAdded`, an Event's time) on this clock, given
    /// what the wall clock reads (`wall_now`) at this clock's `now`. The live controller's
    /// clock runs on the monotonic clock from a wall-clock start, so the two drift apart when
    /// the wall clock is stepped; taking the offset afresh each time follows every step.
    pub fn from_wall(wall: Time, wall_now: Time, now: Time) -> Time {
        let offset = wall_now.0.saturating_sub(now.0);
        Time(wall.0.saturating_sub(offset))
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Duration {
        let ms = self.0.saturating_sub(earlier.0);
        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hole 7: the wall-clock offset was frozen at start. The controller starts at wall time
    /// 1,000 s; its monotonic clock then reads 1,600 s while the wall clock was stepped back by
    /// an hour (an NTP correction). A taint added 10 minutes ago by the new wall clock must be
    /// 10 minutes old on the controller's clock, not in the future.
    #[test]
    fn wall_timestamps_follow_a_clock_step() {
        let now = Time::from_secs(1_600);
        let wall_now = Time::from_secs(1_600 - 3_600);
        let added = Time::from_secs(1_600 - 3_600 - 600);
        assert_eq!(
            Time::from_wall(added, wall_now, now),
            Time::from_secs(1_000)
        );
        // Without a step the timestamp is unchanged.
        assert_eq!(Time::from_wall(added, now, now), added);
    }

    #[test]
    fn whole_seconds_truncate_toward_the_past() {
        assert_eq!(Time::from_millis(1999).whole_second(), Time::from_secs(1));
        assert_eq!(Time::from_millis(2000).whole_second(), Time::from_secs(2));
        assert_eq!(Time::from_millis(-1).whole_second(), Time::from_secs(-1));
        assert_eq!(Time::MIN.whole_second(), Time::MIN);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Time::MAX.plus_secs(1), Time::MAX);
        assert_eq!(
            Time::from_secs(1).plus(Duration::from_millis(1500)),
            Time::from_millis(2500)
        );
        assert_eq!(Time::from_secs(1).since(Time::from_secs(3)), Duration::ZERO);
        assert_eq!(
            Time::from_secs(3).since(Time::from_secs(1)),
            Duration::from_secs(2)
        );
    }
}
