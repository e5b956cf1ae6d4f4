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
