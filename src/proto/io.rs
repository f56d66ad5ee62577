//! The byte streams of a task's input and output areas (IO in
//! `cuda/pkq_layout.h`): 7 bytes under the lap's tag in every word, so a
//! reader that finds every word of a stream with the expected tag has the
//! whole stream, whatever order the words arrived in. An output area's word
//! 0 holds the output's length and its lap's low bits, its stream starts at
//! word 1: the area keeps older laps' words, so word 0 (written after the
//! stream) says whose the stream is; the device fences between them, or
//! knows that no word of the stream can carry this lap's tag but this
//! lap's (IO_SEEN in the header), so the host checks every word's tag.

use crate::layout::TAG_SHIFT;
use crate::layout::{
    IO_LAP_BITS, IO_LAP_SHIFT, IO_PLAIN_MIN_BYTES, IO_PLAIN_OUT_WORD, IO_ROOM_ALIGN, IO_WORD_BYTES,
};
#[cfg(test)]
use crate::proto::slot::tagged;
use crate::proto::slot::{CHUNK_MASK, tag_of};

use crate::proto::words::Words;
use crate::sync::Ordering;

/// Words of a stream of `bytes` bytes.
pub(crate) fn words_for(bytes: usize) -> usize {
    bytes.div_ceil(IO_WORD_BYTES)
}

/// Words of an output area for outputs of up to `bytes` bytes: the length,
/// then the stream.
pub(crate) fn output_words(bytes: usize) -> usize {
    1 + words_for(bytes)
}

/// Words of an area holding a plain stream of up to `bytes` bytes (PLAIN
/// in `cuda/pkq_layout.h`): the device moves it in 16-byte pieces. None
/// below `IO_PLAIN_MIN_BYTES`, which never moves plain.
pub(crate) fn plain_words(bytes: usize) -> usize {
    if bytes < IO_PLAIN_MIN_BYTES {
        0
    } else {
        bytes.next_multiple_of(16) / 8
    }
}

/// The room (shared or device memory) a worker decodes an input of up
/// to `bytes` into, or a handler writes an output of up to `bytes` in:
/// word k's 7 bytes at bytes [7k, 7k + 7), the room a multiple of 112
/// bytes (8-byte words, whole groups of seven).
pub(crate) fn room(bytes: usize) -> usize {
    bytes.next_multiple_of(IO_ROOM_ALIGN)
}

/// Words `k` of a stream of `len` bytes whose 8 bytes from `7k` lie within
/// it: each is one unaligned 8-byte access of the bytes.
fn whole_words(len: usize) -> usize {
    if len < 8 {
        0
    } else {
        (len - 8) / IO_WORD_BYTES + 1
    }
}

/// Writes `bytes` as the stream from word `at` of `area`, under `tag`
/// (relaxed stores: each word is whole on its own): word k holds bytes
/// [7k, 7k + 7), as the device decodes them.
pub(crate) fn write(area: &Words, at: usize, bytes: &[u8], tag: u8) {
    let dst = area.slice(at, words_for(bytes.len()));
    let tag = u64::from(tag) << TAG_SHIFT;
    let whole = whole_words(bytes.len());
    for (d, b) in dst.iter().zip(bytes.windows(8).step_by(IO_WORD_BYTES)) {
        let v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        d.store((v & CHUNK_MASK) | tag, Ordering::Relaxed);
    }
    for (k, d) in dst.iter().enumerate().skip(whole) {
        let rest = &bytes[IO_WORD_BYTES * k..];
        let mut b = [0u8; 8];
        b[..rest.len().min(IO_WORD_BYTES)].copy_from_slice(&rest[..rest.len().min(IO_WORD_BYTES)]);
        d.store(u64::from_le_bytes(b) | tag, Ordering::Relaxed);
    }
}

/// Writes `bytes` as plain bytes from word `at` of `area` (PLAIN in
/// `cuda/pkq_layout.h`): 8-byte words, little-endian, the last word
/// zero-padded, by relaxed atomic stores (the software device's plain
/// outputs, which a slow reader of the lap before may still be loading).
#[cfg(test)]
pub(crate) fn write_plain(area: &Words, at: usize, bytes: &[u8]) {
    put_plain(area, at, bytes, |d, v| d.store(v, Ordering::Relaxed));
}

/// A producer's plain input: [`write_plain`]'s words, the whole ones by
/// non-temporal stores (`movnti`; pkq builds for x86-64 only). An input is
/// thousands of bytes in lines the ring has not touched for a lap, and a
/// cached store would first read each line from memory. x86-64's store order does not
/// cover such stores, so an `sfence` ends the write: every byte is visible
/// to the device before any later store of this thread (the slot's
/// publish). The last, padded word is a cached store. Under Miri and loom,
/// relaxed atomic stores.
///
/// # Safety
/// The caller owns the words outright: the slot's `seq` is reserved and
/// not yet published, and the task before it in the slot completed, so no
/// host thread reads or writes them meanwhile (the device reads them only
/// after the publish).
pub(crate) unsafe fn write_plain_input(area: &Words, at: usize, bytes: &[u8]) {
    // SAFETY: no access of this process races with these stores (the
    // caller's promise).
    put_plain(area, at, bytes, |d, v| unsafe { stream_word(d, v) });
    end_streams();
}

/// `bytes` as 8-byte little-endian words from word `at` of `area`: the
/// whole ones by `store`, the last, zero-padded one by a relaxed store.
#[inline(always)]
fn put_plain(area: &Words, at: usize, bytes: &[u8], store: impl Fn(&crate::sync::AtomicU64, u64)) {
    let dst = area.slice(at, bytes.len().div_ceil(8));
    let whole = bytes.chunks_exact(8);
    let rest = whole.remainder();
    for (d, b) in dst.iter().zip(whole) {
        store(d, u64::from_le_bytes(b.try_into().expect("8 bytes")));
    }
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        dst[dst.len() - 1].store(u64::from_le_bytes(w), Ordering::Relaxed);
    }
}

/// Stores `v` into `word` bypassing the caches (`movnti`).
///
/// # Safety
/// No access of this process to `word` may race with this store.
#[cfg(not(any(miri, loom)))]
#[inline(always)]
unsafe fn stream_word(word: &crate::sync::AtomicU64, v: u64) {
    // SAFETY: an 8-byte aligned word, valid for writes (its view keeps the
    // allocation alive); no access races with it (the caller's promise).
    unsafe { std::arch::x86_64::_mm_stream_si64(word.as_ptr().cast::<i64>(), v as i64) };
}

/// A relaxed atomic store, under Miri and loom (unsafe only to match the
/// streaming one's signature).
///
/// # Safety
/// None: the store is atomic.
#[cfg(any(miri, loom))]
#[inline(always)]
unsafe fn stream_word(word: &crate::sync::AtomicU64, v: u64) {
    word.store(v, Ordering::Relaxed);
}

/// Orders the streaming stores before every later store of this thread
/// (`sfence`).
#[cfg(not(any(miri, loom)))]
#[inline(always)]
fn end_streams() {
    // SAFETY: SSE is part of x86-64's baseline.
    unsafe { std::arch::x86_64::_mm_sfence() };
}

/// Nothing, under Miri and loom (the stores are atomic).
#[cfg(any(miri, loom))]
#[inline(always)]
fn end_streams() {}

/// `len` plain bytes from word `at` of `area` (relaxed loads: the caller's
/// acquire load of what said they are there comes first).
pub(crate) fn read_plain(area: &Words, at: usize, len: usize) -> Vec<u8> {
    let src = area.slice(at, len.div_ceil(8));
    let mut out = vec![0u8; len];
    let mut whole = out.chunks_exact_mut(8);
    for (o, w) in (&mut whole).zip(src) {
        o.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    let rest = whole.into_remainder();
    if !rest.is_empty() {
        let w = src[src.len() - 1].load(Ordering::Relaxed).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&w[..n]);
    }
    out
}

/// The `len` bytes of the stream from word `at`, if every word of it
/// carries `tag` (acquire loads).
pub(crate) fn read(area: &Words, at: usize, len: usize, tag: u8) -> Option<Vec<u8>> {
    let src = area.slice(at, words_for(len));
    let mut out = vec![0u8; len];
    // Every word's tag against `tag`, folded: zero if all match.
    let mut other = 0u64;
    let whole = whole_words(len);
    for (k, s) in src.iter().enumerate().take(whole) {
        let w = s.load(Ordering::Acquire);
        other |= (w >> TAG_SHIFT) ^ u64::from(tag);
        // Bytes [7k, 7k + 8): the eighth is the next word's first, written
        // again by it.
        out[IO_WORD_BYTES * k..IO_WORD_BYTES * k + 8].copy_from_slice(&w.to_le_bytes());
    }
    for (k, s) in src.iter().enumerate().skip(whole) {
        let w = s.load(Ordering::Acquire);
        other |= (w >> TAG_SHIFT) ^ u64::from(tag);
        let rest = &mut out[IO_WORD_BYTES * k..];
        let n = rest.len().min(IO_WORD_BYTES);
        rest[..n].copy_from_slice(&w.to_le_bytes()[..n]);
    }
    (other == 0).then_some(out)
}

/// Whether every word of the output from word `at` carries `tag` (at most
/// `max` bytes), without decoding it.
pub(crate) fn output_whole(area: &Words, at: usize, max: usize, lap: u64) -> bool {
    let Some(len) = head_len(area, at, max, lap) else {
        return false;
    };
    let other = area.slice(at + 1, words_for(len)).iter().fold(0, |o, w| {
        o | ((w.load(Ordering::Acquire) >> TAG_SHIFT) ^ (lap & 0xff))
    });
    other == 0
}

/// Whether the plain output from word `at` is lap `lap`'s (word 0 says
/// so: the device's fence put its bytes before it).
pub(crate) fn plain_output_whole(area: &Words, at: usize, max: usize, lap: u64) -> bool {
    head_len(area, at, max, lap).is_some()
}

/// The plain output from word `at` (at most `max` bytes), if word 0 is lap
/// `lap`'s: its bytes from word `IO_PLAIN_OUT_WORD` on.
pub(crate) fn read_plain_output(
    area: &Words,
    at: usize,
    max: usize,
    lap: u64,
) -> Option<Box<[u8]>> {
    let len = head_len(area, at, max, lap)?;
    Some(read_plain(area, at + IO_PLAIN_OUT_WORD, len).into_boxed_slice())
}

/// Writes a plain output of `bytes` for lap `lap` from word `at`: the
/// bytes, then (release) word 0, as the device does behind its fence (the
/// software device of the tests).
#[cfg(test)]
pub(crate) fn write_plain_output(area: &Words, at: usize, bytes: &[u8], lap: u64) {
    write_plain(area, at + IO_PLAIN_OUT_WORD, bytes);
    area.at(at)
        .store(tagged(head(bytes.len(), lap), lap as u8), Ordering::Release);
}

/// Word 0 of an output area: its length and the lap's low bits.
#[cfg(test)]
fn head(len: usize, lap: u64) -> u64 {
    len as u64 | (lap & ((1 << IO_LAP_BITS) - 1)) << IO_LAP_SHIFT
}

/// The length in word 0 if it is lap `lap`'s.
fn head_len(area: &Words, at: usize, max: usize, lap: u64) -> Option<usize> {
    let w = area.at(at).load(Ordering::Acquire);
    let payload = w & CHUNK_MASK;
    if tag_of(w) != lap as u8 || payload >> IO_LAP_SHIFT != lap & ((1 << IO_LAP_BITS) - 1) {
        return None;
    }
    Some(((payload & ((1 << IO_LAP_SHIFT) - 1)) as usize).min(max))
}

/// Writes an output of `bytes` for lap `lap` from word `at`: the stream,
/// then (release) word 0, as the device does behind its fence (the
/// software device of the tests).
#[cfg(test)]
pub(crate) fn write_output(area: &Words, at: usize, bytes: &[u8], lap: u64) {
    write(area, at + 1, bytes, lap as u8);
    area.at(at)
        .store(tagged(head(bytes.len(), lap), lap as u8), Ordering::Release);
}

/// The output from word `at` (at most `max` bytes: a longer length is cut
/// to it), if every word of it carries `tag`.
pub(crate) fn read_output(area: &Words, at: usize, max: usize, lap: u64) -> Option<Box<[u8]>> {
    let len = head_len(area, at, max, lap)?;
    Some(read(area, at + 1, len, lap as u8)?.into_boxed_slice())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::test_rng::{Rng, cases};

    #[test]
    fn streams_round_trip_and_a_word_of_another_lap_is_not_whole() {
        let area = Words::heap(3 + output_words(300));
        let mut rng = Rng::new(20);
        for _ in 0..cases(2_000) {
            let len = (rng.next() % 301) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let lap = rng.next() >> 1;
            let tag = lap as u8;
            write_output(&area, 3, &bytes, lap);
            assert_eq!(read_output(&area, 3, 300, lap).as_deref(), Some(&bytes[..]));
            assert_eq!(read_output(&area, 3, 300, lap + 1), None);
            assert_eq!(
                read_output(&area, 3, 300, lap + 256),
                None,
                "same tag, another lap"
            );
            let cut = read_output(&area, 3, len / 2, lap).unwrap();
            assert_eq!(&cut[..], &bytes[..len / 2], "a length over the most is cut");
            if len > 0 {
                // One word of the stream still of the lap before.
                let k = (rng.next() % output_words(len) as u64) as usize;
                area.at(3 + k)
                    .store(tagged(0, tag.wrapping_sub(1)), Ordering::Relaxed);
                assert_eq!(read_output(&area, 3, 300, lap), None);
            }
            write(&area, 0, &bytes, tag);
            assert_eq!(read(&area, 0, len, tag), Some(bytes));
        }
    }

    #[test]
    fn plain_outputs_round_trip_and_wait_for_their_word_0() {
        let mut rng = Rng::new(22);
        let most = IO_PLAIN_MIN_BYTES + 40;
        let words = IO_PLAIN_OUT_WORD + plain_words(most);
        let area = Words::heap(words + 2);
        let mut lens: Vec<usize> = (IO_PLAIN_MIN_BYTES..IO_PLAIN_MIN_BYTES + 17).collect();
        lens.push(most);
        for len in lens {
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let lap = rng.next() >> 1;
            area.slice(0, area.len())
                .iter()
                .for_each(|w| w.store(u64::MAX, Ordering::Relaxed));
            write_plain_output(&area, 0, &bytes, lap);
            assert!(plain_output_whole(&area, 0, most, lap), "{len}");
            assert_eq!(
                read_plain_output(&area, 0, most, lap).as_deref(),
                Some(&bytes[..]),
                "{len}"
            );
            assert!(
                !plain_output_whole(&area, 0, most, lap + 256),
                "word 0 names the lap"
            );
            assert_eq!(read_plain_output(&area, 0, most, lap + 1), None);
            let cut = read_plain_output(&area, 0, len - 3, lap).unwrap();
            assert_eq!(&cut[..], &bytes[..len - 3], "a length over the most is cut");
            assert_eq!(
                area.at(IO_PLAIN_OUT_WORD + len.div_ceil(8))
                    .load(Ordering::Relaxed),
                u64::MAX,
                "nothing past the bytes' last word"
            );
            write_plain(&area, 1, &bytes[..len % 23]);
            assert_eq!(read_plain(&area, 1, len % 23), &bytes[..len % 23]);
        }
    }

    #[test]
    fn streams_of_every_length_near_a_word_edge_round_trip() {
        let mut rng = Rng::new(21);
        let most = 65536;
        let area = Words::heap(2 + output_words(most));
        let mut lens: Vec<usize> = (0..40).collect();
        // Under Miri, the chunk edge alone (each word is an interpreted access).
        lens.extend([3583, 3584, 3585, 3590]);
        if !cfg!(miri) {
            lens.extend([most - 8, most - 1, most]);
        }
        for len in lens {
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let lap = rng.next() >> 1;
            // Words past the stream hold another lap's: the read stops at it.
            area.slice(0, area.len())
                .iter()
                .for_each(|w| w.store(u64::MAX, Ordering::Relaxed));
            write_output(&area, 1, &bytes, lap);
            assert_eq!(
                read_output(&area, 1, most, lap).as_deref(),
                Some(&bytes[..]),
                "{len}"
            );
            assert!(output_whole(&area, 1, most, lap), "{len}");
            assert_eq!(
                area.at(0).load(Ordering::Relaxed),
                u64::MAX,
                "before the area"
            );
            let after = 1 + output_words(len);
            assert_eq!(
                area.at(after).load(Ordering::Relaxed),
                u64::MAX,
                "after the stream"
            );
        }
    }
}
