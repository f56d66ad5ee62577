//! Kernels of the tests' own, as PTX text: the driver compiles it when it
//! loads the module (pkq's build compiles only pkq's kernel; the tests need
//! no nvcc of their own). Checked with `ptxas -arch=sm_80` and `sm_90`.

/// A module of kernels whose parameters are not one `pkq_params` (none;
/// one 8-byte word; a 120-byte struct and a second parameter), for
/// `Builder::module`'s refusals, and `pkq_test_smid`: thread 0 of block b
/// spins `ns` nanoseconds by `%globaltimer` (so that the blocks of a launch
/// overlap), then stores the SM it ran on (`%smid`) into `out[b]`
/// (`pkq_test_smid(uint32_t* out, uint64_t ns)`).
pub(crate) const TEST_KERNELS: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry pkq_test_no_params()
{
	ret;
}

.visible .entry pkq_test_one_u64(.param .u64 a)
{
	ret;
}

.visible .entry pkq_test_two_params(.param .align 8 .b8 p[120], .param .u32 n)
{
	ret;
}

.visible .entry pkq_test_smid(.param .u64 out, .param .u64 ns)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<9>;

	mov.u32 	%r1, %tid.x;
	setp.ne.s32 	%p1, %r1, 0;
	@%p1 bra 	DONE;
	mov.u32 	%r2, %smid;
	ld.param.u64 	%rd1, [ns];
	mov.u64 	%rd2, %globaltimer;
SPIN:
	mov.u64 	%rd3, %globaltimer;
	sub.s64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p2, %rd4, %rd1;
	@%p2 bra 	SPIN;
	ld.param.u64 	%rd5, [out];
	cvta.to.global.u64 	%rd6, %rd5;
	mov.u32 	%r3, %ctaid.x;
	mul.wide.u32 	%rd7, %r3, 4;
	add.s64 	%rd8, %rd6, %rd7;
	st.global.u32 	[%rd8], %r2;
DONE:
	ret;
}
"#;
