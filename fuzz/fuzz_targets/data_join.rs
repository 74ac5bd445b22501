//! The data connection opening: `DataJoin::decode` and `JoinReply::decode`.
//! Whatever either accepts re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::data::{JOIN_LEN, JOIN_REPLY_LEN};
use tern_proto::{DataJoin, JoinReply};

fuzz_target!(|data: &[u8]| {
    if let Ok(join) = DataJoin::decode(data) {
        assert_eq!(&join.encode()[..], &data[..JOIN_LEN]);
    }
    if let Ok(reply) = JoinReply::decode(data) {
        assert_eq!(&reply.encode()[..], &data[..JOIN_REPLY_LEN]);
    }
});
