//! One line per path of a multi-path session, in words.

use tern_engine::paths::{PathReport, PathState};

use crate::size::{count, human_bytes, human_rate};

/// Below this share of its reserved rate a reserved path is reported as
/// under its reservation.
const UNDER_RESERVATION: f64 = 0.8;

/// One path of a multi-path session, in words.
pub(super) fn path_line(p: &PathReport) -> String {
    let state = match p.state {
        PathState::Active => String::new(),
        PathState::Reserved => {
            let reserved = p.reserved_bps.unwrap_or(0) as f64;
            let share = if reserved > 0.0 {
                p.rate_bps / reserved
            } else {
                1.0
            };
            if share < UNDER_RESERVATION {
                format!(
                    ", reserved {}: {:.0} % of it delivered, well under the reservation",
                    human_rate(reserved),
                    share * 100.0
                )
            } else {
                format!(", reserved {}", human_rate(reserved))
            }
        }
        PathState::Dropped => ", dropped: it did not add to the rate".to_string(),
        PathState::Failed => format!(
            ", failed{}{}",
            p.failed_after_s
                .map(|s| format!(" after {s:.1} s"))
                .unwrap_or_default(),
            p.failure
                .as_ref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default()
        ),
    };
    let state = match (p.rejoined_after_s, p.state) {
        (Some(back), PathState::Failed) => {
            format!("{state}; it had come back after {back:.1} s")
        }
        (Some(back), _) => format!(
            "{state}, down after {:.1} s{}, back after {back:.1} s",
            p.failed_after_s.unwrap_or(0.0),
            p.failure
                .as_ref()
                .map(|f| format!(" ({f})"))
                .unwrap_or_default()
        ),
        (None, _) => state,
    };
    let from = p
        .local
        .as_ref()
        .map(|l| format!("{l} → "))
        .unwrap_or_default();
    let rtt = p
        .rtt_ms
        .map(|ms| format!(", RTT {ms:.1} ms"))
        .unwrap_or_default();
    let limit = match p.limit.filter(|_| p.state != PathState::Reserved) {
        Some(tern_drs::Limit::Network) => ", paced by the network",
        Some(tern_drs::Limit::SendBuffer) => ", held back by send buffers",
        Some(tern_drs::Limit::ReceiveWindow) => ", held back by the receive window",
        Some(tern_drs::Limit::Receiver) => ", held back by the receiving application",
        Some(tern_drs::Limit::Application) => ", held back by this end (disk or CPU)",
        Some(tern_drs::Limit::Unknown) | None => "",
    };
    format!(
        "  path {}: {from}{}, {}, {} ({}){rtt}{limit}{state}",
        p.index,
        p.remote
            .as_deref()
            .unwrap_or("the server's address unknown (nothing came over it)"),
        count(p.streams, "stream"),
        human_bytes(p.bytes),
        human_rate(p.rate_bps),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(state: PathState) -> PathReport {
        PathReport {
            index: 1,
            local: None,
            remote: Some("10.47.1.2:4747".into()),
            streams: 2,
            bytes: 100 << 20,
            rate_bps: 2e8,
            state,
            rtt_ms: Some(75.0),
            limit: None,
            reserved_bps: None,
            failed_after_s: Some(4.0),
            failure: Some("every stream on it stalled or was lost".into()),
            rejoined_after_s: None,
        }
    }

    #[test]
    fn a_path_that_failed_or_came_back_says_when() {
        let failed = path_line(&path(PathState::Failed));
        assert!(
            failed.ends_with(", failed after 4.0 s (every stream on it stalled or was lost)"),
            "{failed}"
        );
        let mut back = path(PathState::Active);
        back.rejoined_after_s = Some(9.5);
        let line = path_line(&back);
        assert!(
            line.ends_with(
                ", down after 4.0 s (every stream on it stalled or was lost), back after 9.5 s"
            ),
            "{line}"
        );
        let mut again = path(PathState::Failed);
        again.failed_after_s = Some(20.0);
        again.rejoined_after_s = Some(9.5);
        let line = path_line(&again);
        assert!(line.contains(", failed after 20.0 s"), "{line}");
        assert!(line.ends_with("; it had come back after 9.5 s"), "{line}");
    }
}
