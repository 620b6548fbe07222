//! A one-word handle to a header and a text: triomphe's `ThinArc` over the text's bytes,
//! read back as text without checking it again.
//!
//! Why it exists (measured): the L1's entry was a `triomphe::Arc<HeaderSlice<_, str>>`, a
//! pointer and a length. Every table that holds entries (the L1's buckets, the pending
//! clicks, the click queues, the breakdowns' slots) paid the second word: with every code of
//! 1,000,000 requested, about 27 MiB of the all-in-one's RSS
//! (`benches/results/2026-12-07h-breakdown-memory.md`). A `ThinArc` keeps the length in the
//! allocation, but its slice is bytes, and checking them as UTF-8 on each read cost 217
//! instructions a hit (e65aa66). The text is checked once, when the handle is made from a
//! `&str`; it can never change after (no mutable access is handed out), so reading it back
//! unchecked is sound. Debug builds (every test) check it again on each read.

use triomphe::ThinArc;

/// A header and a text behind one pointer, shared by its clones.
pub(crate) struct ThinText<H>(ThinArc<H, u8>);

impl<H> ThinText<H> {
    /// The only way to make one: from a `&str`, so its bytes are UTF-8.
    pub(crate) fn new(header: H, text: &str) -> ThinText<H> {
        ThinText(ThinArc::from_header_and_slice(header, text.as_bytes()))
    }

    #[inline]
    pub(crate) fn header(&self) -> &H {
        &self.0.header.header
    }

    #[inline]
    pub(crate) fn text(&self) -> &str {
        let bytes = &self.0.slice;
        debug_assert!(std::str::from_utf8(bytes).is_ok(), "a ThinText's text is UTF-8");
        // SAFETY: the bytes are those of the `&str` `new` was given (the only constructor),
        // and nothing here hands out a way to change them (`ThinArc::with_arc_mut` is never
        // called): they are still valid UTF-8.
        #[allow(unsafe_code)]
        unsafe {
            std::str::from_utf8_unchecked(bytes)
        }
    }

    /// Whether both are one allocation.
    #[inline]
    pub(crate) fn ptr_eq(&self, other: &ThinText<H>) -> bool {
        std::ptr::eq(self.0.ptr(), other.0.ptr())
    }

    /// Where the allocation lives.
    #[inline]
    pub(crate) fn address(&self) -> usize {
        self.0.ptr() as usize
    }

    /// The handles to the allocation (this one counted).
    #[cfg(test)]
    pub(crate) fn strong_count(&self) -> usize {
        ThinArc::strong_count(&self.0)
    }
}

impl<H> Clone for ThinText<H> {
    #[inline]
    fn clone(&self) -> Self {
        ThinText(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::ThinText;

    #[test]
    fn a_text_reads_back_as_made_and_clones_share_it() {
        let texts = [
            "",
            "abc",
            "abc1234https://example.com/page/1?ref=bench",
            "é",
            "日本語のテキスト",
            "emoji 🦀 and\nnewline",
            &"x".repeat(10_000),
        ];
        for (n, text) in texts.iter().enumerate() {
            let t = ThinText::new(n as u64, text);
            assert_eq!(t.text(), *text);
            assert_eq!(*t.header(), n as u64);
            let c = t.clone();
            assert!(t.ptr_eq(&c));
            assert_eq!(t.address(), c.address());
            assert_eq!(t.strong_count(), 2);
            drop(c);
            assert_eq!(t.strong_count(), 1);
            assert!(!t.ptr_eq(&ThinText::new(n as u64, text)), "another allocation");
        }
        assert_eq!(std::mem::size_of::<ThinText<u64>>(), 8, "one word");
    }
}
