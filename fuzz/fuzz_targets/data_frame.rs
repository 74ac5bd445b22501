//! Data frame headers: whatever `DataFrame::decode` accepts re-encodes to the
//! same 36 bytes and never announces more than `MAX_BLOCK_SIZE`. A
//! compressed block's payload opens with its raw length, decoded from the
//! bytes after the header as a receiver would.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::data::{HEADER_LEN, RAW_LEN_LEN};
use tern_proto::{DataFrame, MAX_BLOCK_SIZE, RawLen};

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = DataFrame::decode(data) {
        assert_eq!(&frame.encode()[..], &data[..HEADER_LEN]);
        if let DataFrame::Block(h) = frame {
            assert!(h.length <= MAX_BLOCK_SIZE);
            if h.flags.codec().is_some() {
                assert!(h.length as usize >= RAW_LEN_LEN);
                if let Ok(raw) = RawLen::decode(&data[HEADER_LEN..]) {
                    assert!(raw.0 >= 1 && raw.0 <= MAX_BLOCK_SIZE);
                    assert_eq!(raw.encode()[..], data[HEADER_LEN..HEADER_LEN + RAW_LEN_LEN]);
                }
            }
        }
    }
});
