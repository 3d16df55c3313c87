/* A kernel launch written as a macro, KC_LAUNCH(grid, block, shared bytes,
 * stream, kernel)(arguments...), instead of CUDA's triple chevrons, so that
 * the same source also builds as plain C++ for the CPU emulator of
 * tests/features/emu (SHARD_CUDA_EMU), which runs every block's threads itself.
 * Under nvcc it is exactly kernel<<<grid, block, shared, stream>>>. The
 * first argument may be a macro that expands to all four (KC_GRID(n)): the
 * extra level of expansion splits it before the arguments are counted. */
#ifndef SHARD_KERNELS_CUDA_LAUNCH_H
#define SHARD_KERNELS_CUDA_LAUNCH_H

#define KC_LAUNCH(...) KC_LAUNCH_(__VA_ARGS__)
#ifdef SHARD_CUDA_EMU
/* The emulator's launch (tests/features/emu/include/cuda_runtime.h) takes the
 * kernel as a generic lambda, so that a template kernel's parameters are
 * deduced from the arguments as nvcc deduces them, and its name and the
 * launch's place for its messages. The parentheses matter: without them
 * the argument list that follows the macro would call the lambda itself,
 * on the host, once. */
#define KC_LAUNCH_(grid, block, shared, stream, ...)                                   \
  (kc_emu::Launch((grid), (block), (shared), (stream), #__VA_ARGS__, __FILE__, __LINE__) % \
   [](auto... kc_emu_args_) { __VA_ARGS__(kc_emu_args_...); })
/* The launch of one function (a template's instance named in full) whose
 * attributes the launch obeys: more than 48 KB of dynamic shared memory
 * needs cudaFuncSetAttribute on that function first. */
#define KC_LAUNCH_FN(grid, block, shared, stream, fn)                                           \
  (kc_emu::Launch((grid), (block), (shared), (stream), #fn, __FILE__, __LINE__, (const void *)&(fn)) % \
   [](auto... kc_emu_args_) { fn(kc_emu_args_...); })
#else
#define KC_LAUNCH_(grid, block, shared, stream, ...) __VA_ARGS__<<<grid, block, shared, stream>>>
#define KC_LAUNCH_FN(grid, block, shared, stream, fn) fn<<<grid, block, shared, stream>>>
#endif

#endif
