//! Who is on a control connection: the grants of the client certificate
//! the handshake verified, and what the connection's TLS exports (the
//! block MAC key's base, the third-party-copy binding).

use super::*;

/// Looks up the grants of the client certificate the handshake verified.
pub(super) fn authorize(ctx: &Context, tls: &ServerTls, peer: SocketAddr) -> Authorization {
    let Some(site) = &ctx.opts.site else {
        return Authorization::Open;
    };
    let subject = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|cert| Subject::from_der(cert));
    match subject {
        Some(Ok(subject)) => match site.authz.grants_for(&subject) {
            Some(grants) => {
                tracing::info!(
                    "{peer}: certificate {} granted {}",
                    subject.slash,
                    grants.describe()
                );
                Authorization::Granted(grants)
            }
            None => {
                tracing::warn!(
                    "{peer}: refused: certificate {} is not in the authorization file",
                    subject.slash
                );
                Authorization::Denied(subject.slash)
            }
        },
        Some(Err(e)) => {
            tracing::warn!("{peer}: refused: {e}");
            Authorization::Denied("an unreadable certificate".into())
        }
        None => {
            tracing::warn!("{peer}: refused: no client certificate");
            Authorization::Denied("a client without a certificate".into())
        }
    }
}

pub(super) type KeyExporter = Box<dyn Fn(&Token) -> Option<[u8; 32]> + Send>;

pub(super) fn export_key_fn(tls: &ServerTls) -> KeyExporter {
    // Exported now, while the concrete connection type is at hand; the
    // token does not exist yet, so it is bound in afterwards by a keyed hash.
    let (_, conn) = tls.get_ref();
    let mut base = [0u8; 32];
    let ok = conn
        .export_keying_material(&mut base, BLOCK_MAC_LABEL, None)
        .is_ok();
    Box::new(move |token: &Token| ok.then(|| bind_token(&base, token)))
}

pub(super) async fn peek_exact(conn: &TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    loop {
        let n = conn.peek(buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if n >= buf.len() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
