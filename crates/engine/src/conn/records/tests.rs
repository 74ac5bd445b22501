//! The record layer against rustls, both ways, and against a peer that
//! sends what it should not.

use std::io::Write as _;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

use super::*;
use crate::conn::tls::{PinVerifier, ServerIdentity};

type Client = client::TlsStream<Aligned<DuplexStream>>;
type Server = server::TlsStream<Aligned<DuplexStream>>;

/// A TLS 1.3 handshake between a rustls client and a daemon's rustls
/// server over an in-memory pipe, each end's secrets captured.
async fn handshake() -> (Client, SecretCapture, Server, SecretCapture) {
    let dir = tempfile::tempdir().unwrap();
    let identity = ServerIdentity::load_or_create(dir.path()).unwrap();
    let verifier = PinVerifier::new(Some(identity.fingerprint.clone()));
    let (c, s) = tokio::io::duplex(1 << 20);
    let client_capture = SecretCapture::default();
    let server_capture = SecretCapture::default();
    let connector = TlsConnector::from(capturing_client(
        verifier.client_config(None).unwrap(),
        &client_capture,
    ));
    let acceptor = TlsAcceptor::from(capturing_server(
        &identity.server_config(None).unwrap(),
        &server_capture,
    ));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let (client, server) = tokio::join!(
        connector.connect(name, Aligned::new(c)),
        acceptor.accept(Aligned::new(s))
    );
    (
        client.unwrap(),
        client_capture,
        server.unwrap(),
        server_capture,
    )
}

fn own_client(tls: Client, capture: &SecretCapture) -> RecordStream<DuplexStream> {
    let (io, conn) = tls.into_inner();
    take_over(io, conn.into(), capture, 64 << 10).unwrap()
}

/// A daemon's end: it reads `first` bytes through rustls (as a daemon
/// reads JOIN), sends its tickets, then takes the connection over.
async fn own_server(
    mut tls: Server,
    capture: &SecretCapture,
    first: usize,
) -> (Vec<u8>, RecordStream<DuplexStream>) {
    let mut head = vec![0u8; first];
    tls.read_exact(&mut head).await.unwrap();
    tls.flush().await.unwrap();
    let (io, conn) = tls.into_inner();
    (head, take_over(io, conn.into(), capture, 64 << 10).unwrap())
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 131 + seed) % 251) as u8).collect()
}

/// Reads until the end, in `piece`-byte reads.
async fn read_to_end_in(r: &mut (impl AsyncRead + Unpin), piece: usize) -> io::Result<Vec<u8>> {
    let mut all = Vec::new();
    let mut chunk = vec![0u8; piece];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Ok(all);
        }
        all.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn an_own_client_and_a_rustls_daemon_carry_data_both_ways_and_close_cleanly() {
    let (client, cc, mut server, _) = handshake().await;
    let mut client = own_client(client, &cc);
    let up = pattern(1_000_003, 1);
    let down = pattern(300_000, 2);
    let sent = up.clone();
    let writer = tokio::spawn(async move {
        client.write_all(&sent).await.unwrap();
        client.shutdown().await.unwrap();
        // The daemon's answer, read in pieces smaller than a record.
        read_to_end_in(&mut client, 1000).await.unwrap()
    });
    let got = read_to_end_in(&mut server, 70_000).await.unwrap();
    assert_eq!(got, up);
    server.write_all(&down).await.unwrap();
    server.shutdown().await.unwrap();
    assert_eq!(writer.await.unwrap(), down);
}

#[tokio::test]
async fn a_daemon_takes_over_after_join_with_data_already_behind_it() {
    let (mut client, _, server, sc) = handshake().await;
    // The client writes its join and data at once, as a data connection
    // does: some of it is in rustls's hands when the daemon takes over.
    let up = pattern(500_000, 3);
    let mut first = b"JOIN".to_vec();
    first.extend_from_slice(&up[..10]);
    client.write_all(&first).await.unwrap();
    client.write_all(&up[10..]).await.unwrap();
    client.flush().await.unwrap();
    let (head, mut server) = own_server(server, &sc, 4).await;
    assert_eq!(head, b"JOIN");
    let mut got = vec![0u8; up.len()];
    // Reads of a whole block: records open straight into it.
    server.read_exact(&mut got).await.unwrap();
    assert_eq!(got, up);
    let down = pattern(200_000, 4);
    server.write_all(&down).await.unwrap();
    server.shutdown().await.unwrap();
    assert_eq!(read_to_end_in(&mut client, 16_384).await.unwrap(), down);
}

#[tokio::test]
async fn both_ends_own_with_gathered_writes_of_many_pieces() {
    let (client, cc, server, sc) = handshake().await;
    let mut client = own_client(client, &cc);
    client.write_all(b"JOIN").await.unwrap();
    client.flush().await.unwrap();
    let (_, mut server) = own_server(server, &sc, 4).await;
    let data = pattern(2_000_000, 5);
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        // Pieces of odd sizes, gathered into records across their ends.
        let mut at = 0;
        let sizes = [1, 7, 100, 16_384, 16_385, 40_000, 3];
        let mut k = 0;
        while at < sent.len() {
            let mut slices = Vec::new();
            let mut end = at;
            for _ in 0..5 {
                let n = sizes[k % sizes.len()].min(sent.len() - end);
                k += 1;
                slices.push(io::IoSlice::new(&sent[end..end + n]));
                end += n;
            }
            let n = client.write_vectored(&slices).await.unwrap();
            assert!(n > 0);
            at += n;
        }
        client.shutdown().await.unwrap();
    });
    let got = read_to_end_in(&mut server, 1 << 20).await.unwrap();
    writer.await.unwrap();
    assert_eq!(got, data);
}

#[tokio::test]
async fn keys_are_updated_before_their_limit_and_rustls_follows() {
    let (client, cc, mut server, _) = handshake().await;
    let mut client = own_client(client, &cc);
    client.set_tx_limit(3);
    let data = pattern(400_000, 6);
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        client.write_all(&sent).await.unwrap();
        client.shutdown().await.unwrap();
        client
    });
    let got = read_to_end_in(&mut server, 50_000).await.unwrap();
    assert_eq!(got, data);
    let client = writer.await.unwrap();
    // 25 records of data at three per key.
    assert!(client.tx.seq < 3, "{:?}", client.tx);
}

#[tokio::test]
async fn a_key_update_from_rustls_is_followed() {
    let (mut client, _, server, sc) = handshake().await;
    client.write_all(b"JOIN").await.unwrap();
    client.flush().await.unwrap();
    let (_, mut server) = own_server(server, &sc, 4).await;
    let data = pattern(300_000, 7);
    for (k, part) in data.chunks(100_000).enumerate() {
        client.write_all(part).await.unwrap();
        if k < 2 {
            client.get_mut().1.refresh_traffic_keys().unwrap();
        }
    }
    client.shutdown().await.unwrap();
    assert_eq!(read_to_end_in(&mut server, 30_000).await.unwrap(), data);
}

/// A daemon's end that took over, and the raw pipe under the rustls
/// client, to write what rustls would not.
async fn raw_peer() -> (Client, RecordStream<DuplexStream>) {
    let (mut client, _, server, sc) = handshake().await;
    client.write_all(b"JOIN").await.unwrap();
    client.flush().await.unwrap();
    let (_, server) = own_server(server, &sc, 4).await;
    (client, server)
}

async fn first_error(server: &mut RecordStream<DuplexStream>) -> io::Error {
    let err = read_to_end_in(server, 4096).await.unwrap_err();
    // And the stream stays failed.
    let again = server.read(&mut [0u8; 10]).await.unwrap_err();
    assert_eq!(again.kind(), err.kind());
    err
}

#[tokio::test]
async fn a_changed_byte_fails_authentication() {
    let (mut client, mut server) = raw_peer().await;
    // A record sealed by rustls, one ciphertext byte flipped.
    let mut wire = Vec::new();
    {
        let conn = client.get_mut().1;
        conn.writer().write_all(&pattern(5000, 8)).unwrap();
        conn.write_tls(&mut wire).unwrap();
    }
    wire[100] ^= 1;
    client.get_mut().0.write_all(&wire).await.unwrap();
    let err = first_error(&mut server).await;
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("bad_record_mac"), "{err}");
}

#[tokio::test]
async fn records_of_the_wrong_kind_or_length_are_refused() {
    for (garbage, says) in [
        (vec![23, 3, 3, 0x50, 0x00, 1, 2, 3], "record of 20480 bytes"),
        (vec![22, 3, 3, 0, 40], "unexpected record (type 22"),
        (vec![23, 3, 3, 0, 3, 1, 2, 3], "record of 3 bytes"),
        (
            [vec![23, 3, 3, 0, 40], vec![9; 40]].concat(),
            "bad_record_mac",
        ),
    ] {
        let (mut client, mut server) = raw_peer().await;
        client.get_mut().0.write_all(&garbage).await.unwrap();
        let err = first_error(&mut server).await;
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{garbage:?}");
        assert!(err.to_string().contains(says), "{err} for {garbage:?}");
    }
}

#[tokio::test]
async fn an_end_without_close_notify_or_inside_a_record_is_an_error() {
    for (tail, says) in [
        (vec![], "without close_notify"),
        (vec![23, 3, 3, 0, 40, 1, 2], "inside a record"),
    ] {
        let (mut client, mut server) = raw_peer().await;
        client.write_all(b"some data").await.unwrap();
        client.flush().await.unwrap();
        client.get_mut().0.write_all(&tail).await.unwrap();
        client.get_mut().0.shutdown().await.unwrap();
        let mut got = [0u8; 9];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"some data");
        let err = first_error(&mut server).await;
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[tokio::test]
async fn a_close_notify_is_a_clean_end_and_stays_one() {
    let (mut client, mut server) = raw_peer().await;
    client.write_all(b"last words").await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(
        read_to_end_in(&mut server, 100).await.unwrap(),
        b"last words"
    );
    assert_eq!(server.read(&mut [0u8; 4]).await.unwrap(), 0);
}

/// Both ends taken over, as between two tern hosts.
async fn own_pair() -> (RecordStream<DuplexStream>, RecordStream<DuplexStream>) {
    let (client, cc, server, sc) = handshake().await;
    let mut client = own_client(client, &cc);
    client.write_all(b"JOIN").await.unwrap();
    client.flush().await.unwrap();
    let (_, server) = own_server(server, &sc, 4).await;
    (client, server)
}

/// Seals a record the way a hostile or odd peer might, and sends it.
async fn send_raw(client: &mut RecordStream<DuplexStream>, content_type: u8, content: &[u8]) {
    client.seal_message(content_type, content);
    client.flush().await.unwrap();
}

#[tokio::test]
async fn a_few_records_without_data_pass_and_a_flood_of_them_is_refused() {
    let key_update = [KEY_UPDATE, 0, 0, 1, 0];
    for (kind, content) in [(APPLICATION_DATA, &[][..]), (HANDSHAKE, &key_update[..])] {
        let (mut client, mut server) = own_pair().await;
        for n in [MAX_EMPTY_IN_A_ROW, MAX_EMPTY_IN_A_ROW + 1] {
            for _ in 0..n {
                client.seal_message(kind, content);
                if kind == HANDSHAKE {
                    client.tx = client.tx.next();
                }
            }
            client.write_all(b"data").await.unwrap();
            client.flush().await.unwrap();
            let mut got = [0u8; 4];
            let read = server.read_exact(&mut got).await;
            if n == MAX_EMPTY_IN_A_ROW {
                read.unwrap();
                assert_eq!(&got, b"data");
            } else {
                let err = read.unwrap_err();
                assert!(err.to_string().contains("too many records"), "{err}");
            }
        }
    }
}

#[tokio::test]
async fn a_key_update_the_peer_asks_for_is_sent_before_the_next_data() {
    let (mut client, mut server) = own_pair().await;
    // The client updates its keys and asks the daemon to update its own.
    send_raw(&mut client, HANDSHAKE, &[KEY_UPDATE, 0, 0, 1, 1]).await;
    client.tx = client.tx.next();
    client.write_all(b"after").await.unwrap();
    client.flush().await.unwrap();
    // One byte at a time, across the update.
    let mut got = Vec::new();
    for _ in 0..5 {
        let mut one = [0u8; 1];
        server.read_exact(&mut one).await.unwrap();
        got.push(one[0]);
    }
    assert_eq!(got, b"after");
    assert_eq!(server.rx.generation, 1);
    assert_eq!(server.tx.generation, 0);
    server.write_all(b"answer").await.unwrap();
    server.flush().await.unwrap();
    assert_eq!(
        server.tx.generation, 1,
        "the daemon answered with its own update"
    );
    let mut answer = [0u8; 6];
    client.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"answer");
    assert_eq!(client.rx.generation, 1);
}

#[tokio::test]
async fn malformed_post_handshake_messages_are_refused() {
    for (kind, content, says) in [
        (
            HANDSHAKE,
            vec![KEY_UPDATE, 0, 0, 1, 0, 9],
            "data after a key update",
        ),
        (
            HANDSHAKE,
            vec![KEY_UPDATE, 0, 0, 1, 2],
            "unexpected handshake message 24",
        ),
        (
            HANDSHAKE,
            vec![KEY_UPDATE, 0, 0, 2, 0, 0],
            "unexpected handshake message 24",
        ),
        (HANDSHAKE, vec![], "empty handshake record"),
        // Tickets come from servers only.
        (
            HANDSHAKE,
            vec![NEW_SESSION_TICKET, 0, 0, 1, 0],
            "unexpected handshake message 4",
        ),
        (HANDSHAKE, vec![KEY_UPDATE, 0, 0], "split handshake message"),
        // All padding: no content type.
        (0, vec![], "without a content type"),
        (ALERT, vec![2, 40], "alert 40"),
        (ALERT, vec![1], "malformed alert"),
        (20, vec![1], "unexpected content type 20"),
        // More than 2^14 bytes of content (§5.4).
        (
            APPLICATION_DATA,
            vec![7; 16_385],
            "16386 bytes of plaintext",
        ),
    ] {
        let (mut client, mut server) = own_pair().await;
        send_raw(&mut client, kind, &content).await;
        let err = first_error(&mut server).await;
        assert!(
            err.to_string().contains(says),
            "{err} for {kind} {content:?}"
        );
        // A failed reader fails its writes too.
        assert!(server.write_all(b"x").await.is_err());
    }
}

#[tokio::test]
async fn a_join_split_across_records_is_taken_over_whole() {
    let (mut client, _, server, sc) = handshake().await;
    for piece in [&b"JO"[..], b"IN", b"rest"] {
        client.write_all(piece).await.unwrap();
        client.flush().await.unwrap();
    }
    let (head, mut server) = own_server(server, &sc, 4).await;
    assert_eq!(head, b"JOIN");
    let mut rest = [0u8; 4];
    server.read_exact(&mut rest).await.unwrap();
    assert_eq!(&rest, b"rest");
}
