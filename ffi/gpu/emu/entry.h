// The emulator's C entry points (entry.cc), for tests/amd_emulator.py and run_case.cc.
#ifndef MUSE_ATTN_GPU_EMU_ENTRY_H_
#define MUSE_ATTN_GPU_EMU_ENTRY_H_

#include <cstdint>

extern "C" {

// One verify-attention call: its buffers, sizes and launch plan (VerifyParams and Plan).
struct MuseEmuCall {
  const uint16_t* q;
  const void* kv;  // bf16 or FP8 (kv_format)
  const int32_t* table;
  const int32_t* seq_lens;
  const int32_t* num_reqs;
  uint16_t* out;
  uint16_t* part_o;
  float* part_ml;
  int64_t num_blocks, table_stride;
  int num_requests, tokens, num_q_heads, num_kv_heads, head_dim, pages, window;
  int num_splits, num_reqs_static;
  float scale;
  int split_kernel, merge_warps, merge_by_lane;
  int schedule;  // 0: lockstep, 1: wave-serial
  uint64_t seed;
  const float* k_scale;  // FP8: [] or [num_blocks, Hkv, 16]; bf16: unread
  const float* v_scale;
  int kv_format, scale_kind;  // muse_attn::KvFormat, muse_attn::ScaleKind
  // The drafts target (draft_kind 0 and no lse: the chain call): muse_attn::DraftKind, the draft
  // operands it reads, the lse result or null.
  const int32_t* draft_lens;
  const uint32_t* tree_mask;
  const int32_t* draft_depths;
  float* lse;
  int draft_kind;
  int balance_segments;  // the plan's balanced cut (muse_attn/geometry.h)
};

const char* muse_emu_target();  // "gfx942" or "gfx950"
int muse_emu_lds_bytes();       // the target's LDS a workgroup
int muse_emu_mfma_k();          // 16 or 32
// 0, or 1 with the emulator's error in error[0 .. error_len).
int muse_emu_verify_attention(const MuseEmuCall* call, char* error, int error_len);
// d = the MFMA of the lanes' registers a, b (K / 8 words each) and c (4 floats each).
int muse_emu_mfma(const uint32_t* a, const uint32_t* b, const float* c, float* d, char* error,
                  int error_len);
}

#endif  // MUSE_ATTN_GPU_EMU_ENTRY_H_
