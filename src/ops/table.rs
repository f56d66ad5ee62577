//! The op table a device module exports (`PKQ_OP_TABLE` in
//! `cuda/pkq_handler.cuh`), parsed, and what it refuses: a declared op
//! whose argument layout or pointer flag disagrees, raw arguments of
//! another size, an op a caller's module does not list.

use std::mem::{offset_of, size_of};

use bytemuck::{Pod, Zeroable};

use crate::error::{Error, Result};
use crate::layout::{
    OP_BLOCK, OP_DEREFS, OP_GROUP, OP_INFO_BYTES, OP_INFO_OFF_ARG_ALIGN, OP_INFO_OFF_ARG_BYTES,
    OP_INFO_OFF_FLAGS, OP_INFO_OFF_OP, OP_STATE, OP_UP_TO,
};
use crate::op::Op;
use crate::width::Width;

/// What the host declared of one op (a [`TypedOp`](crate::TypedOp) without
/// its type).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Signature {
    pub(crate) op: u16,
    pub(crate) name: &'static str,
    pub(crate) bytes: u32,
    pub(crate) align: u32,
    pub(crate) derefs: bool,
    /// A state op (`StateOp`): its handler dereferences only the state
    /// whose address and length begin its arguments.
    pub(crate) state: bool,
}

/// One entry of a module's op table (`struct pkq_op_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(crate) struct OpInfo {
    pub(crate) op: u32,
    pub(crate) arg_bytes: u32,
    pub(crate) arg_align: u32,
    pub(crate) flags: u32,
}

const _: () = {
    assert!(size_of::<OpInfo>() == OP_INFO_BYTES);
    assert!(offset_of!(OpInfo, op) == OP_INFO_OFF_OP);
    assert!(offset_of!(OpInfo, arg_bytes) == OP_INFO_OFF_ARG_BYTES);
    assert!(offset_of!(OpInfo, arg_align) == OP_INFO_OFF_ARG_ALIGN);
    assert!(offset_of!(OpInfo, flags) == OP_INFO_OFF_FLAGS);
};

/// Op codes below this are found by index (pkq's own ops are 0 to 10).
const DIRECT: usize = 16;

/// A module's op table, sorted by op code.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpTable {
    ops: Box<[OpInfo]>,
    /// The rows of codes below [`DIRECT`], by code (see [`OpTable::get`]).
    direct: [u8; DIRECT],
    /// Ops the table does not list may still reach a handler (a caller's
    /// module may fall back on pkq's built-ins, or on anything): the safe
    /// calls refuse them. pkq's own kernel answers them `UnknownOp`.
    refuse_unlisted: bool,
    /// The width of the lane it serves: ops of another width are refused.
    width: Width,
}

impl OpTable {
    /// The table from the bytes of `<kernel>_ops` and its entry count.
    pub(crate) fn parse(bytes: &[u8], count: u32) -> Result<Self> {
        if count == 0 {
            return Err(Error::InvalidModule(
                "its op table is empty (or could not be read)".into(),
            ));
        }
        let need = count as usize * OP_INFO_BYTES;
        if bytes.len() < need {
            return Err(Error::InvalidModule(format!(
                "its op table holds {} bytes, not the {need} its count of {count} needs",
                bytes.len()
            )));
        }
        let mut ops: Vec<OpInfo> = bytes[..need]
            .chunks_exact(OP_INFO_BYTES)
            .map(bytemuck::pod_read_unaligned)
            .collect();
        ops.sort_by_key(|o| o.op);
        if let Some(w) = ops.windows(2).find(|w| w[0].op == w[1].op) {
            return Err(Error::InvalidModule(format!(
                "its op table lists op {} twice",
                w[0].op
            )));
        }
        if let Some(o) = ops.iter().find(|o| o.op > u16::MAX as u32) {
            return Err(Error::InvalidModule(format!(
                "its op table lists op {}, over the largest code {}",
                o.op,
                u16::MAX
            )));
        }
        // Rows no slot can carry, or that mean what this pkq cannot tell.
        let known = OP_DEREFS | OP_UP_TO | OP_STATE | OP_BLOCK | OP_GROUP;
        for o in &ops {
            let why = if o.arg_bytes as usize > crate::layout::ARGS_BYTES {
                format!(
                    "{} argument bytes, over a slot's {}",
                    o.arg_bytes,
                    crate::layout::ARGS_BYTES
                )
            } else if !o.arg_align.is_power_of_two() || o.arg_align > 8 {
                format!(
                    "an argument alignment of {} (a power of two up to 8)",
                    o.arg_align
                )
            } else if o.flags & !known != 0 {
                format!(
                    "flags {:#x}, which this pkq does not know",
                    o.flags & !known
                )
            } else {
                continue;
            };
            return Err(Error::InvalidModule(format!(
                "its op table's row for op {} has {why}",
                o.op
            )));
        }
        // Each code below DIRECT: its row's index plus one (0: none).
        let mut direct = [0u8; DIRECT];
        for (i, o) in ops.iter().enumerate().take(usize::from(u8::MAX)) {
            if let Some(d) = direct.get_mut(o.op as usize) {
                *d = i as u8 + 1;
            }
        }
        Ok(Self {
            ops: ops.into(),
            direct,
            refuse_unlisted: false,
            width: Width::Warp,
        })
    }

    /// The table of `rows` (the software device's).
    #[cfg(test)]
    pub(crate) fn of(rows: &[OpInfo]) -> Self {
        Self::parse(bytemuck::cast_slice(rows), rows.len() as u32).expect("distinct ops")
    }

    /// The table of a caller's module: ops it does not list are refused by
    /// the safe calls.
    pub(crate) fn refusing_unlisted(mut self) -> Self {
        self.refuse_unlisted = true;
        self
    }

    /// The table as a lane of `width` serves it: the ops of other widths
    /// refused (NOP is served at every width).
    pub(crate) fn serving(mut self, width: Width) -> Self {
        self.width = width;
        self
    }

    /// Why this lane does not serve the op of row `o`, if it does not.
    #[inline(always)]
    fn width_refuses(&self, o: &OpInfo) -> Option<&'static str> {
        if o.op == u32::from(crate::layout::OP_NOP) {
            return None;
        }
        self.width.refuses(o.flags)
    }

    /// [`Error::OpMismatch`] if the table lists `op` for another width than
    /// its lane's (what even an unchecked raw task is refused: a handler of
    /// one width run at another miscounts its threads or waits on barriers
    /// nobody reaches).
    #[inline(always)]
    pub(crate) fn refuse_width(&self, op: Op) -> Result<()> {
        match self.get(op.0).and_then(|o| self.width_refuses(o)) {
            None => Ok(()),
            Some(why) => Err(Error::OpMismatch {
                op: op.builtin_name().unwrap_or_default().to_string(),
                code: op.0,
                why: why.into(),
            }),
        }
    }

    /// The row of `op`: for a code below `DIRECT`, by index (pkq's own ops,
    /// on every submit), else by binary search.
    #[inline(always)]
    fn get(&self, op: u16) -> Option<&OpInfo> {
        let at = match self.direct.get(usize::from(op)) {
            Some(&slot) => usize::from(slot).checked_sub(1),
            None => self.ops.binary_search_by_key(&u32::from(op), |o| o.op).ok(),
        };
        at.map(|i| &self.ops[i])
    }

    /// What the safe submits refuse: an op whose handler dereferences
    /// device addresses ([`Error::UncheckedOp`]); arguments of `len` bytes
    /// that are not what the op table lists for the op (its size, or up to
    /// it for an op flagged so, as ECHO is: [`Error::OpMismatch`]); and in a
    /// caller's module an op its table does not list ([`Error::OpMismatch`]).
    #[inline]
    pub(crate) fn refuse(&self, op: Op, len: usize) -> Result<()> {
        let mismatch = |why: String| {
            Err(Error::OpMismatch {
                op: op.builtin_name().unwrap_or_default().to_string(),
                code: op.0,
                why,
            })
        };
        let row = self.get(op.0);
        if let Some(o) = row
            && let Some(why) = self.width_refuses(o)
        {
            return mismatch(why.into());
        }
        match row {
            // A state op dereferences its state's address, flagged so or not.
            Some(o) if o.flags & (OP_DEREFS | OP_STATE) != 0 => Err(Error::UncheckedOp(op)),
            Some(o) if o.flags & OP_UP_TO != 0 && len > o.arg_bytes as usize => mismatch(format!(
                "the op table takes up to {} argument bytes; the submit sends {len}",
                o.arg_bytes
            )),
            Some(o) if o.flags & OP_UP_TO == 0 && len != o.arg_bytes as usize => mismatch(format!(
                "the op table takes {} argument bytes; the submit sends {len}",
                o.arg_bytes
            )),
            None if self.refuse_unlisted => mismatch(
                "the module's op table does not list it, and its handlers might serve it \
                 anyway (a fallback): only a raw task marked unchecked sends it"
                    .into(),
            ),
            _ => Ok(()),
        }
    }

    /// [`Error::OpMismatch`] unless the module serves `sig.op` with arguments
    /// of the same size and alignment (or, for a row flagged up-to, of at
    /// most its size and alignment), and the same pointer flag.
    #[inline(always)]
    pub(crate) fn check(&self, sig: &Signature) -> Result<()> {
        let row = self.get(sig.op);
        if let Some(dev) = row
            && let Some(why) = self.width_refuses(dev)
        {
            return Err(Error::OpMismatch {
                op: sig.name.to_string(),
                code: sig.op,
                why: why.into(),
            });
        }
        match row {
            Some(dev) if matches(dev, sig) => Ok(()),
            found => Err(mismatch(found, sig)),
        }
    }
}

/// Whether row `dev` serves the declaration `sig` (see [`OpTable::check`]).
#[inline(always)]
fn matches(dev: &OpInfo, sig: &Signature) -> bool {
    let fits = if dev.flags & OP_UP_TO != 0 {
        sig.bytes <= dev.arg_bytes && sig.align <= dev.arg_align
    } else {
        (sig.bytes, sig.align) == (dev.arg_bytes, dev.arg_align)
    };
    let dev_derefs = dev.flags & (OP_DEREFS | OP_STATE) != 0;
    // A host's state op needs a handler that touches nothing but the
    // state; an unchecked declaration (`with_pointers`) may name one.
    fits && dev_derefs == sig.derefs && (!sig.state || dev.flags & OP_STATE != 0)
}

/// Why row `dev` (none: the table has no such op) does not serve `sig`.
#[cold]
fn mismatch(dev: Option<&OpInfo>, sig: &Signature) -> Error {
    let why = match dev {
        None => "the kernel's op table has no such op".into(),
        Some(dev) => {
            let dev_derefs = dev.flags & (OP_DEREFS | OP_STATE) != 0;
            if !matches(
                dev,
                &Signature {
                    derefs: dev_derefs,
                    state: false,
                    ..*sig
                },
            ) {
                format!(
                    "the host's arguments take {} bytes aligned to {}, the device's {}{} bytes \
                     aligned to {}",
                    sig.bytes,
                    sig.align,
                    if dev.flags & OP_UP_TO != 0 {
                        "up to "
                    } else {
                        ""
                    },
                    dev.arg_bytes,
                    dev.arg_align
                )
            } else if dev_derefs != sig.derefs {
                if dev_derefs {
                    "the device's handler dereferences pointers, the host declared it without \
                     (TypedOp::with_pointers)"
                        .into()
                } else {
                    "the host declared pointers, the device's handler takes none (TypedOp::new)"
                        .into()
                }
            } else {
                "the host declared a state op (StateOp), the device's handler is not one \
                 (PKQ_OP_INFO_STATE)"
                    .into()
            }
        }
    };
    Error::OpMismatch {
        op: sig.name.to_string(),
        code: sig.op,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::typed::TypedOp;

    fn table(rows: &[OpInfo]) -> OpTable {
        OpTable::parse(bytemuck::cast_slice(rows), rows.len() as u32).unwrap()
    }

    #[repr(C)]
    #[derive(Clone, Copy, Pod, Zeroable)]
    struct Args {
        a: u64,
        b: f32,
        c: u32,
    }

    /// A module's row that no slot can carry (over 48 argument bytes), an
    /// alignment that is not a power of two up to 8, or a flag this pkq
    /// does not know is refused at load, naming the op.
    #[test]
    fn rows_no_slot_can_carry_are_refused_at_load() {
        let parse = |o: OpInfo| OpTable::parse(bytemuck::bytes_of(&o), 1);
        let ok = OpInfo {
            op: 300,
            arg_bytes: 48,
            arg_align: 8,
            flags: OP_UP_TO,
        };
        assert!(parse(ok).is_ok());
        for (bad, says) in [
            (
                OpInfo {
                    arg_bytes: 56,
                    ..ok
                },
                "56 argument bytes",
            ),
            (OpInfo { arg_align: 0, ..ok }, "alignment of 0"),
            (
                OpInfo {
                    arg_align: 12,
                    ..ok
                },
                "alignment of 12",
            ),
            (
                OpInfo {
                    arg_align: 16,
                    ..ok
                },
                "alignment of 16",
            ),
            (
                OpInfo {
                    flags: 1 << 9,
                    ..ok
                },
                "flags 0x200",
            ),
        ] {
            match parse(bad) {
                Err(Error::InvalidModule(m)) => {
                    assert!(m.contains("op 300") && m.contains(says), "{m}")
                }
                other => panic!("{says}: {:?}", other.err()),
            }
        }
    }

    /// A type past 4 GiB does not pass as its size modulo 2^32 (no value
    /// of it is made: the check reads its size only).
    #[test]
    fn arguments_past_4_gib_never_match_a_table_row() {
        #[repr(C)]
        #[derive(Clone, Copy, Pod, Zeroable)]
        struct Huge {
            a: [[[u8; 4096]; 1024]; 1024],
            b: [u8; 16],
        }
        assert_eq!(size_of::<Huge>() as u32, 16);
        let t = table(&[OpInfo {
            op: 300,
            arg_bytes: 16,
            arg_align: 1,
            flags: 0,
        }]);
        assert!(matches!(
            t.check(&TypedOp::<Huge>::new(300, "BIG").signature()),
            Err(Error::OpMismatch { code: 300, .. })
        ));
    }

    #[test]
    fn declared_ops_are_checked_against_the_table() {
        let t = table(&[
            OpInfo {
                op: 300,
                arg_bytes: 16,
                arg_align: 8,
                flags: 0,
            },
            OpInfo {
                op: 256,
                arg_bytes: 16,
                arg_align: 8,
                flags: OP_DEREFS,
            },
        ]);
        assert!(t.check(&TypedOp::<Args>::new(300, "A").signature()).is_ok());
        assert!(
            t.check(&TypedOp::<Args>::with_pointers(256, "B").signature())
                .is_ok()
        );
        assert!(matches!(t.refuse(Op(256), 16), Err(Error::UncheckedOp(_))));
        assert!(t.refuse(Op(300), 16).is_ok() && t.refuse(Op(1), 5).is_ok());
        let strict = t.clone().refusing_unlisted();
        assert!(strict.refuse(Op(300), 16).is_ok());
        assert!(matches!(
            strict.refuse(Op(1), 0),
            Err(Error::OpMismatch { code: 1, .. })
        ));
        // A listed op's arguments are its table's size, or up to it where
        // the table says so.
        for len in [0, 8, 24] {
            match t.refuse(Op(300), len) {
                Err(Error::OpMismatch { code: 300, why, .. }) => {
                    assert!(why.contains("16"), "{why}")
                }
                other => panic!("{len} bytes: {other:?}"),
            }
        }
        let up_to = table(&[OpInfo {
            op: 1,
            arg_bytes: 48,
            arg_align: 8,
            flags: OP_UP_TO,
        }]);
        assert!(up_to.refuse(Op(1), 0).is_ok() && up_to.refuse(Op(1), 48).is_ok());
        assert!(matches!(
            up_to.refuse(Op(1), 49),
            Err(Error::OpMismatch { .. })
        ));
        for (sig, what) in [
            (TypedOp::<[u64; 3]>::new(300, "size").signature(), "bytes"),
            (
                TypedOp::<[u32; 4]>::new(300, "align").signature(),
                "aligned",
            ),
            (
                TypedOp::<Args>::new(256, "flag").signature(),
                "dereferences",
            ),
            (
                TypedOp::<Args>::with_pointers(300, "flag2").signature(),
                "declared pointers",
            ),
            (TypedOp::<Args>::new(9, "absent").signature(), "no such op"),
        ] {
            match t.check(&sig) {
                Err(Error::OpMismatch { op, code, why }) => {
                    assert_eq!((op.as_str(), code), (sig.name, sig.op));
                    assert!(why.contains(what), "{why}");
                    let shown = Error::OpMismatch { op, code, why }.to_string();
                    assert!(shown.contains(sig.name), "{shown}");
                }
                other => panic!("{}: {other:?}", sig.name),
            }
        }
    }

    #[test]
    fn malformed_tables_are_refused() {
        let row = OpInfo {
            op: 5,
            arg_bytes: 0,
            arg_align: 1,
            flags: 0,
        };
        let two = [row, row];
        assert!(OpTable::parse(bytemuck::cast_slice(&two), 2).is_err());
        assert!(OpTable::parse(bytemuck::cast_slice(&two[..1]), 2).is_err());
        let big = OpInfo { op: 70_000, ..row };
        assert!(OpTable::parse(bytemuck::bytes_of(&big), 1).is_err());
        assert!(OpTable::parse(&[], 0).is_err());
    }

    /// A row flagged up-to (`PKQ_OP_INFO_UP_TO`, as pkq's ECHO) matches a
    /// declaration of any size and alignment up to its own, and refuses a
    /// larger one.
    #[test]
    fn an_up_to_row_takes_declarations_up_to_its_size() {
        let t = table(&[OpInfo {
            op: 1,
            arg_bytes: 48,
            arg_align: 8,
            flags: OP_UP_TO,
        }]);
        assert!(t.check(&TypedOp::<u64>::new(1, "ECHO").signature()).is_ok());
        assert!(
            t.check(&TypedOp::<[u64; 2]>::new(1, "ECHO").signature())
                .is_ok()
        );
        assert!(
            t.check(&TypedOp::<[u64; 6]>::new(1, "ECHO").signature())
                .is_ok()
        );
        assert!(t.check(&TypedOp::<u8>::new(1, "ECHO").signature()).is_ok());
        match t.check(&TypedOp::<[u64; 7]>::new(1, "ECHO").signature()) {
            Err(Error::OpMismatch { why, .. }) => assert!(why.contains("up to 48"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// A mismatch names an op the host did not name by its code alone.
    #[test]
    fn a_mismatch_of_an_unnamed_op_names_its_code_once() {
        let t = table(&[OpInfo {
            op: 259,
            arg_bytes: 16,
            arg_align: 8,
            flags: 0,
        }]);
        let e = t.refuse(Op(259), 8).unwrap_err();
        let shown = e.to_string();
        assert!(shown.starts_with("op 259: "), "{shown}");
        let named = t
            .check(&TypedOp::<u64>::new(259, "GAIN").signature())
            .unwrap_err();
        assert!(named.to_string().starts_with("GAIN (op 259): "), "{named}");
    }

    #[test]
    fn a_lane_serves_the_ops_of_its_width_and_nop() {
        use crate::layout::{OP_GROUP, OP_NOP};
        let row = |op: u32, flags: u32| OpInfo {
            op,
            arg_bytes: 0,
            arg_align: 1,
            flags,
        };
        let rows = [row(u32::from(OP_NOP), 0), row(300, 0), row(301, OP_GROUP)];
        let group = Width::Group {
            blocks: 4,
            warps: 8,
        };
        let warp_lane = table(&rows);
        let wide_lane = table(&rows).serving(group);
        assert!(warp_lane.refuse(Op(300), 0).is_ok());
        assert!(matches!(
            warp_lane.refuse(Op(301), 0),
            Err(Error::OpMismatch { .. })
        ));
        assert!(matches!(
            wide_lane.refuse(Op(300), 0),
            Err(Error::OpMismatch { .. })
        ));
        assert!(wide_lane.refuse(Op(301), 0).is_ok());
        for t in [&warp_lane, &wide_lane] {
            assert!(t.refuse(Op(OP_NOP), 0).is_ok());
        }
        assert!(wide_lane.refuse_width(Op(301)).is_ok());
        assert!(matches!(
            wide_lane.refuse_width(Op(300)),
            Err(Error::OpMismatch { .. })
        ));
        assert!(warp_lane.refuse_width(Op(300)).is_ok() && wide_lane.refuse_width(Op(999)).is_ok());
        let declared = TypedOp::<()>::new(301, "WIDE").signature();
        assert!(wide_lane.check(&declared).is_ok());
        assert!(matches!(
            warp_lane.check(&declared),
            Err(Error::OpMismatch { .. })
        ));
    }
}
