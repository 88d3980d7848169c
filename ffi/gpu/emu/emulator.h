// A wave64 emulator of the HIP path, for CPUs: the unmodified split and merge kernels, compiled
// for the host under __gfx942__ or __gfx950__ with the stand-in hip/hip_runtime.h beside this
// file, run with each GPU thread a fiber and every cross-lane operation (shuffles, __any, the
// MFMA builtins) a collective of its wave. It checks what a CPU run can check of the AMD path:
// cross-lane ops under divergence, reads of exited lanes, shared memory (LDS) read before any
// write in the block, LDS outside its bounds or over the target's budget, barriers that not
// every live wave reaches. Each is an error that ends the launch with a message; the launch
// returns hipErrorLaunchFailure and last_error() says what and where.
//
// Two schedules: lockstep (every wave runs to its next synchronization point, waves and lanes
// in a shuffled order, round after round) and wave-serial (one wave runs alone from barrier to
// barrier, then the next), which exposes a barrier missing between a stage's reads by one wave
// and its refill by another. Blocks run one after another on the calling thread.
#ifndef MUSE_ATTN_GPU_EMU_EMULATOR_H_
#define MUSE_ATTN_GPU_EMU_EMULATOR_H_

#include <cstddef>
#include <cstdint>

namespace muse_emu {

inline constexpr int kWaveSize = 64;

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

enum class Schedule : int { kLockstep = 0, kWaveSerial = 1 };

// Settings of the following launches: the schedule, the seed of its shuffles, the target's LDS
// a workgroup (65536 on gfx942, 163840 on gfx950).
void configure(Schedule schedule, uint64_t seed, int lds_bytes);
// The message of the last failed launch ("" when none failed since configure()).
const char* last_error();

// Launches body(args) over grid x block threads with smem bytes of dynamic LDS (at most
// smem_limit, the kernel's attribute), synchronously; kernel names it in errors. Returns 0, or 1
// after an error (last_error()).
int launch(const char* name, const void* kernel, void (*body)(const void*), const void* args,
           Dim3 grid, Dim3 block, size_t smem, size_t smem_limit);

// ---- inside a kernel ------------------------------------------------------------------------
struct Ids {
  Dim3 thread, block, block_dim, grid_dim;
};
const Ids& ids();                    // the running thread's
char* dynamic_lds();                 // the block's dynamic LDS
void fail(const char* what, const char* file, int line);  // an error at this thread; no return

// Collectives of the running thread's wave: every live lane must reach the same one.
float shfl(float v, int src_lane, const char* file, int line);
float shfl_xor(float v, int lane_mask, const char* file, int line);
int any(int pred, const char* file, int line);
void syncthreads(const char* file, int line);
// D = A B + C of one 16 x 16 x K bf16 MFMA (K 16: gfx942 v_mfma_f32_16x16x16_bf16; K 32: gfx950
// v_mfma_f32_16x16x32_bf16): this lane's K / 16 operand words of A and of B and its 4 floats of
// C in, its 4 floats of D out (mfma.h: the lane layouts).
void mfma_16x16_bf16(int k, const uint32_t* a_words, const uint32_t* b_words, const float* c,
                     float* d, const char* file, int line);
// One of lane_ops.h's instructions (LaneOp op, its param) over the wave: this lane's 4 input
// words in, its 4 output words out. Every lane of the wave must be live and reach it.
void lane_op(int op, uint32_t param, const uint32_t* in, uint32_t* out, const char* file, int line);
// ds_read_b64_tr_b16 at this lane's LDS address p (8-byte aligned, its 8 bytes written in the
// block): this lane's 2 result words (lane_ops.h).
void ds_read_b64_tr_b16(const void* p, uint32_t* out, const char* file, int line);

// LDS accesses (the kernels' lds_read / lds_write / lds_value): a write marks its bytes written
// for the rest of the block; a read of bytes not written is an error.
void lds_note_write(const void* p, size_t bytes, const char* file, int line);
void lds_check_read(const void* p, size_t bytes, const char* file, int line);

}  // namespace muse_emu

#endif  // MUSE_ATTN_GPU_EMU_EMULATOR_H_
