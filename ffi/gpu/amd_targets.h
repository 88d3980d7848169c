// The AMD launch plan's table: one row a target, its hardware numbers and the values the plan
// takes from them (launch_plan.h amd_tuning, which also checks the derivation), kept as data
// beside the kernels.
//
// NOT MEASURED: no AMD GPU has run these kernels. Every planning value below is derived from the
// hardware numbers and the kernels' resources (static_asserts below check the derivation); the
// reason for each is beside it. The split policy's other thresholds (tuning.h) are H100 / H200
// measurements that AMD takes unchanged until an AMD GPU measures them; NVIDIA's plan never reads
// this table.
#ifndef MUSE_ATTN_GPU_AMD_TARGETS_H_
#define MUSE_ATTN_GPU_AMD_TARGETS_H_

#include "gpu/tuning.h"

namespace muse_attn::gpu {

struct AmdTarget {
  int gfx;           // the gfx target number: 942 (CDNA3), 950 (CDNA4)
  const char* name;  // "gfx942", "gfx950"
  // Hardware (sources: tools/amd_model.py ArchSpec / GPUS, which cite them).
  int cus;                 // CUs of the reference part (MI300X, MI355X); the plan uses the runtime's
  int lds_bytes;           // LDS a CU, also a workgroup's most
  int lds_granule;         // LDS allocation granule, bytes
  int vgprs_per_simd;      // VGPRs + AGPRs a lane of a SIMD (one unified file)
  int vgpr_granule;        // VGPR allocation granule
  int max_waves_per_simd;
  int simds_per_cu;
  // The split kernels' VGPRs + AGPRs a lane as allocated (the largest of the per_tile family:
  // bf16, FP8, drafts; compiler output, which tests/test_amd_model.py holds the table to).
  int split_vgprs_d64, split_vgprs_d128;
  // The plan's values: split workgroups a CU holds at once, the one-wave target of the split
  // count (tuning.h ctas_per_sm_*): the fewer of what LDS and what VGPRs allow.
  int split_ctas_per_cu_d64, split_ctas_per_cu_d128;
  // A windowed call's K/V loads keep their lines in the caches (split kernel per_tile_cached);
  // full attention's stream past them (nontemporal). The gfx950 design's rule (the seed): the
  // next step rereads a window's keys but for a few, a long context's once.
  bool cache_window_kv;
};

inline constexpr AmdTarget kAmdTargets[] = {
    {942, "gfx942",
     /*cus=*/304,                 // MI300X
     /*lds_bytes=*/64 * 1024,     // CDNA3: 64 KiB a CU
     /*lds_granule=*/512,         // 128 dwords (COMPUTE_PGM_RSRC2.LDS_SIZE, gfx9)
     /*vgprs_per_simd=*/512, /*vgpr_granule=*/8, /*max_waves_per_simd=*/8, /*simds_per_cu=*/4,
     /*split_vgprs_d64=*/208,     // FP8 tree 173 VGPRs (-> 176) + 32 AGPRs
     /*split_vgprs_d128=*/344,    // balanced tree 256 + 82 AGPRs -> 338 -> 344
     /*split_ctas_per_cu_d64=*/1,   // LDS: 40 KiB a workgroup, one fits 64 KiB (VGPRs: 2)
     /*split_ctas_per_cu_d128=*/1,  // LDS: 48 KiB, one fits; VGPRs: 344 leave one wave a SIMD
     /*cache_window_kv=*/true},     // as gfx950 (256 MiB of Infinity Cache both)
    {950, "gfx950",
     /*cus=*/256,                 // MI355X
     /*lds_bytes=*/160 * 1024,    // CDNA4: 160 KiB a CU
     /*lds_granule=*/1280,        // 320 dwords (COMPUTE_PGM_RSRC2.LDS_SIZE, GFX950)
     /*vgprs_per_simd=*/512, /*vgpr_granule=*/8, /*max_waves_per_simd=*/8, /*simds_per_cu=*/4,
     /*split_vgprs_d64=*/120,     // the FP8 tree 116 -> 120, no AGPRs
     /*split_vgprs_d128=*/168,    // split_kernel<128> 166, the FP8 tree 163 -> 168
     /*split_ctas_per_cu_d64=*/4,   // LDS: 40 KiB, four fit 160 KiB; VGPRs: 120 leave four waves a SIMD
     /*split_ctas_per_cu_d128=*/3,  // VGPRs: 168 leave three waves a SIMD; LDS: 3 too
     /*cache_window_kv=*/true},
};
inline constexpr int kNumAmdTargets = sizeof(kAmdTargets) / sizeof(kAmdTargets[0]);

// The row of gfx target `gfx`; an AMD GPU the table does not know (0: unknown) takes gfx942's,
// whose 64 KiB of LDS every CDNA GPU has.
constexpr const AmdTarget& amd_target(int gfx) {
  for (const AmdTarget& t : kAmdTargets)
    if (t.gfx == gfx) return t;
  return kAmdTargets[0];
}

// The gfx number of a runtime architecture name ("gfx942:sramecc+:xnack-" -> 942); 0 where it is
// not "gfx" and decimal digits (gfx90a).
inline int amd_gfx_number(const char* arch) {
  if (arch == nullptr || arch[0] != 'g' || arch[1] != 'f' || arch[2] != 'x') return 0;
  int n = 0, digits = 0;
  for (const char* c = arch + 3; *c != '\0' && *c != ':'; ++c, ++digits) {
    if (*c < '0' || *c > '9' || digits >= 6) return 0;
    n = 10 * n + (*c - '0');
  }
  return digits > 0 ? n : 0;
}

}  // namespace muse_attn::gpu

#endif  // MUSE_ATTN_GPU_AMD_TARGETS_H_
