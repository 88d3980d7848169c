// The emulator as a program: runs the verify-attention call described by a case file
// (tests/amd_emulator.py write_case) and writes its output; for runs under the sanitizers, whose
// runtimes a program links itself.
//   run_case CASE_FILE OUT_FILE
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gpu/emu/entry.h"

namespace {

template <typename T>
bool read(std::FILE* f, std::vector<T>* v, int64_t n) {
  v->resize(static_cast<size_t>(n));
  return std::fread(v->data(), sizeof(T), v->size(), f) == v->size();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CASE_FILE OUT_FILE\n", argv[0]);
    return 2;
  }
  std::FILE* f = std::fopen(argv[1], "rb");
  if (f == nullptr) {
    std::perror(argv[1]);
    return 2;
  }
  // The header: int64 fields in this order, then the float64 scale.
  enum { kRequests, kTokens, kQHeads, kKvHeads, kHeadDim, kPages, kWindow, kSplits, kNumReqsStatic,
         kSplitKernel, kMergeWarps, kMergeByLane, kSchedule, kSeed, kBlocks, kTableRows, kNumReqs,
         kKvFormat, kScaleKind, kBalanceSegments, kFields };
  std::vector<int64_t> h;
  std::vector<double> scale;
  std::vector<uint16_t> q;
  std::vector<uint8_t> kv;
  std::vector<int32_t> table, lens;
  std::vector<float> k_scale, v_scale;  // each exactly as large as the call's scales
  bool ok = read(f, &h, kFields) && read(f, &scale, 1);
  const int64_t rows = ok ? h[kRequests] * h[kTokens] : 0;
  const int64_t kv_elems = ok ? h[kBlocks] * h[kKvHeads] * 16 * 2 * h[kHeadDim] : 0;
  const int64_t scales = ok && h[kScaleKind] == 2 ? h[kBlocks] * h[kKvHeads] * 16 : 1;
  ok = ok && read(f, &q, rows * h[kQHeads] * h[kHeadDim]) &&
       read(f, &kv, kv_elems * (h[kKvFormat] == 0 ? 2 : 1)) &&
       read(f, &table, h[kTableRows] * h[kPages]) && read(f, &lens, h[kTableRows]) &&
       read(f, &k_scale, scales) && read(f, &v_scale, scales);
  std::fclose(f);
  if (!ok) {
    std::fprintf(stderr, "%s: a short case file\n", argv[1]);
    return 2;
  }
  const int64_t groups = h[kRequests] * h[kKvHeads];
  const int64_t grows = h[kTokens] * (h[kQHeads] / h[kKvHeads]);
  std::vector<uint16_t> out(q.size(), 0xffff), part_o(groups * h[kSplits] * grows * h[kHeadDim]);
  std::vector<float> part_ml(groups * h[kSplits] * grows * 2);
  const int32_t num_reqs = static_cast<int32_t>(h[kNumReqs]);
  MuseEmuCall call{};
  call.q = q.data();
  call.kv = kv.data();
  call.table = table.data();
  call.seq_lens = lens.data();
  call.num_reqs = &num_reqs;
  call.out = out.data();
  call.part_o = part_o.data();
  call.part_ml = part_ml.data();
  call.num_blocks = h[kBlocks];
  call.table_stride = h[kPages];
  call.num_requests = static_cast<int>(h[kRequests]);
  call.tokens = static_cast<int>(h[kTokens]);
  call.num_q_heads = static_cast<int>(h[kQHeads]);
  call.num_kv_heads = static_cast<int>(h[kKvHeads]);
  call.head_dim = static_cast<int>(h[kHeadDim]);
  call.pages = static_cast<int>(h[kPages]);
  call.window = static_cast<int>(h[kWindow]);
  call.num_splits = static_cast<int>(h[kSplits]);
  call.num_reqs_static = static_cast<int>(h[kNumReqsStatic]);
  call.scale = static_cast<float>(scale[0]);
  call.split_kernel = static_cast<int>(h[kSplitKernel]);
  call.merge_warps = static_cast<int>(h[kMergeWarps]);
  call.merge_by_lane = static_cast<int>(h[kMergeByLane]);
  call.schedule = static_cast<int>(h[kSchedule]);
  call.seed = static_cast<uint64_t>(h[kSeed]);
  call.k_scale = k_scale.data();
  call.v_scale = v_scale.data();
  call.kv_format = static_cast<int>(h[kKvFormat]);
  call.scale_kind = static_cast<int>(h[kScaleKind]);
  call.balance_segments = static_cast<int>(h[kBalanceSegments]);
  char error[2048] = "";
  if (muse_emu_verify_attention(&call, error, sizeof error) != 0) {
    std::fprintf(stderr, "%s\n", error);
    return 1;
  }
  std::FILE* o = std::fopen(argv[2], "wb");
  if (o == nullptr || std::fwrite(out.data(), 2, out.size(), o) != out.size()) return 2;
  std::fclose(o);
  return 0;
}
