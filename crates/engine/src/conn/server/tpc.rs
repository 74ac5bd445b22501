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
use crate::conn::tpc::{DialError, Dialing, dial, now_ms};

/// What a daemon keeps of the third-party copies it takes part in.
#[derive(Debug, Default)]
pub(crate) struct Tpc {
    ledger: Mutex<Ledger>,
    /// Each end's role prepared under the client's grants, by delegation
    /// nonce and end, until used.
    waiting: Mutex<HashMap<([u8; 16], TpcRole), Role>>,
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
    /// The other daemon presents `pass`: admitted once, for the end its
    /// ticket was given for.
    pub(super) fn present(
        &self,
        pass: &PeerPass,
    ) -> std::result::Result<(TpcRole, Delegation), Refusal> {
        self.ledger
            .lock()
            .expect("ledger")
            .present(&pass.delegation, &pass.ticket, now_ms())
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
            .insert((nonce, role), prepared);
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
    pub(super) fn of(tls: &tokio_rustls::server::TlsStream<TcpStream>) -> ConnFacts {
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
    mut control: Control,
    mut opening: ServerOpen,
    (role, signed): (TpcRole, SignedDelegation),
    authorization: &Authorization,
    facts: &ConnFacts,
    handshaking: Handshaking,
) -> Result<()> {
    let peer = handshaking.peer;
    if ctx.once.is_some() {
        let e = Error::Unauthorized("a server started over ssh takes no third-party copies".into());
        return Err(open::refuse(&mut control, e, Linger::No).await);
    }
    let Some(binding) = facts.binding else {
        let e = Error::Tls("cannot export keying material".into());
        return Err(open::refuse(&mut control, e, Linger::No).await);
    };
    let ticket: Token = rand::random();
    let conn = Connection {
        role,
        own_fingerprint: &ctx.fingerprint,
        binding,
        client: facts.client.as_deref(),
        now_ms: now_ms(),
    };
    let accepted = ctx
        .tpc
        .ledger
        .lock()
        .expect("ledger")
        .accept(&signed, &conn, ticket);
    let d = match accepted {
        Ok(d) => d,
        Err(r) => {
            tracing::warn!("{peer}: third-party copy refused: {r}");
            let e = Error::Unauthorized(r.to_string());
            return Err(open::refuse(&mut control, e, Linger::No).await);
        }
    };
    let mode = match role {
        TpcRole::Source => SessionMode::Pull {
            sources: d.sources.clone(),
            recursive: d.recursive,
        },
        TpcRole::Dest => SessionMode::Push {
            dest: d.dest_path.clone(),
            top_level: d.top_level,
        },
    };
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
    let addresses = handshaking.local.map_or_else(Vec::new, |local| {
        ctx.opts
            .advertise
            .for_client(ctx.bound.get().copied(), local)
    });
    opening.accept_tpc(ticket, &addresses);
    open::flush(&mut control, &mut opening).await?;
    tracing::info!(
        "{peer}: third-party copy accepted as the {}: {}",
        if role == TpcRole::Source {
            "source"
        } else {
            "destination"
        },
        describe(&d)
    );
    ctx.tpc.hold(d.nonce, role, prepared);
    let served = serve_end(ctx, control, &d, signed, role).await;
    ctx.tpc
        .waiting
        .lock()
        .expect("waiting")
        .remove(&(d.nonce, role));
    served
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

/// One end's control connection with the client after it accepted:
/// dial when told (again after the other end was unreachable), until the
/// client goes or the copy ends.
async fn serve_end(
    ctx: &Context,
    control: Control,
    d: &Delegation,
    signed: SignedDelegation,
    role: TpcRole,
) -> Result<()> {
    let (mut rd, mut wr) = control.split();
    loop {
        let (host, port, addresses, ticket) = match rd.recv().await {
            Ok(ControlMsg::TpcDial {
                host,
                port,
                addresses,
                ticket,
            }) => (host, port, addresses, ticket),
            // The client went, or is done with this end.
            Err(_) | Ok(ControlMsg::Close { .. }) => return Ok(()),
            Ok(other) => {
                return Err(Error::Protocol(format!(
                    "expected TpcDial, got {:?}",
                    std::mem::discriminant(&other)
                )));
            }
        };
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
        let mut opts = ClientOptions::new(crate::conn::trust::Trust::Any);
        opts.client_cert = Some(ctx.dial_cert.clone());
        opts.connect_timeout = Duration::from_secs(10);
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
                let unknown = SocketAddr::from(([0, 0, 0, 0], 0));
                let done = ControlMsg::TpcDone {
                    bytes: o.stats.bytes,
                    files: o.stats.files.len() as u64,
                    streams: o.streams,
                    network_elapsed_ms: o.stats.network_elapsed.as_millis() as u64,
                    dialer_address: o.local.unwrap_or(unknown),
                    peer_address: o.peer.unwrap_or(unknown),
                };
                return wr.send(&done).await;
            }
            Err(DialError::Unreachable(reason)) => {
                // Nothing was presented: this end is still whole.
                ctx.tpc.hold(d.nonce, role, prepared);
                wr.send(&ControlMsg::TpcUnreachable { reason }).await?;
            }
            Err(DialError::Failed(e)) => {
                let _ = wr
                    .send(&tern_session::open::refusal(e.wire_code(), e.to_string()))
                    .await;
                return Err(e);
            }
        }
    }
}
