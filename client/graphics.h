/* SPDX-License-Identifier: MIT */
/* What graphics.c lends the kinds built on images (ring.c). */
#ifndef GPUSHM_CLIENT_GRAPHICS_H
#define GPUSHM_CLIENT_GRAPHICS_H

#include "gpushm-graphics.h"
#include "gpushm.pb-c.h"

/* A caller's image description, checked and completed (its row pitch and size), in the
 * wire's spelling; 0 or a negative GPUSHM_E_* with the error set.  Linear only: gpushmd
 * allocates no optimal-tiling image. */
int client_image_desc_wire(const gpushm_image_desc_t *desc, Gpushm__ImageDesc *wire);

#endif
