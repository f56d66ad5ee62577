//! Tagged-word codec of submission slots and completion entries (mirrors
//! `cuda/pkq_slot.cuh`; the layout, and why it needs no fence, is described in
//! `cuda/pkq_layout.h`).
//!
//! A payload is a little-endian bit stream of 64-bit words; it travels as
//! 56-bit chunks, one per shared word, under the tag byte.

use crate::error::{Error, Result};
use crate::layout::{
    ARGS_BYTES, CHUNK_BITS, CQE_OUTPUT, CQE_PLAIN, CQE_WORDS, HEADER_FRESH_BIT, HEADER_HOST_BIT,
    HEADER_IN_SHIFT, HEADER_IO_BIT, HEADER_LEN_SHIFT, HEADER_PACK_SHIFT, HEADER_PLAIN_BIT,
    IO_PLAIN_MIN_BYTES, PACK_ARG_BYTES, SLOT_WORDS, TAG_SHIFT,
};

pub(crate) const CHUNK_MASK: u64 = (1 << CHUNK_BITS) - 1;
const CHUNK: usize = CHUNK_BITS as usize;
/// Payload words of a slot: the header and six argument words.
const SLOT_PAYLOAD_WORDS: usize = 1 + ARGS_BYTES / 8;

/// Whether a stream of `len` bytes moves as plain bytes (PLAIN in
/// `cuda/pkq_layout.h`): the input's choice is the producer's, the
/// output's the device's.
#[inline(always)]
pub(crate) fn plain(len: usize) -> bool {
    len >= IO_PLAIN_MIN_BYTES
}

/// The tag byte of a shared word.
#[inline(always)]
pub(crate) fn tag_of(word: u64) -> u8 {
    (word >> TAG_SHIFT) as u8
}

/// A chunk under a tag.
#[inline(always)]
pub(crate) fn tagged(chunk: u64, tag: u8) -> u64 {
    (chunk & CHUNK_MASK) | (u64::from(tag) << TAG_SHIFT)
}

/// Cuts payload words into `N` chunks: chunk k holds bits [56k, 56k + 56).
#[inline(always)]
pub(crate) fn chunks<const N: usize>(words: &[u64]) -> [u64; N] {
    let mut out = [0; N];
    for (k, c) in out.iter_mut().enumerate() {
        let (j, s) = (k * CHUNK / 64, k * CHUNK % 64);
        let mut v = words.get(j).copied().unwrap_or(0) >> s;
        if s > 64 - CHUNK
            && let Some(&next) = words.get(j + 1)
        {
            v |= next << (64 - s);
        }
        *c = v & CHUNK_MASK;
    }
    out
}

/// Rebuilds `M` payload words from chunks (the inverse of [`chunks`]).
#[inline(always)]
pub(crate) fn payload<const M: usize>(chunks: &[u64]) -> [u64; M] {
    let mut out = [0; M];
    for (j, w) in out.iter_mut().enumerate() {
        let (k, s) = (j * 64 / CHUNK, j * 64 % CHUNK);
        let mut v = chunks.get(k).map_or(0, |c| (c & CHUNK_MASK) >> s);
        if let Some(&next) = chunks.get(k + 1) {
            v |= (next & CHUNK_MASK) << (CHUNK - s);
        }
        *w = v;
    }
    out
}

/// `len` argument bytes against a limit of `max`.
#[inline(always)]
fn fits(len: usize, max: usize) -> Result<()> {
    if len > max {
        return Err(Error::PayloadTooLarge { len, max });
    }
    Ok(())
}

/// A submission encoded into its slot's chunks, before its tag is known (the
/// tag comes with the sequence number the producer reserves afterwards, so
/// nothing but plain stores happens between reserving and publishing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotImage(pub(crate) [u64; SLOT_WORDS]);

impl SlotImage {
    /// Encodes op and argument bytes (at most [`ARGS_BYTES`]).
    #[inline]
    pub(crate) fn new(op: u16, args: &[u8]) -> Result<Self> {
        Self::check_len(args.len())?;
        Ok(Self::encode(op, args))
    }

    /// Whether arguments of `len` bytes fit a slot.
    #[inline(always)]
    pub(crate) fn check_len(len: usize) -> Result<()> {
        fits(len, ARGS_BYTES)
    }

    /// Whether arguments of `len` bytes fit a task of a pack.
    #[inline(always)]
    pub(crate) fn check_pack_len(len: usize) -> Result<()> {
        fits(len, PACK_ARG_BYTES)
    }

    /// Encodes op and argument bytes, which the caller checked to be at
    /// most [`ARGS_BYTES`] (bytes past them would be left out).
    #[inline(always)]
    pub(crate) fn encode(op: u16, args: &[u8]) -> Self {
        let args = &args[..args.len().min(ARGS_BYTES)];
        let mut bytes = [0u8; ARGS_BYTES];
        bytes[..args.len()].copy_from_slice(args);
        let mut words = [0u64; SLOT_PAYLOAD_WORDS];
        words[0] = u64::from(op) | (args.len() as u64) << HEADER_LEN_SHIFT;
        for (w, b) in words[1..].iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_le_bytes(b.try_into().unwrap());
        }
        Self(chunks(&words))
    }

    /// The same task as an IO task with `input` bytes in its slot's input
    /// area (IO in `cuda/pkq_layout.h`; at most `IO_MAX_BYTES`, checked by
    /// the caller): plain bytes from `IO_PLAIN_MIN_BYTES` on (PLAIN there).
    #[inline(always)]
    pub(crate) fn with_input(mut self, input: usize) -> Self {
        // The header's bits 32..52 are in chunk 0 (bits 0..56).
        self.0[0] |= (input as u64) << HEADER_IN_SHIFT
            | 1 << HEADER_IO_BIT
            | u64::from(plain(input)) << HEADER_PLAIN_BIT;
        self
    }

    /// The same task, its worker told that the slot's output area held a
    /// plain output in the last 255 laps (PLAIN in `cuda/pkq_layout.h`).
    #[inline(always)]
    pub(crate) fn fresh(mut self) -> Self {
        self.0[0] |= 1 << HEADER_FRESH_BIT;
        self
    }

    /// The same task, its worker told to fence at system scope before the
    /// completion: the task may write host memory (`HEADER_HOST_BIT`).
    #[inline(always)]
    pub(crate) fn host(mut self, host: bool) -> Self {
        self.0[0] |= u64::from(host) << HEADER_HOST_BIT;
        self
    }

    /// The header of a pack (see PACKS in `cuda/pkq_layout.h`): `count`
    /// tasks of `op` with `len` argument bytes each, in the pack arguments.
    #[inline(always)]
    pub(crate) fn pack(op: u16, len: usize, count: usize) -> Self {
        let header =
            u64::from(op) | (len as u64) << HEADER_LEN_SHIFT | (count as u64) << HEADER_PACK_SHIFT;
        Self(chunks(&[header]))
    }

    /// Word `k` of the slot under `tag`.
    #[inline(always)]
    pub(crate) fn word(&self, k: usize, tag: u8) -> u64 {
        tagged(self.0[k], tag)
    }
}

/// A submission as the device decodes it (tests and the software device).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecodedSlot {
    pub op: u16,
    pub len: usize,
    /// The pack count (0: one task).
    pub pack: usize,
    /// An IO task's input bytes, if it is one.
    pub io: Option<usize>,
    /// Its input is plain bytes (header bit `HEADER_PLAIN_BIT`).
    pub plain: bool,
    /// Its slot's output area held a plain output in the last 255 laps
    /// (`HEADER_FRESH_BIT`).
    pub fresh: bool,
    /// It may write host memory (`HEADER_HOST_BIT`).
    pub host: bool,
    pub args: [u64; ARGS_BYTES / 8],
}

#[cfg(test)]
impl DecodedSlot {
    /// Decodes tagged slot words, or `None` unless every word carries `tag`.
    pub(crate) fn decode(words: &[u64; SLOT_WORDS], tag: u8) -> Option<Self> {
        if words.iter().any(|&w| tag_of(w) != tag) {
            return None;
        }
        let p: [u64; SLOT_PAYLOAD_WORDS] = payload(words);
        Some(Self {
            op: p[0] as u16,
            len: ((p[0] >> HEADER_LEN_SHIFT) & 0xff) as usize,
            pack: ((p[0] >> HEADER_PACK_SHIFT) & 0xff) as usize,
            io: (p[0] >> HEADER_IO_BIT & 1 == 1).then(|| {
                ((p[0] >> HEADER_IN_SHIFT) & ((1 << crate::layout::HEADER_IN_BITS) - 1)) as usize
            }),
            plain: p[0] >> HEADER_PLAIN_BIT & 1 == 1,
            fresh: p[0] >> HEADER_FRESH_BIT & 1 == 1,
            host: p[0] >> HEADER_HOST_BIT & 1 == 1,
            args: p[1..].try_into().unwrap(),
        })
    }

    /// The argument bytes.
    pub(crate) fn arg_bytes(&self) -> Vec<u8> {
        let mut v: Vec<u8> = self.args.iter().flat_map(|w| w.to_le_bytes()).collect();
        v.truncate(self.len);
        v
    }
}

/// A completion entry: the task's status, its inline result and the device's
/// start and end timestamps (ns of `%globaltimer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cqe {
    pub status: u8,
    /// The pack count (0: one task; see PACKS in `cuda/pkq_layout.h`).
    pub pack: u8,
    /// `CQE_OUTPUT`: an IO task's output is in its slot's output area.
    pub flags: u8,
    /// The poller warp of its worker that ran it.
    pub poller: u8,
    pub value: u64,
    pub t_start: u64,
    pub t_end: u64,
}

impl Cqe {
    /// A successful single task's entry with `value` and no timestamps (a
    /// stand-in device's completion).
    #[cfg(test)]
    pub(crate) fn ok(value: u64) -> Self {
        Self {
            status: 0,
            pack: 0,
            flags: 0,
            poller: 0,
            value,
            t_start: 0,
            t_end: 0,
        }
    }

    /// Whether the task left an output in its slot's output area.
    #[inline(always)]
    pub(crate) fn has_output(&self) -> bool {
        self.flags & CQE_OUTPUT != 0
    }

    /// Whether that output is plain bytes (PLAIN in `cuda/pkq_layout.h`).
    #[inline(always)]
    pub(crate) fn plain_output(&self) -> bool {
        self.flags & (CQE_OUTPUT | CQE_PLAIN) == CQE_OUTPUT | CQE_PLAIN
    }

    /// The entry's tagged words (what `completion_word` writes on the
    /// device; the host writes them only standing in for a device).
    #[cfg(test)]
    pub(crate) fn encode(&self, tag: u8) -> [u64; CQE_WORDS] {
        let c: [u64; CQE_WORDS] = chunks(&[
            self.value,
            self.t_start,
            self.t_end,
            u64::from(self.status)
                | u64::from(self.pack) << 8
                | u64::from(self.flags) << 16
                | u64::from(self.poller) << 24,
        ]);
        c.map(|c| tagged(c, tag))
    }

    /// Decodes an entry, or `None` unless every word carries `tag`.
    #[inline(always)]
    pub(crate) fn decode(words: &[u64; CQE_WORDS], tag: u8) -> Option<Self> {
        if words.iter().any(|&w| tag_of(w) != tag) {
            return None;
        }
        let p: [u64; 4] = payload(words);
        Some(Self {
            value: p[0],
            t_start: p[1],
            t_end: p[2],
            status: p[3] as u8,
            pack: (p[3] >> 8) as u8,
            flags: (p[3] >> 16) as u8,
            poller: (p[3] >> 24) as u8,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::{Rng, cases};

    #[test]
    fn chunks_and_payload_are_inverse() {
        let mut rng = Rng::new(1);
        for _ in 0..cases(100_000) {
            let words: [u64; 7] = std::array::from_fn(|_| rng.next());
            let c: [u64; 8] = chunks(&words);
            assert!(c.iter().all(|&c| c & !CHUNK_MASK == 0));
            assert_eq!(payload::<7>(&c), words);
        }
    }

    #[test]
    fn slot_round_trips_arbitrary_payloads() {
        let mut rng = Rng::new(2);
        for i in 0..cases(200_000) {
            let len = (rng.next() % (ARGS_BYTES as u64 + 1)) as usize;
            let args: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let op = rng.next() as u16;
            let tag = rng.next() as u8;
            let host = rng.next() % 2 == 1;
            let img = SlotImage::new(op, &args).unwrap().host(host);
            let words: [u64; SLOT_WORDS] = std::array::from_fn(|k| img.word(k, tag));
            let d = DecodedSlot::decode(&words, tag).unwrap();
            assert_eq!((d.op, d.len, d.host), (op, len, host), "case {i}");
            assert_eq!(
                (d.pack, d.io, d.plain, d.fresh),
                (0, None, false, false),
                "case {i}"
            );
            assert_eq!(d.arg_bytes(), args, "case {i}");
            // A slot whose words carry another lap's tag, even one, is not whole.
            let mut torn = words;
            torn[(rng.next() % 8) as usize] = tagged(0, tag.wrapping_sub(1));
            assert_eq!(DecodedSlot::decode(&torn, tag), None);
        }
    }

    #[test]
    fn payload_bytes_map_to_argument_words_little_endian() {
        let args: Vec<u8> = (1..=48).collect();
        let img = SlotImage::new(7, &args).unwrap();
        let words: [u64; 8] = std::array::from_fn(|k| img.word(k, 3));
        let d = DecodedSlot::decode(&words, 3).unwrap();
        assert_eq!(d.args[0], u64::from_le_bytes([1, 2, 3, 4, 5, 6, 7, 8]));
        assert_eq!(
            d.args[5],
            u64::from_le_bytes([41, 42, 43, 44, 45, 46, 47, 48])
        );
    }

    #[test]
    fn oversized_payload_is_refused() {
        let err = SlotImage::new(0, &[0u8; ARGS_BYTES + 1]).unwrap_err();
        assert!(matches!(err, Error::PayloadTooLarge { len: 49, max: 48 }));
        assert!(SlotImage::new(0, &[0u8; ARGS_BYTES]).is_ok());
        assert!(SlotImage::new(0, &[]).is_ok());
    }

    #[test]
    fn completion_round_trips() {
        let mut rng = Rng::new(3);
        for _ in 0..cases(100_000) {
            let c = Cqe {
                status: rng.next() as u8,
                pack: rng.next() as u8,
                flags: rng.next() as u8,
                poller: rng.next() as u8,
                value: rng.next(),
                t_start: rng.next(),
                t_end: rng.next(),
            };
            let tag = rng.next() as u8;
            let words = c.encode(tag);
            assert_eq!(Cqe::decode(&words, tag), Some(c));
            assert_eq!(Cqe::decode(&words, tag.wrapping_add(1)), None);
            let mut torn = words;
            torn[(rng.next() % 4) as usize] = tagged(0, tag.wrapping_sub(1));
            assert_eq!(Cqe::decode(&torn, tag), None);
        }
    }
}
