//! Client-side rate limiting with client-go's semantics: a token bucket of `burst` tokens
//! refilled at `qps` per second, shared by every request the controller makes (except the
//! long-running watches). Waiters are served in order: each reserves the next token.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> RateLimiter {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps: qps.max(0.001),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long the caller must wait for its token (reserving it).
    async fn reserve(&self) -> Duration {
        let mut state = self.state.lock().await;
        let now = Instant::now();
        let (tokens, last) = *state;
        let refilled = (tokens + now.duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        let left = refilled - 1.0;
        *state = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.qps)
        }
    }

    pub async fn acquire(&self) {
        let wait = self.reserve().await;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_then_qps() {
        let limiter = RateLimiter::new(10.0, 3);
        let start = tokio::time::Instant::now();
        for _ in 0..3 {
            limiter.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst is free");
        limiter.acquire().await;
        limiter.acquire().await;
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(190) && waited <= Duration::from_millis(210),
            "two more tokens at 10 qps take 200 ms, took {waited:?}"
        );
    }
}
