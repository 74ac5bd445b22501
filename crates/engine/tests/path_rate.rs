//! `PathRate` (PROTOCOL.md §5.2) at a receiver: taken once, as the first
//! message, by a receiving server; anything else is a protocol error.

use std::sync::Arc;
use std::time::Duration;

use tern_engine::fsio::{FsSink, Root};
use tern_engine::transfer::{Control, Progress, TransferParams, run_receiver};
use tern_engine::tuning::{Joined, StreamSupply};
use tern_engine::{ErrorKind, Result};
use tern_proto::{ChecksumAlg, ControlMsg, FileMeta};

/// A receiver that takes `PathRate` or not, fed `msgs` on its control
/// connection (then the sender's side stays open and silent).
async fn receive_after(take_path_rate: bool, msgs: Vec<ControlMsg>) -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(FsSink::new(Root::Ambient, dir.path().join("out"), 1).unwrap());
    let (ca, cb) = tokio::io::duplex(1 << 16);
    let (_da, db) = tokio::io::duplex(1 << 16);
    let mut p = TransferParams::new(1, 64 << 10, ChecksumAlg::Xxh3);
    p.take_path_rate = take_path_rate;
    let (_rd, mut wr) = Control::new(Box::new(ca)).split();
    wr.send_all(&msgs).await.unwrap();
    let r = run_receiver(
        Control::new(Box::new(cb)),
        vec![Joined::pipe(0, Box::new(db))],
        StreamSupply::Fixed,
        sink,
        p,
        Arc::new(Progress::default()),
    );
    match tokio::time::timeout(Duration::from_secs(2), r).await {
        Ok(result) => result.map(|_| ()),
        // Still waiting for the rest of the session: nothing was refused.
        Err(_) => Ok(()),
    }
}

fn announce() -> ControlMsg {
    ControlMsg::FileAnnounce(FileMeta {
        file_id: 1,
        path: "f".into(),
        size: 10,
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiving_server_takes_one_path_rate_first_and_refuses_any_other() {
    let rate = ControlMsg::PathRate { bps: 1_000_000_000 };
    receive_after(true, vec![rate.clone(), announce()])
        .await
        .expect("the first message may be a PathRate");
    // Even an absurd rate is only advice.
    receive_after(
        true,
        vec![ControlMsg::PathRate { bps: u64::MAX }, announce()],
    )
    .await
    .expect("any rate");
    for (take, msgs, why) in [
        (true, vec![rate.clone(), rate.clone()], "a second one"),
        (
            true,
            vec![announce(), rate.clone()],
            "one after an announcement",
        ),
        (
            false,
            vec![rate.clone()],
            "one at a receiver that takes none",
        ),
    ] {
        let e = receive_after(take, msgs).await.expect_err(why);
        assert_eq!(e.kind(), ErrorKind::Protocol, "{why}: {e}");
    }
}
