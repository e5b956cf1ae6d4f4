/* SPDX-License-Identifier: MIT */
/* The composition root's choice of what a registry offers: every backend and the
 * events this build has, whether a GPU is there or not (without one the CUDA backends
 * say why they are unavailable).  gpushmd and the daemon's fuzz target both use it. */
#ifndef GPUSHMD_OFFER_H
#define GPUSHMD_OFFER_H

struct registry;

void offer_backends(struct registry *reg);

#endif
