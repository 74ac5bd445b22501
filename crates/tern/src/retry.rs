//! Running a copy again after it lost its connection.

use std::time::Duration;

use anyhow::Result;

use crate::console::Console;
use crate::error::{Retry, SshFailure, describe};

/// Runs a copy, and again up to `retries` times after a connection was
/// lost (backing off 1 s, 2 s, 4 s, … up to 30 s); every run resumes the
/// partial files of the one before. A peer that cannot be reached on the
/// first try is not retried (a wrong address or login stays wrong). When
/// every run fails, the error that broke the first is the one reported.
///
/// It also runs again (on the same budget and backoff) after a run that
/// returned but that `busy` says should be tried again, for the reason it
/// gives: files refused because another copy to their names was in
/// progress.
pub async fn with_retries<T, F, Fut>(
    retries: u32,
    console: &Console,
    busy: impl Fn(&T) -> Option<String>,
    mut run: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut first: Option<anyhow::Error> = None;
    let mut attempt = 0u32;
    loop {
        let e = match run().await {
            Ok(v) => match busy(&v) {
                Some(why) if attempt < retries => {
                    attempt += 1;
                    let wait = retry_backoff(attempt);
                    console.warn(format!(
                        "{why}; trying again in {} s (retry {attempt} of {retries})",
                        wait.as_secs()
                    ));
                    tokio::time::sleep(wait).await;
                    continue;
                }
                _ => return Ok(v),
            },
            Err(e) => e,
        };
        let (retryable, reaching) = retry_class(&e);
        let never_connected = first.is_none() && reaching;
        if attempt >= retries || !retryable || never_connected {
            return Err(match first {
                Some(f) if retryable => f,
                _ => e,
            });
        }
        attempt += 1;
        let wait = retry_backoff(attempt);
        console.warn(format!(
            "{}; trying again in {} s (retry {attempt} of {retries})",
            describe(&e),
            wait.as_secs()
        ));
        first.get_or_insert(e);
        tokio::time::sleep(wait).await;
    }
}

/// The wait before retry `attempt` (1, 2, …): 1 s, doubling, at most 30 s.
fn retry_backoff(attempt: u32) -> Duration {
    Duration::from_secs((1u64 << attempt.saturating_sub(1).min(5)).min(30))
}

/// Whether running again may help, and whether the failure was in reaching
/// the peer at all.
fn retry_class(e: &anyhow::Error) -> (bool, bool) {
    if let Some(f) = e.downcast_ref::<SshFailure>() {
        return (f.retry == Retry::May, true);
    }
    match e.downcast_ref::<tern_engine::Error>() {
        Some(e) => (
            e.is_retryable(),
            e.kind() == tern_engine::ErrorKind::Connect,
        ),
        None => (false, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::{Format, ProgressBars};
    use std::cell::Cell;

    fn no_busy<T>(_: &T) -> Option<String> {
        None
    }

    fn console() -> Console {
        Console::new(Format::Human, ProgressBars::Never)
    }

    fn lost() -> anyhow::Error {
        tern_engine::Error::PeerGone("connection reset".into()).into()
    }

    fn unreachable() -> anyhow::Error {
        tern_engine::Error::Connect {
            addr: "192.0.2.1:4747".into(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        }
        .into()
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_that_says_busy_is_run_again_until_it_is_not_or_the_budget_ends() {
        let busy = |n: &u32| (*n < 3).then(|| format!("run {n} was refused"));
        for (retries, runs_expected) in [(5, 3), (1, 2)] {
            let runs = Cell::new(0);
            let got = with_retries(retries, &console(), busy, || {
                runs.set(runs.get() + 1);
                let n = runs.get();
                async move { Ok::<u32, anyhow::Error>(n) }
            })
            .await
            .unwrap();
            assert_eq!((got, runs.get()), (runs_expected, runs_expected));
        }
    }

    #[test]
    fn backoff_doubles_from_one_second_up_to_thirty() {
        let waits: Vec<u64> = (1..=8).map(|a| retry_backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_connection_is_retried_with_backoff_until_it_succeeds() {
        let runs = Cell::new(0);
        let started = tokio::time::Instant::now();
        let got = with_retries(3, &console(), no_busy, || {
            runs.set(runs.get() + 1);
            let n = runs.get();
            async move { if n < 3 { Err(lost()) } else { Ok(n) } }
        })
        .await
        .unwrap();
        assert_eq!(got, 3);
        // Waited 1 s then 2 s (paused time advances only by the sleeps).
        assert_eq!(started.elapsed().as_secs(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_the_limit_and_report_the_first_error() {
        let runs = Cell::new(0);
        let e = with_retries(2, &console(), no_busy, || {
            runs.set(runs.get() + 1);
            let n = runs.get();
            async move {
                Err::<(), _>(if n == 1 {
                    lost()
                } else {
                    // Later runs fail in reaching the peer (a daemon not back yet).
                    unreachable()
                })
            }
        })
        .await
        .unwrap_err();
        assert_eq!(runs.get(), 3, "one run and two retries");
        assert!(format!("{e:#}").contains("connection reset"), "{e:#}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_never_reached_and_a_lasting_error_are_not_retried() {
        for (error, what) in [
            (unreachable as fn() -> anyhow::Error, "never reached"),
            (
                || tern_engine::Error::NoSpace("/data/x".into()).into(),
                "disk full",
            ),
        ] {
            let runs = Cell::new(0);
            let e = with_retries(5, &console(), no_busy, || {
                runs.set(runs.get() + 1);
                async move { Err::<(), _>(error()) }
            })
            .await
            .unwrap_err();
            assert_eq!(runs.get(), 1, "{what}: {e:#}");
        }
    }
}
