//! The daemons' side of third-party copies (PROTOCOL.md §8.13): a
//! client's `TpcOpen` is judged here (the delegation by the ledger of
//! `tern_session::delegation`, the client's right to read or write what it
//! covers by the same rules as its own pull or push). Each end then keeps
//! what it prepared, for whichever comes first:
//! - the other daemon presents the delegation and this end's ticket on a
//!   connection of its own (`PeerOpen`): that session takes it;
//! - the client tells this end to dial (`TpcDial`): it runs the session
//!   with the other (`conn::tpc::dial`), a pull at the destination or a
//!   push at the source, and reports progress and the end to the client;
//!   when it cannot reach the other at all it says so and keeps its end;
//! - the client goes: what was prepared is dropped, and a dial running
//!   stops.

use std::collections::HashMap;

use tern_proto::ControlMsg;
use tern_proto::delegation::{Delegation, SignedDelegation, TpcRole};
use tern_session::delegation::{Connection, Ledger, Refusal};
use tern_session::open::PeerPass;

use super::*;
use std::sync::atomic::Ordering;

use crate::conn::client::ClientOptions;
use crate::conn::tpc::{DialError, Dialing, apply_session, dial, now_ms};

/// One end of one copy: the delegation's nonce, and which end.
type End = ([u8; 16], TpcRole);

/// What a daemon keeps of the third-party copies it takes part in.
#[derive(Debug, Default)]
pub(crate) struct Tpc {
    ledger: Mutex<Ledger>,
    /// Each end's role prepared under the client's grants, by delegation
    /// nonce and end, until used.
    waiting: Mutex<HashMap<End, Role>>,
    /// Each end's stop: set when its client goes, so that a session the
    /// other end opened with it stops too.
    stops: Mutex<HashMap<End, tokio::sync::watch::Sender<bool>>>,
}

impl std::fmt::Debug for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Send(..) => "Send",
            Role::Receive(_) => "Receive",
        })
    }
}

impl Tpc {
    /// The other daemon presents `pass` on a connection where it showed
    /// the certificate `shown`: admitted once, for the end its ticket was
    /// given for, if it is the daemon the delegation names.
    pub(super) fn present(
        &self,
        pass: &PeerPass,
        shown: Option<&str>,
    ) -> std::result::Result<(TpcRole, Delegation), Refusal> {
        self.ledger
            .lock()
            .expect("ledger")
            .present(&pass.delegation, &pass.ticket, now_ms(), shown)
    }

    /// What this end prepared for the delegation `nonce`.
    pub(super) fn take(&self, nonce: &[u8; 16], role: TpcRole) -> Result<Role> {
        self.waiting
            .lock()
            .expect("waiting")
            .remove(&(*nonce, role))
            .ok_or_else(|| Error::Unauthorized("the copy is given up or under way".into()))
    }

    fn hold(&self, nonce: [u8; 16], role: TpcRole, prepared: Role) {
        self.waiting
            .lock()
            .expect("waiting")
            .entry((nonce, role))
            .or_insert(prepared);
    }

    /// What tells the session the other end opened with this one that
    /// the client went.
    pub(super) fn stop_of(
        &self,
        nonce: &[u8; 16],
        role: TpcRole,
    ) -> Option<tokio::sync::watch::Receiver<bool>> {
        let stops = self.stops.lock().expect("stops");
        stops.get(&(*nonce, role)).map(|tx| tx.subscribe())
    }

    fn holds(&self, nonce: &[u8; 16], role: TpcRole) -> bool {
        self.waiting
            .lock()
            .expect("waiting")
            .contains_key(&(*nonce, role))
    }
}

/// What the TLS handshake tells of a control connection.
#[derive(Debug, Clone, Default)]
pub(super) struct ConnFacts {
    /// The third-party-copy binding it exports.
    pub binding: Option<[u8; 32]>,
    /// The client certificate's fingerprint, if one was shown.
    pub client: Option<String>,
}

impl ConnFacts {
    pub(super) fn of(tls: &ServerTls) -> ConnFacts {
        let conn = tls.get_ref().1;
        let mut binding = [0u8; 32];
        let bound = conn
            .export_keying_material(&mut binding, tern_proto::delegation::BINDING_LABEL, None)
            .is_ok();
        ConnFacts {
            binding: bound.then_some(binding),
            client: conn
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|c| crate::conn::tls::fingerprint(c)),
        }
    }
}

/// A client asks this daemon to be `role` of a copy under `signed`.
pub(super) async fn serve_control(
    ctx: &Context,
    (mut control, mut opening): (Control, ServerOpen),
    (role, signed): (TpcRole, SignedDelegation),
    authorization: &Authorization,
    facts: &ConnFacts,
    handshaking: Handshaking,
    claim: Option<Claim<'_>>,
) -> Result<()> {
    let peer = handshaking.peer;
    let Some(binding) = facts.binding else {
        let e = Error::Tls("cannot export keying material".into());
        return Err(open::refuse(&mut control, e, Linger::No).await);
    };
    let refused = |r: Refusal| {
        tracing::warn!("{peer}: third-party copy refused: {r}");
        Error::Unauthorized(r.to_string())
    };
    // What it covers, read first so that the client's rights and its
    // address's share are judged before the ledger remembers anything.
    let d = match tern_session::delegation::verify(&signed) {
        Ok(d) => d,
        Err(r) => return Err(open::refuse(&mut control, refused(r), Linger::No).await),
    };
    let mode = tern_session::delegation::session_at(&d, role);
    // The client's own rights decide, as for a pull or push of its own.
    let asked = SessionOpen {
        mode,
        streams: 1,
        block_size: MIN_BLOCK_SIZE,
        checksum: tern_proto::ChecksumAlg::Blake3,
        protect: Protect::Clear,
    };
    let prepared = match prepare_role(ctx, &asked, authorization) {
        Ok(r) => r,
        Err(e) => return Err(open::refuse(&mut control, e, Linger::No).await),
    };
    let Ok(_slot) = handshaking.handshake.authenticate(1) else {
        let e = Error::Unauthorized(format!(
            "{} already holds the most sessions one address may",
            peer.ip().to_canonical()
        ));
        return Err(open::refuse(&mut control, e, Linger::No).await);
    };
    // An end held counts as a session, as any other.
    let _permit = ctx.sessions.acquire().await;
    let ticket: Token = rand::random();
    let conn = Connection {
        role,
        own_fingerprint: &ctx.fingerprint,
        binding,
        client: facts.client.as_deref(),
        knows_clients: ctx.opts.site.is_some(),
        now_ms: now_ms(),
    };
    let accepted = ctx
        .tpc
        .ledger
        .lock()
        .expect("ledger")
        .accept(&signed, &conn, ticket);
    if let Err(r) = accepted {
        return Err(open::refuse(&mut control, refused(r), Linger::No).await);
    }
    let addresses = handshaking.local.map_or_else(Vec::new, |local| {
        ctx.opts
            .advertise
            .for_client(ctx.bound.get().copied(), local)
    });
    // Held before the client hears of it: it may have the other end
    // present the delegation at once.
    ctx.tpc.hold(d.nonce, role, prepared);
    let (stop, _) = tokio::sync::watch::channel(false);
    ctx.tpc
        .stops
        .lock()
        .expect("stops")
        .insert((d.nonce, role), stop.clone());
    opening.accept_tpc(ticket, &addresses);
    let told = open::flush(&mut control, &mut opening).await;
    tracing::info!(
        "{peer}: third-party copy accepted as the {}: {}",
        if role == TpcRole::Source {
            "source"
        } else {
            "destination"
        },
        describe(&d)
    );
    let served = match told {
        Ok(()) => serve_end(ctx, control, &d, signed, role).await,
        Err(e) => Err(e),
    };
    // The client is gone or done: nothing of this end outlives it.
    ctx.tpc
        .waiting
        .lock()
        .expect("waiting")
        .remove(&(d.nonce, role));
    ctx.tpc
        .stops
        .lock()
        .expect("stops")
        .remove(&(d.nonce, role));
    if !matches!(served, Ok(Ended::Closed)) {
        let _ = stop.send(true);
    }
    // A once server's one session was this copy: done when it dialed and
    // copied, or when the client says the copy it was dialed for ended.
    if let (Ok(Ended::Copied | Ended::Closed), Some(claim)) = (&served, claim) {
        claim.succeeded();
    }
    served.map(|_| ())
}

fn describe(d: &Delegation) -> String {
    format!(
        "{} from {} to {} at {}",
        d.sources.join(", "),
        d.source.name,
        d.dest_path,
        d.dest.name
    )
}

/// How an end's control connection with the client ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The client said it is done: the copy ended at the other end, and a
    /// session the other opened with this one finishes.
    Closed,
    /// This end dialed, and the copy is done.
    Copied,
    /// The client went without a word.
    ClientGone,
}

/// A copy that left entries behind is no success to tell the client
/// (`TpcDone` has no word for them): its failures, as one error, with the
/// code they share (else an I/O error's).
fn entries_failed(stats: &crate::transfer::TransferStats) -> Option<ControlMsg> {
    let first = stats.failed.first()?;
    let shared = stats.failed.iter().all(|f| f.code == first.code);
    let code = if shared {
        first.code
    } else {
        tern_proto::ErrorCode::Io
    };
    let others = match stats.files.len() {
        0 => String::new(),
        1 => "; 1 other file was copied".to_string(),
        n => format!("; {n} other files were copied"),
    };
    let message = match stats.failed.len() {
        1 => format!("{}: {}{others}", first.path, first.message),
        n => format!(
            "{n} entries could not be copied, the first {}: {}{others}",
            first.path, first.message
        ),
    };
    Some(tern_session::open::refusal(code, message))
}

/// One end's control connection with the client after it accepted:
/// dial when told (again after the other end was unreachable), until the
/// client goes or the copy ends.
async fn serve_end(
    ctx: &Context,
    control: Control,
    d: &Delegation,
    signed: SignedDelegation,
    role: TpcRole,
) -> Result<Ended> {
    let (mut rd, mut wr) = control.split();
    // While this end waits to be used, it waits no longer than the
    // delegation may be presented; once the other end's session took it,
    // as long as the client stays.
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(
            d.not_after_ms
                .saturating_sub(now_ms())
                .saturating_add(tern_session::delegation::MAX_SKEW_MS),
        );
    let mut dialed = false;
    loop {
        let next = if ctx.tpc.holds(&d.nonce, role) {
            match tokio::time::timeout_at(deadline, rd.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    let e = Error::Unauthorized("the delegation expired unused".into());
                    let _ = wr
                        .send(&tern_session::open::refusal(e.wire_code(), e.to_string()))
                        .await;
                    return Err(e);
                }
            }
        } else {
            rd.recv().await
        };
        let (host, port, mut addresses, ticket, session) = match next {
            Ok(ControlMsg::TpcDial {
                host,
                port,
                addresses,
                ticket,
                session,
            }) => (host, port, addresses, ticket, session),
            // The client went, or is done with this end.
            // The client said it is done (the copy ended at the other
            // end): a session that end opened with this one finishes.
            Ok(ControlMsg::Close { .. }) => return Ok(Ended::Closed),
            // The client went.
            Err(_) => return Ok(Ended::ClientGone),
            Ok(other) => {
                return Err(Error::Protocol(format!(
                    "expected TpcDial, got {:?}",
                    std::mem::discriminant(&other)
                )));
            }
        };
        // One dial per end: a client may not make a daemon knock on door
        // after door.
        if std::mem::replace(&mut dialed, true) {
            let e = Error::BadRequest("this end has dialed once already".into());
            let _ = wr
                .send(&tern_session::open::refusal(e.wire_code(), e.to_string()))
                .await;
            return Err(e);
        }
        addresses.truncate(tern_proto::MAX_PATHS);
        let mut opts = ClientOptions::new(crate::conn::trust::Trust::Any);
        opts.client_cert = Some(ctx.dial_cert.clone());
        opts.connect_timeout = Duration::from_secs(10);
        if let Err(e) = apply_session(&mut opts, &session) {
            let _ = wr
                .send(&tern_session::open::refusal(e.wire_code(), e.to_string()))
                .await;
            return Err(e);
        }
        let prepared = match ctx.tpc.take(&d.nonce, role) {
            Ok(p) => p,
            Err(e) => {
                let _ = wr
                    .send(&tern_session::open::refusal(e.wire_code(), e.to_string()))
                    .await;
                return Err(e);
            }
        };
        let dialing = match &prepared {
            Role::Receive(sink) => Dialing::Pull(sink.clone()),
            Role::Send(source, _) => Dialing::Push(source.clone()),
        };
        let progress = Arc::new(Progress::default());
        // Listed among this daemon's sessions, as the other end lists the
        // one it takes (without per-stream detail: the streams are the
        // dialer's client side).
        let live = ctx.opts.live.as_ref().map(|l| {
            let mut shown = TransferParams::new(opts.streams, opts.block_size, opts.checksum);
            shown.max_streams = opts.max_streams;
            shown.tuning = opts.tuning.clone();
            // Where it will connect is known once it has; the name the
            // client gave, until then (never the addresses it listed).
            let other = format!("{host}:{port}")
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], port)));
            let sends = matches!(dialing, Dialing::Push(_));
            l.begin(
                other,
                (sends, Some(LiveTpc::of(role, true))),
                Vec::new(),
                LiveTuning::of(&shown),
                progress.clone(),
            )
        });
        let pass = PeerPass {
            delegation: signed.clone(),
            ticket,
        };
        let at = (host.as_str(), port, addresses.as_slice());
        let session = dial(d, at, pass, opts, dialing, progress.clone());
        tokio::pin!(session);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let outcome = loop {
            tokio::select! {
                done = &mut session => break done,
                _ = tick.tick() => {
                    let report = ControlMsg::TpcProgress {
                        bytes: progress.bytes.load(Ordering::Relaxed),
                        total: progress.total.load(Ordering::Relaxed),
                        files_done: progress.files_done.load(Ordering::Relaxed),
                    };
                    if wr.send(&report).await.is_err() {
                        return Err(Error::PeerGone("the client went away; the copy stops".into()));
                    }
                }
                // Anything from the client now, its leaving included, stops it.
                _ = rd.recv() => {
                    return Err(Error::PeerGone("the client went away; the copy stops".into()));
                }
            }
        };
        match outcome {
            Ok(o) => {
                if let Some(live) = live {
                    if let Some(peer) = o.peer {
                        live.reached(peer);
                    }
                    live.completed(&o.stats);
                }
                if let Some(refusal) = entries_failed(&o.stats) {
                    tracing::warn!("third-party copy: {refusal:?}");
                    wr.send(&refusal).await?;
                    return Ok(Ended::Copied);
                }
                let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
                let done = ControlMsg::TpcDone {
                    bytes: o.stats.bytes,
                    files: o.stats.files.len() as u64,
                    streams: o.streams,
                    network_elapsed_ms: o.stats.network_elapsed.as_millis() as u64,
                    dialer_address: o.local.unwrap_or(unknown),
                    peer_address: o.peer.unwrap_or(unknown),
                    bytes_resumed: o.stats.bytes_resumed,
                };
                return wr.send(&done).await.map(|()| Ended::Copied);
            }
            Err(unreached @ (DialError::Unreachable(_) | DialError::Refused(_))) => {
                // No session: nobody answered, or the other daemon would
                // not let this one in.
                if let Some(live) = live {
                    live.forget();
                }
                // Nothing was presented: this end is still whole. The
                // client learns that, not what answered where.
                tracing::warn!("third-party copy: {unreached}");
                ctx.tpc.hold(d.nonce, role, prepared);
                let reason = match unreached {
                    DialError::Refused(_) => format!(
                        "the other daemon refused this end's certificate{}",
                        if ctx.once.is_some() {
                            " (a tern started over ssh has none that a site's CA issued)"
                        } else {
                            ""
                        }
                    ),
                    _ => format!(
                        "no connection to the other daemon at any of the {} address(es) given",
                        addresses.len() + 1
                    ),
                };
                wr.send(&ControlMsg::TpcUnreachable { reason }).await?;
            }
            Err(DialError::Failed(e)) => {
                tracing::warn!("third-party copy failed: {e}");
                // Whoever answered at an address the client gave, if it was
                // not the daemon the delegation names, is not described (the
                // named daemon refusing this end's certificate is a
                // `DialError::Refused`, above).
                let told = match e.kind() {
                    crate::ErrorKind::Connect | crate::ErrorKind::Security => Error::Tls(
                        "the other daemon did not prove to be the one the delegation names".into(),
                    ),
                    _ => e,
                };
                // The other daemon's own words are said as its, naming it
                // (the client would otherwise blame this one: a source
                // file missing at the source, said by the destination).
                let message = match &told {
                    Error::Peer { message, .. } => format!(
                        "the {} daemon ({host}:{port}): {message}",
                        match role {
                            TpcRole::Source => "destination",
                            TpcRole::Dest => "source",
                        }
                    ),
                    other => other.to_string(),
                };
                let _ = wr
                    .send(&tern_session::open::refusal(told.wire_code(), message))
                    .await;
                return Err(told);
            }
        }
    }
}
