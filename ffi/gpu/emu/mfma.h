// The 16 x 16 x K bf16 MFMA instructions of the HIP path, D = A B + C over one wave of 64 lanes,
// with the operand and result lane layouts AMD documents:
//   v_mfma_f32_16x16x16_bf16 (CDNA3, gfx942; K = 16, 4 bf16 a lane): the AMD Matrix Instruction
//     Calculator's register-to-element mapping for CDNA3 (ROCm/amd_matrix_instruction_calculator,
//     -a cdna3 -i v_mfma_f32_16x16x16_bf16):
//       A[i][k]: lane i + 16 * (k / 4), element k % 4     (i = lane % 16)
//       B[k][j]: lane j + 16 * (k / 4), element k % 4     (j = lane % 16)
//       D[i][j]: lane j + 16 * (i / 4), element i % 4
//   v_mfma_f32_16x16x32_bf16 (CDNA4, gfx950; K = 32, 8 bf16 a lane): the same with 8 consecutive
//     k a lane: A[i][k] in lane i + 16 * (k / 8), element k % 8; B likewise; D as above (AMD's
//     composable_kernel xdlops_gemm.hpp mfma_f32_16x16x32bf16: 4 input blocks of 16 lanes, 8 k a
//     block; LLVM / Triton's gfx950 lowering, kWidth 8).
// An element e of a lane's operand is bf16 number e of its words, low half first. Products of
// bf16 values are exact in fp32; the sum is formed in double and rounded once with C (the
// hardware's internal order is not documented, and every order is within the tests' tolerance).
// The result depends on the k order only through rounding: D[i][j] pairs A's element e of lane
// group g with B's element e of the same group, whatever k that is.
#ifndef MUSE_ATTN_GPU_EMU_MFMA_H_
#define MUSE_ATTN_GPU_EMU_MFMA_H_

#include <cstdint>
#include <cstring>

namespace muse_emu {

inline float bf16_element(const uint32_t* words, int e) {
  const uint32_t bits = (words[e / 2] >> (16 * (e % 2))) & 0xffffu;
  const uint32_t f = bits << 16;
  float x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

// k: 16 or 32; a, b: each lane's k / 8 words (k / 4 bf16); c, d: each lane's 4 floats.
inline void mfma_f32_16x16_bf16(int k, const uint32_t (*a)[4], const uint32_t (*b)[4],
                                const float (*c)[4], float (*d)[4]) {
  const int per_lane = k / 4;  // k elements a lane holds (4 lane groups of 16 share K)
  for (int lane = 0; lane < 64; ++lane) {
    const int j = lane % 16, g = lane / 16;
    for (int e = 0; e < 4; ++e) {
      const int i = 4 * g + e;  // D[i][j] sits in lane j + 16 * (i / 4), element i % 4
      double sum = c[lane][e];
      for (int kg = 0; kg < 4; ++kg)
        for (int x = 0; x < per_lane; ++x)
          sum += static_cast<double>(bf16_element(a[i + 16 * kg], x)) *
                 static_cast<double>(bf16_element(b[j + 16 * kg], x));
      d[lane][e] = static_cast<float>(sum);
    }
  }
}

}  // namespace muse_emu

#endif  // MUSE_ATTN_GPU_EMU_MFMA_H_
