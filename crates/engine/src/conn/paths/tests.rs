use super::*;

/// A plan from 10.47.0.2:4747 over best-effort paths to `others`.
fn plan_to(others: &[&str], first_on_control: u16, spares_from: u16) -> PathPlan {
    let others = others.iter().map(|o| other(o, None)).collect();
    PathPlan::new(
        addr("10.47.0.2:4747"),
        others,
        first_on_control,
        spares_from,
    )
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn other(remote: &str, reserved_bps: Option<u64>) -> OtherPath {
    OtherPath {
        remote: Some(addr(remote)),
        local: None,
        reserved_bps,
    }
}

#[test]
fn a_daemon_names_other_addresses_of_the_clients_family_but_not_to_loopback() {
    let given = Advertise::Addresses(vec![
        addr("10.47.0.2:4747"),
        addr("10.47.1.2:4747"),
        addr("[2001:db8::2]:4747"),
        addr("10.47.1.2:4747"),
    ]);
    let bound = Some(addr("0.0.0.0:4747"));
    assert_eq!(
        given.for_client(bound, addr("10.47.0.2:4747")),
        vec![addr("10.47.1.2:4747")]
    );
    assert_eq!(
        Advertise::Interfaces.for_client(bound, addr("127.0.0.1:4747")),
        Vec::<SocketAddr>::new()
    );
    assert_eq!(
        Advertise::Interfaces.for_client(Some(addr("10.47.0.2:4747")), addr("10.47.0.2:4747")),
        Vec::<SocketAddr>::new(),
        "a daemon bound to one address is reachable at that one only"
    );
    assert!(
        Advertise::Off
            .for_client(bound, addr("10.47.0.2:4747"))
            .is_empty()
    );
}

#[test]
fn added_streams_try_the_other_paths_first_and_replacements_take_the_control_path() {
    let plan = plan_to(&["10.47.1.2:4747", "10.47.2.2:4747"], 2, 8);
    assert_eq!(plan.others(), 2);
    assert_eq!(plan.leg(0), Leg::Control);
    assert_eq!(plan.leg(1), Leg::Control);
    let Leg::Path { index: first, .. } = plan.leg(2) else {
        panic!("growth goes to another path")
    };
    let Leg::Path { index: second, .. } = plan.leg(3) else {
        panic!("and to the next")
    };
    assert_eq!((first, second), (1, 2));
    plan.unreachable(2, 3, "timed out".into());
    // Path 1 has one stream, path 0 three: path 1; path 2 is out.
    assert_eq!(
        plan.leg(4),
        Leg::Path {
            index: 1,
            remote: Some(addr("10.47.1.2:4747")),
            local: None
        }
    );
    assert_eq!(plan.leg(8), Leg::Control, "a replacement");
    let reports = plan.report(
        &[10, 10, 5, 7, 5, 0, 0, 0, 3],
        &[LostStream {
            index: 2,
            after: Duration::from_secs(3),
        }],
        8,
        Duration::from_secs(1),
    );
    assert_eq!(reports[0].streams, 4, "0, 1, 3 (moved) and 8");
    assert_eq!(reports[0].bytes, 10 + 10 + 7 + 3);
    assert_eq!(reports[0].state, PathState::Active);
    assert_eq!(reports[1].bytes, 10);
    assert_eq!(reports[1].state, PathState::Active, "stream 4 still runs");
    assert_eq!(reports[2].state, PathState::Failed);
    assert_eq!(reports[2].failure.as_deref(), Some("timed out"));
    assert_eq!(reports[1].rate_bps, 80.0);
}

#[test]
fn a_reserved_path_gets_one_stream_first_and_no_growth() {
    let plan = PathPlan::new(
        addr("10.47.0.2:4747"),
        vec![
            other("10.47.1.2:4747", Some(300_000_000)),
            other("10.47.2.2:4747", None),
        ],
        1,
        8,
    );
    assert_eq!(
        plan.reserved(),
        vec![("10.47.1.2".parse().unwrap(), 300_000_000)]
    );
    assert_eq!(plan.leg(0), Leg::Control);
    assert!(
        matches!(plan.leg(1), Leg::Path { index: 1, .. }),
        "the reservation first"
    );
    for k in 2..6 {
        assert!(
            !matches!(plan.leg(k), Leg::Path { index: 1, .. }),
            "stream {k} went to the reserved path"
        );
    }
    let reports = plan.report(&[1; 6], &[], 6, Duration::from_secs(1));
    assert_eq!(reports[1].state, PathState::Reserved);
    assert_eq!(reports[1].reserved_bps, Some(300_000_000));
    assert_eq!(reports[1].streams, 1);
    assert_eq!(reports[2].state, PathState::Active);
    assert_eq!(reports[2].reserved_bps, None);
}

#[test]
fn a_path_whose_streams_were_lost_or_retired_failed() {
    let plan = plan_to(&["10.47.1.2:4747"], 1, 8);
    for k in 0..5 {
        plan.leg(k);
    }
    // Path 1 has streams 1, 2 and 4 (the other path first, then the
    // fewest): 2 was lost, 1 and 4 retired (one stream, 0, in use at
    // the end).
    let lost = [LostStream {
        index: 2,
        after: Duration::from_secs(12),
    }];
    let reports = plan.report(&[5, 1, 1, 5, 1], &lost, 1, Duration::from_secs(1));
    assert_eq!(reports[1].streams, 3, "{reports:?}");
    assert_eq!(reports[1].state, PathState::Failed, "{reports:?}");
    assert_eq!(reports[1].failed_after_s, Some(12.0));
    assert!(
        reports[1]
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("1 of its 3 streams")),
        "{reports:?}"
    );
    // Without a lost stream, the same retirement is a drop.
    let reports = plan.report(&[5, 1, 1, 5, 1], &[], 1, Duration::from_secs(1));
    assert_eq!(reports[1].state, PathState::Dropped);
}

#[test]
fn each_path_report_gets_its_own_rtt_and_limit() {
    let plan = plan_to(&["10.47.1.2:4747", "10.47.2.2:4747"], 1, 8);
    for k in 0..3 {
        plan.leg(k);
    }
    let mut reports = plan.report(&[1, 1, 1], &[], 3, Duration::from_secs(1));
    let tuning = [
        tern_drs::PathTuning {
            remote: "10.47.1.2".parse().unwrap(),
            min_rtt_ms: Some(75.2),
            limit: tern_drs::Limit::SendBuffer,
        },
        tern_drs::PathTuning {
            remote: "::ffff:10.47.0.2".parse().unwrap(),
            min_rtt_ms: Some(50.1),
            limit: tern_drs::Limit::Network,
        },
    ];
    add_tuning(&mut reports, &tuning);
    assert_eq!(reports[0].rtt_ms, Some(50.1), "a mapped address matches");
    assert_eq!(reports[0].limit, Some(tern_drs::Limit::Network));
    assert_eq!(reports[1].rtt_ms, Some(75.2));
    assert_eq!(reports[1].limit, Some(tern_drs::Limit::SendBuffer));
    assert_eq!(
        (reports[2].rtt_ms, reports[2].limit),
        (None, None),
        "no streams seen"
    );
}

#[test]
fn a_path_that_lost_every_stream_failed_and_one_whose_streams_were_retired_was_dropped() {
    let plan = plan_to(&["10.47.1.2:4747", "10.47.2.2:4747"], 1, 8);
    for k in 0..3 {
        plan.leg(k);
    }
    let lost = [LostStream {
        index: 1,
        after: Duration::from_secs(7),
    }];
    // Streams 0..2 in use at the end: stream 2 (path 2) was retired.
    let reports = plan.report(&[1, 1, 1], &lost, 2, Duration::from_secs(1));
    assert_eq!(reports[1].state, PathState::Failed);
    assert_eq!(reports[1].failed_after_s, Some(7.0));
    assert_eq!(reports[2].state, PathState::Dropped);
}

#[test]
fn a_path_that_lost_its_streams_is_tried_again_with_backoff_and_rejoins() {
    let plan = plan_to(&["10.47.1.2:4747"], 1, 4);
    let s = Duration::from_secs;
    assert_eq!(plan.leg(0), Leg::Control);
    assert!(matches!(plan.leg(1), Leg::Path { index: 1, .. }));
    assert!(plan.due_at(s(100)).is_empty(), "nothing is down");
    // Stream 1, path 1's only one, stalls at 10 s: the path is down.
    plan.stream_lost_at(1, s(10));
    assert_eq!(
        plan.leg(2),
        Leg::Control,
        "growth avoids a path that is down"
    );
    assert!(plan.due_at(s(12)).is_empty(), "not tried at once");
    let due = plan.due_at(s(13));
    assert_eq!(
        due,
        vec![Due {
            index: 1,
            remote: Some(addr("10.47.1.2:4747")),
            local: None,
            since: s(10)
        }]
    );
    // A try that fails waits twice as long before the next.
    plan.tried_at(1, false, s(13));
    assert!(plan.due_at(s(18)).is_empty());
    assert_eq!(plan.due_at(s(19)).len(), 1);
    // It answers: the next spare (a replacement index) goes over it, and
    // the one after takes the control path again.
    plan.tried_at(1, true, s(19));
    assert!(plan.due_at(s(100)).is_empty());
    assert!(matches!(plan.leg(4), Leg::Path { index: 1, .. }));
    assert_eq!(plan.leg(5), Leg::Control);
    let reports = plan.report(
        &[10, 4, 6, 0, 8, 1],
        &[LostStream {
            index: 1,
            after: s(10),
        }],
        3,
        s(30),
    );
    let back = &reports[1];
    assert_eq!(back.state, PathState::Active, "{back:?}");
    assert_eq!(back.bytes, 4 + 8);
    assert_eq!(back.failed_after_s, Some(10.0));
    assert_eq!(back.rejoined_after_s, Some(19.0));
    assert_eq!(
        back.failure.as_deref(),
        Some("every stream on it stalled or was lost")
    );
    assert_eq!(reports[0].rejoined_after_s, None);
    // Down again: the wait after a rejoin is longer (6 s), and after the
    // second rejoin the path is left alone (spare streams are few).
    plan.stream_lost_at(4, s(40));
    assert!(plan.due_at(s(45)).is_empty());
    assert_eq!(plan.due_at(s(46)).len(), 1);
    plan.tried_at(1, true, s(46));
    assert!(
        plan.due_at(s(47)).is_empty(),
        "one answer waits for its stream"
    );
    assert!(matches!(plan.leg(6), Leg::Path { index: 1, .. }));
    plan.stream_lost_at(6, s(60));
    assert!(plan.due_at(s(1000)).is_empty(), "rejoined twice already");
}

#[test]
fn losing_the_control_paths_streams_puts_no_path_down() {
    let plan = plan_to(&["10.47.1.2:4747"], 1, 4);
    assert_eq!(plan.leg(0), Leg::Control);
    plan.stream_lost_at(0, Duration::from_secs(1));
    assert!(plan.due_at(Duration::from_secs(100)).is_empty());
    // An unreachable path is down too, and tried again later.
    plan.unreachable(1, 1, "timed out".into());
    assert!(plan.due_at(Duration::from_secs(100)).len() == 1);
}
