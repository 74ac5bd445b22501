//! In-memory simulation of a sender and a receiver session over a network
//! with per-stream latency, rate and jitter, a slower or faster control
//! channel, dropped streams and corrupted blocks. Deterministic: time is a
//! counter, and whatever is random comes from a seeded generator
//! ([`random`] drives whole transfers from seeds).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use rand::Rng;
use rand::rngs::StdRng;
use tern_proto::{BlockFlags, BlockHeader, ControlMsg, ErrorCode, Existing, FileMeta};

use crate::*;

mod endgame;
mod random;

const BS: u32 = 1000;

/// A frame on its way over a data stream.
struct InFlight {
    at: u64,
    header: BlockHeader,
    /// The block's bytes (empty unless the simulation carries content).
    payload: Vec<u8>,
    /// Damaged on the way: its check fails.
    corrupt: bool,
}

struct Link {
    latency_ms: u64,
    /// Blocks the stream can take every `period_ms`.
    rate: usize,
    period_ms: u64,
    /// Extra delay per frame, drawn up to this; a stream stays in order.
    jitter_ms: u64,
    queue: VecDeque<InFlight>,
    /// When the last frame queued arrives.
    last_at: u64,
    /// Cut: nothing more arrives.
    dead: bool,
    /// The sender was told (`stream_lost`) and hands it nothing more.
    sender_knows: bool,
}

/// A data stream cut at `at`; each end hears of it some time later.
#[derive(Debug, Clone, Copy)]
struct Kill {
    stream: usize,
    at: u64,
    sender_after: u64,
    receiver_after: u64,
}

impl Kill {
    /// Cut, and both ends told at once.
    fn now(stream: usize, at: u64) -> Kill {
        Kill {
            stream,
            at,
            sender_after: 0,
            receiver_after: 0,
        }
    }
}

/// Real bytes: the sender's files, the receiver's temporary files and
/// what ends up at each final name, with block checks and digests
/// computed from them.
#[derive(Default)]
struct Content {
    /// The sender's files, by path.
    source: BTreeMap<String, Vec<u8>>,
    /// Paths by file id (ids are given in push order).
    ids: BTreeMap<u32, String>,
    /// The receiver's temporary files, by file id.
    disk: BTreeMap<u32, Vec<u8>>,
    /// Files whose receiver digest was computed.
    digested: BTreeSet<u32>,
    /// What is at each final name: copies there before the session
    /// (`at_dest`), then the files put in place.
    placed: BTreeMap<String, Vec<u8>>,
}

/// A digest of whole files (FNV-1a, 64 bits): any change shows.
fn digest_of(bytes: &[u8]) -> Vec<u8> {
    fnv(0xcbf2_9ce4_8422_2325, bytes).to_be_bytes().to_vec()
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The block check a driver computes over header fields and payload.
fn block_check(header: &BlockHeader, payload: &[u8]) -> [u8; 16] {
    let fields = [
        &header.file_id.to_be_bytes()[..],
        &header.offset.to_be_bytes(),
        &header.length.to_be_bytes(),
    ]
    .concat();
    let a = fnv(fnv(0xcbf2_9ce4_8422_2325, &fields), payload);
    let b = fnv(fnv(0x6c62_272e_07bb_0142, payload), &fields);
    let mut check = [0; 16];
    check[..8].copy_from_slice(&a.to_be_bytes());
    check[8..].copy_from_slice(&b.to_be_bytes());
    check
}

struct Sim {
    start: Instant,
    now_ms: u64,
    s: SenderSession,
    r: ReceiverSession,
    links: Vec<Link>,
    ctrl_latency_ms: u64,
    /// Extra delay per control message, drawn up to this (needs `rng`).
    ctrl_jitter_ms: u64,
    /// A control message is held this long with this probability (a
    /// stalled control connection; needs `rng`).
    ctrl_stall: (f64, u64),
    to_r: VecDeque<(u64, ControlMsg)>,
    to_s: VecDeque<(u64, ControlMsg)>,
    /// Corrupt the n-th block handed out (0-based), once each.
    corrupt: Vec<u64>,
    /// Corrupt each block with this probability (needs `rng`).
    corrupt_p: f64,
    /// Corrupt this block (file id, offset) every time it is sent.
    doomed: Option<(u32, u64)>,
    rng: Option<StdRng>,
    handed_out: u64,
    /// Streams to cut, and when each end hears of it.
    kills: Vec<Kill>,
    opened: Vec<FileMeta>,
    dirs: Vec<String>,
    /// Files the receiver was told to drop.
    dropped: Vec<u32>,
    /// Files the receiver cannot create, by path.
    refuse: Vec<String>,
    finalized: Vec<u32>,
    /// Receiver's digest differs from the sender's for this file.
    bad_digest_for: Option<u32>,
    repair_blocks_seen: u64,
    /// Frames whose check failed at the receiver.
    corrupt_seen: u64,
    /// Ranges the receiver already holds, by path (a resumed partial).
    kept: Vec<(String, Vec<(u64, u64)>)>,
    /// With a skip policy: what the receiver finds at each final name
    /// (`Absent` when not listed).
    existing: Option<Vec<(String, Existing)>>,
    /// Real bytes, when the simulation carries them.
    content: Option<Content>,
    /// Per file id: transmissions of its blocks that were lost (corrupt,
    /// or on a stream that was cut).
    losses: BTreeMap<u32, u64>,
    /// Per file id: repair requests the receiver sent.
    requests: BTreeMap<u32, u64>,
    /// Per file id: the n-th of its blocks handed out cannot be read; a
    /// frame that fails its check goes in its place (as the engine sends)
    /// and the sender gives the file up.
    unreadable: BTreeMap<u32, u64>,
    /// Per file id: blocks handed out.
    handed_per_file: BTreeMap<u32, u64>,
    /// Files the sender gave up because a read failed.
    read_failed: BTreeSet<u32>,
    /// Per file id: payload bytes the receiver wrote.
    written: BTreeMap<u32, u64>,
    /// When the last control message queued each way arrives (the control
    /// connection stays in order).
    to_r_last: u64,
    to_s_last: u64,
    /// The sender is told what each link still holds (as the engine
    /// measures `TCP_INFO`), which lets its endgame copy blocks.
    measure: bool,
}

fn digest_for(file_id: u32) -> Vec<u8> {
    vec![file_id as u8; 4]
}

impl Sim {
    fn new(latencies: &[u64], rates: &[usize], ctrl_latency_ms: u64) -> Sim {
        let streams = latencies.len() as u16;
        let start = Instant::now();
        Sim {
            start,
            now_ms: 0,
            s: SenderSession::new(SenderConfig {
                streams,
                block_size: BS,
                max_files_in_flight: 4,
                max_repair_rounds: 3,
                deadline: None,
                await_checks: false,
                entries: true,
            }),
            r: ReceiverSession::new(ReceiverConfig {
                streams,
                block_size: BS,
                max_repair_rounds: 3,
                verify_digest: true,
                entries: true,
            }),
            links: latencies
                .iter()
                .zip(rates)
                .map(|(&latency_ms, &rate)| Link {
                    latency_ms,
                    rate,
                    period_ms: 1,
                    jitter_ms: 0,
                    queue: VecDeque::new(),
                    last_at: 0,
                    dead: false,
                    sender_knows: false,
                })
                .collect(),
            ctrl_latency_ms,
            ctrl_jitter_ms: 0,
            ctrl_stall: (0.0, 0),
            to_r: VecDeque::new(),
            to_s: VecDeque::new(),
            corrupt: vec![],
            corrupt_p: 0.0,
            doomed: None,
            rng: None,
            handed_out: 0,
            kills: vec![],
            opened: vec![],
            dirs: vec![],
            dropped: vec![],
            refuse: vec![],
            finalized: vec![],
            bad_digest_for: None,
            repair_blocks_seen: 0,
            corrupt_seen: 0,
            kept: vec![],
            existing: None,
            content: None,
            losses: BTreeMap::new(),
            requests: BTreeMap::new(),
            unreadable: BTreeMap::new(),
            handed_per_file: BTreeMap::new(),
            read_failed: BTreeSet::new(),
            written: BTreeMap::new(),
            to_r_last: 0,
            to_s_last: 0,
            measure: false,
        }
    }

    /// The same simulation with these session settings; `await_checks`: a
    /// skip policy, the receiver finds `existing` at the final names and
    /// the sender waits for its word.
    fn configured(
        mut self,
        max_files_in_flight: usize,
        max_repair_rounds: u32,
        existing: Option<Vec<(String, Existing)>>,
    ) -> Sim {
        let streams = self.links.len() as u16;
        self.s = SenderSession::new(SenderConfig {
            streams,
            block_size: BS,
            max_files_in_flight,
            max_repair_rounds,
            deadline: None,
            await_checks: existing.is_some(),
            entries: true,
        });
        self.r = ReceiverSession::new(ReceiverConfig {
            streams,
            block_size: BS,
            max_repair_rounds,
            verify_digest: true,
            entries: true,
        });
        self.existing = existing;
        self
    }

    /// The same simulation with a skip policy (see [`Self::configured`]).
    fn checking(self, existing: Vec<(String, Existing)>) -> Sim {
        self.configured(4, 3, Some(existing))
    }

    fn file(path: &str, size: u64) -> SendEntry {
        SendEntry::File(FileMeta {
            file_id: 0,
            path: path.into(),
            size,
            mode: 0o644,
            mtime_s: 1_700_000_000,
            mtime_ns: 0,
        })
    }

    fn now(&self) -> Instant {
        self.start + Duration::from_millis(self.now_ms)
    }

    /// Runs until both sides complete, an error, or the step limit.
    fn run(&mut self, max_ms: u64) -> Result<(), Error> {
        self.try_run(max_ms)
            .unwrap_or_else(|| panic!("simulation did not finish in {max_ms} ms"))
    }

    /// Runs until both sides complete or an error; `None` when neither
    /// happened within `max_ms` of simulated time.
    fn try_run(&mut self, max_ms: u64) -> Option<Result<(), Error>> {
        while self.now_ms < max_ms {
            if let Err(e) = self.step() {
                return Some(Err(e));
            }
            if self.s.is_complete() && self.r.is_complete() {
                return Some(Ok(()));
            }
            self.now_ms += 1;
        }
        None
    }

    /// When a control message sent now arrives.
    fn ctrl_arrival(&mut self, to_receiver: bool) -> u64 {
        let mut at = self.now_ms + self.ctrl_latency_ms;
        if let Some(rng) = &mut self.rng {
            if self.ctrl_jitter_ms > 0 {
                at += rng.gen_range(0..=self.ctrl_jitter_ms);
            }
            let (p, stall) = self.ctrl_stall;
            if p > 0.0 && rng.gen_bool(p) {
                at += stall;
            }
        }
        let last = if to_receiver {
            &mut self.to_r_last
        } else {
            &mut self.to_s_last
        };
        at = at.max(*last);
        *last = at;
        at
    }

    fn lost(&mut self, file_id: u32) {
        *self.losses.entry(file_id).or_default() += 1;
    }

    /// Cuts streams, and tells each end when its turn comes.
    fn kill_streams(&mut self) -> Result<(), Error> {
        for i in 0..self.kills.len() {
            let kill = self.kills[i];
            let k = kill.stream;
            if kill.at == self.now_ms && !self.links[k].dead {
                self.links[k].dead = true;
                let gone: Vec<InFlight> = self.links[k].queue.drain(..).collect();
                for f in gone.iter().filter(|f| !f.corrupt) {
                    self.lost(f.header.file_id);
                }
            }
            if kill.at + kill.sender_after == self.now_ms {
                self.links[k].sender_knows = true;
                self.s.stream_lost(k)?;
            }
            if kill.at + kill.receiver_after == self.now_ms {
                self.r.stream_lost(k)?;
            }
        }
        Ok(())
    }

    /// Writes a block the sender handed to stream `k` onto its link.
    fn send_block(&mut self, k: usize, task: BlockTask) {
        let nth = self.handed_out;
        self.handed_out += 1;
        let mut corrupt =
            self.corrupt.contains(&nth) || self.doomed == Some((task.file_id, task.offset));
        if let Some(rng) = &mut self.rng {
            corrupt |= self.corrupt_p > 0.0 && rng.gen_bool(self.corrupt_p);
        }
        let of_file = self.handed_per_file.entry(task.file_id).or_default();
        let nth_of_file = *of_file;
        *of_file += 1;
        if self.unreadable.get(&task.file_id) == Some(&nth_of_file) {
            corrupt = true;
            self.read_failed.insert(task.file_id);
            let why = Problem {
                code: ErrorCode::Io,
                message: "read error (by the test)".into(),
            };
            self.s.file_failed(task.file_id, why);
        }
        let mut header = BlockHeader {
            flags: if task.repair {
                BlockFlags::REPAIR
            } else {
                BlockFlags::default()
            },
            file_id: task.file_id,
            offset: task.offset,
            length: task.len,
            check: [0; 16],
        };
        let mut payload = Vec::new();
        if let Some(c) = &self.content {
            let src = &c.source[&c.ids[&task.file_id]];
            payload = src[task.offset as usize..][..task.len as usize].to_vec();
            header.check = block_check(&header, &payload);
            if corrupt {
                payload[task.len as usize / 2] ^= 0x40;
            }
        }
        self.s.record_sent(k, u64::from(task.len));
        if corrupt || self.links[k].dead {
            self.lost(task.file_id);
        }
        if self.links[k].dead {
            return;
        }
        let jitter = match &mut self.rng {
            Some(rng) if self.links[k].jitter_ms > 0 => rng.gen_range(0..=self.links[k].jitter_ms),
            _ => 0,
        };
        let link = &mut self.links[k];
        let at = (self.now_ms + link.latency_ms + jitter).max(link.last_at);
        link.last_at = at;
        link.queue.push_back(InFlight {
            at,
            header,
            payload,
            corrupt,
        });
    }

    /// Takes a block the receiver judged worth writing onto "disk".
    fn write_block(&mut self, f: &InFlight) {
        *self.written.entry(f.header.file_id).or_default() += u64::from(f.header.length);
        if let Some(c) = &mut self.content {
            let file = c.disk.entry(f.header.file_id).or_default();
            let end = f.header.offset as usize + f.payload.len();
            if file.len() < end {
                file.resize(end, 0);
            }
            file[f.header.offset as usize..end].copy_from_slice(&f.payload);
        }
    }

    /// The receiver's digests: ready once the whole file is contiguous on
    /// "disk".
    fn receiver_digests(&mut self) -> Result<(), Error> {
        let Some(c) = &mut self.content else {
            for meta in &self.opened {
                if let Some(size) = self.r.final_size(meta.file_id) {
                    if self.r.contiguous_prefix(meta.file_id) == size
                        && !self.finalized.contains(&meta.file_id)
                    {
                        let mut d = digest_for(meta.file_id);
                        if self.bad_digest_for == Some(meta.file_id) {
                            d[0] ^= 1;
                        }
                        self.r.set_digest(meta.file_id, d)?;
                    }
                }
            }
            return Ok(());
        };
        for meta in &self.opened {
            let id = meta.file_id;
            let Some(size) = self.r.final_size(id) else {
                continue;
            };
            if c.digested.contains(&id) || self.r.contiguous_prefix(id) != size {
                continue;
            }
            let bytes = c.disk.get(&id).map_or(&[][..], |d| &d[..size as usize]);
            let mut d = digest_of(bytes);
            if self.bad_digest_for == Some(id) {
                d[0] ^= 1;
            }
            c.digested.insert(id);
            self.r.set_digest(id, d)?;
        }
        Ok(())
    }

    /// Carries out what the receiver asks of its driver.
    fn receiver_actions(&mut self) -> Result<(), Error> {
        while let Some(action) = self.r.poll_action() {
            match action {
                RecvAction::Send(msg) => {
                    if let ControlMsg::BlockRequest { file_id, .. } = &msg {
                        *self.requests.entry(*file_id).or_default() += 1;
                    }
                    let at = self.ctrl_arrival(false);
                    self.to_s.push_back((at, msg));
                }
                RecvAction::CreateDir { path, .. } => self.dirs.push(path.display()),
                RecvAction::Entry(meta) => self.dirs.push(meta.path.display()),
                RecvAction::Drop { file_id } => {
                    if let Some(c) = &mut self.content {
                        c.disk.remove(&file_id);
                    }
                    self.dropped.push(file_id);
                }
                RecvAction::FinishTree => self.r.tree_finished(Vec::new())?,
                RecvAction::OpenFile(meta)
                    if self.refuse.iter().any(|p| meta.path == p.as_str()) =>
                {
                    let why = Problem {
                        code: ErrorCode::PermissionDenied,
                        message: format!("{}: permission denied (refused by the test)", meta.path),
                    };
                    self.r.file_failed(meta.file_id, why)?;
                }
                RecvAction::OpenFile(meta) => {
                    let found = self.existing.as_ref().map(|ex| {
                        ex.iter()
                            .find(|(p, _)| meta.path == p.as_str())
                            .map_or(Existing::Absent, |(_, e)| e.clone())
                    });
                    if found == Some(Existing::Same) {
                        self.r.skip_existing(meta.file_id)?;
                        continue;
                    }
                    let kept = self.kept.iter().find(|(p, _)| meta.path == p.as_str());
                    if let Some(c) = &mut self.content {
                        // The partial copy of an earlier session holds the
                        // kept ranges.
                        let src = &c.source[&meta.path.display()];
                        let file = c.disk.entry(meta.file_id).or_default();
                        file.resize(file.len().max(src.len()), 0);
                        for &(offset, len) in kept.map_or(&[][..], |(_, r)| &r[..]) {
                            let range = offset as usize..(offset + len) as usize;
                            file[range.clone()].copy_from_slice(&src[range]);
                        }
                    }
                    if let Some((_, ranges)) = kept {
                        self.r.resumed(meta.file_id, ranges.clone())?;
                    }
                    if let Some(found) = found {
                        self.r.checked(meta.file_id, found)?;
                    }
                    self.opened.push(meta);
                }
                RecvAction::Finalize { file_id } => {
                    self.finalized.push(file_id);
                    if let Some(c) = &mut self.content {
                        let size = self.r.final_size(file_id).expect("tracked") as usize;
                        let bytes = c.disk.remove(&file_id).unwrap_or_default();
                        c.placed
                            .insert(c.ids[&file_id].clone(), bytes[..size].to_vec());
                    }
                    self.r.finalized(file_id)?;
                }
                RecvAction::KeepExisting { file_id } => {
                    if let Some(c) = &mut self.content {
                        c.disk.remove(&file_id);
                    }
                    self.r.discarded(file_id)?;
                }
            }
        }
        Ok(())
    }

    /// Tells the sender what each live link still holds: its frames on
    /// the way, delivered by the time the newest arrives.
    fn measure_links(&mut self, now: Instant) {
        for (k, link) in self.links.iter().enumerate() {
            if link.dead || link.sender_knows {
                continue;
            }
            let undelivered: u64 = link
                .queue
                .iter()
                .map(|f| u64::from(f.header.length) + tern_proto::data::HEADER_LEN as u64)
                .sum();
            let left_ms = link.last_at.saturating_sub(self.now_ms).max(1);
            let rate = match undelivered {
                0 => f64::from(BS) * link.rate as f64 * 1000.0 / link.period_ms as f64,
                n => n as f64 * 1000.0 / left_ms as f64,
            };
            self.s.stream_measured(k, Flight { undelivered, rate }, now);
        }
    }

    fn step(&mut self) -> Result<(), Error> {
        let now = self.now();
        self.kill_streams()?;
        if self.measure {
            self.measure_links(now);
        }
        // Sender: every stream pulls as many blocks as its rate allows.
        for k in 0..self.links.len() {
            let link = &self.links[k];
            if link.sender_knows || self.now_ms % link.period_ms != 0 {
                continue;
            }
            for _ in 0..link.rate {
                let Some(task) = self.s.next_block(k, now) else {
                    break;
                };
                self.send_block(k, task);
            }
        }
        // Sender control out; digests are "computed" as soon as a file is announced.
        while let Some(msg) = self.s.poll_control() {
            if let ControlMsg::FileAnnounce(meta) = &msg {
                let id = meta.file_id;
                let digest = match &self.content {
                    Some(c) => digest_of(&c.source[&c.ids[&id]]),
                    None => digest_for(id),
                };
                let at = self.ctrl_arrival(true);
                self.to_r.push_back((at, msg));
                self.s.set_digest(id, digest);
                continue;
            }
            let at = self.ctrl_arrival(true);
            self.to_r.push_back((at, msg));
        }
        // Receiver: control first, then data that is due.
        while self.to_r.front().is_some_and(|(at, _)| *at <= self.now_ms) {
            let (_, msg) = self.to_r.pop_front().unwrap();
            self.r.handle_control(msg)?;
        }
        // Files are opened as soon as they are announced, before any of
        // their blocks is written.
        self.receiver_actions()?;
        for k in 0..self.links.len() {
            while let Some(f) = self.links[k].queue.front() {
                if f.at > self.now_ms || !self.r.is_announced(f.header.file_id) {
                    break;
                }
                let f = self.links[k].queue.pop_front().unwrap();
                if f.header.flags.contains(BlockFlags::REPAIR) {
                    self.repair_blocks_seen += 1;
                }
                let check_ok = match &self.content {
                    Some(_) => block_check(&f.header, &f.payload) == f.header.check,
                    None => !f.corrupt,
                };
                assert_eq!(check_ok, !f.corrupt, "the simulated check sees damage");
                if !check_ok {
                    self.corrupt_seen += 1;
                }
                match self.r.handle_block(k, &f.header, check_ok)? {
                    BlockVerdict::Write => {
                        self.write_block(&f);
                        self.r.block_written(k, &f.header)?;
                    }
                    BlockVerdict::Corrupt | BlockVerdict::Duplicate => {}
                }
            }
        }
        self.r.judge_due()?;
        self.receiver_digests()?;
        self.receiver_actions()?;
        while self.to_s.front().is_some_and(|(at, _)| *at <= self.now_ms) {
            let (_, msg) = self.to_s.pop_front().unwrap();
            self.s.handle_control(msg)?;
        }
        Ok(())
    }
}

fn queue(sim: &mut Sim, entries: Vec<SendEntry>) {
    for e in entries {
        sim.s.push(e);
    }
    sim.s.finish_listing();
}

#[test]
fn files_complete_across_streams_with_different_latencies() {
    let mut sim = Sim::new(&[1, 5, 20], &[1, 1, 1], 2);
    queue(
        &mut sim,
        vec![
            SendEntry::Entry(tern_proto::EntryMeta {
                path: "d".into(),
                kind: tern_proto::EntryKind::Dir,
                mode: 0o755,
                mtime_s: 0,
                mtime_ns: 0,
            }),
            Sim::file("d/a", 10_500),
            Sim::file("d/empty", 0),
            Sim::file("d/b", 3_000),
        ],
    );
    sim.run(10_000).unwrap();
    assert_eq!(sim.dirs, vec!["d".to_string()]);
    let done: Vec<_> = sim.r.finished().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(done.len(), 3);
    assert!(done.contains(&"d/empty"));
    assert_eq!(sim.s.finished().len(), 3);
    assert_eq!(sim.r.stream_bytes().iter().sum::<u64>(), 13_500);
    assert_eq!(sim.s.blocks_retransmitted(), 0);
    assert_eq!(sim.s.peer_stream_bytes().unwrap(), sim.r.stream_bytes());
}

#[test]
fn the_session_ends_with_its_last_file_not_a_round_trip_later() {
    // The sender says Close once everything is announced, so the
    // receiver's Close follows its last FileDone at once: the sender is
    // done when that FileDone arrives (it waited two more control trips
    // when Close had to wait for it).
    let mut sim = Sim::new(&[20, 20], &[1, 1], 20);
    queue(&mut sim, vec![Sim::file("a", 5_000), Sim::file("b", 3_000)]);
    let mut last_file_done = None;
    while !(sim.s.is_complete() && sim.r.is_complete()) {
        assert!(sim.now_ms < 10_000, "the simulation did not finish");
        sim.step().unwrap();
        if last_file_done.is_none() && sim.s.finished().len() == 2 {
            last_file_done = Some(sim.now_ms);
            assert!(sim.s.is_complete(), "complete with the last FileDone");
        }
        sim.now_ms += 1;
    }
    assert!(last_file_done.is_some());
    assert_eq!(sim.r.finished().len(), 2);
    assert_eq!(sim.s.peer_stream_bytes().unwrap(), sim.r.stream_bytes());
}

#[test]
fn control_overtaking_data_waits_for_the_stream_marks() {
    // Data takes 50 ms, control 1 ms: FileSent arrives long before the blocks.
    let mut sim = Sim::new(&[50, 50], &[1, 1], 1);
    queue(&mut sim, vec![Sim::file("f", 20_000)]);
    sim.run(10_000).unwrap();
    assert_eq!(
        sim.s.blocks_retransmitted(),
        0,
        "nothing was lost, nothing is re-sent"
    );
    assert_eq!(sim.r.finished()[0].size, 20_000);
}

#[test]
fn faster_streams_carry_more_blocks() {
    let mut sim = Sim::new(&[1, 1], &[4, 1], 1);
    queue(&mut sim, vec![Sim::file("big", 500_000)]);
    sim.run(10_000).unwrap();
    let bytes = sim.r.stream_bytes();
    assert!(bytes[0] > 3 * bytes[1], "per-stream bytes {bytes:?}");
}

#[test]
fn a_corrupt_block_is_requested_again_and_counted() {
    let mut sim = Sim::new(&[3, 7], &[1, 1], 2);
    sim.corrupt = vec![4];
    queue(&mut sim, vec![Sim::file("f", 12_345)]);
    sim.run(10_000).unwrap();
    assert_eq!(sim.r.blocks_corrupt(), 1);
    assert_eq!(sim.s.blocks_retransmitted(), 1);
    assert_eq!(sim.repair_blocks_seen, 1);
    assert_eq!(sim.r.finished().len(), 1);
}

#[test]
fn a_dropped_stream_loses_nothing() {
    let mut sim = Sim::new(&[10, 10, 10], &[1, 1, 1], 1);
    sim.kills = vec![Kill::now(1, 15)];
    queue(
        &mut sim,
        vec![Sim::file("f", 100_000), Sim::file("g", 5_000)],
    );
    sim.run(20_000).unwrap();
    assert!(
        sim.s.blocks_retransmitted() > 0,
        "blocks in flight on the dead stream are re-sent"
    );
    assert_eq!(sim.r.finished().len(), 2);
    let sizes: u64 = sim.r.finished().iter().map(|f| f.size).sum();
    assert_eq!(sizes, 105_000);
}

#[test]
fn losing_every_stream_is_an_error_not_a_hang() {
    let mut sim = Sim::new(&[10], &[1], 1);
    sim.kills = vec![Kill::now(0, 5)];
    queue(&mut sim, vec![Sim::file("f", 100_000)]);
    let err = sim.run(20_000).unwrap_err();
    assert!(matches!(err, Error::PeerGone(_)), "{err}");
}

#[test]
fn a_block_that_stays_corrupt_exhausts_the_repair_rounds() {
    let mut sim = Sim::new(&[1], &[1], 1);
    // Block 0 and every repair of it (handed out as the 3rd, 4th, ... block).
    sim.corrupt = (0..50).filter(|&n| n == 0 || n >= 3).collect();
    queue(&mut sim, vec![Sim::file("f", 3_000)]);
    let err = sim.run(20_000).unwrap_err();
    assert!(matches!(err, Error::TooManyRetries { .. }), "{err}");
}

#[test]
fn a_digest_mismatch_fails_the_file() {
    let mut sim = Sim::new(&[1, 2], &[1, 1], 1);
    sim.bad_digest_for = Some(1);
    queue(&mut sim, vec![Sim::file("f", 5_000)]);
    let err = sim.run(20_000).unwrap_err();
    assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
}

#[test]
fn files_in_flight_are_bounded() {
    let mut sim = Sim::new(&[30], &[8], 1);
    queue(
        &mut sim,
        (0..20)
            .map(|i| Sim::file(&format!("f{i}"), 1_500))
            .collect(),
    );
    let mut most_open = 0;
    while !(sim.s.is_complete() && sim.r.is_complete()) {
        sim.step().unwrap();
        let open = sim.opened.len() - sim.finalized.len();
        most_open = most_open.max(open);
        sim.now_ms += 1;
        assert!(sim.now_ms < 10_000);
    }
    assert!(most_open <= 4, "at most 4 files in flight, saw {most_open}");
    // Over a 30 ms link, one file at a time would leave the link idle a
    // round trip per file: the pipeline keeps more than one open.
    assert!(most_open > 1, "files overlap in flight, saw {most_open}");
    assert_eq!(sim.r.finished().len(), 20);
}

#[test]
fn perf_streams_end_at_the_deadline() {
    let start = Instant::now();
    let mut s = SenderSession::new(SenderConfig {
        streams: 1,
        block_size: BS,
        max_files_in_flight: 1,
        max_repair_rounds: 1,
        deadline: Some(start + Duration::from_millis(10)),
        await_checks: false,
        entries: true,
    });
    s.push(Sim::file("perf", FileMeta::UNKNOWN_SIZE));
    s.finish_listing();
    s.set_digest(1, vec![]);
    let mut handed = 0;
    for ms in 0..20 {
        if s.next_block(0, start + Duration::from_millis(ms)).is_some() {
            handed += 1;
        }
    }
    assert_eq!(handed, 10);
    let sent: Vec<_> = std::iter::from_fn(|| s.poll_control()).collect();
    assert!(
        sent.iter()
            .any(|m| matches!(m, ControlMsg::FileSent { size: 10_000, .. }))
    );
}

#[test]
fn peer_errors_and_nonsense_are_reported() {
    let mut sim = Sim::new(&[1], &[1], 1);
    let err = sim
        .s
        .handle_control(ControlMsg::Error {
            code: ErrorCode::NoSpace,
            message: "disk full".into(),
            file_id: None,
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Peer {
                code: ErrorCode::NoSpace,
                ..
            }
        ),
        "{err}"
    );
    let err = sim
        .s
        .handle_control(ControlMsg::BlockRequest {
            file_id: 99,
            ranges: vec![(0, 1)],
        })
        .unwrap_err();
    assert!(matches!(err, Error::Protocol(_)), "{err}");
    // A repair range that is not block-aligned is refused.
    let mut sim = Sim::new(&[1], &[1], 1);
    queue(&mut sim, vec![Sim::file("f", 5_000)]);
    for _ in 0..5 {
        sim.s.next_block(0, sim.now()).unwrap();
    }
    sim.s.set_digest(1, vec![1]);
    let err = sim
        .s
        .handle_control(ControlMsg::BlockRequest {
            file_id: 1,
            ranges: vec![(500, 1000)],
        })
        .unwrap_err();
    assert!(err.to_string().contains("block-aligned"), "{err}");
    let bogus = BlockHeader {
        flags: BlockFlags::default(),
        file_id: 42,
        offset: 0,
        length: 10,
        check: [0; 16],
    };
    assert!(sim.r.handle_block(0, &bogus, true).is_err());
}

#[test]
fn a_resumed_file_is_not_sent_again() {
    // 1 stream of 1 block per ms, control 5 ms away: the sender hands out a
    // few blocks before the receiver's FileHave arrives, then skips.
    let mut sim = Sim::new(&[3], &[1], 5);
    sim.kept = vec![("a".into(), vec![(0, 12 * 1000), (15_000, 5 * 1000 - 1)])];
    queue(
        &mut sim,
        vec![Sim::file("a", 20 * 1000 - 1), Sim::file("b", 3000)],
    );
    sim.run(1000).unwrap();
    assert_eq!(sim.finalized, vec![1, 2]);
    assert_eq!(sim.s.bytes_resumed(), 17_000 - 1);
    assert_eq!(sim.r.bytes_resumed(), 17_000 - 1);
    // 3 blocks of `a` were missing, 3 blocks of `b`; what went out twice
    // is bounded by the control round trip: 10 ms + 1 at one block per ms.
    // Without FileHave all 23 blocks would go.
    assert!(
        sim.handed_out >= 6 && sim.handed_out <= 6 + 11,
        "{}",
        sim.handed_out
    );
}

#[test]
fn a_file_held_entirely_completes_without_data() {
    let mut sim = Sim::new(&[0], &[1], 0);
    sim.kept = vec![("a".into(), vec![(0, 4000)])];
    queue(&mut sim, vec![Sim::file("a", 4000)]);
    sim.run(100).unwrap();
    assert_eq!(sim.finalized, vec![1]);
    // Only the block handed out before FileHave arrived went out.
    assert_eq!(sim.handed_out, 1);
}

#[test]
fn a_file_have_that_does_not_fit_is_a_protocol_error() {
    let mut s = one_stream_sender(false);
    s.push(Sim::file("a", 5000));
    s.finish_listing();
    for ranges in [
        vec![(1, 1000)],
        vec![(0, 6000)],
        vec![(0, 500)],
        vec![(0, 0)],
    ] {
        let err = s
            .handle_control(ControlMsg::FileHave { file_id: 1, ranges })
            .unwrap_err();
        assert!(matches!(err, Error::Protocol(_)), "{err}");
    }
    assert!(
        s.handle_control(ControlMsg::FileHave {
            file_id: 9,
            ranges: vec![]
        })
        .is_err()
    );
}

#[test]
fn block_set_tracks_runs() {
    let mut set = BlockSet::default();
    assert!(set.insert(0));
    assert!(!set.insert(0));
    set.insert(1);
    set.insert(3);
    set.insert(200);
    assert_eq!(set.run_from(0), 2);
    assert_eq!(set.run_from(3), 1);
    assert!(set.contains(200) && !set.contains(199));
}

fn one_stream_sender(await_checks: bool) -> SenderSession {
    SenderSession::new(SenderConfig {
        streams: 1,
        block_size: BS,
        max_files_in_flight: 4,
        max_repair_rounds: 3,
        deadline: None,
        await_checks,
        entries: true,
    })
}

fn paths(files: &[FileOutcome]) -> Vec<&str> {
    let mut p: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    p.sort_unstable();
    p
}

#[test]
fn files_the_receiver_has_are_skipped_without_a_block_sent() {
    // Ids are given in push order: a=1, b=2, c=3, d=4, e=5.
    let mut sim = Sim::new(&[2, 6], &[1, 1], 3).checking(vec![
        ("a".into(), Existing::Same),
        ("c".into(), Existing::Digest(digest_for(3))),
        ("d".into(), Existing::Digest(vec![9, 9, 9, 9])),
        ("e".into(), Existing::Same),
    ]);
    queue(
        &mut sim,
        vec![
            Sim::file("a", 5_000),
            Sim::file("b", 3_500),
            Sim::file("c", 7_000),
            Sim::file("d", 2_000),
            Sim::file("e", 0),
        ],
    );
    sim.run(10_000).unwrap();
    assert_eq!(paths(sim.s.skipped()), vec!["a", "c", "e"]);
    assert_eq!(paths(sim.r.skipped()), vec!["a", "c", "e"]);
    assert_eq!(paths(sim.s.finished()), vec!["b", "d"]);
    assert_eq!(paths(sim.r.finished()), vec!["b", "d"]);
    assert_eq!(sim.handed_out, 4 + 2, "only the blocks of b and d went out");
    assert_eq!(sim.r.stream_bytes().iter().sum::<u64>(), 5_500);
}

#[test]
fn no_block_is_handed_out_before_the_receiver_has_looked() {
    let mut sim = Sim::new(&[1], &[1], 40).checking(vec![]);
    queue(&mut sim, vec![Sim::file("f", 4_000)]);
    // The announcement takes 40 ms out and the answer 40 ms back.
    while sim.now_ms < 79 {
        sim.step().unwrap();
        assert_eq!(sim.handed_out, 0, "at {} ms", sim.now_ms);
        sim.now_ms += 1;
    }
    sim.run(10_000).unwrap();
    assert_eq!(sim.handed_out, 4);
    assert_eq!(paths(sim.r.finished()), vec!["f"]);
}

#[test]
fn file_checks_out_of_turn_are_protocol_errors() {
    let check = |existing| ControlMsg::FileCheck {
        file_id: 1,
        existing,
    };
    let mut s = one_stream_sender(true);
    s.push(Sim::file("f", 10));
    s.finish_listing();
    s.handle_control(check(Existing::Absent)).unwrap();
    let twice = s.handle_control(check(Existing::Same)).unwrap_err();
    assert!(matches!(twice, Error::Protocol(_)), "{twice}");
    let unknown = s
        .handle_control(ControlMsg::FileCheck {
            file_id: 9,
            existing: Existing::Absent,
        })
        .unwrap_err();
    assert!(matches!(unknown, Error::Protocol(_)), "{unknown}");
    let mut unasked = one_stream_sender(false);
    unasked.push(Sim::file("f", 10));
    unasked.finish_listing();
    let e = unasked.handle_control(check(Existing::Absent)).unwrap_err();
    assert!(
        matches!(e, Error::Protocol(_)),
        "no skip policy, no FileCheck: {e}"
    );
}

#[test]
fn a_skipped_file_is_never_read_for_its_digest() {
    let mut s = one_stream_sender(true);
    s.push(Sim::file("kept", 10_000));
    s.push(Sim::file("sent", 10_000));
    s.push(Sim::file("compared", 10_000));
    s.finish_listing();
    assert_eq!(s.digest_need(1), DigestNeed::Wait);
    s.handle_control(ControlMsg::FileCheck {
        file_id: 1,
        existing: Existing::Same,
    })
    .unwrap();
    assert_eq!(s.digest_need(1), DigestNeed::None);
    s.handle_control(ControlMsg::FileCheck {
        file_id: 2,
        existing: Existing::Absent,
    })
    .unwrap();
    assert_eq!(s.digest_need(2), DigestNeed::Compute);
    s.handle_control(ControlMsg::FileCheck {
        file_id: 3,
        existing: Existing::Digest(vec![1]),
    })
    .unwrap();
    assert_eq!(
        s.digest_need(3),
        DigestNeed::Read,
        "needed to compare first"
    );
}

#[test]
fn many_small_files_are_announced_ahead_but_large_ones_only_a_few() {
    let announced = |size: u64| {
        let mut s = SenderSession::new(SenderConfig {
            streams: 1,
            block_size: BS,
            max_files_in_flight: 256,
            max_repair_rounds: 3,
            deadline: None,
            await_checks: false,
            entries: true,
        });
        for i in 0..1000 {
            s.push(Sim::file(&format!("f{i}"), size));
        }
        s.finish_listing();
        std::iter::from_fn(|| s.poll_control())
            .filter(|m| matches!(m, ControlMsg::FileAnnounce(_)))
            .count()
    };
    // 256 × 16 KiB is 4 MiB: the count is the limit.
    assert_eq!(announced(16 << 10), 256);
    // 1 GiB files: past FEW_FILES the bytes are.
    assert_eq!(announced(1 << 30), FEW_FILES);
    // 1 MiB files: until 64 MiB are in flight.
    assert_eq!(announced(1 << 20), (BYTES_IN_FLIGHT / (1 << 20)) as usize);
}

fn failure_paths(failed: &[EntryFailure]) -> Vec<(String, bool)> {
    failed
        .iter()
        .map(|f| (f.path.display(), f.by_peer))
        .collect()
}

#[test]
fn a_file_the_receiver_cannot_create_is_reported_and_the_rest_arrive() {
    let mut sim = Sim::new(&[1, 3], &[1, 1], 2);
    sim.refuse = vec!["d/b".into()];
    queue(
        &mut sim,
        vec![
            Sim::file("d/a", 3_000),
            Sim::file("d/b", 5_000),
            Sim::file("d/c", 2_000),
        ],
    );
    sim.run(10_000).unwrap();
    assert_eq!(paths(sim.r.finished()), vec!["d/a", "d/c"]);
    assert_eq!(sim.s.finished().len(), 2);
    assert_eq!(failure_paths(sim.r.failed()), vec![("d/b".into(), false)]);
    assert_eq!(failure_paths(sim.s.failed()), vec![("d/b".into(), true)]);
    assert_eq!(
        sim.s.failed()[0].code,
        tern_proto::ErrorCode::PermissionDenied
    );
}

#[test]
fn a_file_the_sender_cannot_read_is_dropped_by_the_receiver() {
    let mut sim = Sim::new(&[1], &[1], 2);
    queue(
        &mut sim,
        vec![
            Sim::file("a", 3_000),
            Sim::file("b", 30_000),
            Sim::file("c", 10),
        ],
    );
    // File 2 turns out unreadable after it was announced.
    let gone = Problem {
        code: ErrorCode::PermissionDenied,
        message: "b: permission denied".into(),
    };
    sim.s.file_failed(2, gone);
    sim.run(10_000).unwrap();
    assert_eq!(paths(sim.r.finished()), vec!["a", "c"]);
    assert_eq!(failure_paths(sim.s.failed()), vec![("b".into(), false)]);
    assert_eq!(failure_paths(sim.r.failed()), vec![("b".into(), true)]);
    assert!(sim.r.was_given_up(2));
}

#[test]
fn an_older_receiver_is_sent_no_links_pipes_or_names_it_cannot_decode() {
    let mut s = SenderSession::new(SenderConfig {
        streams: 1,
        block_size: BS,
        max_files_in_flight: 4,
        max_repair_rounds: 3,
        deadline: None,
        await_checks: false,
        entries: false,
    });
    let entry = |path: &[u8], kind| {
        SendEntry::Entry(tern_proto::EntryMeta {
            path: tern_proto::RelPath(path.to_vec()),
            kind,
            mode: 0o755,
            mtime_s: 0,
            mtime_ns: 0,
        })
    };
    s.push(entry(b"d", tern_proto::EntryKind::Dir));
    s.push(entry(
        b"d/link",
        tern_proto::EntryKind::Symlink { target: "x".into() },
    ));
    s.push(entry(b"d/pipe", tern_proto::EntryKind::Fifo));
    s.push(entry(b"d/caf\xe9", tern_proto::EntryKind::Dir));
    s.push(SendEntry::File(FileMeta {
        file_id: 0,
        path: tern_proto::RelPath(b"d/f\xff".to_vec()),
        size: 0,
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
    }));
    s.finish_listing();
    let sent: Vec<ControlMsg> = std::iter::from_fn(|| s.poll_control()).collect();
    assert!(
        matches!(&sent[..], [ControlMsg::DirAnnounce { path, mode: 0o755 }, ControlMsg::Close { .. }] if *path == "d"),
        "{sent:?}"
    );
    let failed: Vec<String> = s.failed().iter().map(|f| f.path.display()).collect();
    assert_eq!(failed, vec!["d/link", "d/pipe", "d/caf\\xe9", "d/f\\xff"]);
    assert!(s.failed().iter().all(|f| !f.by_peer));
}

#[test]
fn a_file_the_receiver_partly_keeps_is_read_for_its_digest() {
    let mut s = one_stream_sender(false);
    let bs = u64::from(BS);
    s.push(Sim::file("resumed", 3 * bs));
    s.push(Sim::file("fresh", 3 * bs));
    s.finish_listing();
    assert_eq!(s.digest_need(1), DigestNeed::Compute);
    s.handle_control(ControlMsg::FileHave {
        file_id: 1,
        ranges: vec![(0, bs)],
    })
    .unwrap();
    assert_eq!(
        s.digest_need(1),
        DigestNeed::Read,
        "its first block is never read: the blocks read for sending cannot make its digest"
    );
    assert_eq!(s.digest_need(2), DigestNeed::Compute);
}
