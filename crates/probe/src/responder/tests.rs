use super::*;

fn addr(last: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, last], port))
}

fn request(train: u32, seq: u16, count: u16, len: u16) -> Vec<u8> {
    Probe::request(42, train, seq, count, len).encode()
}

#[test]
fn a_whole_train_is_answered_with_equal_sizes_and_arrival_offsets() {
    let t0 = Instant::now();
    let mut r = Responder::new(ResponderConfig::default(), t0);
    let from = addr(1, 5000);
    for seq in 0..4 {
        let out = r.handle(
            t0,
            from,
            &request(1, seq, 5, 1000),
            1_000 + u64::from(seq) * 10,
        );
        assert!(out.is_empty(), "nothing before the last request");
    }
    let out = r.handle(t0, from, &request(1, 4, 5, 1000), 1_040);
    assert_eq!(out.len(), 5);
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o.to, from);
        assert_eq!(o.bytes.len(), 1000, "a reply is as long as its request");
        let p = Probe::decode(&o.bytes).unwrap();
        assert_eq!((p.kind, p.seq, p.received), (Kind::Reply, i as u16, 5));
        assert_eq!(p.offset_ns, i as u64 * 10);
        assert!(o.stamp_sent, "train replies are stamped as they are sent");
        assert_eq!(p.sent_ns, 0, "not before they are sent");
    }
    assert_eq!(r.open_trains(), 0);
}

#[test]
fn a_train_with_a_gap_is_answered_for_what_arrived() {
    let t0 = Instant::now();
    let mut r = Responder::new(ResponderConfig::default(), t0);
    let from = addr(1, 5000);
    r.handle(t0, from, &request(1, 0, 3, 500), 100);
    let out = r.handle(t0, from, &request(1, 2, 3, 500), 300);
    let seqs: Vec<(u16, u16, u64)> = out
        .iter()
        .map(|o| Probe::decode(&o.bytes).unwrap())
        .map(|p| (p.seq, p.received, p.offset_ns))
        .collect();
    assert_eq!(seqs, vec![(0, 2, 0), (2, 2, 200)]);
}

#[test]
fn junk_replies_and_size_violations_get_nothing() {
    let t0 = Instant::now();
    let mut r = Responder::new(ResponderConfig::default(), t0);
    let from = addr(1, 5000);
    let reply = Probe::request(1, 1, 1, 2, 500).reply(2, 0).encode();
    let mut lying = request(1, 1, 2, 500);
    lying[9] ^= 1;
    for junk in [
        &b"hello"[..],
        &[0u8; 1400],
        &reply,
        &lying,
        &request(1, 1, 2, 100),
    ] {
        assert!(r.handle(t0, from, junk, 0).is_empty());
    }
    assert_eq!(ResponderStats::get(&r.stats().malformed), 5);
    assert_eq!(ResponderStats::get(&r.stats().requests), 0);
}

#[test]
fn a_source_over_its_rate_is_cut_off_and_others_are_not() {
    let t0 = Instant::now();
    let cfg = ResponderConfig {
        per_source_bps: 8_000, // 1000 B/s
        per_source_burst: 3_000,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(cfg, t0);
    let (greedy, other) = (addr(1, 1), addr(2, 1));
    let answered = |r: &mut Responder, from, train, at| {
        let _ = r.handle(at, from, &request(train, 0, 2, 1000), 0);
        r.handle(at, from, &request(train, 1, 2, 1000), 1).len()
    };
    assert_eq!(answered(&mut r, greedy, 1, t0), 2, "within the burst");
    assert_eq!(answered(&mut r, greedy, 2, t0), 0, "third packet refused");
    assert!(ResponderStats::get(&r.stats().rate_limited) >= 1);
    assert_eq!(
        answered(&mut r, other, 3, t0),
        2,
        "another source is unaffected"
    );
    // Two seconds refill 2000 bytes: one more train.
    let later = t0 + Duration::from_secs(2);
    r.expire(later);
    assert_eq!(answered(&mut r, greedy, 4, later), 2);
}

#[test]
fn addresses_of_one_ipv6_64_share_a_bucket_and_mapped_v4_is_v4() {
    let a: SocketAddr = "[2001:db8:1:2::7]:1".parse().unwrap();
    let b: SocketAddr = "[2001:db8:1:2:ffff::1]:9".parse().unwrap();
    let other: SocketAddr = "[2001:db8:1:3::7]:1".parse().unwrap();
    assert_eq!(source_of(a), source_of(b));
    assert_ne!(source_of(a), source_of(other));
    let mapped: SocketAddr = "[::ffff:10.0.0.1]:5".parse().unwrap();
    assert_eq!(source_of(mapped), source_of(addr(1, 6)));
    // Rotating addresses inside a /64 does not buy more replies.
    let t0 = Instant::now();
    let cfg = ResponderConfig {
        per_source_burst: 3_000,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(cfg, t0);
    let _ = r.handle(t0, a, &request(1, 0, 2, 1000), 0);
    assert_eq!(r.handle(t0, a, &request(1, 1, 2, 1000), 0).len(), 2);
    let _ = r.handle(t0, b, &request(2, 0, 2, 1000), 0);
    assert!(r.handle(t0, b, &request(2, 1, 2, 1000), 0).is_empty());
}

#[test]
fn the_shared_bucket_caps_many_sources_together() {
    let t0 = Instant::now();
    let cfg = ResponderConfig {
        total_bps: 8_000,
        total_burst: 4_000,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(cfg, t0);
    let mut replies = 0;
    for i in 0..10u8 {
        let from = addr(i, 1);
        let _ = r.handle(t0, from, &request(1, 0, 2, 1000), 0);
        replies += r.handle(t0, from, &request(1, 1, 2, 1000), 1).len();
    }
    assert_eq!(replies, 4, "4000 bytes of burst, spoofed sources or not");
}

#[test]
fn open_trains_are_bounded_and_expire() {
    let t0 = Instant::now();
    let cfg = ResponderConfig {
        max_trains: 3,
        max_trains_per_source: 2,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(cfg, t0);
    // Half trains that never finish. A source at its limit gives up its
    // oldest train for a new one.
    let second = t0 + Duration::from_millis(1);
    let _ = r.handle(t0, addr(1, 1), &request(1, 0, 4, 500), 0);
    let _ = r.handle(second, addr(1, 1), &request(2, 0, 4, 500), 0);
    let _ = r.handle(second, addr(1, 1), &request(3, 0, 4, 500), 0);
    assert_eq!(r.open_trains(), 2, "per source");
    assert_eq!(ResponderStats::get(&r.stats().expired), 1);
    assert_eq!(
        r.handle(second, addr(1, 1), &request(3, 3, 4, 500), 0)
            .len(),
        2
    );
    assert_eq!(
        r.handle(second, addr(1, 1), &request(1, 3, 4, 500), 0)
            .len(),
        1,
        "train 1 was given up: its last request starts it anew"
    );
    // Over all sources the limit refuses.
    let _ = r.handle(t0, addr(2, 1), &request(1, 0, 4, 500), 0);
    let _ = r.handle(t0, addr(3, 1), &request(1, 0, 4, 500), 0);
    let _ = r.handle(t0, addr(4, 1), &request(1, 0, 4, 500), 0);
    assert_eq!(r.open_trains(), 3, "over all");
    assert_eq!(ResponderStats::get(&r.stats().busy), 1);
    let later = t0 + Duration::from_secs(3);
    let _ = r.handle(later, addr(4, 1), &request(2, 0, 2, 500), 0);
    assert_eq!(
        r.handle(later, addr(4, 1), &request(2, 1, 2, 500), 0).len(),
        2
    );
    assert_eq!(ResponderStats::get(&r.stats().expired), 4);
}

#[test]
fn a_train_that_changes_its_length_is_dropped() {
    let t0 = Instant::now();
    let mut r = Responder::new(ResponderConfig::default(), t0);
    let from = addr(1, 1);
    let _ = r.handle(t0, from, &request(1, 0, 10, 500), 0);
    assert!(r.handle(t0, from, &request(1, 1, 2, 500), 0).is_empty());
}

fn echo(
    r: &mut Responder,
    at: Instant,
    from: SocketAddr,
    nonce: u64,
    seq: u32,
    ns: u64,
) -> Option<Echo> {
    let out = r.handle(at, from, &Echo::request(nonce, seq, 64).encode(), ns);
    assert!(out.len() <= 1, "one reply per echo at most");
    assert!(out.iter().all(|o| !o.stamp_sent), "echoes carry no stamp");
    out.first().map(|o| {
        assert_eq!(
            (o.to, o.bytes.len()),
            (from, 64),
            "back to its source, as long"
        );
        Echo::decode(&o.bytes).unwrap()
    })
}

#[test]
fn echoes_are_answered_at_once_with_their_measurement_count_and_arrival_offset() {
    let t0 = Instant::now();
    let mut r = Responder::new(ResponderConfig::default(), t0);
    let from = addr(1, 7);
    let a = echo(&mut r, t0, from, 5, 0, 1_000).unwrap();
    assert_eq!((a.reply, a.seq, a.received, a.offset_ns), (true, 0, 1, 0));
    // Echo 1 is lost on the way: 2 arrives as the second.
    let b = echo(&mut r, t0, from, 5, 2, 3_500).unwrap();
    assert_eq!((b.seq, b.received, b.offset_ns), (2, 2, 2_500));
    // Another measurement from the same source counts on its own.
    let c = echo(&mut r, t0, from, 6, 0, 9_000).unwrap();
    assert_eq!((c.received, c.offset_ns), (1, 0));
    // A reply sent to the responder is not answered.
    let reply = Echo::request(5, 3, 64).answer(1, 0).encode();
    assert!(r.handle(t0, from, &reply, 0).is_empty());
    assert_eq!(ResponderStats::get(&r.stats().malformed), 1);
}

#[test]
fn echo_counters_are_bounded_per_source_and_forgotten_when_idle() {
    let t0 = Instant::now();
    let config = ResponderConfig {
        max_echo_sessions: 3,
        max_trains_per_source: 2,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(config, t0);
    let from = addr(1, 7);
    for nonce in 0..3 {
        echo(&mut r, t0 + Duration::from_millis(nonce), from, nonce, 0, 0).unwrap();
    }
    // The source's oldest (nonce 0) was given up for nonce 2: it starts anew.
    assert_eq!(echo(&mut r, t0, from, 0, 1, 0).unwrap().received, 1);
    // Others fill the rest; over all, a new measurement is refused.
    echo(&mut r, t0, addr(2, 7), 9, 0, 0).unwrap();
    assert!(echo(&mut r, t0, addr(3, 7), 9, 0, 0).is_none());
    assert_eq!(ResponderStats::get(&r.stats().busy), 1);
    // After the idle time everything is forgotten and room is back.
    let later = t0 + Duration::from_secs(11);
    assert_eq!(
        echo(&mut r, later, addr(3, 7), 9, 0, 0).unwrap().received,
        1
    );
    assert_eq!(echo(&mut r, later, from, 2, 5, 0).unwrap().received, 1);
}

#[test]
fn echoes_are_charged_to_the_source_bucket() {
    let t0 = Instant::now();
    let config = ResponderConfig {
        per_source_burst: 640,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(config, t0);
    let answered = (0..20)
        .filter(|&seq| echo(&mut r, t0, addr(1, 7), 1, seq, 0).is_some())
        .count();
    assert_eq!(
        answered, 6,
        "640 bytes of burst are six 64-byte echoes with their 28 bytes of headers"
    );
    assert_eq!(ResponderStats::get(&r.stats().rate_limited), 14);
}
