/* Stand-in for CUDA's library_types.h (tests/features/emu: the CUDA target's sources
 * run on the CPU). Same names and values as the toolkit's. */
#ifndef SHARD_EMU_LIBRARY_TYPES_H
#define SHARD_EMU_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
  CUDA_R_16F = 2,
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14
} cudaDataType_t, cudaDataType;

#endif
