//! Control frames: `control_body_len` on the first 4 bytes and
//! `decode_control` on the rest, as a receiver would see a frame. Whatever
//! decodes must re-encode to a frame that decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_proto::control::control_body_len;
use tern_proto::{MAX_CONTROL_FRAME, decode_control, encode_control};

fuzz_target!(|data: &[u8]| {
    let Some((prefix, body)) = data.split_first_chunk::<4>() else {
        let _ = decode_control(data);
        return;
    };
    match control_body_len(*prefix) {
        Ok(n) => assert!(n <= MAX_CONTROL_FRAME as usize),
        Err(_) => assert!(u32::from_be_bytes(*prefix) > MAX_CONTROL_FRAME),
    }
    if let Ok(msg) = decode_control(body) {
        let frame = encode_control(&msg);
        assert!(frame.len() - 4 <= body.len(), "shortest varints never grow");
        assert_eq!(decode_control(&frame[4..]).as_ref(), Ok(&msg));
    }
});
