//! The handshake: `Hello::decode`, and `negotiate` between the decoded hello
//! and either this build's or a second decoded one. Negotiation must give
//! both ends the same answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::Hello;
use tern_proto::hello::HELLO_LEN;

fuzz_target!(|data: &[u8]| {
    let Ok(a) = Hello::decode(data) else {
        return;
    };
    assert_eq!(&a.encode()[..], &data[..HELLO_LEN]);
    let b = Hello::decode(&data[HELLO_LEN..]).unwrap_or_else(|_| Hello::ours());
    let ab = a.negotiate(&b);
    let ba = b.negotiate(&a);
    assert_eq!(ab.is_ok(), ba.is_ok());
    if let (Ok(ab), Ok(ba)) = (ab, ba) {
        assert_eq!(ab, ba);
        assert!(ab.version <= a.version && ab.version <= b.version);
        assert!(ab.version >= a.min_version && ab.version >= b.min_version);
        assert!(a.features.contains(ab.features) && b.features.contains(ab.features));
    }
});
