//! Block buffers whose bytes start on a page boundary.
//!
//! A receiver writes big files with direct I/O (`O_DIRECT`, see
//! [`crate::store::fsio`]), which the kernel accepts only from memory
//! aligned to the device's direct-I/O alignment (512 bytes to a page).
//! A `Vec<u8>` gives no such promise, so the buffers a block is read into,
//! written from and held in by the digest's fold are [`BlockBuf`]s: whole
//! pages, handed out as a byte slice of the block's size.

use std::ops::{Deref, DerefMut};

/// The alignment of every [`BlockBuf`]: a page, which covers any device's
/// direct-I/O memory alignment.
pub const ALIGN: usize = 4096;

/// One page of a buffer; its alignment is what makes the buffer's.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(4096))]
struct Page([u8; ALIGN]);

/// A zeroed byte buffer of a fixed length, starting on a page boundary.
pub struct BlockBuf {
    pages: Box<[Page]>,
    len: usize,
}

impl BlockBuf {
    /// A buffer of `len` zero bytes.
    pub fn zeroed(len: usize) -> BlockBuf {
        let pages = bytemuck::zeroed_slice_box(len.div_ceil(ALIGN));
        BlockBuf { pages, len }
    }
}

impl Default for BlockBuf {
    fn default() -> Self {
        BlockBuf::zeroed(0)
    }
}

impl Deref for BlockBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.pages)[..self.len]
    }
}

impl DerefMut for BlockBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.pages)[..self.len]
    }
}

impl std::fmt::Debug for BlockBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_starts_on_a_page_and_has_its_length() {
        for len in [0, 1, 4095, 4096, 4097, 1 << 20] {
            let mut b = BlockBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            if len > 0 {
                assert_eq!(b.as_ptr() as usize % ALIGN, 0, "{len} bytes");
                b[len - 1] = 7;
                assert_eq!(b[len - 1], 7);
            }
        }
    }
}
