// The cross-lane and conversion instructions the gfx950 (CDNA4) design needs, as plain functions
// of a wave's 64 lanes, for the emulator (emulator.cc resolves them as wave collectives; the
// stand-in hip/hip_runtime.h exposes them under the clang builtin names). Sources, each checked
// against a second one where the CDNA4 ISA guide itself could not be read here:
//
//   ds_read_b64_tr_b16: CDNA4 ISA guide section 11.4 "MFMA Transpose Load from LDS" (as quoted in
//     public kernel notes: "Each lane (one VGPR) holds 4 consecutive M or N values"; two reads
//     load a 16 x 16 operand), and the lane map of ROCm's gfx950 simulator (ROCm/rocm-systems
//     PR 10175, its DBT reference LargeStaticLdsReadB64TrB16): within each 16-lane group, lane l
//     element n is 16-bit element (l & 3) of the 8 bytes at the address of lane
//     (l & ~15) + ((l >> 2) & 3) + 4 n. The same map is what vLLM's gfx950 attention relies on
//     for V^T (its MFMA k order = a key permutation that makes P^T lane-local).
//   v_permlane16_swap_b32 / v_permlane32_swap_b32: LLVM's llvm.amdgcn.permlane{16,32}.swap
//     (IntrinsicsAMDGPU.td, as Rust's core::arch::amdgpu reproduces it): "odd rows of the first
//     operand are swapped with even rows of the second operand (one row is 16 lanes)" /
//     "rows 2 and 3 of the first operand are swapped with rows 0 and 1 of the second"; the
//     result pair is (new first, new second). LLVM MC test gfx950_asm_features.s: gfx950 only.
//   v_cvt_pk_bf16_f32: two f32 to bf16, round to nearest even, low half = the first source
//     (LLVM selects it for fptrunc <2 x float> to <2 x bfloat> on gfx950). NaN: a quiet NaN
//     keeping the sign and the top payload bits, as LLVM's expansion of the same conversion on
//     gfx942 computes ((bits | 0x400000) >> 16). Denormal inputs are converted exactly here; on
//     hardware the float mode register decides.
//   DPP (v_mov_b32_dpp / llvm.amdgcn.update.dpp): the GCN3 / Vega / CDNA3 ISA guides' DPP_CTRL
//     table (LLVM AMDGPU::DPP::DppCtrl numbers), LLVM AMDGPUModifierSyntax (bound_ctrl: an
//     invalid source lane reads 0 when set, else the lane keeps `old`) and the intrinsic's
//     definition (`v_mov_b32 dst, old` then `v_mov_b32_dpp dst, src ...`). GFX9 has no
//     row_xmask / row_share (GFX10+); the row reductions use quad_perm and the mirrors.
#ifndef MUSE_ATTN_GPU_EMU_LANE_OPS_H_
#define MUSE_ATTN_GPU_EMU_LANE_OPS_H_

#include <cstdint>
#include <cstring>

namespace muse_emu {

enum class LaneOp : int {
  kDsReadB64TrB16 = 1,  // in: the lane's LDS address (2 words); out: 2 words (4 x b16)
  kPermlane16Swap = 2,  // in: vdst_old, src0; out: new vdst, new src0
  kPermlane32Swap = 3,
  kDpp = 4,             // in: old, src; out: the result; param: dpp_param()
};

// DPP controls (AMDGPU::DPP::DppCtrl).
inline constexpr int kDppRowShl0 = 0x100, kDppRowShr0 = 0x110, kDppRowRor0 = 0x120;
inline constexpr int kDppRowMirror = 0x140, kDppRowHalfMirror = 0x141;

inline uint32_t dpp_param(int ctrl, int row_mask, int bank_mask, bool bound_ctrl) {
  return static_cast<uint32_t>(ctrl & 0x1ff) | static_cast<uint32_t>(row_mask & 0xf) << 12 |
         static_cast<uint32_t>(bank_mask & 0xf) << 16 | static_cast<uint32_t>(bound_ctrl) << 20;
}

// The source lane a DPP control reads for `lane`, or -1 where it is out of range.
inline int dpp_source_lane(int ctrl, int lane) {
  const int row = lane & ~15, i = lane & 15;
  if (ctrl >= 0 && ctrl <= 0xff) return (lane & ~3) + ((ctrl >> (2 * (lane & 3))) & 3);
  if (ctrl > kDppRowShl0 && ctrl < kDppRowShl0 + 16) {
    const int n = ctrl - kDppRowShl0;
    return i + n < 16 ? lane + n : -1;
  }
  if (ctrl > kDppRowShr0 && ctrl < kDppRowShr0 + 16) {
    const int n = ctrl - kDppRowShr0;
    return i >= n ? lane - n : -1;
  }
  if (ctrl > kDppRowRor0 && ctrl < kDppRowRor0 + 16) return row + ((i - (ctrl - kDppRowRor0)) & 15);
  if (ctrl == kDppRowMirror) return row + 15 - i;
  if (ctrl == kDppRowHalfMirror) return (lane & ~7) + 7 - (lane & 7);
  return -2;  // not emulated
}

// One instruction over the wave: in[lane] / out[lane] as LaneOp says. Returns nullptr, or what
// is not emulated.
inline const char* apply_lane_op(LaneOp op, uint32_t param, const uint32_t (*in)[4],
                                 uint32_t (*out)[4]) {
  switch (op) {
    case LaneOp::kDsReadB64TrB16:
      for (int l = 0; l < 64; ++l) {
        uint16_t h[4];
        for (int n = 0; n < 4; ++n) {
          const int src = (l & ~15) + ((l >> 2) & 3) + 4 * n;
          uint64_t addr;
          std::memcpy(&addr, in[src], sizeof addr);
          std::memcpy(&h[n], reinterpret_cast<const char*>(addr) + 2 * (l & 3), 2);
        }
        out[l][0] = h[0] | static_cast<uint32_t>(h[1]) << 16;
        out[l][1] = h[2] | static_cast<uint32_t>(h[3]) << 16;
      }
      return nullptr;
    case LaneOp::kPermlane16Swap:
    case LaneOp::kPermlane32Swap: {
      const int half = op == LaneOp::kPermlane16Swap ? 16 : 32;
      for (int l = 0; l < 64; ++l) {
        const bool upper = (l & half) != 0;  // an odd row (16) / rows 2-3 (32)
        out[l][0] = upper ? in[l - half][1] : in[l][0];  // the first's upper rows <- the second's
        out[l][1] = upper ? in[l][1] : in[l + half][0];  // the second's lower rows <- the first's
      }
      return nullptr;
    }
    case LaneOp::kDpp: {
      const int ctrl = param & 0x1ff, row_mask = (param >> 12) & 0xf, bank_mask = (param >> 16) & 0xf;
      const bool bound_zero = (param >> 20) & 1;
      if (bank_mask != 0xf) return "DPP with a bank_mask other than 0xf";
      if (dpp_source_lane(ctrl, 0) == -2) return "this DPP control (wave shifts, broadcasts, ...)";
      for (int l = 0; l < 64; ++l) {
        const int src = dpp_source_lane(ctrl, l);
        if (((row_mask >> (l / 16)) & 1) == 0) out[l][0] = in[l][0];  // row not written
        else if (src < 0) out[l][0] = bound_zero ? 0u : in[l][0];
        else out[l][0] = in[src][1];
      }
      return nullptr;
    }
  }
  return "an unknown lane operation";
}

// v_cvt_pk_bf16_f32 (see above): bf16(a) in the low half, bf16(b) in the high half.
inline uint32_t cvt_pk_bf16_f32(float a, float b) {
  auto one = [](float f) -> uint32_t {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x400000u) >> 16;  // NaN: quieted
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest, ties to even
  };
  return one(a) | one(b) << 16;
}

}  // namespace muse_emu

#endif  // MUSE_ATTN_GPU_EMU_LANE_OPS_H_
