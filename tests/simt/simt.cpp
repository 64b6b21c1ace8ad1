// The SIMT emulator's scheduler (NOTE [Kernels on the CPU emulator] in tests/simt/simt.h): one
// fiber per thread of a block. Warp by warp (in the launch's order), the warp's lanes run until
// each waits at a collective or exits, its warp collectives complete, and so on until the warp
// waits only at __syncthreads (or has exited); when every warp is there, the barrier releases
// them all and the round starts again. A collective that can never complete is an error.
//
// A fiber starts on its own stack through makecontext/setcontext and from then on switches with
// _setjmp/_longjmp, which unlike swapcontext leave the signal mask alone: no system call per
// switch (swapcontext's sigprocmask calls took more time than the kernels themselves).
// _FORTIFY_SOURCE's longjmp check takes a jump to another stack for a corrupt one; it is off here.
#ifdef _FORTIFY_SOURCE
#undef _FORTIFY_SOURCE
#endif
#include "tests/simt/simt.h"

#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace simt {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;  // behind the dynamic shared memory, must stay 0xff
constexpr int kWarp = 32;

enum class Wait { None, Block, Warp };
enum class Op { Shuffle, Ballot, SyncWarp, Mma, Ldmatrix };

const char* op_name(Op op, Shuffle kind) {
  switch (op) {
    case Op::Shuffle:
      switch (kind) {
        case Shuffle::Index: return "__shfl_sync";
        case Shuffle::Xor: return "__shfl_xor_sync";
        case Shuffle::Down: return "__shfl_down_sync";
        case Shuffle::Up: return "__shfl_up_sync";
      }
      break;
    case Op::Ballot: return "__ballot_sync";
    case Op::SyncWarp: return "__syncwarp";
    case Op::Mma: return "mma.sync.m16n8k16";
    case Op::Ldmatrix: return "ldmatrix.sync.aligned.m8n8";
  }
  return "?";
}

struct Fiber {
  ucontext_t ctx{};  // the start
  jmp_buf jb{};      // where it waits
  bool started = false;
  char* stack = nullptr;
  uint3 idx{};
  int linear = 0;
  bool done = false;
  Wait wait = Wait::None;
  // The warp collective it waits on, its operands and its result.
  Op op = Op::SyncWarp;
  Shuffle kind = Shuffle::Index;
  unsigned mask = 0;
  int arg = 0, width = kWarp;
  bool bf16 = false;
  uint64_t value = 0;
  uint32_t a[4] = {}, b[2] = {};
  float d[4] = {};
  int count = 0;  // ldmatrix: matrices, transposed or not, and this lane's row address
  bool trans = false;
  const unsigned char* row = nullptr;
  // cp.async copies that have not landed (Order::Reverse): the bytes, read when issued, and
  // their group (the number of commits before them).
  struct Copy {
    unsigned char* dst;
    unsigned char bytes[16];
    int group;
  };
  std::vector<Copy> copies;
  int committed = 0;
};

struct Block {
  jmp_buf sched{};  // the scheduler, inside resume()
  std::vector<Fiber> fibers;
  uint3 idx{};
  dim3 dim, grid;
  unsigned char* shared = nullptr;
  size_t shared_bytes = 0;
  Order order = Order::Forward;
  const std::function<void()>* body = nullptr;
  std::exception_ptr error;
};

// The kernels' static __shared__ variables: simt.h puts them all in this section, whose bounds
// the linker provides (weak: a program without kernels has no such section).
extern "C" {
extern char __start_simt_shared[] __attribute__((weak));
extern char __stop_simt_shared[] __attribute__((weak));
}

// Static shared memory as a GPU leaves it to a new block: garbage. 0xff bytes are NaN in f32,
// f16 and bf16 and -1 in integers, so a read before the block's own write shows.
void poison_static_shared() {
  char* begin = __start_simt_shared;
  char* end = __stop_simt_shared;
  if (begin != nullptr && end > begin) std::memset(begin, 0xff, static_cast<size_t>(end - begin));
}

// Whether [p, p + n) lies in the block's shared memory (dynamic or static).
bool in_shared(const Block& b, const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  const auto* sb = reinterpret_cast<const unsigned char*>(__start_simt_shared);
  const auto* se = reinterpret_cast<const unsigned char*>(__stop_simt_shared);
  return (c >= b.shared && c + n <= b.shared + b.shared_bytes) || (sb != nullptr && c >= sb && c + n <= se);
}

thread_local Block* g_block = nullptr;
thread_local Fiber* g_self = nullptr;
// Fiber stacks, kept from launch to launch (allocating and touching fresh ones each time cost
// more than the kernels).
thread_local std::vector<std::unique_ptr<char[]>> g_stacks;
thread_local Order g_default_order = Order::Forward;

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("simt: " + what); }

Fiber& self() {
  if (!g_self) fail("a kernel intrinsic was called outside simt::launch");
  return *g_self;
}

std::string where(const Block& b, const Fiber& f) {
  std::ostringstream s;
  s << "block (" << b.idx.x << "," << b.idx.y << "," << b.idx.z << ") thread (" << f.idx.x << "," << f.idx.y << ","
    << f.idx.z << ") [warp " << f.linear / kWarp << " lane " << f.linear % kWarp << "]";
  return s.str();
}

std::string hex(unsigned v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

std::string state(const Fiber& f) {
  if (f.done) return "exited";
  if (f.wait == Wait::Block) return "waits at __syncthreads";
  if (f.wait == Wait::Warp) {
    return std::string("waits at ") + op_name(f.op, f.kind) + " (mask " + hex(f.mask) + ")";
  }
  return "runs";
}

void yield() {
  Fiber& f = self();
  if (!_setjmp(f.jb)) _longjmp(g_block->sched, 1);
}

void entry() {
  Block* b = g_block;
  try {
    (*b->body)();
  } catch (...) {
    if (!b->error) b->error = std::current_exception();
  }
  g_self->done = true;
  g_self->wait = Wait::None;
  _longjmp(b->sched, 1);  // never returns: the stack is abandoned
}

Fiber& warp_op(Op op, unsigned mask) {
  Fiber& f = self();
  f.wait = Wait::Warp;
  f.op = op;
  f.kind = Shuffle::Index;  // compared between lanes: the same for every non-shuffle op
  f.mask = mask;
  return f;
}

float decode16(uint16_t bits, bool bf16) {
  if (bf16) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  }
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}

// Completes the collective `origin` waits on in warp w: the lanes its mask names must all wait on
// the same collective with the same mask.
void complete_warp(Block& b, int w, const Fiber& origin) {
  const int n = static_cast<int>(b.fibers.size());
  const unsigned mask = origin.mask;
  Fiber* lane[kWarp] = {};
  for (int l = 0; l < kWarp; ++l) {
    if (!(mask >> l & 1u)) continue;
    const int i = w * kWarp + l;
    if (i >= n) fail("mask " + hex(mask) + " names lane " + std::to_string(l) + " of warp " + std::to_string(w) + ", which the block (" +
                     std::to_string(n) + " threads) does not have");
    Fiber& f = b.fibers[static_cast<size_t>(i)];
    if (f.wait != Wait::Warp || f.mask != mask || f.op != origin.op || f.kind != origin.kind) {
      fail(where(b, origin) + " " + state(origin) + ", but " + where(b, f) + ", named by its mask, " + state(f) +
           ": the collective can never complete (divergent warp)");
    }
    lane[l] = &f;
  }
  const Op op = origin.op;
  if (op == Op::Mma) {
    if (mask != 0xffffffffu) fail(where(b, origin) + ": mma.sync needs the whole warp (mask 0xffffffff)");
    // PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type": lane = 4 g + t;
    // A [16][16]: reg 0 (g, 2t..2t+1), 1 (g+8, 2t..), 2 (g, 2t+8..), 3 (g+8, 2t+8..);
    // B [16][8] (k, n): reg 0 (2t..2t+1, g), 1 (2t+8..2t+9, g); C [16][8]: (g, 2t..), (g+8, 2t..).
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < kWarp; ++l) {
      const int g = l / 4, t = l % 4;
      const Fiber& f = *lane[l];
      if (f.bf16 != origin.bf16) fail(where(b, f) + ": mma.sync lanes disagree on the input type");
      for (int r = 0; r < 4; ++r) {
        const int row = g + (r & 1 ? 8 : 0), col = 2 * t + (r & 2 ? 8 : 0);
        A[row][col] = decode16(static_cast<uint16_t>(f.a[r] & 0xffffu), f.bf16);
        A[row][col + 1] = decode16(static_cast<uint16_t>(f.a[r] >> 16), f.bf16);
      }
      for (int r = 0; r < 2; ++r) {
        const int k = 2 * t + 8 * r;
        B[k][g] = decode16(static_cast<uint16_t>(f.b[r] & 0xffffu), f.bf16);
        B[k + 1][g] = decode16(static_cast<uint16_t>(f.b[r] >> 16), f.bf16);
      }
      C[g][2 * t] = f.d[0];
      C[g][2 * t + 1] = f.d[1];
      C[g + 8][2 * t] = f.d[2];
      C[g + 8][2 * t + 1] = f.d[3];
    }
    for (int l = 0; l < kWarp; ++l) {
      const int g = l / 4, t = l % 4;
      Fiber& f = *lane[l];
      for (int e = 0; e < 4; ++e) {
        const int row = g + (e < 2 ? 0 : 8), col = 2 * t + (e & 1);
        float s = 0.f;  // products of 16-bit floats are exact in f32
        for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
        f.d[e] = C[row][col] + s;
      }
    }
  } else if (op == Op::Ldmatrix) {
    if (mask != 0xffffffffu) fail(where(b, origin) + ": ldmatrix needs the whole warp");
    // PTX ISA, ldmatrix: the rows of matrix i come from the addresses of lanes 8 i .. 8 i + 7;
    // lane 4 r + c holds elements 2c, 2c + 1 of row r (.trans: of column r).
    uint16_t m[4][8][8];
    for (int i = 0; i < origin.count; ++i)
      for (int r = 0; r < 8; ++r) {
        const Fiber& f = *lane[8 * i + r];
        if (f.count != origin.count || f.trans != origin.trans)
          fail(where(b, f) + ": ldmatrix lanes disagree on the number of matrices or .trans");
        if (reinterpret_cast<uintptr_t>(f.row) % 16 != 0 || !in_shared(b, f.row, 16))
          fail(where(b, f) + ": ldmatrix row address " + hex(static_cast<unsigned>(reinterpret_cast<uintptr_t>(f.row))) +
               " is not 16 bytes of shared memory on a 16-byte boundary");
        std::memcpy(m[i][r], f.row, 16);
      }
    for (int l = 0; l < kWarp; ++l) {
      const int r = l / 4, c = l % 4;
      for (int i = 0; i < origin.count; ++i) {
        const uint16_t lo = origin.trans ? m[i][2 * c][r] : m[i][r][2 * c];
        const uint16_t hi = origin.trans ? m[i][2 * c + 1][r] : m[i][r][2 * c + 1];
        lane[l]->a[i] = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
      }
    }
  } else if (op == Op::Ballot) {
    unsigned bits = 0;
    for (int l = 0; l < kWarp; ++l)
      if (lane[l] && lane[l]->value) bits |= 1u << l;
    for (int l = 0; l < kWarp; ++l)
      if (lane[l]) lane[l]->value = bits;
  } else if (op == Op::Shuffle) {
    uint64_t in[kWarp] = {};
    for (int l = 0; l < kWarp; ++l)
      if (lane[l]) in[l] = lane[l]->value;
    for (int l = 0; l < kWarp; ++l) {
      if (!lane[l]) continue;
      Fiber& f = *lane[l];
      const int w = f.width;
      if (w < 1 || w > kWarp || (w & (w - 1))) fail(where(b, f) + ": shuffle width " + std::to_string(w));
      const int base = l / w * w;
      int src = l;
      switch (f.kind) {
        case Shuffle::Index: src = base + ((f.arg % w) + w) % w; break;
        case Shuffle::Xor: src = l ^ f.arg; break;
        case Shuffle::Down: src = l + f.arg; break;
        case Shuffle::Up: src = l - f.arg; break;
      }
      // Outside the segment (later for xor and down, earlier for up): the lane keeps its own value.
      if (src < base && f.kind == Shuffle::Up) src = l;
      if (src >= base + w && f.kind != Shuffle::Index) src = l;
      if (src < 0 || src >= kWarp || !lane[src])
        fail(where(b, f) + ": " + op_name(op, f.kind) + " reads lane " + std::to_string(src) +
             ", which its mask leaves out (an undefined value on a GPU)");
      f.value = in[src];
    }
  }
  for (int l = 0; l < kWarp; ++l)
    if (lane[l]) lane[l]->wait = Wait::None;
}

// Completes the collectives warp w waits on; false when it waits on none.
bool complete_warp_ops(Block& b, int w) {
  const int n = static_cast<int>(b.fibers.size());
  bool progress = false;
  for (int l = 0; l < kWarp && w * kWarp + l < n; ++l) {
    Fiber& f = b.fibers[static_cast<size_t>(w * kWarp + l)];
    if (f.wait != Wait::Warp) continue;
    if (!(f.mask >> l & 1u)) fail(where(b, f) + ": " + op_name(f.op, f.kind) + " with a mask that leaves out the caller");
    complete_warp(b, w, f);
    progress = true;
  }
  return progress;
}

// Releases __syncthreads once every thread waits there; false when some thread waits elsewhere.
bool release_barrier(Block& b) {
  // __syncthreads completes when every thread of the block waits there. One that exited instead
  // is an error: the CUDA Programming Guide allows the barrier in conditional code only where
  // the condition is the same for the whole block.
  const Fiber* exited = nullptr;
  for (const Fiber& f : b.fibers) {
    if (f.done) {
      if (!exited) exited = &f;
    } else if (f.wait != Wait::Block) {
      return false;
    }
  }
  if (exited) {
    for (const Fiber& f : b.fibers)
      if (!f.done)
        fail(where(b, f) + " waits at __syncthreads, but " + where(b, *exited) +
             " exited without reaching it (a barrier in code the block does not take alike)");
  }
  for (Fiber& f : b.fibers) f.wait = Wait::None;
  return true;
}

std::string deadlock(const Block& b) {
  std::ostringstream s;
  s << "deadlock in block (" << b.idx.x << "," << b.idx.y << "," << b.idx.z << "):";
  int shown = 0;
  for (const Fiber& f : b.fibers) {
    if (shown++ == 8) {
      s << " ...";
      break;
    }
    s << "\n  " << where(b, f) << " " << state(f);
  }
  return s.str();
}

// A fresh context that runs entry() on f's stack. Out of line, as resume(): getcontext and
// _setjmp return twice as far as the compiler knows, which would make it assume any local of
// their caller may be clobbered.
[[gnu::noinline]] void start(Fiber& f) {
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;  // entry() jumps back to the scheduler instead of returning
  makecontext(&f.ctx, entry, 0);
  f.started = false;
}

// Runs f until it waits at a collective or exits.
[[gnu::noinline]] void resume(Block& b, Fiber& f) {
  if (_setjmp(b.sched)) return;
  if (!f.started) {
    f.started = true;
    setcontext(&f.ctx);
  }
  _longjmp(f.jb, 1);
}

}  // namespace

void launch(const Launch& cfg, const std::function<void()>& body) {
  if (g_block) fail("simt::launch inside a kernel");
  const size_t nthreads = static_cast<size_t>(cfg.block.x) * cfg.block.y * cfg.block.z;
  if (nthreads == 0 || nthreads > 1024) fail("a block of " + std::to_string(nthreads) + " threads");
  Block b;
  b.dim = cfg.block;
  b.grid = cfg.grid;
  b.body = &body;
  b.fibers.resize(nthreads);
  while (g_stacks.size() < nthreads) g_stacks.push_back(std::make_unique<char[]>(kStackBytes));
  for (size_t i = 0; i < nthreads; ++i) b.fibers[i].stack = g_stacks[i].get();
  std::vector<uint4> shared((cfg.shared_bytes + kGuardBytes + 15) / 16);
  b.shared = reinterpret_cast<unsigned char*>(shared.data());
  b.shared_bytes = cfg.shared_bytes;
  b.order = cfg.order;
  // The order of the warps, and of the lanes within each.
  const int nwarps = static_cast<int>((nthreads + kWarp - 1) / kWarp);
  std::vector<int> warps(static_cast<size_t>(nwarps)), lanes(kWarp);
  for (int w = 0; w < nwarps; ++w) warps[static_cast<size_t>(w)] = cfg.order == Order::Forward ? w : nwarps - 1 - w;
  for (int l = 0; l < kWarp; ++l) lanes[static_cast<size_t>(l)] = cfg.order == Order::Forward ? l : kWarp - 1 - l;

  struct Reset {
    ~Reset() {
      g_block = nullptr;
      g_self = nullptr;
    }
  } reset;
  g_block = &b;
  for (unsigned bz = 0; bz < cfg.grid.z; ++bz)
    for (unsigned by = 0; by < cfg.grid.y; ++by)
      for (unsigned bx = 0; bx < cfg.grid.x; ++bx) {
        b.idx = {bx, by, bz};
        std::memset(b.shared, 0xff, shared.size() * sizeof(uint4));
        poison_static_shared();
        for (size_t i = 0; i < nthreads; ++i) {
          Fiber& f = b.fibers[i];
          f.linear = static_cast<int>(i);
          f.idx = {static_cast<unsigned>(i % cfg.block.x), static_cast<unsigned>(i / cfg.block.x % cfg.block.y),
                   static_cast<unsigned>(i / (static_cast<size_t>(cfg.block.x) * cfg.block.y))};
          f.done = false;
          f.wait = Wait::None;
          f.copies.clear();  // a copy never waited for does not outlive its block
          f.committed = 0;
          start(f);
        }
        for (;;) {
          // Each warp runs as far as it can, its own collectives completing at once, before the
          // next one starts: the warps end up as far apart as a GPU may let them drift (up to a
          // __syncthreads), and a missing barrier between them shows.
          for (int w : warps) {
            do {
              for (int l : lanes) {
                const size_t i = static_cast<size_t>(w * kWarp + l);
                if (i >= nthreads) continue;
                Fiber& f = b.fibers[i];
                if (f.done || f.wait != Wait::None) continue;
                g_self = &f;
                resume(b, f);
                g_self = nullptr;
                if (b.error) std::rethrow_exception(b.error);
              }
            } while (complete_warp_ops(b, w));
          }
          if (std::all_of(b.fibers.begin(), b.fibers.end(), [](const Fiber& f) { return f.done; })) break;
          if (!release_barrier(b)) fail(deadlock(b));
        }
        const unsigned char* guard = b.shared + cfg.shared_bytes;
        for (size_t i = 0; i < kGuardBytes; ++i)
          if (guard[i] != 0xff)
            fail("block (" + std::to_string(bx) + "," + std::to_string(by) + "," + std::to_string(bz) +
                 ") wrote byte " + std::to_string(cfg.shared_bytes + i) + " of dynamic shared memory; the launch gave " +
                 std::to_string(cfg.shared_bytes));
      }
}

Order default_order() { return g_default_order; }
ScopedOrder::ScopedOrder(Order o) : saved_(g_default_order) { g_default_order = o; }
ScopedOrder::~ScopedOrder() { g_default_order = saved_; }

const uint3& thread_idx() { return self().idx; }
const uint3& block_idx() {
  self();
  return g_block->idx;
}
const dim3& block_dim() {
  self();
  return g_block->dim;
}
const dim3& grid_dim() {
  self();
  return g_block->grid;
}
void* dynamic_shared() {
  self();
  return g_block->shared;
}

void sync_threads() {
  Fiber& f = self();
  f.wait = Wait::Block;
  yield();
}

void sync_warp(unsigned mask) {
  warp_op(Op::SyncWarp, mask);
  yield();
}

uint64_t shuffle(unsigned mask, uint64_t bits, Shuffle kind, int arg, int width) {
  Fiber& f = warp_op(Op::Shuffle, mask);
  f.kind = kind;
  f.arg = arg;
  f.width = width;
  f.value = bits;
  yield();
  return f.value;
}

unsigned ballot(unsigned mask, bool pred) {
  Fiber& f = warp_op(Op::Ballot, mask);
  f.value = pred;
  yield();
  return static_cast<unsigned>(f.value);
}

void mma_m16n8k16(bool bf16, float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Fiber& f = warp_op(Op::Mma, 0xffffffffu);
  f.bf16 = bf16;
  std::copy(a, a + 4, f.a);
  f.b[0] = b0;
  f.b[1] = b1;
  std::copy(d, d + 4, f.d);
  yield();
  std::copy(f.d, f.d + 4, d);
}

void ldmatrix(int count, bool trans, uint32_t* regs, const void* row) {
  if (count != 1 && count != 2 && count != 4) fail("ldmatrix of " + std::to_string(count) + " matrices");
  Fiber& f = warp_op(Op::Ldmatrix, 0xffffffffu);
  f.count = count;
  f.trans = trans;
  f.row = static_cast<const unsigned char*>(row);
  yield();
  std::copy(f.a, f.a + count, regs);
}

void cp_async16(void* dst, const void* src, int src_bytes) {
  Fiber& f = self();
  const Block& b = *g_block;
  if (src_bytes < 0 || src_bytes > 16) fail(where(b, f) + ": cp.async of " + std::to_string(src_bytes) + " source bytes");
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || !in_shared(b, dst, 16))
    fail(where(b, f) + ": cp.async destination is not 16 bytes of shared memory on a 16-byte boundary");
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) fail(where(b, f) + ": cp.async source is not 16-byte aligned");
  Fiber::Copy c{static_cast<unsigned char*>(dst), {}, f.committed};
  std::memcpy(c.bytes, src, static_cast<size_t>(src_bytes));  // what a GPU reads; the rest zeros
  if (b.order == Order::Forward) {
    std::memcpy(c.dst, c.bytes, 16);
  } else {
    f.copies.push_back(c);
  }
}

void cp_async_commit() { ++self().committed; }

void cp_async_wait(int pending) {
  Fiber& f = self();
  const int done = f.committed - pending;  // groups [0, done) must have landed
  auto land = [done](const Fiber::Copy& c) {
    if (c.group >= done) return false;
    std::memcpy(c.dst, c.bytes, 16);
    return true;
  };
  f.copies.erase(std::remove_if(f.copies.begin(), f.copies.end(), land), f.copies.end());
}

void trap(const char* what) { fail(std::string(what) + " in " + where(*g_block, self())); }

}  // namespace simt
