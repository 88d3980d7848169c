// The wave64 emulator (emulator.h): fibers, the two schedules, the wave collectives, the MFMA
// lane layouts and the LDS checks. One launch at a time (a mutex), on the calling thread.
#include "gpu/emu/emulator.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/emu/hip/hip_runtime.h"
#include "gpu/emu/lane_ops.h"
#include "gpu/emu/mfma.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MUSE_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MUSE_EMU_ASAN 1
#endif
#if defined(MUSE_EMU_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

// The static LDS of every kernel (hip_runtime.h __shared__), from the linker.
extern "C" {
extern char __start_muse_emu_lds[] __attribute__((weak));
extern char __stop_muse_emu_lds[] __attribute__((weak));
}

namespace muse_emu {
namespace {

// ---- fibers ------------------------------------------------------------------------------------
// x86-64: a switch that saves the callee-saved registers, MXCSR and the x87 control word on the
// old stack and restores them from the new one (no system call, unlike swapcontext).
#if !defined(__x86_64__)
#error "the emulator's fiber switch is written for x86-64"
#endif
extern "C" void muse_emu_switch(void** save_sp, void* load_sp);
extern "C" void muse_emu_fiber_entry();
asm(R"(
  .text
  .p2align 4
  .globl muse_emu_switch
  .hidden muse_emu_switch
  .type muse_emu_switch, @function
muse_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size muse_emu_switch, .-muse_emu_switch

  .p2align 4
  .globl muse_emu_fiber_entry
  .hidden muse_emu_fiber_entry
  .type muse_emu_fiber_entry, @function
muse_emu_fiber_entry:
  movq %r12, %rdi
  call muse_emu_fiber_main
  ud2
  .size muse_emu_fiber_entry, .-muse_emu_fiber_entry
)");

#if defined(MUSE_EMU_ASAN)
constexpr size_t kStackBytes = 1 << 20;  // ASan's redzones and fake frames
#else
constexpr size_t kStackBytes = 256 << 10;
#endif
constexpr size_t kGuardBytes = 4096;
constexpr int kMaxThreads = 1024;

enum class State { kReady, kWaiting, kDone };
enum class Op { kNone, kShfl, kShflXor, kAny, kMfma, kLaneOp, kBarrier };

const char* op_name(Op op) {
  switch (op) {
    case Op::kShfl: return "__shfl";
    case Op::kShflXor: return "__shfl_xor";
    case Op::kAny: return "__any";
    case Op::kMfma: return "an MFMA";
    case Op::kLaneOp: return "a cross-lane instruction (lane_ops.h)";
    case Op::kBarrier: return "__syncthreads";
    default: return "nothing";
  }
}

struct Lane {
  Ids ids;
  char* stack = nullptr;  // kStackBytes + the guard page below
  void* sp = nullptr;
  State state = State::kDone;
  // The synchronization point it waits at and its operands there.
  Op op = Op::kNone;
  const char* file = "";
  int line = 0;
  float f = 0.0f;
  int i = 0;
  uint32_t a[4] = {}, b[4] = {};
  float c[4] = {};
  uint32_t param = 0;  // a lane op's parameter
  // Results.
  float rf = 0.0f;
  int ri = 0;
  float rd[4] = {};
  uint32_t ru[4] = {};
};

// ---- the emulator's state (one launch at a time) -----------------------------------------------
std::mutex g_mutex;
Schedule g_schedule = Schedule::kLockstep;
uint64_t g_seed = 1;
int g_lds_limit = 65536;
int g_multiprocessors = 304;
std::string g_error;
hipError_t g_last_error = hipSuccess;
std::map<const void*, size_t> g_max_dynamic_lds;

std::vector<Lane> g_lanes;  // the running block's threads first (never shrinks: it owns stacks)
int g_nthreads = 0;
Lane* g_current = nullptr;
void* g_scheduler_sp = nullptr;
bool g_failed = false;
const char* g_kernel_name = "";
void (*g_body)(const void*) = nullptr;
const void* g_args = nullptr;
Dim3 g_block_idx, g_block_dim, g_grid_dim;
uint64_t g_rng = 0;

std::vector<char> g_lds;             // the block's dynamic LDS
std::vector<uint8_t> g_lds_written;  // 1: written in this block
std::vector<uint8_t> g_static_written;
size_t g_static_touched = 0;  // static LDS bytes written by the block

#if defined(MUSE_EMU_ASAN)
const void* g_main_stack_bottom = nullptr;
size_t g_main_stack_size = 0;
#endif

uint64_t next_random() {  // splitmix64
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
template <typename T>
void shuffle(std::vector<T>& v) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[next_random() % i]);
}

std::string demangled(const void* fn, const char* fallback) {
  Dl_info info{};
  if (fn != nullptr && dladdr(fn, &info) != 0 && info.dli_sname != nullptr) {
    int status = 0;
    char* name = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    if (status == 0 && name != nullptr) {
      std::string s(name);
      std::free(name);
      return s;
    }
    return info.dli_sname;
  }
  return fallback;
}

int wave_count() { return (g_nthreads + kWaveSize - 1) / kWaveSize; }
int wave_lanes(int w) { return std::min(kWaveSize, g_nthreads - w * kWaveSize); }
int lane_index(const Lane& l) { return static_cast<int>(&l - g_lanes.data()); }
int wave_lanes(int w);

std::string where(const Lane* l) {
  char buf[256];
  if (l == nullptr) {
    std::snprintf(buf, sizeof buf, "%s, block (%u, %u, %u)", g_kernel_name, g_block_idx.x,
                  g_block_idx.y, g_block_idx.z);
  } else {
    const int t = lane_index(*l);
    std::snprintf(buf, sizeof buf, "%s, block (%u, %u, %u), wave %d, lane %d", g_kernel_name,
                  g_block_idx.x, g_block_idx.y, g_block_idx.z, t / kWaveSize, t % kWaveSize);
  }
  return buf;
}

// Records the first error of a launch.
void record(const std::string& msg) {
  if (!g_failed) g_error = msg;
  g_failed = true;
}

// ---- switching ---------------------------------------------------------------------------------
void switch_to_lane(Lane& l) {
  g_current = &l;
#if defined(MUSE_EMU_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, l.stack + kGuardBytes, kStackBytes);
  muse_emu_switch(&g_scheduler_sp, l.sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  muse_emu_switch(&g_scheduler_sp, l.sp);
#endif
  g_current = nullptr;
}

// From a lane back to the scheduler; returns when the scheduler resumes this lane.
void yield_to_scheduler(bool ending) {
  Lane& l = *g_current;
#if defined(MUSE_EMU_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(ending ? nullptr : &fake, g_main_stack_bottom, g_main_stack_size);
  muse_emu_switch(&l.sp, g_scheduler_sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)ending;
  muse_emu_switch(&l.sp, g_scheduler_sp);
#endif
}

// A lane waits at a synchronization point; the scheduler resolves it and resumes the lane.
Lane& arrive(Op op, const char* file, int line) {
  Lane& l = *g_current;
  l.op = op;
  l.file = file;
  l.line = line;
  l.state = State::kWaiting;
  yield_to_scheduler(false);
  return l;
}

}  // namespace

extern "C" __attribute__((visibility("hidden"), used)) void muse_emu_fiber_main(Lane* l) {
#if defined(MUSE_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &g_main_stack_bottom, &g_main_stack_size);
#endif
  g_body(g_args);
  l->state = State::kDone;
  yield_to_scheduler(true);
  std::abort();  // a finished lane is never resumed
}

namespace {

void start_lane(Lane& l) {
  if (l.stack == nullptr) {
    void* m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "muse_emu: cannot map a fiber stack\n");
      std::abort();
    }
    mprotect(m, kGuardBytes, PROT_NONE);  // an overflow faults instead of corrupting memory
    l.stack = static_cast<char*>(m);
  }
  // The first switch into the lane pops MXCSR / x87 CW, r15 .. rbp (r12: the lane), then
  // returns into muse_emu_fiber_entry with the stack 16-byte aligned at its call.
  char* top = l.stack + kGuardBytes + kStackBytes;
  uint64_t* sp = reinterpret_cast<uint64_t*>(top - 80);
  uint32_t ctl[2];
  asm volatile("stmxcsr %0" : "=m"(ctl[0]));
  asm volatile("fnstcw %0" : "=m"(ctl[1]));
  std::memcpy(&sp[0], ctl, 8);
  sp[1] = 0;                                       // r15
  sp[2] = 0;                                       // r14
  sp[3] = 0;                                       // r13
  sp[4] = reinterpret_cast<uint64_t>(&l);          // r12
  sp[5] = 0;                                       // rbx
  sp[6] = 0;                                       // rbp
  sp[7] = reinterpret_cast<uint64_t>(&muse_emu_fiber_entry);
  l.sp = sp;
  l.state = State::kReady;
  l.op = Op::kNone;
}

// ---- resolving a wave's collective ----------------------------------------------------------------
// The wave's live lanes all wait at one wave collective (same operation, same call site): its
// results. Otherwise an error naming the lanes that differ.
void resolve_wave(int w) {
  const int first = w * kWaveSize;
  const int n = wave_lanes(w);
  Lane* lanes = &g_lanes[first];
  const Lane* lead = nullptr;
  for (int i = 0; i < n; ++i) {
    if (lanes[i].state == State::kDone) continue;
    if (lead == nullptr) {
      lead = &lanes[i];
    } else if (lanes[i].op != lead->op || lanes[i].line != lead->line ||
               std::strcmp(lanes[i].file, lead->file) != 0) {
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "divergence: lanes of one wave at different synchronization points, %s at "
                    "%s:%d and %s at %s:%d (%s)",
                    op_name(lead->op), lead->file, lead->line, op_name(lanes[i].op), lanes[i].file,
                    lanes[i].line, where(&lanes[i]).c_str());
      record(buf);
      return;
    }
  }
  if (lead == nullptr || lead->op == Op::kBarrier) return;
  auto exited = [&](int src, const Lane& reader) {
    if (src < n && lanes[src].state != State::kDone) return false;
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s at %s:%d reads lane %d, which has exited (%s)",
                  op_name(reader.op), reader.file, reader.line, src, where(&reader).c_str());
    record(buf);
    return true;
  };
  switch (lead->op) {
    case Op::kShfl:
      for (int i = 0; i < n; ++i) {
        if (lanes[i].state == State::kDone) continue;
        const int src = lanes[i].i & (kWaveSize - 1);  // HIP: the source lane modulo the width
        if (exited(src, lanes[i])) return;
        lanes[i].rf = lanes[src].f;
      }
      break;
    case Op::kShflXor:
      for (int i = 0; i < n; ++i) {
        if (lanes[i].state == State::kDone) continue;
        const int src = i ^ lanes[i].i;
        if (src >= kWaveSize) {  // HIP: a target past the width gives the lane's own value
          lanes[i].rf = lanes[i].f;
          continue;
        }
        if (exited(src, lanes[i])) return;
        lanes[i].rf = lanes[src].f;
      }
      break;
    case Op::kAny: {
      int any = 0;
      for (int i = 0; i < n; ++i)
        if (lanes[i].state != State::kDone) any |= lanes[i].i != 0;
      for (int i = 0; i < n; ++i) lanes[i].ri = any;
      break;
    }
    case Op::kMfma: {
      for (int i = 0; i < kWaveSize; ++i)  // an MFMA reads every lane's registers
        if (exited(i, *lead)) return;
      uint32_t a[kWaveSize][4], b[kWaveSize][4];
      float c[kWaveSize][4], d[kWaveSize][4];
      for (int i = 0; i < kWaveSize; ++i) {
        if (lanes[i].i != lead->i) {
          record("MFMA: lanes disagree on its K (" + where(&lanes[i]) + ")");
          return;
        }
        std::memcpy(a[i], lanes[i].a, sizeof a[i]);
        std::memcpy(b[i], lanes[i].b, sizeof b[i]);
        std::memcpy(c[i], lanes[i].c, sizeof c[i]);
      }
      mfma_f32_16x16_bf16(lead->i, a, b, c, d);
      for (int i = 0; i < kWaveSize; ++i) std::memcpy(lanes[i].rd, d[i], sizeof d[i]);
      break;
    }
    case Op::kLaneOp: {
      for (int i = 0; i < kWaveSize; ++i)  // these read any lane's registers
        if (exited(i, *lead)) return;
      uint32_t in[kWaveSize][4], out[kWaveSize][4] = {};
      for (int i = 0; i < kWaveSize; ++i) {
        if (lanes[i].i != lead->i || lanes[i].param != lead->param) {
          record("a cross-lane instruction: lanes disagree on its operation or controls (" +
                 where(&lanes[i]) + ")");
          return;
        }
        std::memcpy(in[i], lanes[i].a, sizeof in[i]);
      }
      if (const char* missing = apply_lane_op(static_cast<LaneOp>(lead->i), lead->param, in, out)) {
        record(std::string("not emulated: ") + missing + " at " + lead->file + ":" +
               std::to_string(lead->line) + " (" + where(lead) + ")");
        return;
      }
      for (int i = 0; i < kWaveSize; ++i) std::memcpy(lanes[i].ru, out[i], sizeof out[i]);
      break;
    }
    default:
      break;
  }
  // Lanes in SIMT step: a lane that exited without reaching this collective diverged from it.
  for (int i = 0; i < n; ++i) {
    if (lanes[i].state != State::kDone) continue;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "divergence: lane %d exited without reaching %s at %s:%d, which other lanes of "
                  "its wave reach (%s)",
                  i, op_name(lead->op), lead->file, lead->line, where(lead).c_str());
    record(buf);
    return;
  }
  for (int i = 0; i < n; ++i)
    if (lanes[i].state == State::kWaiting) lanes[i].state = State::kReady;
}

// Runs the wave's ready lanes (in a shuffled order) to their next synchronization point.
bool run_wave(int w) {
  std::vector<int> ready;
  const int first = w * kWaveSize;
  const int n = wave_lanes(w);
  for (int i = 0; i < n; ++i)
    if (g_lanes[first + i].state == State::kReady) ready.push_back(first + i);
  shuffle(ready);
  for (int t : ready) {
    switch_to_lane(g_lanes[t]);
    if (g_failed) return true;
  }
  return !ready.empty();
}

bool wave_waits_at_collective(int w) {
  const int first = w * kWaveSize;
  const int n = wave_lanes(w);
  bool any_waiting = false;
  for (int i = 0; i < n; ++i) {
    const Lane& l = g_lanes[first + i];
    if (l.state == State::kReady) return false;
    if (l.state == State::kWaiting && l.op != Op::kBarrier) any_waiting = true;
  }
  return any_waiting;
}

// A wave is at the barrier when none of its lanes can run on: all live ones wait somewhere and at
// least one waits at the barrier (a lane elsewhere is divergence, reported by resolve_wave).
bool wave_at_barrier_or_done(int w, bool* done) {
  const int first = w * kWaveSize;
  const int n = wave_lanes(w);
  bool live = false;
  for (int i = 0; i < n; ++i) {
    const Lane& l = g_lanes[first + i];
    if (l.state == State::kDone) continue;
    live = true;
    if (l.state != State::kWaiting || l.op != Op::kBarrier) return false;
  }
  *done = !live;
  return true;
}

// Drives one wave until it waits at the barrier or ends (wave-serial), or one round (lockstep).
bool advance_wave(int w, bool alone) {
  bool progress = false;
  for (;;) {
    progress |= run_wave(w);
    if (g_failed) return true;
    if (wave_waits_at_collective(w)) {
      resolve_wave(w);
      if (g_failed) return true;
      progress = true;
      if (alone) continue;
    }
    return progress;
  }
}

// Every live wave waits at the barrier: one call site for all of them, or an error.
void release_barrier() {
  const Lane* lead = nullptr;
  for (int t = 0; t < g_nthreads; ++t) {
    Lane& l = g_lanes[t];
    if (l.state != State::kWaiting) continue;
    if (lead == nullptr) {
      lead = &l;
    } else if (l.line != lead->line || std::strcmp(l.file, lead->file) != 0) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "waves at different barriers: %s:%d and %s:%d (%s)",
                    lead->file, lead->line, l.file, l.line, where(&l).c_str());
      record(buf);
      return;
    }
  }
  for (int t = 0; t < g_nthreads; ++t)
    if (g_lanes[t].state == State::kWaiting) g_lanes[t].state = State::kReady;
}

std::string deadlock_report() {
  std::string s = "deadlock: no lane can run on (";
  for (int w = 0; w < wave_count(); ++w) {
    const Lane* waiting = nullptr;
    int done = 0;
    for (int i = w * kWaveSize; i < w * kWaveSize + wave_lanes(w); ++i) {
      if (g_lanes[i].state == State::kDone) ++done;
      else if (waiting == nullptr) waiting = &g_lanes[i];
    }
    char buf[200];
    if (waiting != nullptr)
      std::snprintf(buf, sizeof buf, "wave %d at %s %s:%d, %d lanes exited; ", w,
                    op_name(waiting->op), waiting->file, waiting->line, done);
    else
      std::snprintf(buf, sizeof buf, "wave %d exited; ", w);
    s += buf;
  }
  return s + where(nullptr) + ")";
}

void run_block() {
  const int waves = wave_count();
  for (int t = 0; t < g_nthreads; ++t) start_lane(g_lanes[t]);
  std::vector<int> order(waves);
  for (;;) {
    for (int w = 0; w < waves; ++w) order[w] = w;
    shuffle(order);
    bool progress = false;
    if (g_schedule == Schedule::kWaveSerial) {
      for (int w : order) {  // each wave alone, up to the barrier or its end
        progress |= advance_wave(w, true);
        if (g_failed) return;
      }
    } else {
      for (int w : order) {
        progress |= advance_wave(w, false);
        if (g_failed) return;
      }
    }
    // The barrier, once every live wave waits at it.
    bool all_done = true, all_at_barrier = true;
    for (int w = 0; w < waves; ++w) {
      bool done = false;
      if (!wave_at_barrier_or_done(w, &done)) all_at_barrier = false;
      all_done &= done;
    }
    if (all_done) return;
    if (all_at_barrier) {
      release_barrier();
      if (g_failed) return;
      continue;
    }
    if (!progress) {
      // Lanes of a wave that wait at different points, or a barrier some wave never reaches.
      for (int w = 0; w < waves; ++w) {
        resolve_wave(w);
        if (g_failed) return;
      }
      record(deadlock_report());
      return;
    }
  }
}

struct Range {
  char* begin;
  char* end;
};
Range static_lds() {
  if (__start_muse_emu_lds == nullptr || __stop_muse_emu_lds == nullptr) return {nullptr, nullptr};
  return {__start_muse_emu_lds, __stop_muse_emu_lds};
}

// The flags of the LDS bytes [p, p + bytes), or nullptr (and an error) when they are not LDS.
uint8_t* lds_flags(const void* p, size_t bytes, const char* what, const char* file, int line) {
  const char* c = static_cast<const char*>(p);
  if (!g_lds.empty() && c >= g_lds.data() && c + bytes <= g_lds.data() + g_lds.size())
    return g_lds_written.data() + (c - g_lds.data());
  const Range s = static_lds();
  if (c >= s.begin && c + bytes <= s.end && s.begin != nullptr)
    return g_static_written.data() + (c - s.begin);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "LDS %s of %zu bytes at %s:%d is outside the block's LDS (dynamic %zu bytes) (%s)",
                what, bytes, file, line, g_lds.size(), where(g_current).c_str());
  record(buf);
  return nullptr;
}

}  // namespace

// ---- emulator.h --------------------------------------------------------------------------------
void configure(Schedule schedule, uint64_t seed, int lds_bytes) {
  g_schedule = schedule;
  g_seed = seed;
  g_lds_limit = lds_bytes;
  g_error.clear();
  g_last_error = hipSuccess;
}

const char* last_error() { return g_error.c_str(); }

int launch(const char* name, const void* kernel, void (*body)(const void*), const void* args,
           Dim3 grid, Dim3 block, size_t smem, size_t smem_limit) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string kernel_name = demangled(kernel, name);
  g_kernel_name = kernel_name.c_str();
  g_failed = false;
  g_rng = g_seed ^ (0x51ed2701ull * (static_cast<uint64_t>(grid.x) * 131 + block.x));
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  char buf[512];
  if (threads == 0 || threads > kMaxThreads || block.y != 1 || block.z != 1) {
    std::snprintf(buf, sizeof buf, "%s: a block of %u x %u x %u threads (at most %d, 1-D)",
                  g_kernel_name, block.x, block.y, block.z, kMaxThreads);
    record(buf);
    return 1;
  }
  if (smem > smem_limit || smem > static_cast<size_t>(g_lds_limit)) {
    std::snprintf(buf, sizeof buf,
                  "%s: over-budget launch: %zu bytes of dynamic LDS, the kernel's limit %zu, the "
                  "target's %d a workgroup",
                  g_kernel_name, smem, smem_limit, g_lds_limit);
    record(buf);
    return 1;
  }
  g_body = body;
  g_args = args;
  g_grid_dim = grid;
  g_block_dim = block;
  if (g_lanes.size() < threads) g_lanes.resize(threads);
  g_nthreads = static_cast<int>(threads);
  g_lds.assign(smem, static_cast<char>(0xff));  // NaN in every float and bf16 until written
  g_lds_written.assign(smem, 0);
  const Range s = static_lds();
  g_static_written.assign(s.end - s.begin, 0);
  std::vector<Dim3> blocks;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back(Dim3{x, y, z});
  shuffle(blocks);  // no order between blocks is promised
  for (const Dim3& b : blocks) {
    g_block_idx = b;
    std::fill(g_lds.begin(), g_lds.end(), static_cast<char>(0xff));
    std::fill(g_lds_written.begin(), g_lds_written.end(), 0);
    if (s.begin != nullptr) std::memset(s.begin, 0xff, s.end - s.begin);
    std::fill(g_static_written.begin(), g_static_written.end(), 0);
    g_static_touched = 0;
    for (size_t t = 0; t < threads; ++t) {
      g_lanes[t].ids = Ids{Dim3{static_cast<unsigned>(t), 0, 0}, b, block, grid};
    }
    run_block();
    if (!g_failed && smem + g_static_touched > static_cast<size_t>(g_lds_limit)) {
      std::snprintf(buf, sizeof buf,
                    "%s: over-budget block: %zu bytes of dynamic and %zu of static LDS, the "
                    "target's %d a workgroup",
                    g_kernel_name, smem, g_static_touched, g_lds_limit);
      record(buf);
    }
    if (g_failed) return 1;
  }
  return 0;
}

const Ids& ids() { return g_current->ids; }
char* dynamic_lds() { return g_lds.data(); }

void fail(const char* what, const char* file, int line) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s at %s:%d (%s)", what, file, line, where(g_current).c_str());
  record(buf);
  if (g_current != nullptr) yield_to_scheduler(false);  // never resumed
  std::abort();
}

float shfl(float v, int src_lane, const char* file, int line) {
  g_current->f = v;
  g_current->i = src_lane;
  return arrive(Op::kShfl, file, line).rf;
}
float shfl_xor(float v, int lane_mask, const char* file, int line) {
  g_current->f = v;
  g_current->i = lane_mask;
  return arrive(Op::kShflXor, file, line).rf;
}
int any(int pred, const char* file, int line) {
  g_current->i = pred;
  return arrive(Op::kAny, file, line).ri;
}
void syncthreads(const char* file, int line) { arrive(Op::kBarrier, file, line); }

void mfma_16x16_bf16(int k, const uint32_t* a_words, const uint32_t* b_words, const float* c,
                     float* d, const char* file, int line) {
  Lane& l = *g_current;
  l.i = k;
  std::memset(l.a, 0, sizeof l.a);
  std::memset(l.b, 0, sizeof l.b);
  std::memcpy(l.a, a_words, sizeof(uint32_t) * (k / 8));
  std::memcpy(l.b, b_words, sizeof(uint32_t) * (k / 8));
  std::memcpy(l.c, c, sizeof l.c);
  std::memcpy(d, arrive(Op::kMfma, file, line).rd, sizeof l.rd);
}

void lane_op(int op, uint32_t param, const uint32_t* in, uint32_t* out, const char* file, int line) {
  Lane& l = *g_current;
  l.i = op;
  l.param = param;
  std::memcpy(l.a, in, sizeof l.a);
  std::memcpy(out, arrive(Op::kLaneOp, file, line).ru, sizeof l.ru);
}

void ds_read_b64_tr_b16(const void* p, uint32_t* out, const char* file, int line) {
  if (reinterpret_cast<uintptr_t>(p) % 8 != 0) fail("ds_read_b64_tr_b16 at an address not 8-byte aligned", file, line);
  lds_check_read(p, 8, file, line);  // every byte of each lane's 8 goes to some lane
  uint32_t in[4] = {};
  const uint64_t addr = reinterpret_cast<uintptr_t>(p);
  std::memcpy(in, &addr, sizeof addr);
  uint32_t r[4];
  lane_op(static_cast<int>(LaneOp::kDsReadB64TrB16), 0, in, r, file, line);
  out[0] = r[0];
  out[1] = r[1];
}

void lds_note_write(const void* p, size_t bytes, const char* file, int line) {
  uint8_t* flags = lds_flags(p, bytes, "write", file, line);
  if (flags == nullptr) {
    yield_to_scheduler(false);
    std::abort();
  }
  const Range s = static_lds();
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; ++i) {
    if (c >= s.begin && c < s.end && flags[i] == 0) ++g_static_touched;
    flags[i] = 1;
  }
}

void lds_check_read(const void* p, size_t bytes, const char* file, int line) {
  const uint8_t* flags = lds_flags(p, bytes, "read", file, line);
  if (flags == nullptr) {
    yield_to_scheduler(false);
    std::abort();
  }
  for (size_t i = 0; i < bytes; ++i) {
    if (flags[i] != 0) continue;
    const char* c = static_cast<const char*>(p);
    const bool dyn = !g_lds.empty() && c >= g_lds.data() && c < g_lds.data() + g_lds.size();
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "LDS read before any write in the block: byte %zu of %s LDS at %s:%d (%s)",
                  static_cast<size_t>(dyn ? c + i - g_lds.data() : c + i - static_lds().begin),
                  dyn ? "dynamic" : "static", file, line, where(g_current).c_str());
    record(buf);
    yield_to_scheduler(false);
    std::abort();
  }
}

// ---- the stand-in header's host side -----------------------------------------------------------
hipError_t take_last_error() {
  const hipError_t e = g_last_error;
  g_last_error = hipSuccess;
  return e;
}
void set_last_error(hipError_t e) {
  if (e != hipSuccess) g_last_error = e;
}
hipError_t set_max_dynamic_lds(const void* kernel, int bytes) {
  if (bytes < 0 || bytes > g_lds_limit) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "hipFuncSetAttribute: %d bytes of dynamic LDS for %s, more than the target's %d",
                  bytes, demangled(kernel, "a kernel").c_str(), g_lds_limit);
    g_error = buf;
    return hipErrorInvalidValue;
  }
  g_max_dynamic_lds[kernel] = static_cast<size_t>(bytes);
  return hipSuccess;
}
size_t max_dynamic_lds(const void* kernel) {
  const auto it = g_max_dynamic_lds.find(kernel);
  return it == g_max_dynamic_lds.end() ? 65536 : it->second;
}
int multiprocessors() { return g_multiprocessors; }

}  // namespace muse_emu
