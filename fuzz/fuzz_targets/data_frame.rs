//! Data frame headers: whatever `DataFrame::decode` accepts re-encodes to the
//! same 36 bytes and never announces more than `MAX_BLOCK_SIZE`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::data::HEADER_LEN;
use tern_proto::{DataFrame, MAX_BLOCK_SIZE};

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = DataFrame::decode(data) {
        assert_eq!(&frame.encode()[..], &data[..HEADER_LEN]);
        if let DataFrame::Block(h) = frame {
            assert!(h.length <= MAX_BLOCK_SIZE);
        }
    }
});
