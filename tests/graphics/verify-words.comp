// SPDX-License-Identifier: MIT
// Counts the words of a buffer that differ from the test pattern (tests/gpu/kernels.cu's
// pattern_word, for indices below 2^32): the consuming side's check, on the GPU.
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Data { uint words[]; };
layout(std430, binding = 1) buffer Result { uint errors; };
layout(push_constant) uniform Params { uint n; uint seed; uint row_length; uint width; } p;

void main()
{
  uint i = gl_GlobalInvocationID.x;
  // rows of width words, row_length apart (a linear image's rows); index i counts texels
  uint at = p.row_length == 0u ? i : (i / p.width) * p.row_length + i % p.width;
  if (i < p.n && words[at] != ((i * 2654435761u) ^ p.seed))
    atomicAdd(errors, 1u);
}
