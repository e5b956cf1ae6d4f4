/* SPDX-License-Identifier: MIT */
/* gpushmctl doctor's graphics probe (doctor-graphics.c): what this host's Vulkan and GL
 * drivers can import, given the CUDA devices' UUIDs. */
#ifndef GPUSHMCTL_DOCTOR_GRAPHICS_H
#define GPUSHMCTL_DOCTOR_GRAPHICS_H

#include <stddef.h>
#include <stdint.h>

enum graphics_status { GRAPHICS_OK, GRAPHICS_FAIL, GRAPHICS_NA };

struct graphics_finding {
  enum graphics_status status;
  char detail[768];
};

void doctor_graphics(const uint8_t (*cuda_uuids)[16], size_t n_cuda,
                     struct graphics_finding *vulkan, struct graphics_finding *gl);

#endif
