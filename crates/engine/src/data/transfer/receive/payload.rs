//! Reading a block's payload off a data stream: plain, with the resume
//! journal's hash taken as soon as the block is in, or compressed.
//!
//! The journal hashes every block of a file it covers. Taken after a
//! direct write (which reads the buffer by DMA, past the caches) the hash
//! was a pass of its own over bytes gone cold; taken here, the block is
//! still in the cache that TLS (or the socket) just copied it through.
//! The block is read whole before it is hashed, not piece by piece: on a
//! plain stream, reads of a whole block go past the stream's read buffer
//! straight into the block, in as few `recv` calls as the socket allows,
//! where 64 KiB pieces were each copied through that buffer once more
//! (docs/EFFICIENCY.md, item 23).

use tern_proto::data::RAW_LEN_LEN;
use tern_proto::{BlockHeader, Codec, RawLen};
use tokio::io::AsyncRead;

use crate::Error;
use crate::data::compress;
use crate::data::pace::Pace;
use crate::store::blockbuf::BlockBuf;
use crate::store::journal::BlockHasher;

/// Fills `payload` from `stream` (paced by `pace` when there is one) and,
/// when it goes to a `journaled` file, returns the journal hash of its
/// bytes.
pub(super) async fn read_plain<S: AsyncRead + Unpin + ?Sized>(
    stream: &mut S,
    payload: &mut [u8],
    pace: Option<&Pace>,
    journaled: bool,
) -> std::io::Result<Option<BlockHasher>> {
    crate::data::pace::read_exact(stream, payload, pace).await?;
    if !journaled {
        return Ok(None);
    }
    let mut hasher = BlockHasher::new();
    hasher.update(payload);
    Ok(Some(hasher))
}

/// Reads a compressed payload of `wire` bytes and decompresses it into
/// `buf`; returns the block as it is in the file (its raw length, no codec
/// flag) and whether the payload decompressed.
pub(super) async fn read_compressed(
    stream: &mut (impl AsyncRead + Unpin),
    h: BlockHeader,
    codec: Codec,
    (packed, buf): (&mut Vec<u8>, &mut BlockBuf),
    block_size: u32,
    pace: Option<&Pace>,
) -> std::result::Result<(BlockHeader, bool), ReadError> {
    let wire = h.length as usize;
    if packed.len() < wire {
        packed.resize(block_size as usize, 0);
    }
    crate::data::pace::read_exact(stream, &mut packed[..wire], pace)
        .await
        .map_err(ReadError::Ended)?;
    let raw = RawLen::decode(&packed[..wire]).map_err(|e| ReadError::Fatal(e.into()))?;
    if raw.0 > block_size {
        return Err(ReadError::Fatal(Error::Protocol(format!(
            "compressed block of {} bytes exceeds the block size",
            raw.0
        ))));
    }
    let (p, b) = (std::mem::take(packed), std::mem::take(buf));
    let raw_len = raw.0 as usize;
    let (p, b, good) = tokio::task::spawn_blocking(move || {
        let mut b = b;
        let good = compress::decompress(codec, &p[RAW_LEN_LEN..wire], &mut b[..raw_len]);
        (p, b, good)
    })
    .await
    .map_err(|e| ReadError::Fatal(Error::Protocol(format!("decompression task failed: {e}"))))?;
    *packed = p;
    *buf = b;
    let block = BlockHeader {
        flags: h.flags.with_codec(None),
        length: raw.0,
        ..h
    };
    Ok((block, good))
}

/// Why a stream reader stops.
pub(super) enum ReadError {
    /// The connection ended or failed.
    Ended(std::io::Error),
    /// The peer broke the protocol: the session fails.
    Fatal(Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_plain_payload_arrives_whole_with_the_hash_of_its_bytes() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let (mut tx, mut rx) = tokio::io::duplex(4096);
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            tx.write_all(&sent).await.unwrap();
        });
        let mut payload = vec![0u8; data.len()];
        let hashed = read_plain(&mut rx, &mut payload, None, true).await.unwrap();
        writer.await.unwrap();
        assert_eq!(payload, data);
        let mut whole = BlockHasher::new();
        whole.update(&data);
        assert_eq!(hashed.map(|h| h.finish()), Some(whole.finish()));
        // A stream that ends early is an error, not a short block.
        let (tx, mut rx) = tokio::io::duplex(4096);
        drop(tx);
        assert!(read_plain(&mut rx, &mut payload, None, true).await.is_err());
    }

    #[tokio::test]
    async fn a_payload_for_a_file_without_a_journal_is_not_hashed() {
        let (mut tx, mut rx) = tokio::io::duplex(4096);
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            tx.write_all(&[7u8; 10_000]).await.unwrap();
        });
        let mut payload = vec![0u8; 10_000];
        let hashed = read_plain(&mut rx, &mut payload, None, false)
            .await
            .unwrap();
        assert!(hashed.is_none());
        assert_eq!(payload, vec![7u8; 10_000]);
    }
}
