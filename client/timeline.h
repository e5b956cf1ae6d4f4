/* SPDX-License-Identifier: MIT */
/* Signals and waits on a counter whose fence is in its control block (timeline.c), for
 * timelines and for the kinds built of them (ring.c).  handle's mapping must have a
 * control block; the caller checked its kind and cleared the error.  As
 * gpushm_timeline_signal[_stream]() and gpushm_timeline_wait[_stream](). */
#ifndef GPUSHM_CLIENT_TIMELINE_H
#define GPUSHM_CLIENT_TIMELINE_H

#include "buffer.h"

#include <stdbool.h>
#include <stdint.h>

int client_timeline_signal(gpushm_buffer_t *handle, bool on_stream, void *stream, uint64_t value);
/* As client_timeline_wait(), a stream's wait on the timeline's semaphore plane where it
 * has one this process may import on the stream's device (a ring consumer's done plane,
 * which its consumer alone signals besides gpushmd), else on the fence word. */
int client_timeline_wait_plane(gpushm_buffer_t *handle, bool on_stream, void *stream,
                               uint64_t value, int timeout_ms);
int client_timeline_wait(gpushm_buffer_t *handle, bool on_stream, void *stream, uint64_t value,
                         int timeout_ms);
/* As gpushm_timeline_signal_external(): published, the fence left to the caller's queue. */
int client_timeline_signal_external(gpushm_buffer_t *handle, uint64_t value);

#endif
