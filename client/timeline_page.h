/* SPDX-License-Identifier: MIT */
/* A timeline's control block page as this process's GPUs reach it (timeline_page.c). */
#ifndef GPUSHM_CLIENT_TIMELINE_PAGE_H
#define GPUSHM_CLIENT_TIMELINE_PAGE_H

#include "device.h"
#include "mapping.h"

/* What a new mapping of a timeline sets up, and what its unmap undoes (the page's
 * registration with CUDA); 0 or a GPUSHM_E_*. */
int client_timeline_attach(struct client_mapping *buf);
int client_timeline_detach(struct client_mapping *buf);
/* The stream a signal or wait is queued on (NULL: the legacy default stream of the
 * current device), the page registered for it on first use: 0 with the fence reachable
 * from s (GPUSHM_SYNC_GPU_FENCE), 1 where the CPU stands in for the stream
 * (GPUSHM_SYNC_CPU_FENCE, buf->sync_why says why), or a GPUSHM_E_*. */
int client_timeline_stream(struct client_mapping *buf, void *stream, struct client_stream *s);

#endif
