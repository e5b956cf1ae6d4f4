// SPDX-License-Identifier: MIT
// Counts the texels of an RGBA8 image (level 0, layer 0) that differ from the test
// pattern: texel (x, y) holds word y * width + x of the pattern, little-endian RGBA.
#version 450
layout(local_size_x = 16, local_size_y = 16) in;
layout(binding = 0, rgba8) uniform readonly image2D image;
layout(std430, binding = 1) buffer Result { uint errors; };
layout(push_constant) uniform Params { uint width; uint height; uint seed; } p;

void main()
{
  uvec2 xy = gl_GlobalInvocationID.xy;
  if (xy.x >= p.width || xy.y >= p.height)
    return;
  uint i = xy.y * p.width + xy.x;
  uint want = (i * 2654435761u) ^ p.seed;
  // unorm8 to float and back is exact: x / 255 * 255 rounds to x
  uvec4 t = uvec4(round(imageLoad(image, ivec2(xy)) * 255.0));
  uint got = t.r | (t.g << 8) | (t.b << 16) | (t.a << 24);
  if (got != want)
    atomicAdd(errors, 1u);
}
