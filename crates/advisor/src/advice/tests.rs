use super::*;
use proptest::prelude::*;

fn caps(tcp_max: u64, core_max: u64) -> HostCaps {
    HostCaps {
        tcp_rmem: [4096, 131072, tcp_max],
        tcp_wmem: [4096, 16384, tcp_max],
        rmem_max: core_max,
        wmem_max: core_max,
        ..HostCaps::default()
    }
}

fn m(
    kind: Kind,
    value: f64,
    origin: Origin,
    at_ms: i64,
    details: serde_json::Value,
) -> Measurement {
    Measurement {
        host: "h".into(),
        kind,
        value,
        unit: kind.unit().into(),
        origin,
        producer: "test".into(),
        at_ms,
        from: String::new(),
        details,
    }
}

fn series(kind: Kind, values: &[f64], origin: Origin) -> Vec<Measurement> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| m(kind, v, origin, 1000 * i as i64, serde_json::json!({})))
        .collect()
}

#[test]
fn enable_formula_when_one_socket_suffices() {
    // 50 ms × 100 Mbit/s = 625 000 bytes; caps of 6 MiB hold it.
    let rtt = series(Kind::Rtt, &[50.0; 5], Origin::Active);
    let cap = series(Kind::Capacity, &[100e6; 3], Origin::Active);
    let ev = Evidence {
        rtt: &rtt,
        capacity: &cap,
        throughput: &[],
    };
    let a = advise(
        "h",
        &ev,
        &caps(6 << 20, 212992),
        &AdviceConfig::default(),
        10_000,
    )
    .unwrap();
    assert_eq!(a.bdp_bytes, 625_000);
    assert_eq!(a.streams, 1);
    assert_eq!(a.buffer_bytes, round_up(625_000, 4096));
    assert_eq!(a.tern_window_bytes, 2 * a.buffer_bytes);
    assert!(!a.host_limit.limited && a.host_limit.sysctls.is_empty());
    assert!((a.expected_throughput_bps - 100e6).abs() < 1.0);
    assert_eq!(a.samples, 8);
    assert_eq!(a.source, Source::Active);
    assert_eq!(a.capacity_basis, CapacityBasis::Capacity);
    // Newest RTT at 4 s, newest capacity at 2 s: the staler counts.
    assert!((a.age_s - 8.0).abs() < 1e-9, "{}", a.age_s);
}

#[test]
fn host_caps_split_the_window_over_streams_and_name_the_sysctls() {
    // 180 ms × 500 Mbit/s = 11.25 MB; a socket gets 2 MiB (4 MiB tcp_rmem / 2).
    let rtt = series(Kind::Rtt, &[180.0; 4], Origin::Active);
    let cap = series(Kind::Capacity, &[500e6; 4], Origin::Active);
    let ev = Evidence {
        rtt: &rtt,
        capacity: &cap,
        throughput: &[],
    };
    let c = caps(4 << 20, 212992);
    let a = advise("h", &ev, &c, &AdviceConfig::default(), 0).unwrap();
    assert_eq!(a.bdp_bytes, 11_250_000);
    assert_eq!(a.host_limit.socket_window_max_bytes, 2 << 20);
    assert!(a.host_limit.limited);
    // The caps need 6 streams; a quick ramp on 180 ms takes the cap of 8.
    assert_eq!(a.streams, 8);
    assert!(a.buffer_bytes <= 2 << 20);
    assert!(u64::from(a.streams) * a.buffer_bytes >= a.bdp_bytes);
    assert!((a.expected_throughput_bps - 500e6).abs() < 1.0);
    assert!(
        a.host_limit
            .sysctls
            .iter()
            .any(|s| s.contains("tcp_rmem=\"4096 131072 33554432\""))
    );
    assert!(
        a.host_limit
            .sysctls
            .iter()
            .any(|s| s.contains("net.core.wmem_max=16777216"))
    );
    // With at most 4 streams the expected rate drops and a note says why.
    let few = AdviceConfig {
        max_streams: 4,
        ..AdviceConfig::default()
    };
    let a = advise("h", &ev, &c, &few, 0).unwrap();
    assert_eq!(a.streams, 4);
    assert!(a.expected_throughput_bps < 500e6 * 0.8);
    assert!(a.notes.iter().any(|n| n.contains("needs 6 streams")));
}

/// Values recorded before the bounds were checked (the store may hold
/// them) are set aside: they neither shape the advice nor overflow it.
#[test]
fn values_no_network_can_have_are_set_aside() {
    let mut rtt = series(Kind::Rtt, &[20.0; 3], Origin::Active);
    rtt.push(m(
        Kind::Rtt,
        1e300,
        Origin::Passive,
        9,
        serde_json::json!({}),
    ));
    let mut cap = series(Kind::Capacity, &[1e9; 3], Origin::Active);
    cap.push(m(
        Kind::Capacity,
        1e300,
        Origin::Passive,
        9,
        serde_json::json!({}),
    ));
    let tp = vec![m(
        Kind::Throughput,
        1e300,
        Origin::Active,
        9,
        serde_json::json!({"sweep": {"best": true}, "streams": 9999, "window": u64::MAX.to_string()}),
    )];
    let ev = Evidence {
        rtt: &rtt,
        capacity: &cap,
        throughput: &tp,
    };
    let c = caps(64 << 20, 64 << 20);
    let a = advise("h", &ev, &c, &AdviceConfig::default(), 10).unwrap();
    assert_eq!(a.rtt_ms, 20.0);
    assert_eq!(a.capacity_bps, 1e9);
    assert_eq!(a.bdp_bytes, 2_500_000);
    assert_eq!(a.rtt.samples + a.capacity.samples, 6);
    assert_eq!(a.sweep, None, "no sweep cell within bounds");
    a.check().unwrap();
    // Only absurd values: nothing to advise on.
    let absurd = [m(
        Kind::Rtt,
        1e300,
        Origin::Passive,
        9,
        serde_json::json!({}),
    )];
    let ev = Evidence {
        rtt: &absurd,
        capacity: &cap,
        throughput: &[],
    };
    assert!(matches!(
        advise("h", &ev, &c, &AdviceConfig::default(), 10),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn advice_out_of_bounds_fails_its_check_naming_the_field() {
    let rtt = series(Kind::Rtt, &[20.0; 3], Origin::Active);
    let cap = series(Kind::Capacity, &[1e9; 3], Origin::Active);
    let ev = Evidence {
        rtt: &rtt,
        capacity: &cap,
        throughput: &[],
    };
    let good = advise(
        "h",
        &ev,
        &caps(64 << 20, 64 << 20),
        &AdviceConfig::default(),
        10,
    )
    .unwrap();
    good.check().unwrap();
    type Spoil = fn(&mut Advice);
    let cases: [(&str, Spoil); 9] = [
        ("capacity_bps", |a| a.capacity_bps = 1e300),
        ("rtt_ms", |a| a.rtt_ms = f64::NAN),
        ("expected_throughput_bps", |a| {
            a.expected_throughput_bps = 2e13
        }),
        ("bdp_bytes", |a| a.bdp_bytes = u64::MAX),
        ("buffer_bytes", |a| a.buffer_bytes = 0),
        ("tern_window_bytes", |a| a.tern_window_bytes = u64::MAX),
        ("streams", |a| a.streams = 0),
        ("capacity.ewma", |a| a.capacity.ewma = 1e300),
        ("age_s", |a| a.age_s = 1e300),
    ];
    for (field, spoil) in cases {
        let mut a = good.clone();
        spoil(&mut a);
        let e = a.check().unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
        assert!(e.len() < 200, "{field}: {e}");
    }
}

#[test]
fn passive_rates_stand_in_for_capacity() {
    let rtt = series(Kind::Rtt, &[20.0; 3], Origin::Passive);
    let net = serde_json::json!({"limit": "network"});
    let buf = serde_json::json!({"limit": "send_buffer"});
    let tp = vec![
        m(Kind::Throughput, 300e6, Origin::Passive, 1, buf.clone()),
        m(Kind::Throughput, 900e6, Origin::Passive, 2, net.clone()),
        m(Kind::Throughput, 910e6, Origin::Active, 3, net),
    ];
    let ev = Evidence {
        rtt: &rtt,
        capacity: &[],
        throughput: &tp,
    };
    let a = advise(
        "h",
        &ev,
        &caps(64 << 20, 64 << 20),
        &AdviceConfig::default(),
        10,
    )
    .unwrap();
    assert_eq!(a.capacity_basis, CapacityBasis::Throughput);
    assert_eq!(a.capacity.samples, 2);
    assert!((a.capacity_bps - 905e6).abs() < 1.0);
    assert_eq!(a.source, Source::Mixed);
    // Only buffer-limited transfers: the best of them, as a lower bound.
    let ev = Evidence {
        rtt: &rtt,
        capacity: &[],
        throughput: &tp[..1],
    };
    let a = advise(
        "h",
        &ev,
        &caps(64 << 20, 64 << 20),
        &AdviceConfig::default(),
        10,
    )
    .unwrap();
    assert_eq!(a.capacity_basis, CapacityBasis::ThroughputLowerBound);
    assert_eq!(a.capacity.method, "max");
    assert_eq!(a.capacity_bps, 300e6);
    assert!(a.notes.iter().any(|n| n.contains("lower bound")));
}

#[test]
fn missing_evidence_is_not_found() {
    let rtt = series(Kind::Rtt, &[20.0], Origin::Active);
    let none = Evidence {
        rtt: &[],
        capacity: &[],
        throughput: &[],
    };
    let c = caps(4 << 20, 4 << 20);
    let e = advise("h", &none, &c, &AdviceConfig::default(), 0).unwrap_err();
    assert!(
        matches!(e, Error::NotFound(ref s) if s.contains("no RTT")),
        "{e}"
    );
    let only_rtt = Evidence {
        rtt: &rtt,
        capacity: &[],
        throughput: &[],
    };
    let e = advise("h", &only_rtt, &c, &AdviceConfig::default(), 0).unwrap_err();
    assert!(
        matches!(e, Error::NotFound(ref s) if s.contains("20.0 ms")),
        "{e}"
    );
}

#[test]
fn unknown_caps_give_one_stream_and_a_note() {
    let rtt = series(Kind::Rtt, &[100.0], Origin::Active);
    let cap = series(Kind::Capacity, &[1e9], Origin::Active);
    let ev = Evidence {
        rtt: &rtt,
        capacity: &cap,
        throughput: &[],
    };
    let a = advise("h", &ev, &HostCaps::default(), &AdviceConfig::default(), 0).unwrap();
    // One stream for the caps; the 100 ms path asks for more to ramp up.
    assert_eq!(a.streams, 8);
    assert!(a.notes.iter().any(|n| n.contains("slow start")));
    assert_eq!(a.host_limit.socket_window_max_bytes, 0);
    assert!(a.notes.iter().any(|n| n.contains("could not be read")));
}

#[test]
fn long_paths_get_streams_for_the_ramp_short_ones_do_not() {
    // 1 Gbit/s x 50 ms: ten doublings from 14 KB pass 6 MB.
    assert_eq!(ramp_streams(6_250_000, 0.050), 1);
    // 500 Mbit/s x 180 ms: two doublings reach 58 KB; the cap decides.
    assert!(ramp_streams(11_250_000, 0.180) > 8);
    // 1 Gbit/s x 100 ms: five doublings reach 463 KB.
    assert_eq!(ramp_streams(12_500_000, 0.100), 27);
    assert_eq!(ramp_streams(1_000, 0.0), 1);
    assert_eq!(ramp_streams(1_000, f64::NAN), 1);
}

/// One cell of a sweep stored at `at_ms`.
fn cell(at_ms: i64, streams: u16, window: &str, bps: f64, best: bool) -> Measurement {
    let details = serde_json::json!({
        "streams": streams,
        "window": window,
        "sweep": {"streams": streams, "window": window, "best": best},
    });
    m(Kind::Throughput, bps, Origin::Active, at_ms, details)
}

fn advise_with_sweep(capacity: f64, sweep: &[Measurement], now_ms: i64) -> Advice {
    // 50 ms; one socket of 3 MiB holds any product here.
    let rtt = series(Kind::Rtt, &[50.0; 5], Origin::Active);
    let cap = series(Kind::Capacity, &[capacity; 3], Origin::Active);
    let ev = Evidence {
        rtt: &rtt,
        capacity: &cap,
        throughput: sweep,
    };
    advise(
        "h",
        &ev,
        &caps(6 << 20, 6 << 20),
        &AdviceConfig::default(),
        now_ms,
    )
    .unwrap()
}

#[test]
fn the_fixed_window_max_is_twice_the_smaller_core_maximum() {
    let caps = HostCaps {
        wmem_max: 4 << 20,
        rmem_max: 6 << 20,
        ..Default::default()
    };
    assert_eq!(fixed_window_max(&caps), Some(8 << 20));
    assert_eq!(fixed_window_max(&HostCaps::default()), None);
}

#[test]
fn a_sweep_that_beat_the_formula_sets_streams_and_a_locked_window() {
    // Packet trains said 50 Mbit/s; the sweep moved 90 with 4 streams
    // locked at 2 MiB.
    let sweep = [
        cell(9_000, 1, "auto", 40e6, false),
        cell(9_000, 4, "auto", 80e6, false),
        cell(9_000, 4, "2097152", 90e6, true),
    ];
    let a = advise_with_sweep(50e6, &sweep, 10_000);
    assert_eq!(a.streams, 4);
    assert_eq!(a.tern_window_bytes, 2_097_152);
    assert_eq!(a.buffer_bytes, 1_048_576);
    assert_eq!(a.expected_throughput_bps, 90e6);
    let b = a.sweep.as_ref().unwrap();
    assert!(b.followed);
    assert_eq!((b.cells, b.best_streams), (3, 4));
    assert_eq!(b.best_window, "2097152");
    assert!((b.formula_bps - 50e6).abs() < 1.0, "{b:?}");
    assert!((b.age_s - 1.0).abs() < 1e-9);
    assert!(a.notes.iter().any(|n| n.contains("sweep")), "{:?}", a.notes);
    // The same sweep with tern sizing the best cell: the window carries
    // the best rate, split over its streams (50 ms x 90 Mbit/s / 4).
    let auto = [
        cell(9_000, 2, "auto", 60e6, false),
        cell(9_000, 4, "auto", 90e6, true),
    ];
    let a = advise_with_sweep(50e6, &auto, 10_000);
    assert_eq!(a.streams, 4);
    assert_eq!(a.buffer_bytes, round_up(562_500_u64.div_ceil(4), 4096));
    assert!(a.sweep.unwrap().followed);
}

#[test]
fn a_sweep_that_did_not_beat_the_formula_or_is_old_is_not_followed() {
    // The formula expects the full 100 Mbit/s with one stream.
    let sweep = [
        cell(9_000, 1, "auto", 60e6, false),
        cell(9_000, 8, "auto", 98e6, true),
    ];
    let a = advise_with_sweep(100e6, &sweep, 10_000);
    assert_eq!(a.streams, 1);
    assert_eq!(a.buffer_bytes, round_up(625_000, 4096));
    let b = a.sweep.unwrap();
    assert!(!b.followed);
    assert_eq!(b.best_bps, 98e6);
    assert!(!a.notes.iter().any(|n| n.contains("sweep")));
    // A winning sweep older than a day is ignored altogether.
    let old = [cell(0, 4, "2097152", 90e6, true)];
    let day = AdviceConfig::default().sweep_max_age_s as i64 * 1000;
    let a = advise_with_sweep(50e6, &old, day + 1);
    assert_eq!((a.streams, a.sweep), (1, None));
    // Only the newest sweep counts, even when an older one did better.
    let two = [
        cell(1_000, 8, "auto", 95e6, true),
        cell(5_000, 2, "auto", 70e6, true),
        cell(5_000, 4, "auto", 60e6, false),
    ];
    let a = advise_with_sweep(50e6, &two, 10_000);
    assert_eq!(a.streams, 2);
    let b = a.sweep.unwrap();
    assert_eq!((b.at_ms, b.cells, b.best_bps), (5_000, 2, 70e6));
}

#[test]
fn the_openapi_document_names_every_field_of_advice() {
    use crate::api::{json_fields, schema_fields};
    let mut a = advise_with_sweep(100e6, &[cell(9_000, 1, "auto", 60e6, true)], 10_000);
    // `paths` is left out when empty.
    a.paths.push(OtherPath {
        host: "192.0.2.9".into(),
        rtt_ms: Some(75.0),
        capacity_bps: Some(2.5e8),
        expected_throughput_bps: Some(2.4e8),
    });
    assert_eq!(json_fields(&a), schema_fields("Advice"));
    assert_eq!(json_fields(&a.paths[0]), schema_fields("OtherPath"));
    assert_eq!(json_fields(a.sweep.unwrap()), schema_fields("SweepBasis"));
}

proptest! {
    #[test]
    fn advice_covers_the_product_within_the_caps(
        rtt_ms in 0.05f64..600.0,
        capacity in 1e5f64..1e11,
        tcp_max_kib in 64u64..(1 << 20),
        core_kib in 16u64..(1 << 20),
        max_streams in 1u16..64,
    ) {
        let rtt = series(Kind::Rtt, &[rtt_ms], Origin::Active);
        let cap = series(Kind::Capacity, &[capacity], Origin::Active);
        let ev = Evidence { rtt: &rtt, capacity: &cap, throughput: &[] };
        let c = caps(tcp_max_kib << 10, core_kib << 10);
        let cfg = AdviceConfig { max_streams, ..AdviceConfig::default() };
        let a = advise("h", &ev, &c, &cfg, 0).unwrap();
        let max = socket_window_max(&c).unwrap();
        prop_assert!(a.streams >= 1 && a.streams <= max_streams);
        prop_assert!(a.buffer_bytes <= max.max(round_up(a.bdp_bytes, 4096)));
        if a.host_limit.limited {
            prop_assert!(a.buffer_bytes <= max);
        }
        // Either the streams hold the whole product, or every one is at
        // the cap and the stream limit was reached.
        let held = u64::from(a.streams) * a.buffer_bytes;
        prop_assert!(held >= a.bdp_bytes || (a.streams == max_streams && a.buffer_bytes == max));
        prop_assert!(a.expected_throughput_bps <= capacity * (1.0 + 1e-9));
        prop_assert!(a.expected_throughput_bps > 0.0);
    }
}
