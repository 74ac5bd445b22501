//! Which blocks of a file are missing, as the ranges a `BlockRequest`
//! asks for.

/// Runs of missing blocks as `(offset, length)` ranges, each a whole number
/// of blocks (the last may end at the file's end) and at most 2 GiB, so a
/// `BlockRequest` stays small however many blocks a dead stream took.
pub(super) fn missing_ranges(held: impl Fn(u64) -> bool, size: u64, bs: u64) -> Vec<(u64, u32)> {
    let max_run = ((1u64 << 31) / bs).max(1);
    let blocks = size.div_ceil(bs);
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < blocks {
        if held(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < blocks && !held(i) && i - start < max_run {
            i += 1;
        }
        let offset = start * bs;
        let end = (i * bs).min(size);
        ranges.push((offset, (end - offset) as u32));
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BlockSet;

    #[test]
    fn missing_blocks_coalesce_into_ranges() {
        let mut got = BlockSet::default();
        for i in [0, 1, 4, 7] {
            got.insert(i);
        }
        // 8 blocks of 10 bytes, the last one 5 bytes long.
        assert_eq!(
            missing_ranges(|i| got.contains(i), 75, 10),
            vec![(20, 20), (50, 20)]
        );
        assert_eq!(missing_ranges(|_| false, 75, 10), vec![(0, 75)]);
        let big = missing_ranges(|_| false, 5 << 30, 1 << 20);
        assert_eq!(big.len(), 3, "runs are capped at 2 GiB");
        assert_eq!(big.iter().map(|r| u64::from(r.1)).sum::<u64>(), 5 << 30);
    }
}
