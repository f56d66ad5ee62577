//! The device code pkq loads: the embedded kernel image (pkq's worker
//! kernel), a caller's module, and the lookups done when one is loaded (a
//! kernel by name, its parameter list, its op table).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, sys};
use cudarc::nvrtc::Ptx;

use crate::cuda::driver::error_name;
use crate::error::{Error, Result};
use crate::ops::table::OpTable;

include!(concat!(env!("OUT_DIR"), "/kernel_gen.rs"));

/// The fatbin compiled from `cuda/pkq.cu` when pkq was built: SASS for the
/// architectures in [`build_info::CUDA_ARCHS`](crate::build_info::CUDA_ARCHS)
/// and PTX of the newest. [`Error::KernelNotBuilt`] when nvcc was missing.
pub fn image() -> Result<&'static [u8]> {
    FATBIN.map_err(Error::KernelNotBuilt)
}

/// A device module to load: pkq's embedded one (the worker kernel), or one
/// of the caller's (equal when the bytes are).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Image {
    Embedded,
    Caller(Arc<[u8]>),
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Embedded => f.write_str("embedded"),
            Self::Caller(bytes) => write!(f, "caller's ({} bytes)", bytes.len()),
        }
    }
}

impl Image {
    /// Loads the module into `ctx`; a refused image is
    /// [`Error::InvalidModule`] (an embedded one's absence, [`Error::KernelNotBuilt`]).
    pub(crate) fn load(&self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaModule>> {
        let bytes = match self {
            Self::Embedded => image()?.to_vec(),
            // PTX text ends at a NUL: the driver reads to one (harmless
            // after an ELF or fatbin, which carry their sizes, checked by
            // `check_caller`).
            Self::Caller(bytes) => [&bytes[..], &[0]].concat(),
        };
        ctx.load_module(Ptx::from_binary(bytes))
            .map_err(|e| match self {
                Self::Embedded => Error::Cuda(e),
                Self::Caller(_) => Error::InvalidModule(format!(
                    "the driver refused the image ({}){}",
                    error_name(e),
                    if e.0 == sys::CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU {
                        ": it holds no code this GPU runs; build it for this GPU's \
                         architecture (PKQ_CUDA_ARCHS, pkq-build)"
                    } else {
                        ""
                    }
                )),
            })
    }
}

/// Refuses ([`Error::InvalidModule`]) a caller's image that the driver's
/// loader would read past the end of: it takes no length, so an empty image,
/// or a fatbin or ELF (cubin) whose own header names more bytes than it
/// has, would have it read memory that is not the image. (PTX text is
/// read to a NUL, which [`Image::load`] appends.) What the driver makes of
/// an image of the right sizes is the driver's to refuse.
pub(crate) fn check_caller(bytes: &[u8]) -> Result<()> {
    let refuse = |why: &str| {
        Err(Error::InvalidModule(format!(
            "{why} ({} bytes)",
            bytes.len()
        )))
    };
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as u64)
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as u64)
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let len = bytes.len() as u64;
    // `count` entries of `size` bytes from `offset` lie within the image.
    let within = |offset: u64, count: u64, size: u64| {
        count
            .checked_mul(size)
            .and_then(|n| n.checked_add(offset))
            .is_some_and(|end| end <= len)
    };
    if bytes.is_empty() {
        return Err(Error::InvalidModule(
            "an empty image (0 bytes): was it built without nvcc (pkq-build's NoNvcc)? Install \
             nvcc or set NVCC to it, then rebuild the crate that embeds the image \
             (`cargo clean -p <crate>`)"
                .into(),
        ));
    }
    if bytes.starts_with(&FATBIN_MAGIC) {
        // magic (4), version (2), header size (2), size after the header (8).
        let (header, size) = match (u16_at(6), u64_at(8)) {
            (Some(header), Some(size)) if header >= 16 && within(header, 1, size) => (header, size),
            _ => return refuse("a fatbin whose header names more bytes than it has"),
        };
        // Its entries, one after another to the end the header names: each
        // a header (its size at 4, at least 16 bytes) and a payload (its
        // padded size at 8), within the fatbin.
        let end = header + size;
        let mut at = header;
        while at < end {
            match (u32_at(at as usize + 4), u64_at(at as usize + 8)) {
                (Some(head), Some(payload))
                    if head >= 16
                        && head
                            .checked_add(payload)
                            .and_then(|n| n.checked_add(at))
                            .is_some_and(|next| next <= end) =>
                {
                    at += head + payload;
                }
                _ => return refuse("a fatbin with an entry past its end"),
            }
        }
        return Ok(());
    }
    if bytes.starts_with(b"\x7fELF") {
        // ELF64, little-endian (what nvcc writes); the program and section
        // header tables, and every section with contents, within the image.
        if bytes.get(4..6) != Some(&[2, 1]) || bytes.len() < 64 {
            return refuse("an ELF image that is not a whole 64-bit little-endian header");
        }
        let field = |at: usize| u64_at(at).expect("within the 64-byte header");
        let half = |at: usize| u16_at(at).expect("within the 64-byte header");
        let (phoff, shoff) = (field(0x20), field(0x28));
        let (phentsize, phnum) = (half(0x36), half(0x38));
        let (shentsize, shnum) = (half(0x3a), half(0x3c));
        if !within(phoff, phnum, phentsize) || !within(shoff, shnum, shentsize) {
            return refuse("an ELF image whose header tables lie past its end");
        }
        for i in 0..phnum {
            let at = (phoff + i * phentsize) as usize;
            match (u64_at(at + 8), u64_at(at + 32)) {
                (Some(offset), Some(size)) if within(offset, 1, size) => {}
                _ => return refuse("an ELF image with a segment past its end"),
            }
        }
        // The section names' section, and each section's link (and a
        // relocation section's target), name sections it has.
        let shstrndx = half(0x3e);
        if shnum > 0 && shstrndx >= shnum {
            return refuse("an ELF image whose section names' index is past its sections");
        }
        for i in 0..shnum {
            let at = (shoff + i * shentsize) as usize;
            const SHT_NOBITS: u64 = 8;
            const SHT_RELA: u64 = 4;
            const SHT_REL: u64 = 9;
            match (u32_at(at + 4), u64_at(at + 0x18), u64_at(at + 0x20)) {
                (Some(SHT_NOBITS), Some(_), Some(_)) => {}
                (Some(_), Some(offset), Some(size)) if within(offset, 1, size) => {}
                _ => return refuse("an ELF image with a section past its end"),
            }
            let kind = u32_at(at + 4);
            match (u32_at(at + 0x28), u32_at(at + 0x2c)) {
                (Some(link), Some(info))
                    if link < shnum.max(1)
                        && (!matches!(kind, Some(SHT_REL | SHT_RELA)) || info < shnum) => {}
                _ => return refuse("an ELF image whose section links name sections it lacks"),
            }
        }
    }
    Ok(())
}

/// A fatbin's first four bytes (0xBA55ED50, little-endian).
const FATBIN_MAGIC: [u8; 4] = [0x50, 0xed, 0x55, 0xba];

/// A kernel name the module could hold; [`Error::KernelMissing`] for one
/// with a NUL (no module has one; the driver takes names as C strings).
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.contains('\0') {
        return Err(Error::KernelMissing(name.to_string()));
    }
    Ok(())
}

/// Looks `name` up in `module`; [`Error::KernelMissing`] if it has none.
pub(crate) fn function(module: &Arc<CudaModule>, name: &str) -> Result<CudaFunction> {
    check_name(name)?;
    module.load_function(name).map_err(|e| match e.0 {
        sys::CUresult::CUDA_ERROR_NOT_FOUND => Error::KernelMissing(name.to_string()),
        _ => Error::Cuda(e),
    })
}

/// Checks that `f` takes exactly one parameter of `bytes` bytes (the kernel
/// ABI every pkq kernel has: one struct by value), so that a launch never
/// hands a kernel arguments it reads differently.
pub(crate) fn check_one_parameter(
    ctx: &Arc<CudaContext>,
    f: &CudaFunction,
    name: &str,
    bytes: usize,
) -> Result<()> {
    let info = |index: usize| {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: a function of `ctx`, made current around the call, and two
        // valid out-pointers.
        let r = crate::cuda::driver::with_current(ctx, || unsafe {
            sys::cuFuncGetParamInfo(f.cu_function(), index, &mut offset, &mut size)
        })?;
        Ok::<_, Error>((r, size))
    };
    let (first, size) = info(0)?;
    let (second, _) = info(1)?;
    if first == sys::CUresult::CUDA_SUCCESS
        && size == bytes
        && second != sys::CUresult::CUDA_SUCCESS
    {
        return Ok(());
    }
    Err(Error::InvalidModule(format!(
        "kernel {name} does not take exactly one {bytes}-byte pkq_params argument"
    )))
}

/// Reads `<kernel>_op_count` and `<kernel>_ops` (PKQ_OP_TABLE) from the
/// module, on `stream` (a stream of pkq's own, while none of pkq's kernels
/// runs: see `modules`; never the legacy
/// stream, which would wait for a resident kernel of another runtime).
pub(crate) fn read_op_table(
    module: &Arc<CudaModule>,
    stream: &Arc<CudaStream>,
    kernel: &str,
) -> Result<OpTable> {
    let missing = |what: &str| {
        Error::InvalidModule(format!(
            "it exports no {what} for kernel {kernel}: declare its ops with \
             PKQ_OP_TABLE({kernel}, ...) (cuda/pkq.cuh)"
        ))
    };
    let read = |symbol: String| -> Result<Option<Vec<u8>>> {
        match module.get_global(&symbol, stream) {
            Ok(view) => {
                let bytes = stream.clone_dtoh(&view)?;
                // The copy is asynchronous: the bytes are there after this.
                stream.synchronize()?;
                Ok(Some(bytes))
            }
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
            Err(e) => Err(e.into()),
        }
    };
    let count = read(format!("{kernel}_op_count"))?.ok_or_else(|| missing("op count"))?;
    let count: [u8; 4] = count
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| missing("4-byte op count"))?;
    let rows = read(format!("{kernel}_ops"))?.ok_or_else(|| missing("op table"))?;
    OpTable::parse(&rows, u32::from_le_bytes(count))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The image nvcc built for pkq passes the check of a caller's image,
    /// and cut by a byte (its size then past its end) fails it.
    #[test]
    fn pkq_images_pass_the_caller_check_and_their_truncations_fail() {
        let Ok(image) = image() else {
            println!("skipped: pkq was built without nvcc (no image to check)");
            return;
        };
        check_caller(image).unwrap();
        assert!(matches!(
            check_caller(&image[..image.len() - 1]),
            Err(Error::InvalidModule(_))
        ));
        check_caller(b".version 8.0").unwrap();
    }

    /// An ELF image whose section header links a section it lacks, and a
    /// fatbin whose entry names a payload past its end: both crash the
    /// driver's loader (seen on the H200's), so both are refused here.
    #[test]
    fn links_and_entries_past_the_image_are_refused() {
        let put = |b: &mut [u8], at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        // ELF64 little-endian, two section headers at 64, names in 0.
        let mut elf = vec![0u8; 192];
        put(&mut elf, 0, b"\x7fELF\x02\x01\x01");
        put(&mut elf, 0x28, &64u64.to_le_bytes());
        put(&mut elf, 0x3a, &64u16.to_le_bytes());
        put(&mut elf, 0x3c, &2u16.to_le_bytes());
        put(&mut elf, 128 + 4, &2u32.to_le_bytes()); // section 1: SHT_SYMTAB
        check_caller(&elf).unwrap();
        let mut bad = elf.clone();
        put(&mut bad, 128 + 0x28, &400u32.to_le_bytes()); // sh_link 400
        assert!(matches!(check_caller(&bad), Err(Error::InvalidModule(_))));
        let mut bad = elf.clone();
        put(&mut bad, 0x3e, &2u16.to_le_bytes()); // e_shstrndx 2 of 2
        assert!(matches!(check_caller(&bad), Err(Error::InvalidModule(_))));
        let mut bad = elf.clone();
        put(&mut bad, 128 + 4, &9u32.to_le_bytes()); // SHT_REL, sh_info 7
        put(&mut bad, 128 + 0x2c, &7u32.to_le_bytes());
        assert!(matches!(check_caller(&bad), Err(Error::InvalidModule(_))));

        // A fatbin of one entry: a 64-byte header and 16 bytes of payload.
        let mut fat = vec![0u8; 16 + 80];
        put(&mut fat, 0, &FATBIN_MAGIC);
        put(&mut fat, 6, &16u16.to_le_bytes());
        put(&mut fat, 8, &80u64.to_le_bytes());
        put(&mut fat, 16 + 4, &64u32.to_le_bytes());
        put(&mut fat, 16 + 8, &16u64.to_le_bytes());
        check_caller(&fat).unwrap();
        let mut bad = fat.clone();
        put(&mut bad, 16 + 8, &(1u64 << 20).to_le_bytes()); // a 1 MiB payload
        assert!(matches!(check_caller(&bad), Err(Error::InvalidModule(_))));
        let mut bad = fat.clone();
        put(&mut bad, 16 + 8, &u64::MAX.to_le_bytes()); // wraps
        assert!(matches!(check_caller(&bad), Err(Error::InvalidModule(_))));
        let mut bad = fat.clone();
        put(&mut bad, 16 + 4, &0u32.to_le_bytes()); // no header: no progress
        assert!(matches!(check_caller(&bad), Err(Error::InvalidModule(_))));
    }
}
