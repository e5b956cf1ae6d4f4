/* SPDX-License-Identifier: MIT */
// Device code for the GPU sync tests, compiled to PTX at build time and loaded with
// cuModuleLoadData (the tests themselves are plain C on the driver API).

__device__ __forceinline__ unsigned pattern_word(unsigned long long i, unsigned seed)
{
  return (unsigned)(i * 2654435761ull) ^ seed ^ (unsigned)(i >> 32);
}

__device__ __forceinline__ unsigned long long global_ns()
{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Writes the pattern, but only after spinning for delay_ns: a producer whose work
// is still running when a consumer looks.
extern "C" __global__ void slow_fill(unsigned *p, unsigned long long n, unsigned seed,
                                     unsigned long long delay_ns)
{
  if (delay_ns) {
    unsigned long long start = global_ns();
    while (global_ns() - start < delay_ns)
      ;
  }
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    p[i] = pattern_word(i, seed);
}

// Counts the words that differ from the pattern.
extern "C" __global__ void verify(const unsigned *p, unsigned long long n, unsigned seed,
                                  unsigned *errors)
{
  unsigned bad = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    bad += p[i] != pattern_word(i, seed);
  if (bad)
    atomicAdd(errors, bad);
}

// A linear image's rows, width texels of the pattern each, pitch_words apart: what a
// CUDA producer writes into a gpushm image (texel (x, y) is word y * width + x).
extern "C" __global__ void fill_rows(unsigned *p, unsigned width, unsigned height,
                                     unsigned long long pitch_words, unsigned seed)
{
  unsigned x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < width && y < height)
    p[y * pitch_words + x] = pattern_word((unsigned long long)y * width + x, seed);
}

// Counts the texels of a 32-bit-per-texel CUDA array (an RGBA8 image, through a surface
// object) that differ from the pattern.
extern "C" __global__ void verify_surface(unsigned long long surface, unsigned width,
                                          unsigned height, unsigned seed, unsigned *errors)
{
  unsigned x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  unsigned v;
  if (x >= width || y >= height)
    return;
  surf2Dread(&v, (cudaSurfaceObject_t)surface, x * 4, y);
  if (v != pattern_word((unsigned long long)y * width + x, seed))
    atomicAdd(errors, 1u);
}
