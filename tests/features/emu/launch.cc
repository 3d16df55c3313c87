/* Kernel launches: the configuration checked as the hardware checks it,
 * then every block in turn, its threads as fibers on this OS thread.
 *
 * A fiber runs until it reaches a barrier (__syncthreads, a warp
 * collective) or returns; when none can run, the scheduler releases what
 * is complete: a warp whose lanes all wait at a collective with the same
 * mask, or the block when every live thread waits at the same
 * __syncthreads. Anything else is a deadlock or divergence on the hardware
 * and aborts here with a message that names the kernel, the block, the
 * threads and the source lines.
 *
 * Order. The hardware promises no order among a block's threads between
 * two barriers, nor among a grid's blocks, so code whose result depends on
 * one is wrong even where it passes. SHARD_EMU_ORDER picks the order here:
 * "forward" (the default: blocks and threads by increasing index),
 * "reverse" (both by decreasing index), or "shuffle:SEED" (the blocks of
 * each launch in a shuffled order, and the threads of each block in a new
 * shuffled order at each of its rounds between barriers, all drawn from
 * SEED and the launch's count, so that a failure repeats). CI runs the
 * kernel tests in all three.
 *
 * Fibers switch with a few instructions of assembly on x86-64 (ucontext's
 * swapcontext makes a system call each time, and a warp shuffle switches
 * every lane twice), with swapcontext elsewhere. Stacks are allocated once
 * and reused; under AddressSanitizer each switch is announced to it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <vector>

#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define KC_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KC_EMU_ASAN 1
#endif
#endif
#ifdef KC_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__) || defined(KC_EMU_UCONTEXT)
#define KC_EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

/* The shared-memory section (__shared__ in cuda_runtime.h); the linker
 * defines its bounds. Weak: a program without __shared__ has none. */
extern "C" char __start_kc_emu_shared[] __attribute__((weak));
extern "C" char __stop_kc_emu_shared[] __attribute__((weak));

namespace kc_emu {

Thread *g_thread;
uint3 g_block;
dim3 g_block_dim, g_grid_dim;

namespace {

#ifdef KC_EMU_ASAN
const size_t STACK = 512 * 1024;
#else
const size_t STACK = 64 * 1024;
#endif

enum State { RUN, AT_BAR, AT_WARP, DONE };

struct Fiber {
  Thread t;
  State state;
  const char *file;
  int line;
  /* The collective this fiber waits at. */
  WarpOp op;
  unsigned mask;
  uint64_t value, result;
  int arg, width;
  char *stack;
  /* cp.async: copies issued and not yet landed, and the sizes of the
   * committed groups among them, oldest first (cp_async_*). */
  std::vector<std::pair<void *, uint4>> copies;
  std::vector<size_t> groups;
#ifdef KC_EMU_USE_UCONTEXT
  ucontext_t ctx;
#else
  void *sp;
#endif
  void *fake;
};

struct Block {
  const Config *c;
  const std::function<void()> *body;
  std::vector<Fiber> f;
  int n;
  Fiber *cur;
#ifdef KC_EMU_USE_UCONTEXT
  ucontext_t main;
#else
  void *main_sp;
#endif
  void *main_fake;
  const void *main_bottom;
  size_t main_size;
} B;

std::vector<char *> stacks;

/* SHARD_EMU_ORDER (the top of this file), read at the first launch. */
enum OrderMode { FORWARD, REVERSE, SHUFFLE };
struct Order {
  bool read;
  OrderMode mode;
  uint64_t seed;
  uint64_t launches; /* launches so far: each shuffles with its own stream */
  uint64_t state;    /* the current launch's generator */
  std::vector<int> perm;
} O;

void read_order() {
  O.read = true;
  O.mode = FORWARD;
  const char *s = getenv("SHARD_EMU_ORDER");
  if (!s || !*s || strcmp(s, "forward") == 0) return;
  if (strcmp(s, "reverse") == 0) {
    O.mode = REVERSE;
    return;
  }
  char *end;
  if (strncmp(s, "shuffle:", 8) == 0 && s[8]) {
    O.seed = strtoull(s + 8, &end, 10);
    if (!*end) {
      O.mode = SHUFFLE;
      return;
    }
  }
  die("SHARD_EMU_ORDER=%s: want forward, reverse or shuffle:SEED (SEED a decimal number)", s);
}

/* splitmix64: a small generator whose streams for nearby seeds differ. */
uint64_t next_random() {
  uint64_t z = (O.state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* The order in which to visit 0 .. n-1 under the mode, in O.perm. */
const std::vector<int> &visit_order(int n) {
  O.perm.resize((size_t)n);
  for (int i = 0; i < n; i++) O.perm[(size_t)i] = O.mode == REVERSE ? n - 1 - i : i;
  if (O.mode == SHUFFLE)
    for (int i = n - 1; i > 0; i--) {
      int j = (int)(next_random() % (uint64_t)(i + 1));
      int t = O.perm[(size_t)i];
      O.perm[(size_t)i] = O.perm[(size_t)j];
      O.perm[(size_t)j] = t;
    }
  return O.perm;
}

} // namespace

#ifndef KC_EMU_USE_UCONTEXT
/* Saves the callee-saved registers on the current stack, stores the stack
 * pointer in *from, and resumes the stack `to` the same way. */
extern "C" void kc_emu_switch(void **from, void *to);
asm(R"(
  .text
  .globl kc_emu_switch
  .type kc_emu_switch,@function
kc_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kc_emu_switch,.-kc_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
#endif

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vnote(fmt, ap);
  va_end(ap);
  abort();
}

namespace {

/* "kernel K (file:line), block (x,y,z)" for messages. */
const char *where() {
  static char buf[512];
  snprintf(buf, sizeof buf, "kernel %s launched at %s:%d, block (%u,%u,%u)", B.c->kernel,
           B.c->file, B.c->line, g_block.x, g_block.y, g_block.z);
  return buf;
}

/* Into the scheduler from the running fiber (which is done when `exiting`). */
void to_scheduler(bool exiting) {
  Fiber *f = B.cur;
#ifdef KC_EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f->fake, B.main_bottom, B.main_size);
#else
  (void)exiting;
#endif
#ifdef KC_EMU_USE_UCONTEXT
  swapcontext(&f->ctx, &B.main);
#else
  kc_emu_switch(&f->sp, B.main_sp);
#endif
#ifdef KC_EMU_ASAN
  __sanitizer_finish_switch_fiber(f->fake, &B.main_bottom, &B.main_size);
#endif
}

void fiber_main() {
#ifdef KC_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &B.main_bottom, &B.main_size);
#endif
  (*B.body)();
  if (!B.cur->copies.empty())
    die("%s: thread (%u,%u,%u) exits with %zu cp.async copies it never waited for "
        "(cp.async.wait_group)", where(), B.cur->t.idx.x, B.cur->t.idx.y, B.cur->t.idx.z,
        B.cur->copies.size());
  B.cur->state = DONE;
  to_scheduler(true);
  die("a finished fiber was resumed");
}

#ifdef KC_EMU_USE_UCONTEXT
void fiber_entry_uc() { fiber_main(); }
#else
extern "C" void kc_emu_fiber_entry() { fiber_main(); }
#endif

void resume(Fiber *f) {
  B.cur = f;
  g_thread = &f->t;
#ifdef KC_EMU_ASAN
  __sanitizer_start_switch_fiber(&B.main_fake, f->stack, STACK);
#endif
#ifdef KC_EMU_USE_UCONTEXT
  swapcontext(&B.main, &f->ctx);
#else
  kc_emu_switch(&B.main_sp, f->sp);
#endif
#ifdef KC_EMU_ASAN
  __sanitizer_finish_switch_fiber(B.main_fake, nullptr, nullptr);
#endif
}

char *stack_for(int i) {
  while ((int)stacks.size() <= i) {
    void *p = mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) die("cannot map a fiber stack");
    stacks.push_back((char *)p);
  }
  return stacks[i];
}

/* A fresh fiber on stack i that starts in the kernel's body. */
void start(Fiber *f, int i) {
  f->stack = stack_for(i);
  f->fake = nullptr;
#ifdef KC_EMU_ASAN
  /* Every fiber of a block returns from the kernel before the block ends,
   * so its frames' redzones are unpoisoned again, all but fiber_main's,
   * which the next fiber's fiber_main lays out the same way. The top of
   * the stack is cleared anyway (the whole stack would cost a memset of its
   * shadow per thread). */
  ASAN_UNPOISON_MEMORY_REGION(f->stack + STACK - 16384, 16384);
#endif
#ifdef KC_EMU_USE_UCONTEXT
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = STACK;
  f->ctx.uc_link = nullptr;
  makecontext(&f->ctx, fiber_entry_uc, 0);
#else
  /* The frame kc_emu_switch pops: six registers, then the entry as the
   * return address, at a 16-byte boundary so that the entry starts with
   * the stack aligned as after a call. */
  uintptr_t top = ((uintptr_t)f->stack + STACK - 64) & ~(uintptr_t)15;
  void **sp = (void **)top;
  sp[0] = (void *)kc_emu_fiber_entry;
  sp[1] = nullptr;
  sp -= 6;
  for (int r = 0; r < 6; r++) sp[r] = nullptr;
  f->sp = sp;
#endif
}

/* Dynamic shared memory: a launch may ask for DYN_DEFAULT bytes, or for
 * what cudaFuncSetAttribute allowed its kernel, at most DYN_OPTIN (the
 * opt-in limit of cudaGetDeviceProperties' sharedMemPerBlockOptin:
 * 227 KB a block on Hopper). */
#define DYN_DEFAULT ((size_t)48 * 1024)
#define DYN_OPTIN ((size_t)227 * 1024)
std::vector<std::pair<const void *, size_t>> dyn_limits; /* (kernel, bytes) */
std::vector<unsigned char> dyn_store;                   /* the running block's, */
unsigned char *dyn_shared;                              /* from a 128-byte boundary */
size_t dyn_bytes;

size_t dyn_limit(const void *fn) {
  for (auto &l : dyn_limits)
    if (fn && l.first == fn) return l.second;
  return DYN_DEFAULT;
}

bool config_ok(const Config &c) {
  uint64_t threads = (uint64_t)c.block.x * c.block.y * c.block.z;
  return threads >= 1 && threads <= 1024 && c.block.x <= 1024 && c.block.y <= 1024 &&
         c.block.z <= 64 && c.grid.x >= 1 && c.grid.x <= 0x7fffffffu && c.grid.y >= 1 &&
         c.grid.y <= 65535 && c.grid.z >= 1 && c.grid.z <= 65535 && c.shared <= dyn_limit(c.fn);
}

/* The result of collective op for lane `lane` of warp w's fibers. */
uint64_t collective_result(Fiber *w, int nlanes, int lane) {
  Fiber &me = w[lane];
  if (me.op == SYNC) return 0;
  if (me.op == BALLOT) {
    uint64_t vote = 0;
    for (int l = 0; l < nlanes; l++)
      if ((me.mask >> l & 1u) && w[l].value) vote |= 1ull << l;
    return vote;
  }
  int width = me.width, seg = lane / width * width, src;
  switch (me.op) {
  case SHFL_IDX: src = seg + ((me.arg % width) + width) % width; break;
  case SHFL_UP: src = lane - me.arg; if (src < seg) src = lane; break;
  case SHFL_DOWN: src = lane + me.arg; if (src >= seg + width) src = lane; break;
  default: src = lane ^ me.arg; if (src >= seg + width) src = lane; break;
  }
  if (src >= nlanes || !(me.mask >> src & 1u))
    die("%s: thread %d reads lane %d in a shuffle at %s:%d, which is not in the mask 0x%08x",
        where(), me.t.warp * 32 + lane, src, me.file, me.line, me.mask);
  return w[src].value;
}

/* Releases warp `warp` if its lanes wait at one collective; aborts where
 * they never could. Returns whether it released anything. */
bool release_warp(int warp) {
  Fiber *w = &B.f[warp * 32];
  int nlanes = B.n - warp * 32 < 32 ? B.n - warp * 32 : 32;
  int first = -1;
  for (int l = 0; l < nlanes; l++)
    if (w[l].state == AT_WARP) { first = l; break; }
  if (first < 0) return false;
  Fiber &a = w[first];
  unsigned valid = nlanes == 32 ? 0xffffffffu : (1u << nlanes) - 1;
  if (a.mask & ~valid)
    die("%s: the warp collective at %s:%d has mask 0x%08x, but warp %d has only %d lanes",
        where(), a.file, a.line, a.mask, warp, nlanes);
  for (int l = 0; l < nlanes; l++) {
    Fiber &b = w[l];
    bool in = a.mask >> l & 1u;
    if (b.state == AT_WARP && (!in || b.mask != a.mask || b.op != a.op || b.line != a.line ||
                               b.file != a.file))
      die("%s: warp %d diverges: lane %d waits at a warp collective at %s:%d (mask 0x%08x), "
          "lane %d at %s:%d (mask 0x%08x)",
          where(), warp, first, a.file, a.line, a.mask, l, b.file, b.line, b.mask);
    if (in && b.state != AT_WARP)
      die("%s: lane %d of warp %d is in the mask 0x%08x of the warp collective at %s:%d but %s",
          where(), l, warp, a.mask, a.file, a.line,
          b.state == DONE ? "has exited" : "waits at __syncthreads");
  }
  for (int l = 0; l < nlanes; l++)
    if (w[l].state == AT_WARP) w[l].result = collective_result(w, nlanes, l);
  for (int l = 0; l < nlanes; l++)
    if (w[l].state == AT_WARP) w[l].state = RUN;
  return true;
}

/* Every live thread waits at __syncthreads: they must all be at the same
 * one, and none may have exited. */
void release_block() {
  Fiber *a = nullptr, *done = nullptr;
  for (int i = 0; i < B.n; i++) {
    Fiber &f = B.f[i];
    if (f.state == DONE) done = &f;
    else if (!a) a = &f;
    else if (f.line != a->line || f.file != a->file)
      die("%s: threads wait at different __syncthreads: thread (%u,%u,%u) at %s:%d, thread "
          "(%u,%u,%u) at %s:%d",
          where(), a->t.idx.x, a->t.idx.y, a->t.idx.z, a->file, a->line, f.t.idx.x, f.t.idx.y,
          f.t.idx.z, f.file, f.line);
  }
  if (a && done)
    die("%s: thread (%u,%u,%u) waits at __syncthreads at %s:%d, but thread (%u,%u,%u) has "
        "exited (a barrier in divergent code)",
        where(), a->t.idx.x, a->t.idx.y, a->t.idx.z, a->file, a->line, done->t.idx.x,
        done->t.idx.y, done->t.idx.z);
  for (int i = 0; i < B.n; i++)
    if (B.f[i].state == AT_BAR) B.f[i].state = RUN;
}

void run_block() {
  uintptr_t lo = (uintptr_t)__start_kc_emu_shared, hi = (uintptr_t)__stop_kc_emu_shared;
  if (hi > lo) memset((void *)lo, 0xff, hi - lo);
  if (dyn_bytes) memset(dyn_shared, 0xff, dyn_bytes);
  const dim3 &bd = B.c->block;
  for (int i = 0; i < B.n; i++) {
    Fiber &f = B.f[i];
    f.t.idx = uint3{i % bd.x, i / bd.x % bd.y, i / (bd.x * bd.y)};
    f.t.lane = i % 32;
    f.t.warp = i / 32;
    f.state = RUN;
    f.file = "";
    f.line = 0;
    f.copies.clear();
    f.groups.clear();
    start(&f, i);
  }
  int live = B.n;
  while (live > 0) {
    if (O.mode == FORWARD) {
      for (int i = 0; i < B.n; i++)
        if (B.f[i].state == RUN) resume(&B.f[i]);
    } else {
      /* A copy: visit_order's vector is the grid's too. */
      std::vector<int> order = visit_order(B.n);
      for (int i : order)
        if (B.f[(size_t)i].state == RUN) resume(&B.f[(size_t)i]);
    }
    live = 0;
    for (int i = 0; i < B.n; i++) live += B.f[i].state != DONE;
    if (live == 0) break;
    bool released = false;
    for (int w = 0; w * 32 < B.n; w++) released |= release_warp(w);
    if (!released) release_block();
  }
}

void run_grid(const Config &c, const std::function<void()> &body) {
  B.c = &c;
  /* Aligned as the hardware's window is, for the 32-byte fragment loads. */
  dyn_store.assign(c.shared + 128, 0xff);
  dyn_shared = dyn_store.data() + (128 - (uintptr_t)dyn_store.data() % 128) % 128;
  dyn_bytes = c.shared;
  B.body = &body;
  B.n = (int)(c.block.x * c.block.y * c.block.z);
  B.f.resize((size_t)B.n);
  g_block_dim = c.block;
  g_grid_dim = c.grid;
  if (!O.read) read_order();
  O.state = O.seed ^ (++O.launches * 0xd1b54a32d192ed03ULL);
  uint64_t blocks = (uint64_t)c.grid.x * c.grid.y * c.grid.z;
  if (O.mode == FORWARD || blocks > (1u << 24)) {
    /* Forward, or a grid too large to keep a permutation of (run in order). */
    for (unsigned z = 0; z < c.grid.z; z++)
      for (unsigned y = 0; y < c.grid.y; y++)
        for (unsigned x = 0; x < c.grid.x; x++) {
          g_block = uint3{x, y, z};
          run_block();
        }
  } else {
    std::vector<int> order = visit_order((int)blocks);
    for (int b : order) {
      g_block = uint3{(unsigned)b % c.grid.x, (unsigned)b / c.grid.x % c.grid.y,
                      (unsigned)b / (c.grid.x * c.grid.y)};
      run_block();
    }
  }
  g_thread = nullptr;
}

bool in_kernel() { return g_thread != nullptr; }

} // namespace

void syncthreads(const char *file, int line) {
  Fiber *f = B.cur;
  f->state = AT_BAR;
  f->file = file;
  f->line = line;
  to_scheduler(false);
  g_thread = &f->t;
}

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int arg, int width,
                         const char *file, int line) {
  Fiber *f = B.cur;
  if (width < 1 || width > 32 || (width & (width - 1)))
    die("%s: a warp collective at %s:%d with width %d (a power of two up to 32)", where(), file,
        line, width);
  if (!(mask >> f->t.lane & 1u))
    die("%s: lane %d calls a warp collective at %s:%d outside its own mask 0x%08x", where(),
        f->t.lane, file, line, mask);
  f->state = AT_WARP;
  f->op = op;
  f->mask = mask;
  f->value = value;
  f->arg = arg;
  f->width = width;
  f->file = file;
  f->line = line;
  to_scheduler(false);
  g_thread = &f->t;
  return f->result;
}

unsigned active_mask() {
  Fiber *f = B.cur;
  int warp = f->t.warp;
  unsigned m = 0;
  for (int l = 0; l < 32 && warp * 32 + l < B.n; l++)
    if (B.f[warp * 32 + l].state != DONE) m |= 1u << l;
  return m;
}

cudaError_t set_last_error(cudaError_t e);

unsigned char *dynamic_shared() {
  if (!in_kernel()) die("dynamic shared memory asked for outside a kernel");
  return dyn_shared;
}

/* cp.async: the 16 bytes are read now and land in shared memory only when
 * the thread waits for their group, the latest the hardware may land
 * them, so that a read before the wait (or before the barrier that
 * publishes other threads' copies) sees the NaN bytes of unwritten
 * shared memory. Both addresses must be 16-byte aligned, as on the
 * hardware. */
void cp_async16(void *dst, const void *src, const char *file, int line) {
  if ((uintptr_t)dst % 16 || (uintptr_t)src % 16)
    die("%s:%d: cp.async of 16 bytes from %p to %p: misaligned address", file, line, src, dst);
  uint4 v;
  memcpy(&v, src, sizeof v);
  B.cur->copies.push_back({dst, v});
}

void cp_async_commit() {
  size_t before = 0;
  for (size_t g : B.cur->groups) before += g;
  B.cur->groups.push_back(B.cur->copies.size() - before);
}

/* All but the newest n committed groups land (cp.async.wait_group n). */
void cp_async_wait(int n) {
  Fiber *f = B.cur;
  size_t land = 0;
  while (f->groups.size() > (size_t)n) {
    land += f->groups.front();
    f->groups.erase(f->groups.begin());
  }
  for (size_t i = 0; i < land; i++) memcpy(f->copies[i].first, &f->copies[i].second, sizeof(uint4));
  f->copies.erase(f->copies.begin(), f->copies.begin() + (long)land);
}

void launch(const Config &c, std::function<void()> body) {
  if (in_kernel()) die("kernel %s launched from inside a kernel (dynamic parallelism)", c.kernel);
  if (!config_ok(c)) {
    note("launch of %s at %s:%d: grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of shared memory "
         "(at most %zu for this kernel): invalid configuration", c.kernel, c.file, c.line,
         c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.shared,
         dyn_limit(c.fn));
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  Config copy = c;
  cudaError_t e = enqueue(c.stream, [copy, body]() { run_grid(copy, body); }, "a kernel launch");
  if (e != cudaSuccess) set_last_error(e);
}

} // namespace kc_emu

/* The hardware refuses a limit above the opt-in one (cudaErrorInvalidValue)
 * and leaves the kernel's as it was. */
extern "C" cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
                                            int value) {
  using namespace kc_emu;
  if (!func) return set_last_error(cudaErrorInvalidValue);
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
    return value >= -1 && value <= 100 ? cudaSuccess : set_last_error(cudaErrorInvalidValue);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || (size_t)value > DYN_OPTIN) {
    note("cudaFuncSetAttribute: %d bytes of dynamic shared memory, above the device's %zu: "
         "invalid value", value, DYN_OPTIN);
    return set_last_error(cudaErrorInvalidValue);
  }
  for (auto &l : dyn_limits)
    if (l.first == func) return l.second = (size_t)value, cudaSuccess;
  dyn_limits.push_back({func, (size_t)value});
  return cudaSuccess;
}
