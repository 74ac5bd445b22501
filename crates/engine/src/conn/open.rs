//! The pump between a control channel and an opening state machine of
//! `tern-session` ([`ClientOpen`], [`ServerOpen`]).
//!
//! The state machines decide what to send and whether what came is right;
//! this module only moves their messages, with one [`expect`] (send what
//! is queued, then wait for the next event, within a deadline) and one
//! [`refuse`] (tell the peer why, then give the error back).

use std::time::Duration;

use tern_proto::ControlMsg;
use tern_session::open::{ClientAgreed, ClientOpen, ServerEvent, ServerOpen};
use tokio::time::Instant;

use crate::data::transfer::Control;
use crate::{Error, Result};

/// An opening state machine, as the pump sees it.
pub(crate) trait Opening {
    /// What it has to tell the driver.
    type Event;
    /// The next message to send.
    fn poll_transmit(&mut self) -> Option<ControlMsg>;
    /// Takes one received message.
    fn handle(&mut self, msg: ControlMsg) -> tern_session::Result<Option<Self::Event>>;
}

impl Opening for ClientOpen {
    type Event = ClientAgreed;

    fn poll_transmit(&mut self) -> Option<ControlMsg> {
        ClientOpen::poll_transmit(self)
    }

    fn handle(&mut self, msg: ControlMsg) -> tern_session::Result<Option<ClientAgreed>> {
        ClientOpen::handle(self, msg)
    }
}

impl Opening for ServerOpen {
    type Event = ServerEvent;

    fn poll_transmit(&mut self) -> Option<ControlMsg> {
        ServerOpen::poll_transmit(self)
    }

    fn handle(&mut self, msg: ControlMsg) -> tern_session::Result<Option<ServerEvent>> {
        ServerOpen::handle(self, msg)
    }
}

/// What [`expect`] came back with.
#[derive(Debug)]
pub(crate) enum Step<E> {
    /// The machine has news.
    Event(E),
    /// The deadline passed first.
    Expired,
}

/// Sends everything `machine` has queued.
pub(crate) async fn flush<M: Opening>(control: &mut Control, machine: &mut M) -> Result<()> {
    while let Some(msg) = machine.poll_transmit() {
        control.send(&msg).await?;
    }
    Ok(())
}

/// Sends what `machine` has queued, then feeds it what arrives until it
/// has news, or `deadline` (when given) passes. A message the machine
/// refuses ends the opening: its refusal (queued by the machine) is sent
/// before the error is returned.
pub(crate) async fn expect<M: Opening>(
    control: &mut Control,
    machine: &mut M,
    deadline: Option<Instant>,
    linger: Linger,
) -> Result<Step<M::Event>> {
    loop {
        flush(control, machine).await?;
        let received = match deadline {
            Some(at) => match tokio::time::timeout_at(at, control.recv()).await {
                Ok(received) => received,
                Err(_) => return Ok(Step::Expired),
            },
            None => control.recv().await,
        };
        match machine.handle(received?) {
            Ok(Some(event)) => return Ok(Step::Event(event)),
            Ok(None) => {}
            Err(e) => {
                send_refusal(control, machine, linger).await;
                return Err(e.into());
            }
        }
    }
}

/// How a refused peer is let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Linger {
    /// Close at once.
    No,
    /// Read what the peer had already sent (its `SessionOpen`) until it
    /// hangs up, at most this long, so that closing does not reset the
    /// connection before the peer has read why.
    For(Duration),
}

/// Tells the peer why the session cannot go on; always returns `e`.
pub(crate) async fn refuse(control: &mut Control, e: Error, linger: Linger) -> Error {
    let _ = control
        .send(&tern_session::open::refusal(e.wire_code(), e.to_string()))
        .await;
    linger_on(control, linger).await;
    e
}

async fn linger_on(control: &mut Control, linger: Linger) {
    if let Linger::For(most) = linger {
        let drain = async { while control.recv().await.is_ok() {} };
        let _ = tokio::time::timeout(most, drain).await;
    }
}

/// Sends a refusal already queued in `machine`, then lingers as asked.
pub(crate) async fn send_refusal<M: Opening>(
    control: &mut Control,
    machine: &mut M,
    linger: Linger,
) {
    let _ = flush(control, machine).await;
    linger_on(control, linger).await;
}
