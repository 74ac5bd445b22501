//! The capacity probe's UDP packets: `probe::Probe::decode` on any
//! datagram, as a responder or a client reads them off the network.
//! Whatever it accepts must encode back to the same header and decode to
//! the same packet (padding is not kept).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::probe::{HEADER_LEN, Probe};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Probe::decode(data) {
        let again = p.encode();
        assert_eq!(again.len(), data.len());
        assert_eq!(&again[..HEADER_LEN], &data[..HEADER_LEN]);
        assert_eq!(Probe::decode(&again), Ok(p));
    }
});
