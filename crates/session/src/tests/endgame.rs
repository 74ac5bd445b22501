//! The endgame: blocks still on their way on a slow stream are copied to
//! a fast one once every block is handed out, and the receiver completes
//! a file as soon as all its blocks are in.

use super::*;

/// A file over a fast stream (1 ms) and a slow one (400 ms), both taking
/// a block a millisecond: the slow one holds hundreds of blocks when the
/// last is handed out. Returns the simulated time it took.
fn fast_and_slow(measure: bool) -> (Sim, u64) {
    let mut sim = Sim::new(&[1, 400], &[1, 1], 1);
    sim.measure = measure;
    let size = 3_000 * u64::from(BS) + 17;
    let source: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    sim.content = Some(Content {
        source: [("f".to_string(), source)].into_iter().collect(),
        ids: [(1, "f".to_string())].into_iter().collect(),
        ..Content::default()
    });
    queue(&mut sim, vec![Sim::file("f", size)]);
    sim.run(20_000).unwrap();
    let took = sim.now_ms;
    (sim, took)
}

#[test]
fn blocks_on_a_slow_stream_are_copied_to_a_fast_one_at_the_end() {
    let (without, slow_end) = fast_and_slow(false);
    assert_eq!(without.s.blocks_copied(), 0, "no flights, no copies");
    let (with, took) = fast_and_slow(true);
    let c = with.content.as_ref().unwrap();
    assert_eq!(c.placed["f"], c.source["f"], "the copy is byte-identical");
    assert!(with.s.blocks_copied() > 0, "the endgame copied blocks");
    // The session ends before the slow stream's copies arrive, but for
    // the few it was about to deliver anyway.
    assert!(
        with.r.blocks_duplicate() * 10 < with.s.blocks_copied(),
        "{} duplicates of {} copies",
        with.r.blocks_duplicate(),
        with.s.blocks_copied()
    );
    // Without the endgame the file waits for the slow stream's last block
    // (400 ms after it was handed out). With it, the fast stream copies
    // the slow one's blocks from the newest while the slow one delivers
    // from the oldest: they meet halfway, 200 ms sooner.
    assert!(
        took + 150 < slow_end,
        "with the endgame {took} ms, without {slow_end} ms"
    );
    assert_eq!(with.s.blocks_retransmitted(), 0, "nothing was lost");
}

#[test]
fn streams_of_equal_speed_copy_nothing() {
    let mut sim = Sim::new(&[20, 20, 20], &[1, 1, 1], 1);
    sim.measure = true;
    queue(&mut sim, vec![Sim::file("f", 600_000)]);
    sim.run(20_000).unwrap();
    // A stream that ran dry may copy the last blocks of a peer, but never
    // more than the peers held at the end.
    assert!(
        sim.s.blocks_copied() <= 2 * 20,
        "copied {} blocks",
        sim.s.blocks_copied()
    );
}

#[test]
fn blocks_a_few_milliseconds_from_arriving_are_not_copied() {
    // A LAN: every stream delivers within milliseconds, one at a quarter
    // of the others' rate. Copying its last blocks would gain a
    // millisecond or two and send them twice.
    let mut sim = Sim::new(&[1, 1, 1, 1], &[4, 4, 4, 1], 1);
    sim.measure = true;
    queue(&mut sim, vec![Sim::file("f", 600 * u64::from(BS))]);
    sim.run(20_000).unwrap();
    assert_eq!(sim.r.finished().len(), 1);
    assert_eq!(sim.s.blocks_copied(), 0);
}

#[test]
fn a_block_is_copied_once_and_never_from_a_lost_stream() {
    let mut sim = Sim::new(&[1, 300, 300], &[1, 1, 1], 1);
    sim.measure = true;
    sim.kills = vec![Kill::now(2, 500)];
    queue(&mut sim, vec![Sim::file("f", 1_000_000)]);
    sim.run(20_000).unwrap();
    assert_eq!(sim.r.finished().len(), 1);
    // Stream 1 held about 300 blocks at the end: at most that many copies.
    let copied = sim.s.blocks_copied();
    assert!(copied > 0 && copied <= 320, "copied {copied}");
}

/// A receiver of two streams.
fn two_stream_receiver() -> ReceiverSession {
    ReceiverSession::new(ReceiverConfig {
        streams: 2,
        block_size: BS,
        max_repair_rounds: 3,
        verify_digest: true,
        entries: true,
    })
}

#[test]
fn a_second_copy_arriving_while_the_first_is_written_is_a_duplicate() {
    let mut r = two_stream_receiver();
    let meta = FileMeta {
        file_id: 1,
        path: "f".into(),
        size: u64::from(BS) * 2,
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
    };
    r.handle_control(ControlMsg::FileAnnounce(meta)).unwrap();
    let header = BlockHeader {
        flags: BlockFlags::default(),
        file_id: 1,
        offset: u64::from(BS),
        length: BS,
        check: [0; 16],
    };
    // The original on stream 1 is judged worth writing; before its write
    // is done the copy arrives on stream 0.
    assert_eq!(
        r.handle_block(1, &header, true).unwrap(),
        BlockVerdict::Write
    );
    assert_eq!(
        r.handle_block(0, &header, true).unwrap(),
        BlockVerdict::Duplicate
    );
    r.block_written(1, &header).unwrap();
    assert_eq!(r.blocks_duplicate(), 1);
    assert_eq!(r.stream_bytes(), &[0, u64::from(BS)], "written once");
}

#[test]
fn a_copy_still_being_written_when_the_marks_are_reached_is_not_asked_for_again() {
    let mut r = two_stream_receiver();
    let size = u64::from(BS) * 2;
    let meta = FileMeta {
        file_id: 1,
        path: "f".into(),
        size,
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
    };
    r.handle_control(ControlMsg::FileAnnounce(meta)).unwrap();
    let block = |offset: u64| BlockHeader {
        flags: BlockFlags::default(),
        file_id: 1,
        offset,
        length: BS,
        check: [0; 16],
    };
    // Block 0 on stream 0; block 1 on stream 1 (slow), and FileSent.
    assert_eq!(
        r.handle_block(0, &block(0), true).unwrap(),
        BlockVerdict::Write
    );
    r.block_written(0, &block(0)).unwrap();
    r.handle_control(ControlMsg::FileSent {
        file_id: 1,
        size,
        digest: digest_for(1),
        stream_marks: vec![1, 1],
    })
    .unwrap();
    // The endgame's copy of block 1 arrives on stream 0 first and is being
    // written when the original reaches stream 1's mark.
    let copy = block(u64::from(BS));
    assert_eq!(r.handle_block(0, &copy, true).unwrap(), BlockVerdict::Write);
    assert_eq!(
        r.handle_block(1, &copy, true).unwrap(),
        BlockVerdict::Duplicate
    );
    r.judge_due().unwrap();
    let mut actions = Vec::new();
    while let Some(a) = r.poll_action() {
        actions.push(a);
    }
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, RecvAction::Send(ControlMsg::BlockRequest { .. }))),
        "nothing is missing: {actions:?}"
    );
    r.block_written(0, &copy).unwrap();
    r.judge_due().unwrap();
    r.set_digest(1, digest_for(1)).unwrap();
    let finalize = std::iter::from_fn(|| r.poll_action())
        .any(|a| matches!(a, RecvAction::Finalize { file_id: 1 }));
    assert!(finalize, "the file completes once the copy is written");
}
