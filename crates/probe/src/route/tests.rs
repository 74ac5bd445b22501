//! The route probe's tests: parsing and assembly on synthetic answers,
//! and loopback I/O.

use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const ROUTER: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
const DEST: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
const ROUTER6: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));

/// A `sock_extended_err` and its offender, as the kernel writes them.
fn ext(origin: u8, icmp_type: u8, code: u8, offender: Option<IpAddr>) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(libc::EHOSTUNREACH as u32).to_ne_bytes());
    b.extend_from_slice(&[origin, icmp_type, code, 0]);
    b.extend_from_slice(&[0u8; 8]); // ee_info, ee_data
    match offender {
        Some(IpAddr::V4(a)) => {
            b.extend_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b.extend_from_slice(&[0, 0]); // port
            b.extend_from_slice(&a.octets());
            b.extend_from_slice(&[0u8; 8]);
        }
        Some(IpAddr::V6(a)) => {
            b.extend_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b.extend_from_slice(&[0u8; 6]); // port, flowinfo
            b.extend_from_slice(&a.octets());
            b.extend_from_slice(&[0u8; 4]); // scope id
        }
        None => {
            b.extend_from_slice(&(libc::AF_UNSPEC as u16).to_ne_bytes());
            b.extend_from_slice(&[0u8; 14]);
        }
    }
    b
}

fn v4(data: &[u8]) -> Option<Answer> {
    parse_extended_err(libc::IPPROTO_IP, libc::IP_RECVERR, data)
}

fn v6(data: &[u8]) -> Option<Answer> {
    parse_extended_err(libc::IPPROTO_IPV6, libc::IPV6_RECVERR, data)
}

#[test]
fn icmp_errors_name_their_sender() {
    let icmp = libc::SO_EE_ORIGIN_ICMP;
    assert_eq!(
        v4(&ext(icmp, 11, 0, Some(ROUTER))),
        Some(Answer::TimeExceeded(ROUTER))
    );
    assert_eq!(
        v4(&ext(icmp, 3, 3, Some(DEST))),
        Some(Answer::Unreachable(DEST, Unreachable::Port))
    );
    assert_eq!(
        v4(&ext(icmp, 3, 1, Some(ROUTER))),
        Some(Answer::Unreachable(ROUTER, Unreachable::Host))
    );
    assert_eq!(
        v4(&ext(icmp, 3, 13, Some(ROUTER))),
        Some(Answer::Unreachable(ROUTER, Unreachable::Prohibited))
    );
    let icmp6 = libc::SO_EE_ORIGIN_ICMP6;
    assert_eq!(
        v6(&ext(icmp6, 3, 0, Some(ROUTER6))),
        Some(Answer::TimeExceeded(ROUTER6))
    );
    assert_eq!(
        v6(&ext(icmp6, 1, 4, Some(ROUTER6))),
        Some(Answer::Unreachable(ROUTER6, Unreachable::Port))
    );
    assert_eq!(
        v6(&ext(icmp6, 1, 0, Some(ROUTER6))),
        Some(Answer::Unreachable(ROUTER6, Unreachable::Net))
    );
    // An IPv6 socket's errors about IPv4 datagrams come as IP_RECVERR,
    // the sender as a mapped address.
    let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
    assert_eq!(
        v4(&ext(icmp, 11, 0, Some(mapped))),
        Some(Answer::TimeExceeded(ROUTER))
    );
}

#[test]
fn other_errors_and_short_data_are_not_answers() {
    let icmp = libc::SO_EE_ORIGIN_ICMP;
    let good = ext(icmp, 11, 0, Some(ROUTER));
    // Local errors (no neighbour, EMSGSIZE) and unknown offenders.
    assert_eq!(v4(&ext(libc::SO_EE_ORIGIN_LOCAL, 0, 0, Some(ROUTER))), None);
    assert_eq!(v4(&ext(icmp, 11, 0, None)), None);
    // Other ICMP types: parameter problem, source quench; an ICMPv4
    // type number read as ICMPv6 means something else.
    assert_eq!(v4(&ext(icmp, 12, 0, Some(ROUTER))), None);
    assert_eq!(v4(&ext(icmp, 4, 0, Some(ROUTER))), None);
    assert_eq!(
        v6(&ext(libc::SO_EE_ORIGIN_ICMP6, 11, 0, Some(ROUTER6))),
        None
    );
    // Other control messages.
    assert_eq!(
        parse_extended_err(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &good),
        None
    );
    assert_eq!(
        parse_extended_err(libc::IPPROTO_IP, libc::IP_TTL, &good),
        None
    );
    // Cut anywhere: never a panic, never an answer.
    for len in 0..good.len() {
        let got = v4(&good[..len]);
        assert!(got.is_none() || len >= 24, "{len}: {got:?}");
    }
    let good6 = ext(libc::SO_EE_ORIGIN_ICMP6, 3, 0, Some(ROUTER6));
    for len in 0..40 {
        assert_eq!(v6(&good6[..len]), None, "{len}");
    }
}

#[test]
fn a_quote_must_be_the_start_of_the_probe() {
    let p = probe_payload(0x0102_0304_0506_0708, 7, 2);
    assert_eq!(&p[..8], b"TRNT\x07\x02\0\0");
    assert_eq!(p[8..16], [1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(p[16..].iter().all(|&b| b == 0));
    assert!(quote_matches(&p, &p));
    assert!(quote_matches(&p, &p[..12]), "a router that quotes less");
    assert!(quote_matches(&p, &[]), "one that quotes only the header");
    assert!(!quote_matches(
        &p,
        &probe_payload(0x0102_0304_0506_0708, 8, 2)
    ));
    assert!(!quote_matches(&p, &probe_payload(9, 7, 2)[..16]));
    assert!(!quote_matches(&p, &[p.as_slice(), &[0]].concat()));
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_hop_keeps_its_first_address_and_the_others_as_alternates() {
    let silent = assemble_hop(3, &[None, None, None], DEST);
    assert_eq!(silent.addr, None);
    assert!(silent.rtt_ms.is_empty() && silent.alternates.is_empty());
    assert!(!silent.reached && silent.unreachable.is_none());

    let ecmp = assemble_hop(
        4,
        &[
            None,
            Some((Answer::TimeExceeded(OTHER), ms(12))),
            Some((Answer::TimeExceeded(ROUTER), ms(10))),
            Some((Answer::TimeExceeded(OTHER), ms(11))),
        ],
        DEST,
    );
    assert_eq!(ecmp.ttl, 4);
    assert_eq!(ecmp.addr, Some(OTHER), "the first probe answered");
    assert_eq!(ecmp.alternates, vec![ROUTER]);
    assert_eq!(ecmp.rtt_ms, vec![12.0, 10.0, 11.0]);
    assert!(!ecmp.reached);
}

#[test]
fn the_destination_is_reached_by_port_unreachable_or_a_reply() {
    let port = Some((Answer::Unreachable(DEST, Unreachable::Port), ms(20)));
    let hop = assemble_hop(9, &[port, None, port], DEST);
    assert!(hop.reached);
    assert_eq!((hop.addr, hop.unreachable), (Some(DEST), None));
    assert_eq!(hop.rtt_ms.len(), 2);

    let reply = assemble_hop(9, &[Some((Answer::Reply(DEST), ms(20)))], DEST);
    assert!(reply.reached);

    // The destination refusing with another code is still the
    // destination.
    let refused = assemble_hop(
        9,
        &[Some((
            Answer::Unreachable(DEST, Unreachable::Prohibited),
            ms(20),
        ))],
        DEST,
    );
    assert!(refused.reached);
    assert_eq!(refused.unreachable, Some("prohibited"));
}

#[test]
fn a_router_that_refuses_ends_the_route_unreached() {
    let hop = assemble_hop(
        5,
        &[Some((
            Answer::Unreachable(ROUTER, Unreachable::Host),
            ms(5),
        ))],
        DEST,
    );
    assert!(!hop.reached);
    assert_eq!(hop.addr, Some(ROUTER));
    assert_eq!(hop.unreachable, Some("host"));
    let mut plan = Plan::new(30, 1);
    for ttl in 1..=4 {
        assert_eq!(plan.launch(), Some(ttl));
        plan.conclude(router_hop(ttl));
    }
    assert_eq!(plan.launch(), Some(5));
    plan.conclude(hop);
    assert!(plan.done() && !plan.gave_up());
    assert_eq!(plan.launch(), None);
}

fn router_hop(ttl: u8) -> Hop {
    assemble_hop(ttl, &[Some((Answer::TimeExceeded(ROUTER), ms(1)))], DEST)
}

fn silent_hop(ttl: u8) -> Hop {
    assemble_hop(ttl, &[None], DEST)
}

fn dest_hop(ttl: u8) -> Hop {
    assemble_hop(
        ttl,
        &[Some((Answer::Unreachable(DEST, Unreachable::Port), ms(1)))],
        DEST,
    )
}

#[test]
fn ttls_are_launched_within_the_window_and_concluded_in_order() {
    let mut plan = Plan::new(30, 3);
    let launched: Vec<u8> = std::iter::from_fn(|| plan.launch()).collect();
    assert_eq!(launched, vec![1, 2, 3]);
    plan.conclude(router_hop(1));
    assert_eq!(plan.launch(), Some(4));
    assert_eq!(plan.launch(), None);
    // TTL 4 reaches the destination before 2 and 3 are concluded: no
    // TTL above 4 is launched, and the trace waits for 2 and 3.
    plan.cap(4);
    plan.conclude(router_hop(2));
    assert_eq!(plan.launch(), None);
    assert!(!plan.done());
    plan.conclude(silent_hop(3));
    assert!(!plan.done());
    plan.conclude(dest_hop(4));
    assert!(plan.done() && !plan.gave_up());
    assert_eq!(plan.hops.len(), 4);
}

#[test]
fn a_lower_ttl_that_reaches_the_destination_ends_the_trace_there() {
    // Launched 1..=4; 4 reached first, then 3 also reached (a shorter
    // path): the route ends at 3.
    let mut plan = Plan::new(30, 4);
    while plan.launch().is_some() {}
    plan.cap(4);
    plan.cap(3);
    plan.conclude(router_hop(1));
    plan.conclude(router_hop(2));
    plan.conclude(dest_hop(3));
    assert!(plan.done());
    assert_eq!(plan.hops.len(), 3);
}

#[test]
fn max_hops_ends_the_trace() {
    let mut plan = Plan::new(3, 8);
    let launched: Vec<u8> = std::iter::from_fn(|| plan.launch()).collect();
    assert_eq!(launched, vec![1, 2, 3]);
    for ttl in 1..=3 {
        assert!(!plan.done());
        plan.conclude(if ttl == 2 {
            silent_hop(ttl)
        } else {
            router_hop(ttl)
        });
    }
    assert!(plan.done() && !plan.gave_up());

    // 255 hops, the most a u8 TTL allows, without wrapping.
    let mut plan = Plan::new(255, 255);
    let launched: Vec<u8> = std::iter::from_fn(|| plan.launch()).collect();
    assert_eq!(launched.len(), 255);
    for ttl in 1..=255 {
        plan.conclude(router_hop(ttl));
    }
    assert!(plan.done());
}

#[test]
fn a_silent_run_stops_launching_and_ends_the_trace() {
    let mut plan = Plan::new(30, 1);
    plan.launch();
    plan.conclude(router_hop(1));
    for ttl in 2..=(1 + SILENT_HOPS) {
        assert!(!plan.done());
        assert_eq!(plan.launch(), Some(ttl));
        plan.conclude(silent_hop(ttl));
    }
    assert_eq!(plan.launch(), None);
    assert!(plan.done() && plan.gave_up());
    assert_eq!(plan.hops.len(), 1 + usize::from(SILENT_HOPS));

    // The same run at the very end of max_hops is not giving up.
    let mut plan = Plan::new(SILENT_HOPS, 1);
    for ttl in 1..=SILENT_HOPS {
        plan.launch();
        plan.conclude(silent_hop(ttl));
    }
    assert!(plan.done() && !plan.gave_up());
}

#[test]
fn an_answer_in_flight_after_a_silent_run_resumes_the_trace() {
    let mut plan = Plan::new(30, 3);
    for ttl in 1..=SILENT_HOPS {
        while plan.launch().is_some() {}
        plan.conclude(silent_hop(ttl));
    }
    // TTLs 6 and 7 are in flight: the trace waits for them.
    assert_eq!(plan.next, u16::from(SILENT_HOPS) + 3);
    assert_eq!(plan.launch(), None);
    assert!(!plan.done());
    plan.conclude(router_hop(SILENT_HOPS + 1));
    assert!(!plan.done());
    assert_eq!(plan.launch(), Some(SILENT_HOPS + 3));
    assert!(!plan.gave_up());
}

#[test]
fn the_signature_keeps_gaps_but_not_a_silent_end() {
    let route = |hops: Vec<Hop>| Route {
        target: SocketAddr::new(DEST, 1),
        reached: false,
        hops,
        gave_up: false,
        method: METHOD,
        elapsed_s: 0.0,
    };
    let mut ecmp = router_hop(3);
    ecmp.alternates.push(OTHER);
    let r = route(vec![
        router_hop(1),
        silent_hop(2),
        ecmp,
        dest_hop(4),
        silent_hop(5),
    ]);
    assert_eq!(
        r.signature(),
        vec!["192.0.2.1", "*", "192.0.2.1", "198.51.100.7"]
    );
    assert!(
        route(vec![silent_hop(1), silent_hop(2)])
            .signature()
            .is_empty()
    );
    assert!(route(vec![]).signature().is_empty());
    // Reached after silent hops: the destination's ICMP rate limit, not
    // routers; left out, or every trace would differ.
    let mut reached = route(vec![
        router_hop(1),
        silent_hop(2),
        router_hop(3),
        silent_hop(4),
        silent_hop(5),
        dest_hop(6),
    ]);
    reached.reached = true;
    assert_eq!(
        reached.signature(),
        vec!["192.0.2.1", "*", "192.0.2.1", "198.51.100.7"]
    );
}

#[test]
fn default_ports_count_up_from_33434_and_avoid_the_target_port() {
    let o = RouteOptions::default();
    assert_eq!(o.dest_port(7000, 1, 0), 33434);
    assert_eq!(o.dest_port(7000, 1, 2), 33436);
    assert_eq!(o.dest_port(7000, 2, 0), 33437);
    assert_eq!(o.dest_port(7000, 30, 2), 33434 + 89);
    // A daemon on 33450: the probes use 33451 and up.
    assert_eq!(o.dest_port(33450, 1, 0), 33451);
    assert!((1..=30).all(|t| (0..3).all(|p| o.dest_port(33450, t, p) != 33450)));
    let most = RouteOptions {
        max_hops: 255,
        probes_per_hop: MAX_PROBES_PER_HOP,
        ..RouteOptions::default()
    };
    assert_eq!(most.dest_port(35000, 255, 9), 35001 + 2549);
    let fixed = RouteOptions {
        port: Some(9999),
        ..RouteOptions::default()
    };
    assert_eq!(fixed.dest_port(7000, 17, 1), 9999);
}

#[test]
fn options_that_cannot_work_are_refused() {
    let target: SocketAddr = "127.0.0.1:7000".parse().unwrap();
    let ok = RouteOptions::default();
    assert!(ok.check(target).is_ok());
    for bad in [
        RouteOptions {
            max_hops: 0,
            ..ok.clone()
        },
        RouteOptions {
            probes_per_hop: 0,
            ..ok.clone()
        },
        RouteOptions {
            probes_per_hop: MAX_PROBES_PER_HOP + 1,
            ..ok.clone()
        },
        RouteOptions {
            reply_timeout: Duration::ZERO,
            ..ok.clone()
        },
        RouteOptions {
            parallel_hops: 0,
            ..ok.clone()
        },
        RouteOptions {
            port: Some(0),
            ..ok.clone()
        },
        RouteOptions {
            port: Some(7000),
            ..ok.clone()
        },
    ] {
        assert!(
            matches!(bad.check(target), Err(Error::BadOptions(_))),
            "{bad:?}"
        );
    }
}

// I/O, to loopback only.

/// A UDP port that is bound, so it stays ours, and never read: a
/// destination that answers nothing.
fn silent_port(ip: &str) -> std::net::UdpSocket {
    std::net::UdpSocket::bind((ip, 0)).unwrap()
}

fn check_reached_at_once(r: &Route, ip: IpAddr, probes: usize) {
    assert!(r.reached && !r.gave_up, "{r:?}");
    assert_eq!(r.hops.len(), 1, "{r:?}");
    let hop = &r.hops[0];
    assert_eq!((hop.ttl, hop.addr, hop.reached), (1, Some(ip), true));
    assert!(hop.alternates.is_empty() && hop.unreachable.is_none());
    assert_eq!(hop.rtt_ms.len(), probes, "{hop:?}");
    // Loose: one probe may wait on a busy host.
    assert!(hop.rtt_ms.iter().all(|&t| t > 0.0 && t < 500.0), "{hop:?}");
    assert_eq!(r.method, "udp-recverr");
    assert_eq!(r.signature(), vec![ip.to_string()]);
}

#[tokio::test]
async fn loopback_is_reached_at_ttl_1_by_port_unreachable() {
    // The "daemon": its port is never probed.
    let daemon = silent_port("127.0.0.1");
    let target = daemon.local_addr().unwrap();
    let r = route(target, &RouteOptions::default()).await.unwrap();
    check_reached_at_once(&r, target.ip(), 3);
    assert_eq!(r.target, target);
    assert!(r.elapsed_s < 0.9, "answered, not timed out: {r:?}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["method"], "udp-recverr");
    assert_eq!(json["hops"][0]["addr"], "127.0.0.1");
    assert_eq!(json["hops"][0]["unreachable"], serde_json::Value::Null);
}

#[tokio::test]
async fn ipv6_loopback_is_reached_at_ttl_1() {
    let Ok(daemon) = std::net::UdpSocket::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    };
    let target = daemon.local_addr().unwrap();
    let r = route(target, &RouteOptions::default()).await.unwrap();
    check_reached_at_once(&r, target.ip(), 3);
}

#[tokio::test]
async fn a_listener_that_replies_is_the_destination() {
    let echo = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let echo_port = echo.local_addr().unwrap().port();
    let echoing = tokio::spawn(async move {
        let mut buf = [0u8; 100];
        while let Ok((n, from)) = echo.recv_from(&mut buf).await {
            let _ = echo.send_to(&buf[..n], from).await;
        }
    });
    let daemon = silent_port("127.0.0.1");
    let opts = RouteOptions {
        port: Some(echo_port),
        probes_per_hop: 2,
        ..RouteOptions::default()
    };
    let r = route(daemon.local_addr().unwrap(), &opts).await;
    echoing.abort();
    check_reached_at_once(&r.unwrap(), "127.0.0.1".parse().unwrap(), 2);
}

#[tokio::test]
async fn a_silent_destination_times_out_hop_by_hop_and_gives_up() {
    let daemon = silent_port("127.0.0.1");
    let quiet = silent_port("127.0.0.1");
    let opts = RouteOptions {
        max_hops: 10,
        probes_per_hop: 2,
        reply_timeout: Duration::from_millis(100),
        port: Some(quiet.local_addr().unwrap().port()),
        parallel_hops: 2,
    };
    let r = route(daemon.local_addr().unwrap(), &opts).await.unwrap();
    assert!(!r.reached && r.gave_up, "{r:?}");
    // Five silent hops, and the one in flight when the fifth ended.
    assert!((5..=6).contains(&r.hops.len()), "{r:?}");
    for (i, h) in r.hops.iter().enumerate() {
        assert_eq!(usize::from(h.ttl), i + 1);
        assert!(h.addr.is_none() && h.rtt_ms.is_empty() && !h.reached);
    }
    assert!(r.signature().is_empty());
    // Three rounds of two TTLs, 100 ms each: bounded by the timeouts.
    assert!(r.elapsed_s >= 0.25 && r.elapsed_s < 2.0, "{r:?}");

    // Fewer hops than a silent run: ends at max_hops, not giving up.
    let opts = RouteOptions {
        max_hops: 2,
        ..opts
    };
    let r = route(daemon.local_addr().unwrap(), &opts).await.unwrap();
    assert!(!r.reached && !r.gave_up && r.hops.len() == 2, "{r:?}");
}

#[tokio::test]
async fn bad_options_are_refused_before_any_probe() {
    let target: SocketAddr = "127.0.0.1:7000".parse().unwrap();
    let opts = RouteOptions {
        port: Some(7000),
        ..RouteOptions::default()
    };
    let e = route(target, &opts).await.unwrap_err();
    assert!(
        matches!(e, Error::BadOptions(_)) && !e.is_retryable(),
        "{e}"
    );
}
