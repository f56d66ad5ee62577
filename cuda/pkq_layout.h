/*
 * pkq_layout.h: the one definition of the memory shared by the host and the
 * resident kernel.
 *
 * Every number both sides use is a `#define PKQ_<NAME> <integer>` here.
 * build.rs turns each into `pub const <NAME>` in Rust (src/proto/layout.rs), with the
 * type named in the trailing comment (usize when none), so the two sides
 * cannot drift: a change here changes both, and the structs below are checked
 * against these numbers at compile time on both sides (static_assert here,
 * const assertions in src/proto/layout.rs).
 *
 * Two mapped, pinned host allocations carry the shared words. Words the host
 * writes live only in the first, words the device writes only in the second,
 * so a host-written and a device-written word never share a cache line.
 *
 * host -> device allocation:  [ submission slots: pollers x rings x capacity x 64 B ][ control lines: workers x pollers x 128 B ][ pack arguments: rings x capacity x 256 B ][ input areas: rings x capacity x io_in_words x 8 B ]
 * device -> host allocation:  [ completion entries: rings x capacity x 32 B ][ pad to 128 B ][ poller states: workers x pollers x 8 B ][ heartbeats: workers x pollers x 8 B ][ pack results: rings x capacity x 256 B ][ output areas: rings x capacity x io_out_words x 8 B ]
 * (each section starts on a PKQ_SECTION_ALIGN boundary)
 *
 * RINGS
 * The slots form `rings` rings of `capacity` slots each, ring r's slots and
 * entries at index r * capacity + (seq & (capacity - 1)); each ring has its
 * own sequence numbers (from start_seq) and its own host-only tail, so
 * producers on different rings share no cache line. Worker w serves ring
 * w % rings, the sequence numbers start + w / rings + k * (workers / rings).
 *
 * TAGGED WORDS (the LL protocol of NCCL, widened to 56 bits of payload)
 * Every 8-byte word of a submission slot and of a completion entry carries a
 * tag in its top byte and 56 payload bits below it. The tag is the low byte
 * of the lap of the task's sequence number: lap = seq >> log2(capacity).
 * An aligned 8-byte store is single-copy atomic on both sides (x86-64 mov,
 * PTX st.*.u64) and so is an aligned 8-byte load, so a reader sees each word
 * either wholly old or wholly new; a word whose tag matches the lap it
 * expects is therefore valid, whatever order the other words arrived in.
 * Readers check every word's tag: no sequence word, no flag read after the
 * data, and no fence between data and flag is needed, so the device reads a
 * whole slot in one round of PCIe reads and the host sees a completion as
 * soon as its last word lands.
 *
 * A slot or entry holds only its current or previous lap: the producer
 * rewrites a slot for lap L+1 only after it saw the completion of lap L
 * (so after the device finished reading the slot), and the device writes an
 * entry for lap L+1 only after the host published lap L+1, which it does only
 * after it read the entry of lap L. Tags are compared for equality with the
 * expected lap; a tag that is neither the expected lap nor the one before is
 * corruption, and the device stops with PKQ_WORKER_BAD_TAG.
 *
 * Sequence numbers are 63 bits and wrap (at 2^63); capacity divides 2^63, so
 * the slot index and the tag run on continuously across the wrap.
 */
#ifndef PKQ_LAYOUT_H
#define PKQ_LAYOUT_H

/* Bump when anything below changes meaning. */
#define PKQ_PROTOCOL_VERSION 7 /* u32 */

/* ---------------------------------------------------------------------------
 * Tagged words
 * ------------------------------------------------------------------------- */
#define PKQ_TAG_SHIFT 56 /* u32 */
#define PKQ_CHUNK_BITS 56 /* u32 */
#define PKQ_SEQ_BITS 63 /* u32 */

/* ---------------------------------------------------------------------------
 * Submission slot: written by one producer thread (the one whose reservation
 * on its ring's host-only tail counter won the slot's sequence number), read
 * by the poller warps of the one device worker that owns the slot (see
 * RINGS above); the poller that claims the task (a shared-memory
 * compare-and-swap among them) runs it and writes its completion.
 * COPIES: with P poller warps per worker, the slots are there P times (copy
 * c of ring r's slots at (c * rings + r) * capacity slots from the start);
 * the producer writes every copy of its slot, and poller c of a worker
 * polls copy c only, so that its reads do not queue behind another
 * poller's reads of the same line. Each copy is tagged and whole on its
 * own; the claim decides which poller runs the task. A task can complete
 * from one copy while its producer is still writing the others, so the
 * rule below ("rewrites a slot only after it saw the completion") holds
 * per copy through one more step: the host frees a slot for its next lap
 * only after the publish that filled it wrote every copy (a host-only mark
 * per slot, Queue::published), and a copy other than 0 may meanwhile hold
 * the lap before the one before, which its poller reads as not yet
 * published, not as corruption. Copy 0 never does: the producer stores
 * copy 0, then (after a release fence, for the compiler) the others, and
 * x86-64 keeps stores in program order on their way to the device (TSO;
 * pkq builds for x86-64 hosts only, see docs/PROTOCOL.md), so a poller that
 * sees a lap in any copy is followed by copy 0 holding it too.
 * 8 tagged words = 56 payload bytes; the payload is a little-endian bit
 * stream: chunk k of word k holds payload bits [56k, 56k + 56).
 * Payload bytes 0..8: header (bits 0..16 op code, bits 16..24 argument
 * length in bytes, bits 24..32 the pack count, the rest zero); bytes
 * 8..56: the arguments. A pack count of 0 is one task; 1 to PKQ_PACK_TASKS
 * makes the slot a pack (see PACKS below): that many tasks of the op, each
 * with `length` (at most PKQ_PACK_ARG_BYTES) argument bytes in the slot's
 * pack arguments, the slot's own argument bytes unused.
 * Written with relaxed 8-byte stores (order irrelevant: every word is tagged);
 * read by the device with relaxed sys-scope 8-byte loads, 8 lanes of one
 * warp issuing one coalesced 64-byte read.
 * ------------------------------------------------------------------------- */
#define PKQ_SLOT_BYTES 64
#define PKQ_SLOT_WORDS 8
#define PKQ_ARGS_BYTES 48
#define PKQ_HEADER_LEN_SHIFT 16 /* u32 */
#define PKQ_HEADER_PACK_SHIFT 24 /* u32 */
/* Header bits 32..49: the task's input bytes in its slot's input area (IO
   below); bit 49: the task has an input and an output area (an IO task);
   bit 50: its input is plain bytes (PLAIN below); bit 51: the slot's
   output area held a plain output in the last 255 laps (PLAIN below);
   bit 52: the task may write host memory (a host buffer of the caller's:
   `HostBuffer`), so its worker fences at system scope, not GPU scope,
   between the handler's writes and the completion; bit 53: the task is
   traced (tracing was on at its submit, and its record is kept, not
   dropped: `pkq::trace`; only on a lane of blocks or groups, whose
   submits claim their records before their stores): a lane of blocks or
   groups logs each block's run of it (TRACE LOG below); a lane of warps
   never gets it. */
#define PKQ_HEADER_IN_SHIFT 32 /* u32 */
#define PKQ_HEADER_IN_BITS 17 /* u32 */
#define PKQ_HEADER_IO_BIT 49 /* u32 */
#define PKQ_HEADER_PLAIN_BIT 50 /* u32 */
#define PKQ_HEADER_FRESH_BIT 51 /* u32 */
#define PKQ_HEADER_HOST_BIT 52 /* u32 */
#define PKQ_HEADER_TRACE_BIT 53 /* u32 */

/* ---------------------------------------------------------------------------
 * Completion entry: written by the device worker that ran the task (lane 0
 * of its warp stores the four tagged words as two 16-byte vector stores,
 * relaxed sys-scope, no fence: each word is tagged and single-copy atomic,
 * so their order does not matter); read by the host thread
 * that waits on the task's ticket (or reclaims its slot), with 8-byte acquire
 * loads. The host writes nothing here.
 * Payload bit stream (28 bytes): bytes 0..8 result value, 8..16 device start
 * time, 16..24 device end time (ns of %globaltimer), byte 24 status, byte
 * 25 the pack count (0: one task). For a pack, the value is the mask of its
 * tasks whose status is not PKQ_STATUS_OK and the times span all of them;
 * each task's result is in the slot's pack results. Byte 26: flags
 * (PKQ_CQE_OUTPUT: an IO task's output is in its slot's output area;
 * PKQ_CQE_PLAIN with it: as plain bytes, PLAIN below). Byte 27: the poller
 * warp of the worker that ran the task (for the host's trace records).
 * ------------------------------------------------------------------------- */
#define PKQ_CQE_OUTPUT 1 /* u8 */
#define PKQ_CQE_PLAIN 2 /* u8 */
#define PKQ_CQE_BYTES 32
#define PKQ_CQE_WORDS 4

/* ---------------------------------------------------------------------------
 * Control lines (host -> device allocation, after the slots): one 128-byte
 * line per poller (poller j of worker w: line w * pollers + j), so that no
 * device-polled slot shares its 128-byte prefetch pair, and no two pollers
 * poll the same line. Reads of one line of host memory are answered one
 * after another: when every worker read one shared stop word, each read of
 * it queued behind the others'; two warps reading one line back to back
 * slowed a memory-bound kernel on other SMs
 * (docs/design/heartbeat-and-stop.md#stop-word).
 * Word PKQ_CTRL_STOP of a poller's line: written by the host with one value
 * only (release stores of PKQ_STOP_VALUE to every poller's line: after the
 * drain on shutdown, at once on cancel or when a fault is latched; it may be
 * stored more than once, always the same value), read by that poller
 * every PKQ_STOP_POLL_INTERVAL of its own polls, busy or
 * idle, in the same load instruction as the slot poll (so it costs no extra
 * round trip; a quiet poller, which does not poll, reads it on its own
 * every QUIET_STOP_NAPS naps, pkq_worker.cuh); it takes precedence over a
 * task in the slot, and a poller never drops one it read set, so a busy
 * worker (one poll per slot) starts at most that many more slots per
 * poller (a packed slot runs all its tasks). One writer, one aligned 8-byte word:
 * no torn read. It is the exit of every device spin loop but SPIN's (a test
 * op that waits out its argument) and a taking poller's wait for the other
 * pollers' chunks of a large IO stream (io_together in pkq_worker.cuh),
 * which ends because those pollers never block.
 * ------------------------------------------------------------------------- */
#define PKQ_CTRL_BYTES 128
#define PKQ_CTRL_STOP 0
#define PKQ_STOP_VALUE 1 /* u64 */
#define PKQ_STOP_POLL_INTERVAL 8 /* u32 */

/* ---------------------------------------------------------------------------
 * PACKS: many small tasks in one slot (Runtime::submit_packed), so that a
 * task costs the host one 8-byte store and one 8-byte load instead of a
 * 64-byte slot, a 32-byte completion and a compare-and-swap, and the device
 * one dependent read per pack instead of per task.
 * Pack arguments (host -> device allocation): PKQ_PACK_TASKS words per slot,
 * at index (r * capacity + slot) * PKQ_PACK_TASKS + j for task j of the
 * pack in ring r's slot. Written by the producer that reserved the slot
 * (relaxed 8-byte stores of the arguments, zero-padded) before it publishes
 * the slot's words, with a release fence between; read by the worker that
 * took the pack, lane j loading word j, after it saw the whole slot and a
 * system-scope acquire fence (the words carry no tag: the fence orders
 * them after the slot). The producer writes them again only for a later
 * lap, after it saw the pack's completion, so the worker never reads them
 * while they change.
 * Pack results (device -> host allocation): the same indexing; written by
 * that worker (lane j stores task j's value, or its status code when the
 * status is not OK) before a system fence and then the pack's completion;
 * read by the host thread that takes the completion (or moves it aside)
 * after it saw the whole completion and before it frees the slot (the next
 * lap overwrites them). Aligned 8-byte words with one writer each: no torn
 * read.
 * ------------------------------------------------------------------------- */
#define PKQ_PACK_TASKS 32
#define PKQ_PACK_ARG_BYTES 8

/* ---------------------------------------------------------------------------
 * IO: a task's input and output bytes in mapped memory (Builder::io,
 * TypedOp::io), up to PKQ_IO_MAX_BYTES each way, in areas of the
 * slot, tagged like the slot's words: each word carries the lap's tag and
 * 7 bytes of a byte stream (word k: bytes [7k, 7k + 7), little-endian).
 * A stream of PKQ_IO_PLAIN_MIN_BYTES or more is plain bytes instead
 * (PLAIN below); what follows is of tagged streams.
 * Unlike a slot, an area is not rewritten every lap (plain tasks leave it,
 * a short output leaves the tail of a longer one), so a word 256 laps old
 * carries the same tag: the tags alone do not tell this lap's words, and
 * each direction also has an order (below).
 * Input area (host -> device allocation): io_in_words words per slot (an
 * even count: each area starts on 16 bytes, read 16 bytes a lane), at
 * index (r * capacity + slot) * io_in_words; the task's input bytes (their
 * count in the slot's header). Written by the producer that reserved the
 * slot (relaxed 8-byte stores) before it publishes the slot; read by the
 * poller that took the task (an input of several chunks of 512 words also
 * by the worker's other pollers, which cannot take a task meanwhile: the
 * taking poller posts it in the block's shared memory after the fence
 * below, and waits until every chunk is decoded before its handler runs;
 * IoHelp in pkq_worker.cuh), every word checked for the task's tag (a
 * word of another lap after IO_RETRIES reads fails the task with
 * PKQ_STATUS_BAD_ARGS; the fence makes one a host's fault): after it saw
 * the whole slot and a system-scope acquire fence (so its loads come after
 * the slot's: the producer's stores reach the device in order, x86-64's
 * TSO, with a release fence for the compiler; reading the input in the
 * same round as the slot was measured slower: docs/design/io-transports.md#areas).
 * The producer rewrites them only for a later lap,
 * after it saw the task's completion.
 * Output area (device -> host allocation): io_out_words words per slot, the
 * same indexing; word 0 holds the output's length (bits 0..17) and the low
 * PKQ_IO_LAP_BITS bits of the task's lap (from bit PKQ_IO_LAP_SHIFT), the
 * stream from word 1 its bytes. Written by the poller that ran the task:
 * the stream (relaxed sys-scope 8-byte stores; a stream of several chunks
 * also by the worker's other pollers, each behind a system fence of its
 * own where one is due, counted done before the taking poller goes on), a
 * system fence (none where the worker's knowledge of the slot, below,
 * makes the tags enough), word 0, then the task's completion, which says
 * so (PKQ_CQE_OUTPUT). Read by
 * the host thread that takes the completion (or moves it aside): the task
 * is complete only once word 0 holds this lap and every word of the stream
 * this lap's tag (then the stream is this lap's: the fence, or the
 * knowledge); it reads them before it frees
 * the slot (the next lap overwrites them). One writer per word, aligned 8 bytes:
 * no torn read. The poller that took a task decodes its input into, and
 * its handler writes the output in, its worker's rooms (a worker runs one
 * task at a time, whichever of its pollers took it): in the block's
 * dynamic shared memory when the launch gave every worker of the block its
 * rooms, else in io_scratch (device memory allocated before the kernel
 * starts).
 * Word k's 7 bytes sit at bytes [7k, 7k + 7) of a room; each room is a
 * multiple of PKQ_IO_ROOM_ALIGN bytes (8-byte words, whole groups of 7).
 * What the worker knows of each slot's output area (device memory, after
 * the rooms: PKQ_IO_SEEN_WORDS word per slot, zeroed by the kernel's
 * blocks before they serve; read and written only by the pollers of the
 * worker that serves the slot, every lap the same one): bits 0..16 a
 * count n of words, bits 16..64 the low 48 bits of a lap L, meaning "words
 * [0, n) of the output's stream (from word 1) were all written at lap L or
 * later". A task of lap M whose words [0, m) have m <= n and M - L < 256
 * meets in those words only laps M - 255 .. M, so a word that carries M's
 * tag is M's: the host needs no fence to tell, and the output's word 0 is
 * stored without a fence after its stream. Otherwise (the slot's first IO
 * task, a longer stream than the knowledge covers, or a knowledge 256 laps
 * old: IO tasks that write fewer words keep an older lap's knowledge up to
 * 128 laps, failed and empty ones none) the fence above orders them.
 * Knowledge read late (an older value) is still true: the area only gets
 * newer. Input areas need none: their fence is an acquire fence, which on
 * sm_90 costs about nothing (docs/design/acquire-fence.md#no-input-knowledge;
 * before sm_90 it is fence.acq_rel.sys, a full system fence every IO task
 * with an input pays).
 * ------------------------------------------------------------------------- */
#define PKQ_IO_SEEN_WORDS 1

/* ---------------------------------------------------------------------------
 * PLAIN: a stream of PKQ_IO_PLAIN_MIN_BYTES or more moves as plain bytes,
 * untagged, behind system fences, by the bulk copy engine where the
 * worker's rooms are in shared memory (else by the taking poller's loads
 * and stores): the codec's cost grows with the bytes, a fence's does not.
 * Input (chosen by the producer, from its length): the producer writes the
 * bytes from byte 0 of the slot's input area (8-byte words, the whole
 * ones by non-temporal stores, the last, zero-padded one cached, then an
 * sfence, which orders them before the slot's stores) and sets header bit
 * PKQ_HEADER_PLAIN_BIT; the
 * poller that took the task reads them only after the whole slot, a
 * system-scope acquire fence and an async-proxy fence (the bulk copy is a
 * weak read of the async proxy), copying the area's first bytes, rounded
 * up to 16, into the input room. Output (chosen by the device, from the handler's length): the
 * poller copies the output room's bytes, rounded up to 16, to the output
 * area from byte 16 (word 2), waits for the copy's writes, fences (async
 * proxy, then system), stores word 0 (length and lap, as a tagged output's)
 * and then the completion with PKQ_CQE_OUTPUT | PKQ_CQE_PLAIN. The host
 * takes it once the entry and word 0 hold this lap: the fence put the
 * bytes before both. Area sizes: both areas hold a plain stream of their
 * most bytes, rounded up to 16 (the output from word 2), and every slot's
 * areas start on 16 bytes (an even count of words each).
 * Plain bytes carry no tag, so a plain output breaks what a worker knows
 * of the output area (IO_SEEN): a plain word may carry any lap's tag. A
 * lap that wrote a plain output leaves the knowledge empty, and, because a
 * poller reads the knowledge before its poll (an older value than the
 * plain lap's note may be read several laps on), the host marks every IO
 * task of the next 255 laps of that slot with PKQ_HEADER_FRESH_BIT: its
 * worker then uses no knowledge of the slot (fences, as for a first task)
 * and notes only what this task wrote. After 255 laps, knowledge older
 * than the plain lap is too old to be used (seen_reach). The host learns
 * of a plain output from the completion, before the slot is freed
 * (Io::note_plain in src/proto/queue.rs). A plain input needs no mark: no
 * knowledge of input areas is kept.
 * ------------------------------------------------------------------------- */
#define PKQ_IO_PLAIN_MIN_BYTES 4096
#define PKQ_IO_PLAIN_OUT_WORD 2
#define PKQ_IO_MAX_BYTES 65536
#define PKQ_IO_WORD_BYTES 7
#define PKQ_IO_ROOM_ALIGN 112
#define PKQ_IO_LAP_SHIFT 17 /* u32 */
#define PKQ_IO_LAP_BITS 39 /* u32 */

/* ---------------------------------------------------------------------------
 * Poller state words (device -> host allocation, after the completion
 * entries, 128-byte aligned). Word w * pollers + j is written only by lane 0
 * of poller warp j of worker w (relaxed sys-scope 8-byte stores), read by
 * the host's liveness checks (acquire loads). One writer per word, aligned
 * 8 bytes: no torn read. Bits 0..8: the state below; bits 8..64: how many of
 * its worker's tasks the poller knows to be taken (its position; progress
 * for diagnostics), as of its latest heartbeat or its stop. The final state
 * (STOPPED or BAD_TAG) is the poller's last store to mapped memory, behind
 * a warp barrier and a system fence after every other: a kernel all of whose
 * pollers stored it has exited, which is how the host sees an exit when the
 * driver reports a fault on every context of the process (docs/PROTOCOL.md,
 * "Faults").
 * ------------------------------------------------------------------------- */
#define PKQ_WORKER_STARTING 0 /* u64 */
#define PKQ_WORKER_RUNNING 1 /* u64 */
#define PKQ_WORKER_STOPPED 2 /* u64 */
#define PKQ_WORKER_BAD_TAG 3 /* u64 */
#define PKQ_STATE_BITS 8 /* u32 */
/* Heartbeat words follow the state words (word pollers_total + w * pollers +
   j), same writer and reader: %globaltimer (ns) as of the poller's latest
   beat. A poller beats every PKQ_HEARTBEAT_CYCLES SM cycles, judged by
   clock64 (a register read; %globaltimer is read to beat, to time tasks, and
   under an idle policy every 8th idle poll) every 8
   polls, every poll while it sleeps between polls, and after every task:
   2^17 cycles, 66 us at 1.98 GHz, under 1 ms at any clock over 131 MHz. One that runs a task does not beat, so a heartbeat older
   than the stall bound (10 ms at least) means the poller is stuck in a task,
   or the kernel is gone. */
#define PKQ_HEARTBEAT_CYCLES 131072 /* u64 */

/* Separation of the sections inside each allocation. */
#define PKQ_SECTION_ALIGN 128

/* ---------------------------------------------------------------------------
 * Limits
 * ------------------------------------------------------------------------- */
#define PKQ_MAX_CAPACITY_LOG2 20 /* u32 */
#define PKQ_MAX_WORKERS 1024
#define PKQ_MAX_WARPS_PER_BLOCK 8
/* Poller warps per worker (1, 2, 4 or 8), started a fraction of a read round
   trip apart, all polling the worker's next slot, each in its own copy of
   the slots (COPIES above). */
#define PKQ_MAX_POLLERS 8

/* ---------------------------------------------------------------------------
 * Built-in ops and task status codes
 * ------------------------------------------------------------------------- */
/* Op codes below PKQ_OP_USER are pkq's; a module's own ops take the rest. */
#define PKQ_OP_USER 256 /* u16 */
#define PKQ_OP_NOP 0 /* u16 */
#define PKQ_OP_ECHO 1 /* u16 */
#define PKQ_OP_AXPY 2 /* u16 */
/* SPIN: busy-waits the u64 argument's nanoseconds (at most PKQ_SPIN_MAX_NS)
   by %globaltimer, then returns the nanoseconds it waited. */
#define PKQ_OP_SPIN 3 /* u16 */
/* TRAP: executes a trap instruction, which kills the resident kernel and
   leaves a sticky error in its CUDA context (for testing fault handling). */
#define PKQ_OP_TRAP 4 /* u16 */
#define PKQ_SPIN_MAX_NS 10000000000 /* u64 */
/* MEMCPY: copies `bytes` (at most PKQ_MEMCPY_MAX_BYTES) from src to dst
   (device addresses; the ranges must not overlap). */
#define PKQ_OP_MEMCPY 5 /* u16 */
/* MEMSET: sets `bytes` (at most PKQ_MEMCPY_MAX_BYTES) at dst to the byte
   `value`. */
#define PKQ_OP_MEMSET 6 /* u16 */
/* DOT: sum of x[i] * y[i] over i < n (at most PKQ_DOT_MAX_N), or of x[i]
   when y is 0, accumulated in double; the result's bits are the value. */
#define PKQ_OP_DOT 7 /* u16 */
/* GEMV: y = A x, A of rows x cols f32 in row-major order, both at most
   PKQ_GEMV_MAX_DIM. */
#define PKQ_OP_GEMV 8 /* u16 */
/* FIR: y[i] = sum over k < taps of h[k] * x[i + k], i < n (at most
   PKQ_FIR_MAX_N); x holds n + taps - 1 samples, taps at most PKQ_FIR_MAX_TAPS. */
#define PKQ_OP_FIR 9 /* u16 */
/* COPY_IO: out[i] = (i < in_len ? in[i] : 0) ^ key for i < out_len; the value
   is the sum of the input bytes (an IO task's test and bench op). */
#define PKQ_OP_COPY_IO 10 /* u16 */
/* GROUP_EMPTY: a group op that does nothing on every participant (the
   empty wide task: its round trip is the cost of the hand-off). */
#define PKQ_OP_GROUP_EMPTY 11 /* u16 */
/* GROUP_DOT: DOT's arguments and result, over every thread of the group,
   for n up to PKQ_GROUP_MAX_N. */
#define PKQ_OP_GROUP_DOT 12 /* u16 */
/* GROUP_AXPY, GROUP_MEMCPY, GROUP_MEMSET, GROUP_GEMV, GROUP_FIR: AXPY,
   MEMCPY, MEMSET, GEMV and FIR over every thread of the group (their
   arguments), for n up to PKQ_GROUP_MAX_N, bytes up to
   PKQ_GROUP_MEMCPY_MAX_BYTES, rows and cols up to PKQ_GROUP_GEMV_MAX_DIM. */
#define PKQ_OP_GROUP_AXPY 13 /* u16 */
#define PKQ_OP_GROUP_MEMCPY 14 /* u16 */
#define PKQ_OP_GROUP_MEMSET 15 /* u16 */
#define PKQ_OP_GROUP_GEMV 16 /* u16 */
#define PKQ_OP_GROUP_FIR 17 /* u16 */
/* GROUP_SPIN: block r of the group busy-waits r times the u64 argument's
   nanoseconds by %globaltimer (block 0 not at all; (blocks - 1) times it
   at most PKQ_SPIN_MAX_NS, else BAD_ARGS), then returns (blocks - 1) times
   the argument: a task whose participants end one after another (for
   testing stragglers). */
#define PKQ_OP_GROUP_SPIN 18 /* u16 */
#define PKQ_GROUP_MAX_N 268435456
#define PKQ_GROUP_MEMCPY_MAX_BYTES 17179869184
#define PKQ_GROUP_GEMV_MAX_DIM 65536
#define PKQ_MEMCPY_MAX_BYTES 65536
#define PKQ_DOT_MAX_N 65536
#define PKQ_GEMV_MAX_DIM 256
#define PKQ_FIR_MAX_N 65536
#define PKQ_FIR_MAX_TAPS 64

#define PKQ_STATUS_OK 0 /* u8 */
#define PKQ_STATUS_UNKNOWN_OP 1 /* u8 */
#define PKQ_STATUS_BAD_ARGS 2 /* u8 */
/* A wide task cut short by a stop (WIDTH): its poller stopped waiting for
   its group, whose blocks may not all have finished; its result is not one. */
#define PKQ_STATUS_STOPPED 3 /* u8 */
/* Status codes from PKQ_STATUS_USER to 255 are the handlers' own. */
#define PKQ_STATUS_USER 16 /* u8 */

/* ---------------------------------------------------------------------------
 * Op table: what each op of a module takes, exported by the module as
 * `<kernel>_ops` (an array of pkq_op_info) and `<kernel>_op_count` (u32)
 * (PKQ_OP_TABLE in pkq.cuh). The host reads it once, when it loads the
 * module, before the kernel starts; nothing writes it after.
 * ------------------------------------------------------------------------- */
#define PKQ_OP_INFO_BYTES 16
#define PKQ_OP_INFO_OFF_OP 0
#define PKQ_OP_INFO_OFF_ARG_BYTES 4
#define PKQ_OP_INFO_OFF_ARG_ALIGN 8
#define PKQ_OP_INFO_OFF_FLAGS 12
/* Flag: the handler dereferences device addresses taken from its arguments
   (the host's safe calls refuse such an op). */
#define PKQ_OP_DEREFS 1 /* u32 */
/* Flag: the handler takes up to arg_bytes argument bytes, shorter arguments
   zero-filled (ECHO; PKQ_OP_INFO_UP_TO in pkq_handler.cuh); without it,
   exactly arg_bytes. The host matches a declaration of at most arg_bytes
   bytes aligned to at most arg_align against such a row, and refuses other
   sizes elsewhere. */
#define PKQ_OP_UP_TO 2 /* u32 */
/* Flag, with PKQ_OP_DEREFS: the handler dereferences only the device state
   whose address and byte length begin its arguments (PKQ_STATE_OFF_ADDR,
   PKQ_STATE_OFF_BYTES), within those bytes; the host's own arguments follow
   at PKQ_STATE_OFF_ARGS. The host's safe stateful call (`StateOp`) writes
   both from state memory it owns. */
#define PKQ_OP_STATE 4 /* u32 */
/* Width flags: the handler runs on every thread of a block (PKQ_OP_BLOCK),
   or of a group of blocks across SMs (PKQ_OP_GROUP), and is served only by
   a lane of that width (WIDTH below); without either, on one warp, by a
   lane of warps. */
#define PKQ_OP_BLOCK 8 /* u32 */
#define PKQ_OP_GROUP 16 /* u32 */
#define PKQ_STATE_OFF_ADDR 0
#define PKQ_STATE_OFF_BYTES 8
#define PKQ_STATE_OFF_ARGS 16

#define PKQ_AXPY_MAX_N 4096

/* ---------------------------------------------------------------------------
 * Kernel parameters (passed by value at launch; never shared memory).
 * ------------------------------------------------------------------------- */
#define PKQ_PARAMS_BYTES 144
#define PKQ_PARAMS_OFF_SQ 0
#define PKQ_PARAMS_OFF_CQ 8
#define PKQ_PARAMS_OFF_CTRL 16
#define PKQ_PARAMS_OFF_STATES 24
#define PKQ_PARAMS_OFF_START_SEQ 32
#define PKQ_PARAMS_OFF_CAPACITY_LOG2 40
#define PKQ_PARAMS_OFF_WORKERS 44
#define PKQ_PARAMS_OFF_POLLERS 48
#define PKQ_PARAMS_OFF_IDLE_SPIN_NS 52
#define PKQ_PARAMS_OFF_IDLE_SLEEP_MAX_NS 56
#define PKQ_PARAMS_OFF_RINGS 60
#define PKQ_PARAMS_OFF_PACK_ARGS 64
#define PKQ_PARAMS_OFF_PACK_RESULTS 72
#define PKQ_PARAMS_OFF_IO_IN 80
#define PKQ_PARAMS_OFF_IO_OUT 88
#define PKQ_PARAMS_OFF_IO_SCRATCH 96
#define PKQ_PARAMS_OFF_IO_IN_WORDS 104
#define PKQ_PARAMS_OFF_IO_OUT_WORDS 108
#define PKQ_PARAMS_OFF_IO_IN_BYTES 112
#define PKQ_PARAMS_OFF_IO_OUT_BYTES 116
#define PKQ_PARAMS_OFF_GROUPS 120
#define PKQ_PARAMS_OFF_GROUP_BLOCKS 128
#define PKQ_PARAMS_OFF_GROUP_WARPS 132
#define PKQ_PARAMS_OFF_TRACE_LOG 136

/* ---------------------------------------------------------------------------
 * WIDTH: a lane of blocks or groups (Builder::width; `group_blocks` != 0).
 * Each worker is a group of `group_blocks` blocks of `group_warps` warps,
 * consecutive in the grid, of which block 0's warp 0 is the worker's one
 * poller: it serves the ring as any poller does, and hands each task it
 * runs a handler for (not a NOP) to the rest of the group: to its own
 * block's warps through shared memory, to the other blocks (a group of
 * more than one) through device memory, never through the host. Per worker, `groups` holds PKQ_GROUP_BYTES of device memory, zeroed
 * by the host before the launch (copies, not a kernel), written by the
 * device alone:
 *   TASK (line 0, written by the poller only): each task handed to the
 *     group as PKQ_GROUP_TASK_WORDS tagged words, every one carrying in its
 *     high 32 bits the task's generation (tasks handed so far, from 1; low
 *     32 bits): word 0 the header (op, len << 16, traced and quit bits,
 *     PKQ_GROUP_HEADER_*), then each of the six argument words as its low
 *     half and its high half. The poller's warp writes all of them in one
 *     store, each lane one word, behind a GPU-scope release fence (the
 *     ordering between data and its flag: every word is its own flag): the
 *     one its warp issues after a completion that follows its acquire of
 *     a task's arrivals, or one right before the store where none came
 *     since that acquire (a pack's next task), for a task on host memory
 *     (whose data it acquired from the host since) and for the quit (none
 *     before the first task: the host zeroed the words, and the blocks
 *     wrote nothing but PRESENT). Blocks 1..
 *     read the line with relaxed GPU-scope loads, one word a lane, until
 *     every word carries the generation they wait for, or one generation
 *     with the quit bit, then fence at GPU scope (acquire). The poller
 *     hands a task's generation only once every block arrived from the
 *     one before, so the line holds the awaited generation or the one
 *     before, except for the quit: the poller's last generation, handed
 *     once it left its loop, which may follow a generation some block
 *     never ran when a wait of the poller's gave up on a stop (ABANDONED).
 *   ARRIVALS (line 1): a GPU-scope release add of one by block r > 0 after
 *     each task it ran (cumulative: its threads' writes, seen through the
 *     block barrier, come first); the poller waits until it is (blocks - 1)
 *     times the generation, with relaxed loads and then a GPU-scope
 *     acquire fence, before it completes the task: every participant
 *     finished, its writes visible.
 *   BARRIER (line 2): the group barrier of handlers (Context::sync_group):
 *     each block adds one per crossing, as ARRIVALS, and waits until it is
 *     `blocks` times its crossings so far (every block crosses the same
 *     barriers of every task, so the count never needs a reset).
 *   PRESENT (line 3, beside ABANDONED): a GPU-scope add of one by block
 *     r > 0 when it starts; the poller waits until it is (blocks - 1), as it
 *     waits for ARRIVALS, before it serves (and so before its worker reports
 *     RUNNING): a worker whose blocks are not all resident (other kernels
 *     hold the SMs) never reports in, so the start ends in a timeout rather
 *     than with tasks handed to blocks that are not there. Blocks that
 *     become resident after a stop find the quit bit in TASK and leave.
 *   LEFT (line 3, beside PRESENT): a GPU-scope release add of one by block
 *     r > 0 when it leaves on the quit bit (cumulative: every write of its
 *     threads, seen through the block barrier, comes first). A poller whose
 *     blocks all reported present waits, once it handed the quit, until it
 *     is (blocks - 1), beating, then fences at GPU scope (acquire) before
 *     its final state word: the host takes a kernel all of whose pollers
 *     stored that word for one that exited (docs/design/fault-verdict.md),
 *     so no block of the group may still run a handler on memory a call
 *     lent. Where a stop ended the poller's wait for PRESENT (only a failed
 *     build's stop can: the build returns a lane only once every worker
 *     reported in), no task was ever submitted, so none ran: the poller
 *     does not wait, and a block that comes later finds the quit bit.
 *   SCRATCH (from line 4, PKQ_GROUP_SCRATCH_BYTES): the group's own device
 *     memory for its handlers (Context::scratch), e.g. per-block partials.
 *   TIMES (after SCRATCH, 16 bytes per block): of a traced task (header bit
 *     PKQ_HEADER_TRACE_BIT, handed on as TASK's PKQ_GROUP_HEADER_TRACED),
 *     block r's %globaltimer when it began running the handler and when
 *     all its threads had finished, written by its first thread (block 0:
 *     the poller's lane 0) with plain stores before its arrival, whose
 *     release orders them; read by the poller's warp after the arrivals
 *     (acquire), for the TRACE LOG.
 * Inside a block the task goes from warp 0 to the other warps through
 * shared memory and a named barrier (1), and their end through another (2);
 * barrier 0 is the handlers' (Context::sync_block). All three are used in
 * the non-aligned form (barrier.sync): block 0's warp 0 reaches them from
 * another instruction than its other warps.
 * Every wait on these words exits: the poller's waits for PRESENT and
 * ARRIVALS and the group barrier's read the poller's stop word every PKQ_GROUP_STOP_SPINS
 * spins, and blocks 1.. leave on the quit bit, which the poller's last
 * generation carries once it left its loop. The poller's wait for LEFT
 * ends once every block's handler returned: it has no stop exit, as a
 * handler that never returns keeps any poller. It leaves its loop on a
 * stop, which ended every wait of its blocks, or on a bad tag, before
 * which none gave up (every block waits for TASK). A wait that gave up on a stop leaves the group
 * abandoned: ABANDONED (line 3) set to 1 by each block whose wait at the
 * group barrier gave up (the only value ever stored there, before its
 * arrival; a wait of the poller's for presence or arrivals that gave up
 * marks the poller's own copy of the flag only), read by the poller after
 * the arrivals; that task, and every task but a NOP (which
 * the poller answers alone) its poller takes after it, completes
 * with PKQ_STATUS_STOPPED and is handed to no block (so no block mixes two
 * tasks' words, and no result of part of the group is published).
 * ------------------------------------------------------------------------- */
#define PKQ_GROUP_BYTES 25088
#define PKQ_GROUP_OFF_TASK 0
#define PKQ_GROUP_TASK_WORDS 13 /* u32 */
#define PKQ_GROUP_HEADER_TRACED 0x1000000 /* u32 */
#define PKQ_GROUP_HEADER_QUIT 0x2000000 /* u32 */
#define PKQ_GROUP_OFF_ARRIVALS 128
#define PKQ_GROUP_OFF_BARRIER 256
#define PKQ_GROUP_OFF_ABANDONED 384
#define PKQ_GROUP_OFF_PRESENT 448
#define PKQ_GROUP_OFF_LEFT 456
#define PKQ_GROUP_OFF_SCRATCH 512
#define PKQ_GROUP_SCRATCH_BYTES 8192
#define PKQ_GROUP_OFF_TIMES 8704
#define PKQ_GROUP_STOP_SPINS 256 /* u32 */
/* Blocks of a group. (Its blocks' warps: at most the kernel's launch
   bound, PKQ_MAX_WARPS_PER_BLOCK.) */
#define PKQ_MAX_GROUP_BLOCKS 1024

/* ---------------------------------------------------------------------------
 * TRACE LOG: a lane of blocks or groups, in mapped host memory (`trace_log`:
 * per worker PKQ_TRACE_LOG_TASKS entries of PKQ_TRACE_LOG_HEADER_WORDS +
 * 2 x group_blocks words, zeroed by the host before the launch), written by
 * the worker's poller warp only, read by the host (a trace's snapshot). The
 * worker's t-th traced task (from 0) goes to entry t % PKQ_TRACE_LOG_TASKS
 * (the last PKQ_TRACE_LOG_TASKS stay), each of its words tagged with
 * (t mod (2^32 - 1)) + 1 in its high 32 bits (never 0, which no written
 * word carries), so the host takes a word only with its entry's tag and
 * needs no order among them (TAGGED WORDS):
 *   word 0, 1: the low and high halves of the task's %globaltimer start (the
 *     completion's t_start, which names the task among the worker's);
 *   word 2: the group's blocks; word 3: the tag alone;
 *   words 4 + 2r, 5 + 2r: block r's start and end (TIMES) as nanoseconds
 *     after the task's start (0 if before it, 2^32 - 1 at most).
 * The warp's stores come before the completion: a system-scope fence
 * between them, in a traced task of a wide lane only (the host that sees
 * the completion finds the entry whole).
 * ------------------------------------------------------------------------- */
#define PKQ_TRACE_LOG_TASKS 256
#define PKQ_TRACE_LOG_HEADER_WORDS 4

/* Arguments of PKQ_OP_AXPY: y[i] = a * x[i] + y[i] for i < n (device pointers). */
#define PKQ_AXPY_ARGS_BYTES 24
#define PKQ_AXPY_OFF_X 0
#define PKQ_AXPY_OFF_Y 8
#define PKQ_AXPY_OFF_N 16
#define PKQ_AXPY_OFF_A 20

/* Arguments of the other built-in ops (device addresses as u64). */
#define PKQ_MEMCPY_ARGS_BYTES 24
#define PKQ_MEMCPY_OFF_DST 0
#define PKQ_MEMCPY_OFF_SRC 8
#define PKQ_MEMCPY_OFF_BYTES 16
#define PKQ_MEMSET_ARGS_BYTES 24
#define PKQ_MEMSET_OFF_DST 0
#define PKQ_MEMSET_OFF_BYTES 8
#define PKQ_MEMSET_OFF_VALUE 16
#define PKQ_DOT_ARGS_BYTES 24
#define PKQ_DOT_OFF_X 0
#define PKQ_DOT_OFF_Y 8
#define PKQ_DOT_OFF_N 16
#define PKQ_GEMV_ARGS_BYTES 32
#define PKQ_GEMV_OFF_A 0
#define PKQ_GEMV_OFF_X 8
#define PKQ_GEMV_OFF_Y 16
#define PKQ_GEMV_OFF_ROWS 24
#define PKQ_GEMV_OFF_COLS 28
#define PKQ_FIR_ARGS_BYTES 32
/* Arguments of PKQ_OP_COPY_IO. */
#define PKQ_COPY_IO_ARGS_BYTES 8
#define PKQ_COPY_IO_OFF_KEY 4
#define PKQ_FIR_OFF_X 0
#define PKQ_FIR_OFF_H 8
#define PKQ_FIR_OFF_Y 16
#define PKQ_FIR_OFF_N 24
#define PKQ_FIR_OFF_TAPS 28

#ifdef __cplusplus
#include <cstddef>
#include <cstdint>

struct pkq_op_info {
    uint32_t op;        /* op code */
    uint32_t arg_bytes; /* sizeof the argument struct */
    uint32_t arg_align; /* alignof the argument struct */
    uint32_t flags;     /* PKQ_OP_DEREFS, PKQ_OP_UP_TO, PKQ_OP_STATE, PKQ_OP_BLOCK, PKQ_OP_GROUP, or 0 */
};
static_assert(sizeof(pkq_op_info) == PKQ_OP_INFO_BYTES, "pkq_op_info size");
static_assert(offsetof(pkq_op_info, op) == PKQ_OP_INFO_OFF_OP, "pkq_op_info.op");
static_assert(offsetof(pkq_op_info, arg_bytes) == PKQ_OP_INFO_OFF_ARG_BYTES, "pkq_op_info.arg_bytes");
static_assert(offsetof(pkq_op_info, arg_align) == PKQ_OP_INFO_OFF_ARG_ALIGN, "pkq_op_info.arg_align");
static_assert(offsetof(pkq_op_info, flags) == PKQ_OP_INFO_OFF_FLAGS, "pkq_op_info.flags");

struct pkq_memcpy_args {
    uint64_t dst;
    uint64_t src;
    uint64_t bytes;
};
static_assert(sizeof(pkq_memcpy_args) == PKQ_MEMCPY_ARGS_BYTES, "pkq_memcpy_args size");
static_assert(offsetof(pkq_memcpy_args, src) == PKQ_MEMCPY_OFF_SRC, "pkq_memcpy_args.src");
static_assert(offsetof(pkq_memcpy_args, bytes) == PKQ_MEMCPY_OFF_BYTES, "pkq_memcpy_args.bytes");

struct pkq_memset_args {
    uint64_t dst;
    uint64_t bytes;
    uint32_t value; /* the byte, in the low 8 bits */
    uint32_t reserved;
};
static_assert(sizeof(pkq_memset_args) == PKQ_MEMSET_ARGS_BYTES, "pkq_memset_args size");
static_assert(offsetof(pkq_memset_args, bytes) == PKQ_MEMSET_OFF_BYTES, "pkq_memset_args.bytes");
static_assert(offsetof(pkq_memset_args, value) == PKQ_MEMSET_OFF_VALUE, "pkq_memset_args.value");

struct pkq_dot_args {
    uint64_t x; /* const float*, n */
    uint64_t y; /* const float*, n; 0: sum of x */
    uint32_t n;
    uint32_t reserved;
};
static_assert(sizeof(pkq_dot_args) == PKQ_DOT_ARGS_BYTES, "pkq_dot_args size");
static_assert(offsetof(pkq_dot_args, y) == PKQ_DOT_OFF_Y, "pkq_dot_args.y");
static_assert(offsetof(pkq_dot_args, n) == PKQ_DOT_OFF_N, "pkq_dot_args.n");

struct pkq_gemv_args {
    uint64_t a; /* const float*, rows * cols, row-major */
    uint64_t x; /* const float*, cols */
    uint64_t y; /* float*, rows */
    uint32_t rows;
    uint32_t cols;
};
static_assert(sizeof(pkq_gemv_args) == PKQ_GEMV_ARGS_BYTES, "pkq_gemv_args size");
static_assert(offsetof(pkq_gemv_args, x) == PKQ_GEMV_OFF_X, "pkq_gemv_args.x");
static_assert(offsetof(pkq_gemv_args, y) == PKQ_GEMV_OFF_Y, "pkq_gemv_args.y");
static_assert(offsetof(pkq_gemv_args, rows) == PKQ_GEMV_OFF_ROWS, "pkq_gemv_args.rows");
static_assert(offsetof(pkq_gemv_args, cols) == PKQ_GEMV_OFF_COLS, "pkq_gemv_args.cols");

struct pkq_copy_io_args {
    uint32_t out_len; /* output bytes, at most io_out_bytes */
    uint32_t key;     /* XORed into every output byte (low 8 bits) */
};
static_assert(sizeof(pkq_copy_io_args) == PKQ_COPY_IO_ARGS_BYTES, "pkq_copy_io_args size");
static_assert(offsetof(pkq_copy_io_args, key) == PKQ_COPY_IO_OFF_KEY, "pkq_copy_io_args.key");

struct pkq_fir_args {
    uint64_t x; /* const float*, n + taps - 1 */
    uint64_t h; /* const float*, taps */
    uint64_t y; /* float*, n */
    uint32_t n;
    uint32_t taps;
};
static_assert(sizeof(pkq_fir_args) == PKQ_FIR_ARGS_BYTES, "pkq_fir_args size");
static_assert(offsetof(pkq_fir_args, h) == PKQ_FIR_OFF_H, "pkq_fir_args.h");
static_assert(offsetof(pkq_fir_args, y) == PKQ_FIR_OFF_Y, "pkq_fir_args.y");
static_assert(offsetof(pkq_fir_args, n) == PKQ_FIR_OFF_N, "pkq_fir_args.n");
static_assert(offsetof(pkq_fir_args, taps) == PKQ_FIR_OFF_TAPS, "pkq_fir_args.taps");

struct pkq_params {
    uint64_t sq;            /* device address of the submission slots */
    uint64_t cq;            /* device address of the completion entries */
    uint64_t ctrl;          /* device address of the control lines */
    uint64_t states;        /* device address of the worker state words */
    uint64_t start_seq;     /* sequence number of the first task */
    uint32_t capacity_log2; /* log2 of the slot count */
    uint32_t workers;       /* workers, each of `pollers` warps (see RINGS above for what each serves) */
    uint32_t pollers;       /* poller warps per worker: 1, 2, 4 or 8 */
    uint32_t idle_spin_ns;  /* idle time spent spinning before the worker slows down (0 with idle_sleep_max_ns 0: never) */
    uint32_t idle_sleep_max_ns; /* longest __nanosleep between idle polls (Backoff); 0 with idle_spin_ns != 0: pollers but the first go quiet (Quiet) */
    uint32_t rings;         /* submission rings, a power of two dividing workers */
    uint64_t pack_args;     /* device address of the pack arguments */
    uint64_t pack_results;  /* device address of the pack results */
    uint64_t io_in;         /* device address of the input areas (IO) */
    uint64_t io_out;        /* device address of the output areas */
    uint64_t io_scratch;    /* device memory: per worker, io_in_bytes then io_out_bytes, each rounded up to PKQ_IO_ROOM_ALIGN; then PKQ_IO_SEEN_WORDS per slot */
    uint32_t io_in_words;   /* words of a slot's input area (0: no IO) */
    uint32_t io_out_words;  /* words of a slot's output area */
    uint32_t io_in_bytes;   /* the most input bytes of a task */
    uint32_t io_out_bytes;  /* the most output bytes of a task */
    uint64_t groups;        /* device memory: PKQ_GROUP_BYTES per worker (WIDTH); 0 for a lane of warps */
    uint32_t group_blocks;  /* blocks per worker (WIDTH); 0: a lane of warps */
    uint32_t group_warps;   /* warps per block of a lane of blocks or groups */
    uint64_t trace_log;     /* mapped host memory: the TRACE LOG of a lane of blocks or groups; 0 for a lane of warps */
};
static_assert(sizeof(pkq_params) == PKQ_PARAMS_BYTES, "pkq_params size");
static_assert(offsetof(pkq_params, sq) == PKQ_PARAMS_OFF_SQ, "pkq_params.sq");
static_assert(offsetof(pkq_params, cq) == PKQ_PARAMS_OFF_CQ, "pkq_params.cq");
static_assert(offsetof(pkq_params, ctrl) == PKQ_PARAMS_OFF_CTRL, "pkq_params.ctrl");
static_assert(offsetof(pkq_params, states) == PKQ_PARAMS_OFF_STATES, "pkq_params.states");
static_assert(offsetof(pkq_params, start_seq) == PKQ_PARAMS_OFF_START_SEQ, "pkq_params.start_seq");
static_assert(offsetof(pkq_params, capacity_log2) == PKQ_PARAMS_OFF_CAPACITY_LOG2, "pkq_params.capacity_log2");
static_assert(offsetof(pkq_params, workers) == PKQ_PARAMS_OFF_WORKERS, "pkq_params.workers");
static_assert(offsetof(pkq_params, pollers) == PKQ_PARAMS_OFF_POLLERS, "pkq_params.pollers");
static_assert(offsetof(pkq_params, idle_spin_ns) == PKQ_PARAMS_OFF_IDLE_SPIN_NS, "pkq_params.idle_spin_ns");
static_assert(offsetof(pkq_params, idle_sleep_max_ns) == PKQ_PARAMS_OFF_IDLE_SLEEP_MAX_NS,
              "pkq_params.idle_sleep_max_ns");
static_assert(offsetof(pkq_params, rings) == PKQ_PARAMS_OFF_RINGS, "pkq_params.rings");
static_assert(offsetof(pkq_params, pack_args) == PKQ_PARAMS_OFF_PACK_ARGS, "pkq_params.pack_args");
static_assert(offsetof(pkq_params, pack_results) == PKQ_PARAMS_OFF_PACK_RESULTS,
              "pkq_params.pack_results");
static_assert(offsetof(pkq_params, io_in) == PKQ_PARAMS_OFF_IO_IN, "pkq_params.io_in");
static_assert(offsetof(pkq_params, io_out) == PKQ_PARAMS_OFF_IO_OUT, "pkq_params.io_out");
static_assert(offsetof(pkq_params, io_scratch) == PKQ_PARAMS_OFF_IO_SCRATCH, "pkq_params.io_scratch");
static_assert(offsetof(pkq_params, io_in_words) == PKQ_PARAMS_OFF_IO_IN_WORDS, "pkq_params.io_in_words");
static_assert(offsetof(pkq_params, io_out_words) == PKQ_PARAMS_OFF_IO_OUT_WORDS, "pkq_params.io_out_words");
static_assert(offsetof(pkq_params, io_in_bytes) == PKQ_PARAMS_OFF_IO_IN_BYTES, "pkq_params.io_in_bytes");
static_assert(offsetof(pkq_params, io_out_bytes) == PKQ_PARAMS_OFF_IO_OUT_BYTES, "pkq_params.io_out_bytes");
static_assert(offsetof(pkq_params, groups) == PKQ_PARAMS_OFF_GROUPS, "pkq_params.groups");
static_assert(offsetof(pkq_params, group_blocks) == PKQ_PARAMS_OFF_GROUP_BLOCKS, "pkq_params.group_blocks");
static_assert(offsetof(pkq_params, group_warps) == PKQ_PARAMS_OFF_GROUP_WARPS, "pkq_params.group_warps");
static_assert(offsetof(pkq_params, trace_log) == PKQ_PARAMS_OFF_TRACE_LOG, "pkq_params.trace_log");
static_assert(PKQ_GROUP_TASK_WORDS == 1 + 2 * (PKQ_ARGS_BYTES / 8), "a header and two halves per argument word");
static_assert(PKQ_GROUP_OFF_TASK + 8 * PKQ_GROUP_TASK_WORDS <= PKQ_GROUP_OFF_ARRIVALS, "a task fits line 0");
static_assert(PKQ_GROUP_OFF_PRESENT < PKQ_GROUP_OFF_LEFT && PKQ_GROUP_OFF_LEFT + 8 <= PKQ_GROUP_OFF_SCRATCH, "LEFT in line 3");
static_assert(PKQ_ARGS_BYTES < 256 && (PKQ_GROUP_HEADER_TRACED >> 16) == 256, "len fits below the header bits");
static_assert(PKQ_GROUP_OFF_SCRATCH + PKQ_GROUP_SCRATCH_BYTES == PKQ_GROUP_OFF_TIMES, "scratch, then times");
static_assert(PKQ_GROUP_OFF_TIMES + 16 * PKQ_MAX_GROUP_BLOCKS == PKQ_GROUP_BYTES, "group bytes");
static_assert(PKQ_PACK_TASKS == 32, "a pack is one task per lane");

struct pkq_axpy_args {
    uint64_t x; /* const float*, n elements */
    uint64_t y; /* float*, n elements */
    uint32_t n;
    float a;
};
static_assert(sizeof(pkq_axpy_args) == PKQ_AXPY_ARGS_BYTES, "pkq_axpy_args size");
static_assert(offsetof(pkq_axpy_args, x) == PKQ_AXPY_OFF_X, "pkq_axpy_args.x");
static_assert(offsetof(pkq_axpy_args, y) == PKQ_AXPY_OFF_Y, "pkq_axpy_args.y");
static_assert(offsetof(pkq_axpy_args, n) == PKQ_AXPY_OFF_N, "pkq_axpy_args.n");
static_assert(offsetof(pkq_axpy_args, a) == PKQ_AXPY_OFF_A, "pkq_axpy_args.a");
static_assert(PKQ_AXPY_ARGS_BYTES <= PKQ_ARGS_BYTES, "axpy args fit a slot");
static_assert(PKQ_SLOT_WORDS * 8 == PKQ_SLOT_BYTES, "slot words");
static_assert(PKQ_CQE_WORDS * 8 == PKQ_CQE_BYTES, "cqe words");
static_assert(8 + PKQ_ARGS_BYTES == PKQ_SLOT_WORDS * PKQ_CHUNK_BITS / 8, "header + args fill the payload");
static_assert(PKQ_TAG_SHIFT == PKQ_CHUNK_BITS, "tag above the chunk");
#endif /* __cplusplus */

#endif /* PKQ_LAYOUT_H */
