//! Buffer policy: when the send buffer is what holds a stream back, grow
//! it, within a memory budget. Pure; the socket adapter applies decisions.
//!
//! Hybrid with the kernel, as DRS intends: kernel autotuning stays in
//! charge until a stream is measurably limited by its send buffer (the
//! `tcpi_sndbuf_limited` counter grows); only then is the buffer set
//! explicitly, doubling per step but never past four times what the stream
//! actually had in flight (its acknowledged rate × minimum RTT; the kernel
//! counts about half of a buffer as overhead, so that is about twice the
//! data), and never past the stream's share of the budget. Without privilege the kernel caps an explicit
//! `SO_SNDBUF` at `net.core.wmem_max`; the policy knows and stays within it.

use crate::estimate::Interval;

/// A limit counts once it covers this share of an interval's busy time.
const LIMITED: f64 = 0.2;

/// What the policy may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferBudget {
    /// Bytes of send buffer one stream may have.
    pub per_stream: u64,
    /// `SO_SNDBUFFORCE` is allowed (CAP_NET_ADMIN): no `wmem_max` cap.
    pub privileged: bool,
    /// `net.core.wmem_max`.
    pub wmem_max: u64,
}

/// Decides a stream's next send-buffer size, or `None` to leave it.
pub fn next_sndbuf(interval: &Interval, current: u64, budget: &BufferBudget) -> Option<u64> {
    if interval.busy_share < 0.5 || interval.sndbuf_limited_share < LIMITED {
        return None;
    }
    let in_flight = interval.acked_rate * f64::from(interval.min_rtt_us) / 1e6;
    let cap = if budget.privileged {
        budget.per_stream
    } else {
        budget.per_stream.min(budget.wmem_max)
    };
    let want = ((2.0 * in_flight) as u64)
        .max(current.saturating_mul(2))
        .min(cap);
    (want > current).then_some(want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn interval(busy: f64, sndbuf: f64, rate: f64) -> Interval {
        Interval {
            busy_share: busy,
            sndbuf_limited_share: sndbuf,
            rwnd_limited_share: 0.0,
            acked_rate: rate,
            min_rtt_us: 100_000,
        }
    }

    const BUDGET: BufferBudget = BufferBudget {
        per_stream: 64 << 20,
        privileged: true,
        wmem_max: 4 << 20,
    };

    #[test]
    fn a_buffer_limited_stream_gets_at_least_double() {
        // 30 MB/s × 100 ms = 3 MB in flight: 6 MB wanted, but at least 2 × 4 MiB.
        assert_eq!(
            next_sndbuf(&interval(1.0, 0.6, 30e6), 4 << 20, &BUDGET),
            Some(8 << 20)
        );
        // A fast stream asks for twice its in-flight bytes.
        assert_eq!(
            next_sndbuf(&interval(1.0, 0.6, 100e6), 4 << 20, &BUDGET),
            Some(20_000_000)
        );
    }

    #[test]
    fn unlimited_or_idle_streams_are_left_to_the_kernel() {
        assert_eq!(
            next_sndbuf(&interval(1.0, 0.05, 30e6), 4 << 20, &BUDGET),
            None
        );
        assert_eq!(
            next_sndbuf(&interval(0.2, 0.9, 30e6), 4 << 20, &BUDGET),
            None
        );
    }

    #[test]
    fn without_privilege_wmem_max_is_the_ceiling() {
        let b = BufferBudget {
            privileged: false,
            ..BUDGET
        };
        assert_eq!(
            next_sndbuf(&interval(1.0, 0.9, 100e6), 1 << 20, &b),
            Some(4 << 20)
        );
        assert_eq!(next_sndbuf(&interval(1.0, 0.9, 100e6), 4 << 20, &b), None);
    }

    proptest! {
        #[test]
        fn never_exceeds_the_budget_and_never_shrinks(
            busy in 0.0f64..1.0, sndbuf in 0.0f64..1.0, rate in 0.0f64..1e10,
            current in 1u64..(1 << 31), per_stream in 1u64..(1 << 32), privileged: bool,
        ) {
            let b = BufferBudget { per_stream, privileged, wmem_max: 4 << 20 };
            if let Some(next) = next_sndbuf(&interval(busy, sndbuf, rate), current, &b) {
                prop_assert!(next > current);
                prop_assert!(next <= per_stream);
                prop_assert!(privileged || next <= 4 << 20);
            }
        }
    }
}
