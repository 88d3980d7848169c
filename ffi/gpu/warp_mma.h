// The matrix-unit part of the split kernel: one warp (NVIDIA, 32 lanes) or wavefront (AMD, 64
// lanes) owns 16 query rows and, per 64-key tile staged in shared memory,
//   scores():     S = Q K^T for its 16 rows x 64 keys (fp32),
//   accumulate(): O += P V with P the bf16-rounded probabilities.
// Each vendor keeps its fragments in its own register layout; the kernel sees only
//   s[rr][i]  score of the lane's row row_of(rr) and key key_of(i) of the tile,
//   row_max / row_sum   reductions over the lanes that share a row,
//   rescale(rr, f) and, to store them, for_each_out_block(...) (NVIDIA: 8 elements a store,
//   gpu/partial_o_order.h) or for_each_out2(...) (AMD: a pair a store) over the lane's O elements.
// NVIDIA: mma.sync m16n8k16 bf16 (sm_80+), K and V fragments by ldmatrix (V transposed); on
//         sm_90a at D = 64, the warpgroup MMA instead (wgmma m64n64k16, MUSE_ATTN_WGMMA): the
//         CTA's 4 warps are one warpgroup, its 64 rows the instruction's M; Q and P come from
//         registers in the same fragment layout, K and V straight from the swizzled tile.
// AMD:    MFMA bf16, computing S^T = K Q^T and O^T = V^T P^T so that a lane holds one q row and
//         P^T is already lane-local; 16x16x16 (gfx942) or 16x16x32 (gfx950).
#ifndef MUSE_ATTN_GPU_WARP_MMA_H_
#define MUSE_ATTN_GPU_WARP_MMA_H_

#include <cstdint>

#include "gpu/amd_ops.h"
#include "gpu/kv_tile.h"
#include "gpu/vendor.h"

namespace muse_attn::gpu {

#if defined(MUSE_ATTN_CUDA)

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem, bool trans) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  if (trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MUSE_ATTN_WGMMA 1
#endif

// Warpgroup MMA (sm_90a; declared for every CUDA pass, used only where MUSE_ATTN_WGMMA). A tile's K
// and V halves are canonical 128-byte-swizzle layouts for it: rows of 128 bytes (D = 64 bf16),
// 16-byte chunk c of row r at c ^ (r % 8) (kv_tile.h), 8-row atoms of 1024 bytes, the tile
// 1024-byte aligned.
//   K for S = Q K^T: B = K^T, K-major (d contiguous): leading offset unused, stride 1024 bytes
//     between 8-key groups; the k-step (16 d = 32 bytes) moves the start address.
//   V for O += P V: B = V, MN-major (d contiguous, transposed): stride 1024 bytes between 8-key
//     groups; the k-step (16 keys = 2048 bytes) moves the start address.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void* smem, uint32_t byte_offset) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + byte_offset;
  return uint64_t{(a >> 4) & 0x3FFFu} | (uint64_t{1} << 16) |  // leading byte offset (unused)
         (uint64_t{1024 >> 4} << 32) |                         // stride byte offset
         (uint64_t{1} << 62);                                  // 128-byte swizzle
}
__device__ __forceinline__ void wgmma_fence() {
#if defined(MUSE_ATTN_WGMMA)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(MUSE_ATTN_WGMMA)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_wait_all() {
#if defined(MUSE_ATTN_WGMMA)
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

// d (64 x 64 fp32, the warp's 16 rows as 8 mma.sync C fragments d[4j .. 4j+3]) (+)= a (the warp's
// 16 rows x 16 k, an mma.sync A fragment) * B (16 x 64 from desc); kAccumulate = 0: d = a * B.
template <int kTransB, int kAccumulate>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4],
                                                uint64_t desc) {
#if defined(MUSE_ATTN_WGMMA)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(kAccumulate), "n"(kTransB));
#else
  (void)d, (void)a, (void)desc;
#endif
}

// Pins the 32 registers at this point (an empty asm that reads and writes them), so the compiler
// neither reads them before the wgmma that writes them has been waited for nor moves them while
// one is in flight (CUTLASS's warpgroup_fence_operand).
__device__ __forceinline__ void wgmma_pin(float (&r)[32]) {
  asm volatile(""
               : "+f"(r[0]), "+f"(r[1]), "+f"(r[2]), "+f"(r[3]), "+f"(r[4]), "+f"(r[5]),
                 "+f"(r[6]), "+f"(r[7]), "+f"(r[8]), "+f"(r[9]), "+f"(r[10]), "+f"(r[11]),
                 "+f"(r[12]), "+f"(r[13]), "+f"(r[14]), "+f"(r[15]), "+f"(r[16]), "+f"(r[17]),
                 "+f"(r[18]), "+f"(r[19]), "+f"(r[20]), "+f"(r[21]), "+f"(r[22]), "+f"(r[23]),
                 "+f"(r[24]), "+f"(r[25]), "+f"(r[26]), "+f"(r[27]), "+f"(r[28]), "+f"(r[29]),
                 "+f"(r[30]), "+f"(r[31])::"memory");
}

// c += a (16x16, row) * b (16x8, col); bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int D>
struct WarpAttention {
  static constexpr int kRowsPerLane = 2;     // rows g and g + 8
  static constexpr int kScoresPerRow = 16;   // 8 n-tiles x 2
  static constexpr int kKSteps = D / 16;
#if defined(MUSE_ATTN_WGMMA)
  static constexpr bool kWarpgroupMma = D == 64;  // the tile's rows are 128-byte swizzle atoms
#else
  static constexpr bool kWarpgroupMma = false;
#endif

  int lane;
  uint32_t qa[kKSteps][4];  // A fragments of Q (16 rows x D)
  float s[kRowsPerLane][kScoresPerRow];
  float o[D / 8][4];        // C fragments of O (16 rows x D)
  // The lane's ldmatrix row addresses inside a tile, for key block 0 (key block j adds
  // j * 16 rows): K at d-step kk (scores), V at d-block nd2 (accumulate). The swizzle of a row
  // depends on lane & 7 only, so these hold for every tile.
  int k_off[kKSteps];
  int v_off[D / 16];

  __device__ explicit WarpAttention(int lane_) : lane(lane_) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    // Q's fragments are loaded inside the tile loop (load_q, first iteration) and kept: defined
    // here too, or ptxas may treat them as dead around the loop and reuse their registers (on
    // sm_90a every tile after the first would then use P as Q).
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) qa[kk][0] = qa[kk][1] = qa[kk][2] = qa[kk][3] = 0u;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
      k_off[kk] = KvTile<D>::offset((lane & 7) + 8 * (lane >> 4), 8 * (2 * kk + ((lane >> 3) & 1)));
    const int m = lane >> 3;
#pragma unroll
    for (int nd2 = 0; nd2 < D / 16; ++nd2)
      v_off[nd2] = kTileKeys * KvTile<D>::kRowBytes +
                   KvTile<D>::offset((lane & 7) + 8 * (m & 1), 8 * (2 * nd2 + (m >> 1)));
  }
  __device__ int row_of(int rr) const { return (lane >> 2) + 8 * rr; }
  __device__ int key_of(int i) const { return 8 * (i >> 1) + 2 * (lane & 3) + (i & 1); }

  // Q's A fragments: rows row0 .. row0 + 15 of the staged query tile (one ldmatrix a d-step).
  template <int Rows>
  __device__ void load_q(const QTile<D, Rows>& qt, int row0) {
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)  // lanes 8m .. 8m + 7 address matrix m = a0 .. a3
      ldmatrix_x4(qa[kk], qt.at(row0 + (lane & 7) + 8 * ((lane >> 3) & 1), 8 * (2 * kk + (lane >> 4))),
                  false);
  }

  // The warpgroup MMA's pieces (kWarpgroupMma): S = Q K^T of one tile into c (issued, not
  // waited for); c's n-tile j (c[4j .. 4j + 3], as the mma.sync path's c[j]) into rows s.
  // The start-address field moves by 16-byte units: 2 a d-step (32 bytes); it cannot carry out
  // of its 14 bits (shared memory is < 256 KiB).
  __device__ void issue_scores(float (&c)[32], const KvTile<D>& tile) const {
    const uint64_t desc = wgmma_desc_sw128(tile.base, 0);
    wgmma_m64n64k16<0, 0>(c, qa[0], desc);
#pragma unroll
    for (int kk = 1; kk < kKSteps; ++kk) wgmma_m64n64k16<0, 1>(c, qa[kk], desc + 2 * kk);
  }
  __device__ static void scores_to_rows(const float (&c)[32], float (&rows)[kRowsPerLane][kScoresPerRow]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      rows[0][2 * j] = c[4 * j];
      rows[0][2 * j + 1] = c[4 * j + 1];
      rows[1][2 * j] = c[4 * j + 2];
      rows[1][2 * j + 1] = c[4 * j + 3];
    }
  }

  __device__ void scores(const KvTile<D>& tile) {
    if constexpr (kWarpgroupMma) {  // the warpgroup: every warp of the CTA calls this together
      float c[32];
      wgmma_fence();  // Q's fragments were written by ordinary instructions
      issue_scores(c, tile);
      wgmma_commit();
      wgmma_wait_all();
      wgmma_pin(c);
      scores_to_rows(c, s);
    } else {
      scores_mma_sync(tile);
    }
  }

  // Two tiles' scores in one MMA round trip (called only where kWarpgroupMma): a's into s, b's
  // into s_b; both tiles' MMAs are issued before the one wait, b's after b_ready() (which waits
  // for b's copies while a's MMAs run).
  template <typename BReady>
  __device__ void scores_pair(const KvTile<D>& a, const KvTile<D>& b,
                              float (&s_b)[kRowsPerLane][kScoresPerRow], BReady b_ready) {
    float ca[32], cb[32];
    wgmma_fence();
    issue_scores(ca, a);
    b_ready();
    issue_scores(cb, b);
    wgmma_commit();
    wgmma_wait_all();
    wgmma_pin(ca);
    wgmma_pin(cb);
    scores_to_rows(ca, s);
    scores_to_rows(cb, s_b);
  }

  __device__ void scores_mma_sync(const KvTile<D>& tile) {
    float c[8][4];  // n-tile j: keys 8 j .. 8 j + 7
#pragma unroll
    for (int j = 0; j < 8; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
    // d outer, keys inner: only one d-step of K fragments is live at a time (at D = 128 the
    // other order lets the compiler hoist every K fragment and spill).
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int j2 = 0; j2 < 4; ++j2) {  // keys 16 j2 .. 16 j2 + 15: two n-tiles
        uint32_t b[4];  // keys 16 j2 + (lane & 7) + 8 (lane >> 4), d 8 (2 kk + (lane >> 3 & 1))
        ldmatrix_x4(b, tile.base + k_off[kk] + 16 * j2 * KvTile<D>::kRowBytes, false);
        mma_16816(c[2 * j2], qa[kk], b[0], b[1]);
        mma_16816(c[2 * j2 + 1], qa[kk], b[2], b[3]);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      s[0][2 * j] = c[j][0];
      s[0][2 * j + 1] = c[j][1];
      s[1][2 * j] = c[j][2];
      s[1][2 * j + 1] = c[j][3];
    }
  }

  // P's A fragment of keys 16 kk .. 16 kk + 15 from rows of probabilities, rounded to bf16.
  __device__ static void pack_p(const float (&p)[kRowsPerLane][kScoresPerRow], int kk, uint32_t (&pa)[4]) {
    pa[0] = pack_bf16x2(p[0][4 * kk], p[0][4 * kk + 1]);
    pa[1] = pack_bf16x2(p[1][4 * kk], p[1][4 * kk + 1]);
    pa[2] = pack_bf16x2(p[0][4 * kk + 2], p[0][4 * kk + 3]);
    pa[3] = pack_bf16x2(p[1][4 * kk + 2], p[1][4 * kk + 3]);
  }
  // The warpgroup MMA's pieces (kWarpgroupMma): O as its accumulator d (the warp's o[n][0..3] =
  // d[4n .. 4n + 3]) and back; d += P V of one tile (issued, not waited for).
  __device__ void o_to_acc(float (&d)[32]) const {
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) d[4 * n + i] = o[n][i];
  }
  __device__ void acc_to_o(const float (&d)[32]) {
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[n][i] = d[4 * n + i];
  }
  __device__ static void issue_pv(float (&d)[32], const uint32_t (&pa)[4][4], const KvTile<D>& tile) {
    const uint64_t desc = wgmma_desc_sw128(tile.base, kTileKeys * KvTile<D>::kRowBytes);  // V
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)  // keys 16 kk .. 16 kk + 15: 2048 bytes (128 units) a step
      wgmma_m64n64k16<1, 1>(d, pa[kk], desc + 128 * kk);
  }

  // O += P V, P = s (already probabilities), rounded to bf16.
  __device__ void accumulate(const KvTile<D>& tile) {
    uint32_t pa[4][4];  // A fragments of P, packed first so that s is dead during the loads
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) pack_p(s, kk, pa[kk]);
    if constexpr (kWarpgroupMma) {  // the warpgroup
      float d[32];
      o_to_acc(d);
      wgmma_pin(d);
      wgmma_fence();  // P's fragments and the rescaled O were written by ordinary instructions
      issue_pv(d, pa, tile);
      wgmma_commit();
      wgmma_wait_all();
      wgmma_pin(d);
      acc_to_o(d);
    } else {
      accumulate_mma_sync(tile, pa);
    }
  }

  // O += P_a V_a + P_b V_b in one MMA round trip (P_a = s, P_b = s_b; only where kWarpgroupMma).
  __device__ void accumulate_pair(const KvTile<D>& a, const KvTile<D>& b,
                                  const float (&s_b)[kRowsPerLane][kScoresPerRow]) {
    uint32_t pa[4][4], pb[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pack_p(s, kk, pa[kk]);
      pack_p(s_b, kk, pb[kk]);
    }
    float d[32];
    o_to_acc(d);
    wgmma_pin(d);
    wgmma_fence();
    issue_pv(d, pa, a);
    issue_pv(d, pb, b);
    wgmma_commit();
    wgmma_wait_all();
    wgmma_pin(d);
    acc_to_o(d);
  }

  __device__ void accumulate_mma_sync(const KvTile<D>& tile, const uint32_t (&pa)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {  // keys 16 kk .. 16 kk + 15
      const uint32_t (&a)[4] = pa[kk];
#pragma unroll
      for (int nd2 = 0; nd2 < D / 16; ++nd2) {
        uint32_t b[4];  // keys 16 kk + (lane & 7) + 8 (m & 1), d 8 (2 nd2 + (m >> 1)), m = lane >> 3
        ldmatrix_x4(b, tile.base + v_off[nd2] + 16 * kk * KvTile<D>::kRowBytes, true);
        mma_16816(o[2 * nd2], a, b[0], b[1]);
        mma_16816(o[2 * nd2 + 1], a, b[2], b[3]);
      }
    }
  }

  // A row's scores are spread over the 4 lanes lane ^ {0, 1, 2, 3}.
  __device__ static float row_max(float x) { return xor_reduce<1, 2>(x, max_op); }
  __device__ static float row_sum(float x) { return xor_reduce<1, 2>(x, add_op); }
  __device__ bool is_row_leader() const { return (lane & 3) == 0; }

  __device__ void rescale(int rr, float f) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][2 * rr] *= f;
      o[n][2 * rr + 1] *= f;
    }
  }
  // f(rr, d, x) for each 32-column block k of the lane's O rows: x its pairs n = 4k .. 4k + 3
  // of row rr, the columns d + 8j, d + 8j + 1 (j = 0 .. 3), d = 32k + 2t, t = lane % 4. The
  // caller places them (partial_o_order.h puts the 8 floats next to each other).
  template <typename F>
  __device__ void for_each_out_block(F f) const {
    static_assert(D % 32 == 0, "whole 32-column blocks");
#pragma unroll
    for (int k = 0; k < D / 32; ++k) {
      const int d = 32 * k + 2 * (lane & 3);
#pragma unroll
      for (int rr = 0; rr < kRowsPerLane; ++rr) {
        float x[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) x[2 * j] = o[4 * k + j][2 * rr], x[2 * j + 1] = o[4 * k + j][2 * rr + 1];
        f(rr, d, x);
      }
    }
  }
};

#else  // AMD CDNA3 (gfx942) / CDNA4 (gfx950)

#if defined(__gfx950__)
inline constexpr int kMfmaK = 32;  // v_mfma_f32_16x16x32_bf16
typedef __bf16 mfma_ab_t __attribute__((ext_vector_type(8)));
#else
inline constexpr int kMfmaK = 16;  // v_mfma_f32_16x16x16_bf16 (gfx942)
typedef short mfma_ab_t __attribute__((ext_vector_type(4)));
#endif
typedef float mfma_c_t __attribute__((ext_vector_type(4)));
typedef uint32_t mfma_words_t __attribute__((ext_vector_type(kMfmaK / 8)));  // a lane's operand

__device__ __forceinline__ mfma_c_t mfma_bf16(mfma_words_t a, mfma_words_t b, mfma_c_t c) {
#if defined(__HIP_DEVICE_COMPILE__)
#if defined(__gfx950__)
  return __builtin_amdgcn_mfma_f32_16x16x32_bf16(__builtin_bit_cast(mfma_ab_t, a),
                                                 __builtin_bit_cast(mfma_ab_t, b), c, 0, 0, 0);
#else
  return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(mfma_ab_t, a),
                                                   __builtin_bit_cast(mfma_ab_t, b), c, 0, 0, 0);
#endif
#else
  return c;  // host pass: never called
#endif
}

template <int D>
struct WarpAttention {
  static constexpr bool kWarpgroupMma = false;
  static constexpr int kRowsPerLane = 1;    // row lane % 16
  static constexpr int kScoresPerRow = 16;  // keys 16 n + 4 g + i, n, i < 4
  static constexpr int kKSteps = D / kMfmaK;
  static constexpr int kWords = kMfmaK / 8;  // 32-bit words of one A/B operand a lane

  int lane;
  mfma_words_t qb[kKSteps];  // B operand of S^T = K Q^T: Q[row][d-chunk] of the lane's row
  float s[kRowsPerLane][kScoresPerRow];
  mfma_c_t o[D / 16];        // O^T[d = 16 db + 4 g + i][row]

  __device__ explicit WarpAttention(int lane_) : lane(lane_) {
#pragma unroll
    for (int n = 0; n < D / 16; ++n) o[n] = mfma_c_t{0.0f, 0.0f, 0.0f, 0.0f};
  }
  __device__ int row_of(int) const { return lane & 15; }
  __device__ int key_of(int i) const { return 16 * (i >> 2) + 4 * (lane >> 4) + (i & 3); }

  // Q as the B operand: the lane's row row0 + lane % 16 of the staged query tile.
  template <int Rows>
  __device__ void load_q(const QTile<D, Rows>& qt, int row0) {
    const int r = lane & 15, g = lane >> 4;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
#pragma unroll
      for (int w = 0; w < kWords; ++w)
        qb[kk][w] = lds_read<uint32_t>(qt.at(row0 + r, kMfmaK * kk + kWords * 2 * g + 2 * w));
  }

  __device__ void scores(const KvTile<D>& tile) {
    const int r = lane & 15, g = lane >> 4;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      mfma_c_t c = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        const char* src = tile.k_at(16 * n + r, kMfmaK * kk + kWords * 2 * g);
        mfma_words_t a;
#pragma unroll
        for (int w = 0; w < kWords; ++w) a[w] = lds_read<uint32_t>(src + 4 * w);
        c = mfma_bf16(a, qb[kk], c);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) s[0][4 * n + i] = c[i];
    }
  }

  // The A operand V^T[16 db + r][keys of MFMA c] of lane (r, g). gfx950: two LDS transpose
  // reads (amd_ops.h), each the 4 x 16 block of keys 32c + 16h + 4g + 0..3, columns 16 db + 0..15
  // (lane 4 r' + c' of the group reads key row r', columns 4 c' .. 4 c' + 3; 8 bytes within a
  // swizzled 16-byte chunk); gfx942: one 16-bit read an element (the transpose read's fallback
  // adds shuffles).
  __device__ mfma_words_t v_operand(const KvTile<D>& tile, int c, int db) const {
    const int r = lane & 15, g = lane >> 4;
    mfma_words_t va;
#if defined(__gfx950__)
    const char* const v0 = tile.v_at(0, 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const char* at = tile.v_at(kMfmaK * c + 16 * h + 4 * g + (r >> 2), 16 * db + 4 * (r & 3));
      const uint2 t = amd::lds_read_tr_b16(v0, static_cast<uint32_t>(at - v0));
      va[2 * h] = t.x;
      va[2 * h + 1] = t.y;
    }
#else
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      uint32_t lohi[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = 2 * w + e;
        const int key = kMfmaK * c + 16 * (j >> 2) + 4 * g + (j & 3);
        lohi[e] = lds_read<uint16_t>(tile.v_at(key, 16 * db + r));
      }
      va[w] = lohi[0] | (lohi[1] << 16);
    }
#endif
    return va;
  }

  // O^T += V^T P^T. The k index of one MFMA runs over keys in the order the lane's scores
  // hold them (for 16x16x32: keys 32c + 16 (j / 4) + 4g + j % 4), so P^T is lane-local.
  __device__ void accumulate(const KvTile<D>& tile) {
    constexpr int kBlocks = 64 / kMfmaK;
#pragma unroll
    for (int c = 0; c < kBlocks; ++c) {
      mfma_words_t pb;
#pragma unroll
      for (int w = 0; w < kWords; ++w)
        pb[w] = amd::cvt_pk_bf16_f32(s[0][(kMfmaK / 4) * c + 2 * w], s[0][(kMfmaK / 4) * c + 2 * w + 1]);
#pragma unroll
      for (int db = 0; db < D / 16; ++db) o[db] = mfma_bf16(v_operand(tile, c, db), pb, o[db]);
    }
  }

  // A row's scores are spread over the 4 lanes lane ^ {0, 16, 32, 48}: two butterfly steps, each
  // a permlane swap on gfx950 (VALU, no LDS; amd_ops.h), a shuffle on gfx942; the same order of
  // operations as xor_reduce, so the same bits.
  __device__ static float row_max(float x) { return amd::xor_step<32>(amd::xor_step<16>(x, max_op), max_op); }
  __device__ static float row_sum(float x) { return amd::xor_step<32>(amd::xor_step<16>(x, add_op), add_op); }
  __device__ bool is_row_leader() const { return (lane >> 4) == 0; }

  __device__ void rescale(int, float f) {
#pragma unroll
    for (int n = 0; n < D / 16; ++n) o[n] *= f;
  }
  template <typename F>
  __device__ void for_each_out2(F f) const {
    const int g = lane >> 4;
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      f(0, 16 * n + 4 * g, o[n][0], o[n][1]);
      f(0, 16 * n + 4 * g + 2, o[n][2], o[n][3]);
    }
  }
};

#endif

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_WARP_MMA_H_
