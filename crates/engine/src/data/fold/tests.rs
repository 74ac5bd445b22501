use super::*;
use crate::integrity::digest_of;

const BLOCK: usize = 1000;

/// A block buffer holding `data`.
fn owned(data: &[u8]) -> BlockBuf {
    let mut b = BlockBuf::zeroed(data.len());
    b.copy_from_slice(data);
    b
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Offsets of `len` bytes in `BLOCK`-sized blocks, in an order made from
/// `seed` (a simple LCG: the test needs variety, not quality).
fn shuffled(len: usize, seed: u64) -> Vec<u64> {
    let mut offsets: Vec<u64> = (0..len.div_ceil(BLOCK))
        .map(|i| (i * BLOCK) as u64)
        .collect();
    let mut x = seed | 1;
    for i in (1..offsets.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        offsets.swap(i, (x >> 33) as usize % (i + 1));
    }
    offsets
}

/// A receiver's read-back that must not be called: every block is held.
fn unread(_: u64, _: &mut [u8]) -> std::io::Result<()> {
    panic!("a block was read back though it was held")
}

fn block(file: &[u8], offset: u64) -> &[u8] {
    let at = offset as usize;
    &file[at..(at + BLOCK).min(file.len())]
}

#[test]
fn owned_blocks_in_any_order_fold_to_the_files_digest() {
    let file = data(37 * BLOCK + 123);
    for alg in ChecksumAlg::ALL {
        for seed in 0..20 {
            let folds = Folds::new(alg);
            for offset in shuffled(file.len(), seed) {
                let b = block(&file, offset);
                let mut buf = BlockBuf::zeroed(BLOCK);
                buf[..b.len()].copy_from_slice(b);
                let back = folds.feed_owned(7, offset, buf, b.len(), &unread);
                assert_eq!(back.len(), BLOCK, "a buffer of the block's size comes back");
            }
            assert_eq!(
                folds.finished(7, file.len() as u64),
                Some(digest_of(alg, &file)),
                "{} seed {seed}",
                alg.name()
            );
            assert_eq!(*folds.held.lock().unwrap(), 0, "nothing held once done");
        }
    }
}

#[test]
fn copied_blocks_from_racing_threads_fold_to_the_files_digest() {
    let file = Arc::new(data(64 * BLOCK + 5));
    for seed in 0..10 {
        let folds = Arc::new(Folds::new(ChecksumAlg::Md5));
        let offsets = shuffled(file.len(), seed);
        let threads: Vec<_> = offsets
            .chunks(16)
            .map(|part| {
                let (folds, file, part) = (folds.clone(), file.clone(), part.to_vec());
                std::thread::spawn(move || {
                    for offset in part {
                        folds.feed_copied(
                            1,
                            offset,
                            block(&file, offset),
                            Duration::from_millis(1),
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            folds.finished(1, file.len() as u64),
            Some(digest_of(ChecksumAlg::Md5, &file)),
            "seed {seed}"
        );
    }
}

#[test]
fn a_sender_block_waits_for_its_predecessor_instead_of_copying() {
    let file = data(2 * BLOCK);
    let folds = Arc::new(Folds::new(ChecksumAlg::Xxh3));
    let late = {
        let (folds, second) = (folds.clone(), block(&file, BLOCK as u64).to_vec());
        std::thread::spawn(move || {
            folds.feed_copied(3, BLOCK as u64, &second, Duration::from_secs(30))
        })
    };
    // The second block is waiting, not held.
    while !matches!(folds.standing(3), Standing::Folding { .. }) {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        *folds.held.lock().unwrap(),
        0,
        "the waiting block was not copied"
    );
    folds.feed_copied(3, 0, block(&file, 0), Duration::ZERO);
    late.join().unwrap();
    assert_eq!(
        folds.finished(3, file.len() as u64),
        Some(digest_of(ChecksumAlg::Xxh3, &file))
    );
}

#[test]
fn over_the_cap_a_receiver_reads_back_only_the_blocks_it_did_not_hold() {
    let file = data(20 * BLOCK);
    let folds = Folds::with_cap(ChecksumAlg::Sha256, 3 * BLOCK);
    let reads = std::sync::Mutex::new(Vec::new());
    let read_back = |at: u64, into: &mut [u8]| {
        reads.lock().unwrap().push(at);
        into.copy_from_slice(&file[at as usize..at as usize + into.len()]);
        Ok(())
    };
    // Blocks 0..5 in order, then 7.. ahead of a missing 5 and 6: three
    // are held (7, 8, 9), the rest only noted.
    for i in (0..5).chain(7..20) {
        let offset = (i * BLOCK) as u64;
        folds.feed_owned(9, offset, owned(block(&file, offset)), BLOCK, &read_back);
    }
    assert!(
        matches!(folds.standing(9), Standing::Folding { cursor, .. } if cursor == 5 * BLOCK as u64)
    );
    assert_eq!(*folds.held.lock().unwrap(), 3 * BLOCK, "held up to the cap");
    assert!(reads.lock().unwrap().is_empty(), "nothing read yet");
    for i in [5, 6] {
        let offset = (i * BLOCK) as u64;
        folds.feed_owned(9, offset, owned(block(&file, offset)), BLOCK, &read_back);
    }
    assert_eq!(
        folds.finished(9, file.len() as u64),
        Some(digest_of(ChecksumAlg::Sha256, &file))
    );
    let read: Vec<u64> = (10..20).map(|i| (i * BLOCK) as u64).collect();
    assert_eq!(*reads.lock().unwrap(), read, "each unheld block read once");
    assert_eq!(*folds.held.lock().unwrap(), 0, "nothing held once done");
}

#[test]
fn a_failed_read_back_spoils_the_fold_at_its_cursor() {
    let file = data(6 * BLOCK);
    let folds = Folds::with_cap(ChecksumAlg::Xxh3, BLOCK);
    let broken = |_: u64, _: &mut [u8]| Err(std::io::Error::other("disk gone"));
    for i in [1, 2, 3, 4] {
        let offset = (i * BLOCK) as u64;
        folds.feed_owned(3, offset, owned(block(&file, offset)), BLOCK, &broken);
    }
    folds.feed_owned(3, 0, owned(block(&file, 0)), BLOCK, &broken);
    // 0 (given at the cursor) and 1 (held) are in; 2 could not be read.
    assert_eq!(
        folds.standing(3),
        Standing::Spoiled {
            cursor: 2 * BLOCK as u64
        }
    );
    assert_eq!(
        *folds.held.lock().unwrap(),
        0,
        "a spoiled fold holds nothing"
    );
    let (mut digest, cursor) = folds.take(3);
    digest.update(&file[cursor as usize..]);
    assert_eq!(digest.finish(), digest_of(ChecksumAlg::Xxh3, &file));
}

#[test]
fn over_the_cap_a_senders_fold_spoils_and_the_rest_is_read_from_its_cursor() {
    let file = data(20 * BLOCK);
    let folds = Folds::with_cap(ChecksumAlg::Sha256, 3 * BLOCK);
    // Blocks 0..5 in order, then 7.. ahead of a missing 5 and 6.
    for i in (0..5).chain(7..20) {
        let offset = (i * BLOCK) as u64;
        folds.feed_copied(9, offset, block(&file, offset), Duration::ZERO);
    }
    assert_eq!(
        folds.standing(9),
        Standing::Spoiled {
            cursor: 5 * BLOCK as u64
        }
    );
    assert_eq!(
        *folds.held.lock().unwrap(),
        0,
        "a spoiled fold holds nothing"
    );
    assert_eq!(folds.finished(9, file.len() as u64), None);
    let (mut digest, cursor) = folds.take(9);
    assert_eq!(cursor, 5 * BLOCK as u64);
    digest.update(&file[cursor as usize..]);
    assert_eq!(digest.finish(), digest_of(ChecksumAlg::Sha256, &file));
    // A repair fed after the take is ignored.
    let back = folds.feed_owned(9, 6 * BLOCK as u64, BlockBuf::zeroed(BLOCK), BLOCK, &unread);
    assert_eq!(back.len(), BLOCK);
    assert_eq!(*folds.held.lock().unwrap(), 0);
}

#[test]
fn duplicates_and_excluded_files_do_not_change_a_digest() {
    let file = data(4 * BLOCK);
    let folds = Folds::new(ChecksumAlg::Crc32c);
    for offset in [BLOCK, BLOCK, 0, 0, 2 * BLOCK, 3 * BLOCK, BLOCK] {
        let offset = offset as u64;
        folds.feed_owned(2, offset, owned(block(&file, offset)), BLOCK, &unread);
    }
    assert_eq!(
        folds.finished(2, file.len() as u64),
        Some(digest_of(ChecksumAlg::Crc32c, &file))
    );
    folds.exclude(4);
    folds.feed_owned(4, 0, owned(&file[..BLOCK]), BLOCK, &unread);
    assert_eq!(folds.standing(4), Standing::Spoiled { cursor: 0 });
    let (digest, cursor) = folds.take(4);
    assert_eq!(
        (digest.finish(), cursor),
        (digest_of(ChecksumAlg::Crc32c, b""), 0)
    );
}

#[test]
fn a_fold_short_of_the_size_is_not_finished() {
    let file = data(3 * BLOCK);
    let folds = Folds::new(ChecksumAlg::Adler32);
    folds.feed_owned(5, 0, owned(&file[..BLOCK]), BLOCK, &unread);
    assert_eq!(folds.finished(5, file.len() as u64), None);
    assert!(
        matches!(folds.standing(5), Standing::Folding { cursor, .. } if cursor == BLOCK as u64)
    );
}

#[test]
fn an_ended_fold_frees_its_state_and_ignores_later_blocks() {
    let file = data(3 * BLOCK);
    let folds = Folds::new(ChecksumAlg::Xxh3);
    // Finished, taken and forgotten folds, and one still going.
    for offset in [0, BLOCK, 2 * BLOCK] {
        let offset = offset as u64;
        folds.feed_copied(1, offset, block(&file, offset), Duration::ZERO);
    }
    assert!(folds.finished(1, file.len() as u64).is_some());
    folds.feed_copied(2, 0, block(&file, 0), Duration::ZERO);
    assert_eq!(folds.take(2).1, BLOCK as u64);
    folds.feed_copied(
        3,
        2 * BLOCK as u64,
        block(&file, 2 * BLOCK as u64),
        Duration::ZERO,
    );
    assert_eq!(*folds.held.lock().unwrap(), BLOCK, "a block held ahead");
    folds.forget(3);
    folds.feed_copied(4, 0, block(&file, 0), Duration::ZERO);
    assert_eq!(folds.open_folds(), 1, "only the fold still going is kept");
    assert_eq!(
        *folds.held.lock().unwrap(),
        0,
        "what the forgotten fold held is freed"
    );

    // Blocks that come after the end (repairs, copies) start nothing.
    for id in [1, 2, 3] {
        folds.feed_copied(
            id,
            2 * BLOCK as u64,
            block(&file, 2 * BLOCK as u64),
            Duration::ZERO,
        );
        let back = folds.feed_owned(id, BLOCK as u64, BlockBuf::zeroed(BLOCK), BLOCK, &unread);
        assert_eq!(back.len(), BLOCK);
        assert_eq!(folds.standing(id), Standing::Spoiled { cursor: 0 });
        assert_eq!(folds.finished(id, file.len() as u64), None);
    }
    assert_eq!(folds.open_folds(), 1);
    assert_eq!(
        *folds.held.lock().unwrap(),
        0,
        "nothing held for ended folds"
    );
}

#[test]
fn ended_files_are_a_watermark_and_a_few_above_it() {
    let folds = Folds::new(ChecksumAlg::Crc32c);
    for id in [2, 0, 1, u32::MAX, 5] {
        folds.forget(id);
    }
    let slots = folds.files.lock().unwrap();
    assert_eq!(slots.closed_below, 3, "0, 1 and 2 ended: below 3");
    assert_eq!(
        slots.closed_above.iter().copied().collect::<Vec<_>>(),
        vec![5, u32::MAX]
    );
    for id in [0, 1, 2, 5, u32::MAX] {
        assert!(slots.is_closed(id), "{id}");
    }
    for id in [3, 4, 6, u32::MAX - 1] {
        assert!(!slots.is_closed(id), "{id}");
    }
}

#[test]
fn a_fold_that_would_note_too_many_blocks_ahead_gives_up() {
    // Nothing fits under a cap of 0: every block ahead is only noted.
    let folds = Folds::with_cap(ChecksumAlg::Xxh3, 0);
    for i in 1..=MAX_AHEAD as u64 {
        folds.feed_owned(6, i, BlockBuf::zeroed(1), 1, &unread);
    }
    assert!(matches!(
        folds.standing(6),
        Standing::Folding { cursor: 0, .. }
    ));
    folds.feed_owned(6, MAX_AHEAD as u64 + 1, BlockBuf::zeroed(1), 1, &unread);
    assert_eq!(folds.standing(6), Standing::Spoiled { cursor: 0 });
}

#[test]
fn a_held_block_is_booked_at_the_size_of_its_buffer() {
    // A peer's one-byte block still holds a whole block buffer.
    let folds = Folds::with_cap(ChecksumAlg::Crc32c, 10 * BLOCK);
    folds.feed_owned(8, BLOCK as u64, BlockBuf::zeroed(BLOCK), 1, &unread);
    assert_eq!(*folds.held.lock().unwrap(), BLOCK);
    folds.forget(8);
    assert_eq!(*folds.held.lock().unwrap(), 0);
}

#[test]
fn whether_a_fold_gave_up_is_told_without_waiting_for_it() {
    let file = data(3 * BLOCK);
    let folds = Folds::with_cap(ChecksumAlg::Xxh3, 0);
    assert!(!folds.spoiled_now(2), "no fold yet");
    folds.feed_owned(
        2,
        BLOCK as u64,
        owned(block(&file, BLOCK as u64)),
        BLOCK,
        &unread,
    );
    // While a block is read back the fold is locked: asked then, it is
    // going on, and the asker does not wait (a wait would never end here,
    // on the thread holding the lock).
    let asked = std::cell::Cell::new(None);
    let read_back = |at: u64, into: &mut [u8]| {
        asked.set(Some(folds.spoiled_now(2)));
        Err(std::io::Error::other(format!(
            "no read at {at} of {}",
            into.len()
        )))
    };
    folds.feed_owned(2, 0, owned(block(&file, 0)), BLOCK, &read_back);
    assert_eq!(asked.get(), Some(false));
    assert!(folds.spoiled_now(2), "the failed read gave it up");
    folds.forget(2);
    assert!(folds.spoiled_now(2), "an ended fold");
}
