//! A bounds-checked little-endian reader over untrusted bytes.
//!
//! Every parser in `format/` reads through [`Cursor`], so no length or offset taken from input is
//! ever used to slice or allocate before it has been checked against the bytes actually present.
//! A failed read reports what was being read, at which offset, and how many bytes were missing.

/// A read ran past the end of the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("truncated {what} at offset {offset}: need {needed} bytes, only {available} left")]
pub struct Truncated {
    pub what: &'static str,
    pub offset: u64,
    pub needed: u64,
    pub available: u64,
}

/// Reads little-endian values from a byte slice, tracking the absolute offset of each read.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Added to `pos` in error messages and [`Cursor::offset`], for cursors over a sub-slice.
    base: u64,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// A cursor over `buf` whose offsets are reported relative to `base`.
    pub fn with_base(buf: &'a [u8], base: u64) -> Self {
        Self { buf, pos: 0, base }
    }

    /// The absolute offset of the next byte to read.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The unread bytes, without consuming them.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Takes the next `n` bytes. `n` comes from untrusted input: it is checked before slicing.
    pub fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], Truncated> {
        let available = self.remaining() as u64;
        if n > available {
            return Err(Truncated {
                what,
                offset: self.offset(),
                needed: n,
                available,
            });
        }
        // n <= remaining, so it fits in usize.
        let n = n as usize;
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: u64, what: &'static str) -> Result<(), Truncated> {
        self.take(n, what).map(|_| ())
    }

    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Truncated> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, Truncated> {
        Ok(self.array::<1>(what)?[0])
    }

    /// A 3-byte little-endian integer, as in xorb chunk headers.
    pub fn u24(&mut self, what: &'static str) -> Result<u32, Truncated> {
        let b = self.array::<3>(what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], 0]))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, Truncated> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, Truncated> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// 32 raw hash bytes.
    pub fn hash(&mut self, what: &'static str) -> Result<[u8; 32], Truncated> {
        self.array(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_reports_offsets() {
        let bytes = [1, 0, 0, 0, 2, 3, 0, 0];
        let mut c = Cursor::with_base(&bytes, 100);
        assert_eq!(c.u32("a").unwrap(), 1);
        assert_eq!(c.u24("b").unwrap(), 3 * 256 + 2);
        let err = c.u32("c").unwrap_err();
        assert_eq!(
            err,
            Truncated {
                what: "c",
                offset: 107,
                needed: 4,
                available: 1
            }
        );
        // A failed read consumes nothing.
        assert_eq!(c.remaining(), 1);
        assert!(c.take(u64::MAX, "huge").is_err());
    }
}
