//! The once line `tern serve --once` prints: `OnceLine::decode` on any
//! text. Whatever it accepts must re-encode to a line that decodes to the
//! same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::OnceLine;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(line) = OnceLine::decode(text) {
        let again = line.encode();
        assert_eq!(OnceLine::decode(&again).as_ref(), Ok(&line));
    }
});
