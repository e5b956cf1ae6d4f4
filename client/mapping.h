/* SPDX-License-Identifier: MIT */
/* What this process maps of one object (buffer.c keeps them; importers.c maps them). */
#ifndef GPUSHM_CLIENT_MAPPING_H
#define GPUSHM_CLIENT_MAPPING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpushm-graphics.h"
#include "gpushm_limits.h"
#include "hash_table.h"

struct client_segment;
struct sync_control;

/* What this process maps of one object: per daemon instance, object, access and map
 * device, shared by the handles of every connection that opened it (CUDA maps a handle
 * once per context and process), unmapped when the last of them closes. */
struct client_mapping {
  struct hash_link link; /* in the process-wide table */
  struct client_mapping *inherited_next; /* a forked child's list of its parent's */
  unsigned users; /* handles on it; under the cache lock */
  bool inherited; /* mapped by the parent of this (forked) process: never unmapped here */
  uint64_t instance_id;
  uint64_t id;
  bool read_only;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
  gpushm_kind_t kind;       /* GPUSHM_KIND_EVENT: its handles are gpushm_event_t */
  gpushm_backend_t backend; /* buffers only; 0 for an event */
  uint32_t owner_uid, owner_gid;
  /* CUDA backends, this process's ordinals: where the memory (or event) lives, and
   * the device it is mapped for (ptr is that device's; events: the same). */
  int home_device;
  int device;
  /* sync buffers */
  struct sync_control *control;
  gpushm_sync_method_t sync_method;
  char sync_why[128];      /* why a fallback method was taken */
  void *sync_event;        /* GPUSHM_SYNC_IPC_EVENT: the event, on home_device */
  uint64_t fence_dptr;     /* GPU and CPU fences: the fence in the buffer's allocation */
  uint64_t fence_written;  /* the last value this process queued for the fence */
  uint64_t fence_waited;   /* the highest value a stream of this process waits for */
  /* Timelines (timeline.c): the fence is in the control block, whose page is registered
   * with CUDA on a stream's first use (fence_dptr: its device address there). */
  bool timeline_tried;     /* registration attempted */
  int timeline_device;     /* registered through this device's context; -1: not */
  /* Its semaphore plane as this process signals it (timeline_plane.c): imported into
   * CUDA on plane_device on the first signal that finds the control block says there
   * is one. */
  void *plane_cuda;        /* CUexternalSemaphore; NULL: not imported */
  int plane_device;
  /* A stream's wait on the plane failed to set up here (not given to this process,
   * another device): such waits stay on the fence word, not asked again. */
  bool plane_waits_off;
  /* Rings (ring.c): slot i is ring_slot_stride * i bytes into the memory; the ready
   * counter is the control block's fence, as a timeline's. */
  uint32_t ring_slots;
  uint64_t ring_slot_size, ring_slot_stride;
  uint64_t size;
  void *ptr;
  size_t map_len;       /* host and cuda-fd: what is mapped */
  /* Carved buffers: the segment mapping ptr lies in (NULL: an allocation of its own,
   * mapped for this buffer alone). */
  struct client_segment *segment;
  uint64_t slot_offset; /* where in it */
  uint64_t cuda_handle; /* cuda-fd: the imported CUmemGenericAllocationHandle */
  /* cuda-fabric, read-write opens: what other nodes import (the reply's fabric_handle) */
  bool has_fabric_handle;
  uint8_t fabric_handle[GPUSHM_FABRIC_HANDLE_BYTES];
  /* Graphics (graphics.c).  The image's description (is_image), registered memory's
   * import parameters (backend GPUSHM_BACKEND_EXTERNAL), and for a GPUSHM_DEVICE_NONE
   * open of fd memory the fd an importer gets dups of.  A CUDA open of registered memory
   * holds the driver's import and, for optimal images, its mipmapped array. */
  bool is_image;
  gpushm_image_desc_t image;
  uint64_t allocated;          /* the daemon's allocation (info.allocated) */
  uint8_t device_uuid[16];     /* where the memory lives; zero for host memory */
  uint64_t ext_allocation_size;
  uint32_t ext_memory_type_index;
  bool ext_dedicated;
  uint8_t ext_driver_uuid[16];
  char ext_driver_info[64];
  int memory_fd;               /* -1: none kept */
  void *cuda_external;         /* CUexternalMemory */
  void *cuda_mipmap;           /* CUmipmappedArray */
  /* What the buffer was created with, from the open reply. */
  size_t metadata_len;
  uint8_t metadata[];
};

/* Whether m's fence is its control block's (timelines and rings), not its memory's. */
static inline bool client_fence_in_control(const struct client_mapping *m)
{
  return m->kind == GPUSHM_KIND_TIMELINE || m->kind == GPUSHM_KIND_RING;
}

#endif
