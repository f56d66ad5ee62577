//! The safe calls of the built-in ops on cudarc buffers: the op of the
//! lane's width (a warp op, or its `GROUP_` twin on a lane of blocks or
//! groups), lengths checked against that op's limits on the host, the
//! buffers' context checked and the streams of device buffers
//! synchronized, the task waited for as [`Lane::call_on_buffers`] waits.

use crate::builtin::*;
use crate::error::{Error, Result};
use crate::ops::TypedOp;
use crate::runtime::buffers::{DeviceBuffer, DeviceBufferMut, lend, lend_mut};
use crate::runtime::lane::Lane;

fn invalid(what: String) -> Error {
    Error::InvalidArgument(what)
}

impl Lane {
    /// The op a safe call runs on this lane, with its limit: `warp` on a
    /// lane of warps, `wide` on a lane of blocks or groups.
    fn pick<A: 'static>(
        &self,
        warp: (&'static TypedOp<A>, usize),
        wide: (&'static TypedOp<A>, usize),
    ) -> (&'static TypedOp<A>, usize) {
        if self.shared.settings.width.is_wide() {
            wide
        } else {
            warp
        }
    }

    /// `y = a * x + y` on device buffers of at most [`AXPY_MAX_N`] elements,
    /// run by one warp of the resident kernel ([`AXPY`]), or by every
    /// thread of a lane of blocks or groups up to [`GROUP_MAX_N`]
    /// ([`GROUP_AXPY`]); returns once it is done.
    ///
    /// Work queued on the device buffers' own streams is waited for first
    /// (their streams are synchronized), so the task sees what came before
    /// (a [`HostBuffer`](crate::HostBuffer)'s is not: see there).
    pub fn axpy(
        &self,
        a: f32,
        x: &impl DeviceBuffer<f32>,
        y: &mut impl DeviceBufferMut<f32>,
    ) -> Result<()> {
        let (op, most) = self.pick((&AXPY, AXPY_MAX_N), (&GROUP_AXPY, GROUP_MAX_N));
        if x.len() != y.len() || x.len() > most {
            return Err(invalid(format!(
                "axpy needs x and y of equal length up to {most} on this lane (got {} and {})",
                x.len(),
                y.len()
            )));
        }
        let (xs, ys) = (x.stream().clone(), y.stream().clone());
        let n = x.len() as u32;
        let x_lent = lend(x, &xs);
        let y_lent = lend_mut(y, &ys);
        let args = AxpyArgs {
            x: x_lent.addr,
            y: y_lent.addr,
            n,
            a,
        };
        // SAFETY: x and y are live buffers of n f32s in this context, x
        // borrowed and y borrowed exclusively for the call.
        unsafe { self.call_on_lent(op, &args, &[&x_lent, &y_lent]) }.map(drop)
    }

    /// Copies `src` into `dst` (equal lengths, at most [`MEMCPY_MAX_BYTES`]
    /// bytes) with one warp of the resident kernel ([`MEMCPY`]), or with
    /// every thread of a lane of blocks or groups up to
    /// [`GROUP_MEMCPY_MAX_BYTES`] ([`GROUP_MEMCPY`]).
    pub fn memcpy<T>(
        &self,
        dst: &mut impl DeviceBufferMut<T>,
        src: &impl DeviceBuffer<T>,
    ) -> Result<()> {
        let bytes = src.num_bytes();
        let (op, most) = self.pick(
            (&MEMCPY, MEMCPY_MAX_BYTES),
            (&GROUP_MEMCPY, GROUP_MEMCPY_MAX_BYTES),
        );
        if dst.len() != src.len() || bytes > most {
            return Err(invalid(format!(
                "memcpy needs buffers of equal length, at most {most} bytes on this lane (got {} \
                 and {} elements, {bytes} bytes)",
                dst.len(),
                src.len()
            )));
        }
        let (ds, ss) = (dst.stream().clone(), src.stream().clone());
        let s_lent = lend(src, &ss);
        let d_lent = lend_mut(dst, &ds);
        let args = MemcpyArgs {
            dst: d_lent.addr,
            src: s_lent.addr,
            bytes: bytes as u64,
        };
        // SAFETY: two live buffers of `bytes` bytes in this context, src
        // borrowed, dst borrowed exclusively (so they do not overlap).
        unsafe { self.call_on_lent(op, &args, &[&d_lent, &s_lent]) }.map(drop)
    }

    /// Sets every byte of `dst` (at most [`MEMCPY_MAX_BYTES`]) to `byte`
    /// with one warp of the resident kernel ([`MEMSET`]), or with every
    /// thread of a lane of blocks or groups up to
    /// [`GROUP_MEMCPY_MAX_BYTES`] ([`GROUP_MEMSET`]). Buffers of plain-data
    /// types only (any byte pattern is a value of `T`):
    ///
    /// ```compile_fail
    /// fn f(rt: &pkq::Runtime, b: &mut pkq::cudarc::driver::CudaSlice<bool>) {
    ///     let _ = rt.memset(b, 2); // 2 is no bool
    /// }
    /// ```
    pub fn memset<T: bytemuck::Pod>(
        &self,
        dst: &mut impl DeviceBufferMut<T>,
        byte: u8,
    ) -> Result<()> {
        let bytes = dst.num_bytes();
        let (op, most) = self.pick(
            (&MEMSET, MEMCPY_MAX_BYTES),
            (&GROUP_MEMSET, GROUP_MEMCPY_MAX_BYTES),
        );
        if bytes > most {
            return Err(invalid(format!(
                "memset covers at most {most} bytes on this lane (got {bytes})"
            )));
        }
        let ds = dst.stream().clone();
        let d_lent = lend_mut(dst, &ds);
        let args = MemsetArgs {
            dst: d_lent.addr,
            bytes: bytes as u64,
            value: byte as u32,
            reserved: 0,
        };
        // SAFETY: a live buffer of `bytes` bytes in this context, borrowed
        // exclusively.
        unsafe { self.call_on_lent(op, &args, &[&d_lent]) }.map(drop)
    }

    /// The dot product of `x` and `y` (equal lengths, at most [`DOT_MAX_N`]),
    /// accumulated in `f64` by one warp ([`DOT`]), or by every thread of a
    /// lane of blocks or groups up to [`GROUP_MAX_N`] ([`GROUP_DOT`]).
    pub fn dot(&self, x: &impl DeviceBuffer<f32>, y: &impl DeviceBuffer<f32>) -> Result<f64> {
        let (op, most) = self.pick((&DOT, DOT_MAX_N), (&GROUP_DOT, GROUP_MAX_N));
        if x.len() != y.len() || x.len() > most {
            return Err(invalid(format!(
                "dot needs x and y of equal length up to {most} on this lane (got {} and {})",
                x.len(),
                y.len()
            )));
        }
        let (xs, ys) = (x.stream().clone(), y.stream().clone());
        let x_lent = lend(x, &xs);
        let y_lent = lend(y, &ys);
        let args = DotArgs {
            x: x_lent.addr,
            y: y_lent.addr,
            n: x.len() as u32,
            reserved: 0,
        };
        // SAFETY: two live buffers of n f32s in this context, borrowed.
        let c = unsafe { self.call_on_lent(op, &args, &[&x_lent, &y_lent])? };
        Ok(f64::from_bits(c.value))
    }

    /// The sum of `x` (at most [`DOT_MAX_N`] elements), accumulated in `f64`
    /// by one warp ([`DOT`]), or by every thread of a lane of blocks or
    /// groups up to [`GROUP_MAX_N`] ([`GROUP_DOT`]).
    pub fn sum(&self, x: &impl DeviceBuffer<f32>) -> Result<f64> {
        let (op, most) = self.pick((&DOT, DOT_MAX_N), (&GROUP_DOT, GROUP_MAX_N));
        if x.len() > most {
            return Err(invalid(format!(
                "sum takes at most {most} elements on this lane (got {})",
                x.len()
            )));
        }
        let xs = x.stream().clone();
        let x_lent = lend(x, &xs);
        let args = DotArgs {
            x: x_lent.addr,
            y: 0,
            n: x.len() as u32,
            reserved: 0,
        };
        // SAFETY: a live buffer of n f32s in this context, borrowed.
        let c = unsafe { self.call_on_lent(op, &args, &[&x_lent])? };
        Ok(f64::from_bits(c.value))
    }

    /// `y = A x`, `A` of `rows x cols` `f32`s in row-major order (both at
    /// most [`GEMV_MAX_DIM`]), by one warp ([`GEMV`]), or by every warp of
    /// a lane of blocks or groups up to [`GROUP_GEMV_MAX_DIM`]
    /// ([`GROUP_GEMV`]).
    pub fn gemv(
        &self,
        a: &impl DeviceBuffer<f32>,
        rows: usize,
        cols: usize,
        x: &impl DeviceBuffer<f32>,
        y: &mut impl DeviceBufferMut<f32>,
    ) -> Result<()> {
        let (op, most) = self.pick((&GEMV, GEMV_MAX_DIM), (&GROUP_GEMV, GROUP_GEMV_MAX_DIM));
        if rows > most
            || cols > most
            || Some(a.len()) != rows.checked_mul(cols)
            || x.len() != cols
            || y.len() != rows
        {
            return Err(invalid(format!(
                "gemv needs A of rows x cols (both at most {most} on this lane), x of cols and y \
                 of rows elements (got {rows} x {cols}, A {}, x {}, y {})",
                a.len(),
                x.len(),
                y.len()
            )));
        }
        let (as_, xs, ys) = (a.stream().clone(), x.stream().clone(), y.stream().clone());
        let a_lent = lend(a, &as_);
        let x_lent = lend(x, &xs);
        let y_lent = lend_mut(y, &ys);
        let args = GemvArgs {
            a: a_lent.addr,
            x: x_lent.addr,
            y: y_lent.addr,
            rows: rows as u32,
            cols: cols as u32,
        };
        // SAFETY: live buffers of the checked lengths in this context, a and x
        // borrowed, y borrowed exclusively.
        unsafe { self.call_on_lent(op, &args, &[&a_lent, &x_lent, &y_lent]) }.map(drop)
    }

    /// `y[i] = sum over k < taps of h[k] * x[i + k]` for each of `y`'s `n`
    /// elements (at most [`FIR_MAX_N`]), `h` of 1 to [`FIR_MAX_TAPS`] taps,
    /// `x` of `n + taps - 1` samples, by one warp ([`FIR`]), or by every
    /// thread of a lane of blocks or groups up to [`GROUP_MAX_N`] outputs
    /// ([`GROUP_FIR`]). Each output is an in-order chain of fused
    /// multiply-adds.
    pub fn fir(
        &self,
        x: &impl DeviceBuffer<f32>,
        h: &impl DeviceBuffer<f32>,
        y: &mut impl DeviceBufferMut<f32>,
    ) -> Result<()> {
        let (n, taps) = (y.len(), h.len());
        let (op, most) = self.pick((&FIR, FIR_MAX_N), (&GROUP_FIR, GROUP_MAX_N));
        if taps == 0 || taps > FIR_MAX_TAPS || n > most || x.len() != n + taps - 1 {
            return Err(invalid(format!(
                "fir needs 1 to {FIR_MAX_TAPS} taps, at most {most} outputs on this lane and n + taps - 1 \
                 samples (got {taps} taps, {n} outputs, {} samples)",
                x.len()
            )));
        }
        let (xs, hs, ys) = (x.stream().clone(), h.stream().clone(), y.stream().clone());
        let x_lent = lend(x, &xs);
        let h_lent = lend(h, &hs);
        let y_lent = lend_mut(y, &ys);
        let args = FirArgs {
            x: x_lent.addr,
            h: h_lent.addr,
            y: y_lent.addr,
            n: n as u32,
            taps: taps as u32,
        };
        // SAFETY: live buffers of the checked lengths in this context, x and
        // h borrowed, y borrowed exclusively.
        unsafe { self.call_on_lent(op, &args, &[&x_lent, &h_lent, &y_lent]) }.map(drop)
    }
}
