//! Retry schedule for Azure requests: capped exponential backoff with full jitter.
//! Pure: the caller supplies the random draw, so schedules are unit-tested.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub cap: Duration,
    /// Attempts in total, the first included.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(200),
            cap: Duration::from_secs(10),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    /// Delay before retry number `retry` (1 = first retry); `unit` is a uniform draw
    /// in [0, 1). Full jitter spreads the retries of many blocks hitting one 503.
    pub fn delay(&self, retry: u32, unit: f64) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << retry.saturating_sub(1).min(20));
        let ceiling = exp.min(self.cap);
        let unit = unit.clamp(0.0, 1.0);
        // Never zero: at least half the ceiling, so a retry storm still slows down.
        ceiling.mul_f64(0.5 + unit / 2.0)
    }

    /// Whether another attempt is allowed after `attempts` tries.
    pub fn allows(&self, attempts: u32) -> bool {
        attempts < self.max_attempts
    }
}

/// HTTP statuses worth retrying: timeouts, throttling and server errors.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_then_caps() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            max_attempts: 5,
        };
        assert_eq!(b.delay(1, 1.0), Duration::from_millis(100));
        assert_eq!(b.delay(2, 1.0), Duration::from_millis(200));
        assert_eq!(b.delay(3, 1.0), Duration::from_millis(400));
        assert_eq!(b.delay(10, 1.0), Duration::from_secs(1));
        assert_eq!(b.delay(40, 1.0), Duration::from_secs(1));
        assert_eq!(b.delay(1, 0.0), Duration::from_millis(50));
        assert!(b.allows(4));
        assert!(!b.allows(5));
    }

    #[test]
    fn statuses() {
        for s in [500, 503, 429, 408] {
            assert!(is_retryable_status(s));
        }
        for s in [400, 403, 404, 409, 412] {
            assert!(!is_retryable_status(s));
        }
    }
}
