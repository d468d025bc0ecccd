//! The bounded wait every device uses: poll a completion query until it reports done, fails or
//! outlasts a timeout.
//!
//! Polling (rather than a blocking synchronize call of the driver) is what makes the wait bounded: a hung
//! kernel surfaces as [`WaitError::Timeout`] instead of a hang. For the first [`SPIN`] the wait
//! polls back to back (yielding the core between polls), so a chain of decode steps that ends
//! within tens of milliseconds is seen within microseconds; after that it sleeps between polls,
//! backing off to [`MAX_SLEEP`], so a long wait costs little CPU and is seen late by at most a
//! small share of its length.
//!
//! The spin covers a whole decode chain on purpose: with a 5 ms spin and 1 ms sleeps, a chain
//! of eight 0.7 ms steps ended inside the sleeps and could be seen up to a millisecond late,
//! as much as a seventh of the chain (a bound from the schedule, not a measurement).

use std::time::{Duration, Instant};

/// How long the wait polls without sleeping.
const SPIN: Duration = Duration::from_millis(25);
/// The first sleep between polls, doubled up to [`MAX_SLEEP`].
const FIRST_SLEEP: Duration = Duration::from_micros(25);
/// The longest sleep between polls: past the spin, a wait is seen at most this much (and the
/// timer's slack) late, under 1% of it.
const MAX_SLEEP: Duration = Duration::from_micros(200);

/// One poll of the thing being waited for.
#[derive(Debug, PartialEq)]
pub enum Poll<E> {
    Done,
    Pending,
    Failed(E),
}

/// Why a wait ended without completion.
#[derive(Debug, PartialEq)]
pub enum WaitError<E> {
    /// The query reported an error.
    Failed(E),
    /// The query still reported pending work after the timeout.
    Timeout,
}

/// Polls `query` until it reports [`Poll::Done`] or [`Poll::Failed`], or `timeout` has passed
/// since the call (the query is always polled at least once).
pub fn bounded_wait<E>(
    timeout: Duration,
    mut query: impl FnMut() -> Poll<E>,
) -> Result<(), WaitError<E>> {
    let start = Instant::now();
    let mut sleep = FIRST_SLEEP;
    loop {
        match query() {
            Poll::Done => return Ok(()),
            Poll::Failed(e) => return Err(WaitError::Failed(e)),
            Poll::Pending => {}
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(WaitError::Timeout);
        }
        match pause(waited, timeout, &mut sleep) {
            None => std::thread::yield_now(),
            Some(d) => std::thread::sleep(d),
        }
    }
}

/// What a wait does between polls after `waited` of `timeout`: yield (`None`) during the spin,
/// then sleep for `sleep` (at most what is left), doubling it for the next time up to
/// [`MAX_SLEEP`].
fn pause(waited: Duration, timeout: Duration, sleep: &mut Duration) -> Option<Duration> {
    if waited < SPIN {
        return None;
    }
    let now = (*sleep).min(timeout.saturating_sub(waited));
    *sleep = (*sleep * 2).min(MAX_SLEEP);
    Some(now)
}

/// Whole seconds of a timeout for error reports, rounded up so a sub-second timeout never reads
/// as zero.
pub fn timeout_seconds(timeout: Duration) -> u64 {
    let whole = timeout.as_secs();
    if timeout.subsec_nanos() > 0 {
        whole.saturating_add(1)
    } else {
        whole
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_after_some_polls() {
        let mut polls = 0;
        let r = bounded_wait::<()>(Duration::from_secs(5), || {
            polls += 1;
            if polls < 100 {
                Poll::Pending
            } else {
                Poll::Done
            }
        });
        assert_eq!(r, Ok(()));
        assert_eq!(polls, 100);
    }

    #[test]
    fn failure_is_returned_at_once() {
        let mut polls = 0;
        let r = bounded_wait(Duration::from_secs(5), || {
            polls += 1;
            if polls < 3 {
                Poll::Pending
            } else {
                Poll::Failed("sticky")
            }
        });
        assert_eq!(r, Err(WaitError::Failed("sticky")));
        assert_eq!(polls, 3);
    }

    #[test]
    fn pending_forever_times_out_near_the_limit() {
        let start = Instant::now();
        let r = bounded_wait::<()>(Duration::from_millis(30), || Poll::Pending);
        let took = start.elapsed();
        assert_eq!(r, Err(WaitError::Timeout));
        assert!(took >= Duration::from_millis(30), "returned after {took:?}");
        assert!(took < Duration::from_secs(2), "returned after {took:?}");
    }

    #[test]
    fn zero_timeout_still_polls_once() {
        let mut polls = 0;
        let r = bounded_wait::<()>(Duration::ZERO, || {
            polls += 1;
            Poll::Done
        });
        assert_eq!(r, Ok(()));
        assert_eq!(polls, 1);
    }

    #[test]
    fn a_wait_spins_through_a_decode_chain_then_sleeps_at_most_max_sleep() {
        let timeout = Duration::from_secs(600);
        let mut sleep = FIRST_SLEEP;
        // A chain of eight 1 ms steps ends within the spin: it is seen without sleeping.
        assert_eq!(pause(Duration::from_millis(8), timeout, &mut sleep), None);
        assert_eq!(sleep, FIRST_SLEEP);
        let mut sleeps = Vec::new();
        for ms in 25..40 {
            sleeps.extend(pause(Duration::from_millis(ms), timeout, &mut sleep));
        }
        assert_eq!(sleeps[0], FIRST_SLEEP);
        assert!(sleeps.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*sleeps.last().unwrap(), MAX_SLEEP);
        assert!(MAX_SLEEP <= Duration::from_micros(250));
        // Never past the timeout.
        let near_end = timeout - Duration::from_micros(10);
        assert_eq!(
            pause(near_end, timeout, &mut sleep),
            Some(Duration::from_micros(10))
        );
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(timeout_seconds(Duration::from_secs(600)), 600);
        assert_eq!(timeout_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(timeout_seconds(Duration::from_millis(1)), 1);
        assert_eq!(timeout_seconds(Duration::ZERO), 0);
    }
}
