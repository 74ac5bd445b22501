//! The probes' UDP packets: `probe::Probe::decode` (capacity trains) and
//! `probe::Echo::decode` (loss echoes) on any datagram, as a responder or
//! a client reads them off the network. Whatever either accepts must
//! encode back to the same header and decode to the same packet (padding
//! is not kept), and no datagram is both.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::probe::{Echo, HEADER_LEN, Probe};

fuzz_target!(|data: &[u8]| {
    let train = Probe::decode(data);
    if let Ok(p) = train {
        let again = p.encode();
        assert_eq!(again.len(), data.len());
        assert_eq!(&again[..HEADER_LEN], &data[..HEADER_LEN]);
        assert_eq!(Probe::decode(&again), Ok(p));
    }
    if let Ok(e) = Echo::decode(data) {
        assert!(train.is_err(), "a datagram is a train packet or an echo");
        let again = e.encode();
        assert_eq!(again.len(), data.len());
        assert_eq!(&again[..HEADER_LEN], &data[..HEADER_LEN]);
        assert_eq!(Echo::decode(&again), Ok(e));
    }
});
