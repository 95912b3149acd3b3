//! Client-side rate limiting with client-go's semantics: a token bucket of `burst` tokens
//! refilled at `qps` per second, shared by every request the controller makes (except the
//! long-running watches). Waiters are served in order: each reserves the next token. The
//! counting is the core's token bucket ([`Bucket`]), on milliseconds since the limiter began.

use std::time::Duration;

use noexecute_engine::Time;
use noexecute_engine::pace::{Bucket, Rate};
use tokio::sync::Mutex;
use tokio::time::Instant;

#[derive(Debug)]
pub struct RateLimiter {
    rate: Rate,
    origin: Instant,
    state: Mutex<Bucket>,
    /// Callers of [`RateLimiter::acquire`] waiting for a token: background requests yield to
    /// them.
    urgent: std::sync::atomic::AtomicUsize,
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> RateLimiter {
        let rate = Rate {
            per_second: qps.max(0.001),
            burst: burst.max(1),
        };
        RateLimiter {
            rate,
            origin: Instant::now(),
            state: Mutex::new(Bucket::full(&rate, Time::from_millis(0))),
            urgent: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Now, on the bucket's clock.
    fn now(&self) -> Time {
        Time::from_millis(Instant::now().duration_since(self.origin).as_millis() as i64)
    }

    /// How long the caller must wait for its token (reserving it).
    async fn reserve(&self, n: f64) -> Duration {
        let mut bucket = self.state.lock().await;
        let now = self.now();
        let at = bucket.reserve(&self.rate, now, n);
        at.since(now)
    }

    /// Mark urgent work as pending until the guard is dropped: background requests wait
    /// meanwhile (evictions queued in the executor hold one each).
    pub fn priority(self: &std::sync::Arc<Self>) -> Priority {
        self.urgent
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Priority(self.clone())
    }

    /// Wait for a token, in order with other urgent requests (evictions).
    pub async fn acquire(&self) {
        use std::sync::atomic::Ordering;
        self.urgent.fetch_add(1, Ordering::SeqCst);
        let wait = self.reserve(1.0).await;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        self.urgent.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wait for a token, unless `cancel` fires first (then the token is given back and the
    /// answer is false).
    pub async fn acquire_unless(&self, cancel: &tokio_util::sync::CancellationToken) -> bool {
        self.acquire_n_unless(1, cancel).await
    }

    /// Wait for `n` tokens at once (the requests of one eviction, sent back to back), unless
    /// `cancel` fires first (then they are given back and the answer is false).
    pub async fn acquire_n_unless(
        &self,
        n: u32,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> bool {
        use std::sync::atomic::Ordering;
        if cancel.is_cancelled() {
            return false;
        }
        let n = f64::from(n.max(1));
        self.urgent.fetch_add(1, Ordering::SeqCst);
        let wait = self.reserve(n).await;
        let got = if wait.is_zero() {
            true
        } else {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => false,
                _ = tokio::time::sleep(wait) => true,
            }
        };
        let got = got && !cancel.is_cancelled();
        if !got {
            self.state.lock().await.give_back(&self.rate, n);
        }
        self.urgent.fetch_sub(1, Ordering::SeqCst);
        got
    }

    /// Give back `n` tokens taken and not spent (a request that was not sent).
    pub async fn give_back(&self, n: u32) {
        if n > 0 {
            self.state.lock().await.give_back(&self.rate, f64::from(n));
        }
    }

    /// Wait for a token that no urgent request needs (events): the shared budget stays the
    /// configured QPS and burst, but an eviction never waits behind an event.
    pub async fn acquire_background(&self) {
        use std::sync::atomic::Ordering;
        loop {
            if self.urgent.load(Ordering::SeqCst) == 0 {
                let mut bucket = self.state.lock().await;
                let now = self.now();
                bucket.refill(&self.rate, now);
                if bucket.tokens() >= 1.0 {
                    bucket.reserve(&self.rate, now, 1.0);
                    return;
                }
            }
            tokio::time::sleep(Duration::from_secs_f64(1.0 / self.rate.per_second)).await;
        }
    }
}

/// See [`RateLimiter::priority`].
#[derive(Debug)]
pub struct Priority(std::sync::Arc<RateLimiter>);

impl Drop for Priority {
    fn drop(&mut self) {
        self.0
            .urgent
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_in_order_at_the_rate_and_pairs_back_to_back() {
        let limiter = RateLimiter::new(10.0, 1);
        let start = Instant::now();
        let never = tokio_util::sync::CancellationToken::new();
        let mut at = Vec::new();
        for n in [1, 1, 2, 1] {
            assert!(limiter.acquire_n_unless(n, &never).await);
            at.push(Instant::now().duration_since(start).as_millis());
        }
        // The burst at once, then 100 ms a token; the pair waits for both of its tokens.
        assert_eq!(at, [0, 100, 300, 400]);
    }

    #[tokio::test(start_paused = true)]
    async fn background_requests_yield_to_urgent_ones() {
        let limiter = std::sync::Arc::new(RateLimiter::new(10.0, 1));
        limiter.acquire().await; // the burst
        let urgent = {
            let l = limiter.clone();
            tokio::spawn(async move {
                l.acquire().await;
                tokio::time::Instant::now()
            })
        };
        tokio::task::yield_now().await;
        let background = {
            let l = limiter.clone();
            tokio::spawn(async move {
                l.acquire_background().await;
                tokio::time::Instant::now()
            })
        };
        let (u, b) = (
            urgent.await.unwrap_or_else(|_| tokio::time::Instant::now()),
            background
                .await
                .unwrap_or_else(|_| tokio::time::Instant::now()),
        );
        assert!(u < b, "the urgent request went first");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_gives_its_token_back() {
        let limiter = std::sync::Arc::new(RateLimiter::new(1.0, 1));
        limiter.acquire().await; // the burst
        let cancel = tokio_util::sync::CancellationToken::new();
        let waiter = {
            let (l, c) = (limiter.clone(), cancel.clone());
            tokio::spawn(async move { l.acquire_unless(&c).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
        assert_eq!(waiter.await.ok(), Some(false), "the wait was cut short");
        // The next caller gets the token the cancelled one had reserved, at 1 s.
        let start = tokio::time::Instant::now();
        limiter.acquire().await;
        assert!(
            start.elapsed() <= Duration::from_millis(910),
            "{:?}",
            start.elapsed()
        );
    }

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
