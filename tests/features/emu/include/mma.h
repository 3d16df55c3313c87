/* The CPU emulator's nvcuda::wmma (CUDA's <mma.h>): the 16x16x16 bf16
 * fragments with an fp32 accumulator that kernels/cuda uses, as plain C++.
 *
 * The API leaves the mapping of a tile's elements to the lanes of the warp
 * unspecified, so this emulation picks the simplest one: every lane holds
 * the whole tile, row-major (num_elements = 256; x[r * 16 + c] is element
 * (r, c)). Code that uses only the API and treats x[] elementwise runs the
 * same here as on hardware (where a lane holds 8 elements); code that
 * assumes the hardware's mapping (lane-dependent indexing of x[]) breaks
 * here, and the checks below catch it as a disagreement between lanes.
 *
 * load_matrix_sync, store_matrix_sync and mma_sync are collective, as on
 * hardware: all 32 lanes of the warp must call them with the same
 * arguments. Each call, after its own work, compares a hash of its
 * arguments (pointer, stride, layout) and of the fragments it read or
 * wrote with lane 0's through __shfl_sync, so a lane that skipped the call
 * blocks the warp in the emulator, and lanes that disagree (different
 * pointers, or a load that ran before another lane's store to shared
 * memory because a __syncwarp was missing) abort with a message. The
 * hardware's preconditions are checked too: 256-bit aligned pointers and a
 * stride that is a multiple of 16 bytes.
 *
 * mma_sync multiplies in fp32 (a bf16 x bf16 product is exact there) and
 * adds the 16 products of an element to the accumulator in k order, one
 * valid order among those the hardware may use.
 *
 * Defining KC_MMA_EMU_ONE_LANE leaves the warp checks out, for host
 * programs that call the functions from one thread only (the unit test of
 * this header). */
#ifndef SHARD_EMU_MMA_H
#define SHARD_EMU_MMA_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {
  static const bool is_col = false;
};
struct col_major {
  static const bool is_col = true;
};
enum layout_t { mem_row_major, mem_col_major };

/* Element (r, c) of a tile at ptr with stride ldm in the given layout. */
inline size_t emu_index(int r, int c, unsigned ldm, bool col) {
  return col ? (size_t)c * ldm + r : (size_t)r * ldm + c;
}

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has the 16x16x16 shape only");
  typedef T element_type;
  enum { num_elements = 256 };
  T x[num_elements];
};

inline float emu_f(float v) { return v; }
inline float emu_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> inline T emu_to(float v);
template <> inline float emu_to<float>(float v) { return v; }
template <> inline __nv_bfloat16 emu_to<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

/* FNV-1a over bytes, folded into h. */
inline uint32_t emu_hash(uint32_t h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 16777619u;
  return h;
}

/* Every lane of the warp must reach this from the same call (`what`) with
 * the same h. */
inline void emu_warp_agree(uint32_t h, const char *what) {
#ifdef KC_MMA_EMU_ONE_LANE
  (void)h;
  (void)what;
#else
  h = emu_hash(h, what, strlen(what));
  uint32_t h0 = __shfl_sync(0xffffffffu, h, 0);
  if (h0 != h) {
    fprintf(stderr, "wmma emulation: %s: lanes of a warp disagree (thread %u of block %u)\n",
            what, (unsigned)threadIdx.x, (unsigned)blockIdx.x);
    abort();
  }
#endif
}

/* The hardware's preconditions on a tile's pointer and stride. */
inline void emu_check_tile(const void *ptr, unsigned ldm, size_t elem, const char *what) {
  if ((uintptr_t)ptr % 32 != 0 || (ldm * elem) % 16 != 0 || ldm < 16) {
    fprintf(stderr, "wmma emulation: %s: pointer %p must be 32-byte aligned and the stride %u "
            "a multiple of 16 bytes, at least 16 elements\n", what, ptr, ldm);
    abort();
  }
}

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f,
                          const typename fragment<Use, 16, 16, 16, T, Layout>::element_type &v) {
  for (int i = 0; i < 256; i++)
    f.x[i] = v;
}

template <typename F, typename T>
inline void emu_load(F &f, const T *ptr, unsigned ldm, bool col, const char *what) {
  emu_check_tile(ptr, ldm, sizeof(T), what);
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++)
      f.x[r * 16 + c] = ptr[emu_index(r, c, ldm, col)];
  uint32_t h = emu_hash(2166136261u, &ptr, sizeof ptr);
  h = emu_hash(h, &ldm, sizeof ldm);
  emu_warp_agree(emu_hash(h, f.x, sizeof f.x), what);
}

/* a and b: the layout is the fragment's. */
template <typename Use, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *ptr, unsigned ldm) {
  emu_load(f, ptr, ldm, Layout::is_col, "load_matrix_sync");
}

/* The accumulator: the layout is the call's. */
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *ptr,
                             unsigned ldm, layout_t layout) {
  emu_load(f, ptr, ldm, layout == mem_col_major, "load_matrix_sync (accumulator)");
}

inline void store_matrix_sync(float *ptr, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
  emu_check_tile(ptr, ldm, sizeof(float), "store_matrix_sync");
  uint32_t h = emu_hash(2166136261u, &ptr, sizeof ptr);
  h = emu_hash(h, &ldm, sizeof ldm);
  emu_warp_agree(emu_hash(h, f.x, sizeof f.x), "store_matrix_sync");
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++)
      ptr[emu_index(r, c, ldm, layout == mem_col_major)] = f.x[r * 16 + c];
}

/* d = a b + c; d may be c. */
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
  uint32_t h = emu_hash(2166136261u, a.x, sizeof a.x);
  h = emu_hash(h, b.x, sizeof b.x);
  emu_warp_agree(emu_hash(h, c.x, sizeof c.x), "mma_sync");
  float out[256];
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 16; n++) {
      float acc = c.x[r * 16 + n];
      for (int k = 0; k < 16; k++)
        acc += emu_f(a.x[r * 16 + k]) * emu_f(b.x[k * 16 + n]);
      out[r * 16 + n] = acc;
    }
  for (int i = 0; i < 256; i++)
    d.x[i] = out[i];
}

} /* namespace wmma */
} /* namespace nvcuda */

#endif
