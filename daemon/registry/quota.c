/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "registry/quota.h"
#include "gpushm.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

struct quota_usage {
  uid_t uid;
  uint32_t objects;
  uint64_t bytes;
  uint64_t host_bytes;
  uint64_t device_bytes[GPUSHM_LIMIT_DEVICES];
  struct quota_usage *next;
};

static bool on_a_device(const struct quota_cost *c)
{
  return c->device >= 0 && (unsigned)c->device < GPUSHM_LIMIT_DEVICES;
}

void quota_destroy(struct quota *q)
{
  while (q->usage) {
    struct quota_usage *u = q->usage;
    q->usage = u->next;
    free(u);
  }
  q->host_bytes = 0;
}

void quota_charge(struct quota *q, uid_t uid, const struct quota_cost *c)
{
  struct quota_usage *u;

  for (u = q->usage; u && u->uid != uid; u = u->next)
    ;
  if (!u) {
    if (!(u = calloc(1, sizeof *u)))
      return; /* out of memory: the uid is merely under-counted */
    u->uid = uid;
    u->next = q->usage;
    q->usage = u;
  }
  u->objects++;
  u->bytes += c->bytes;
  u->host_bytes += c->host;
  if (on_a_device(c))
    u->device_bytes[c->device] += c->device_bytes;
}

void quota_release(struct quota *q, uid_t uid, const struct quota_cost *c)
{
  struct quota_usage **p, *u;

  for (p = &q->usage; (u = *p); p = &u->next) {
    if (u->uid != uid)
      continue;
    /* Saturating: a charge skipped for lack of memory must not wrap the counters. */
    u->objects -= u->objects ? 1 : 0;
    u->bytes -= u->bytes < c->bytes ? u->bytes : c->bytes;
    u->host_bytes -= u->host_bytes < c->host ? u->host_bytes : c->host;
    if (on_a_device(c)) {
      uint64_t *d = &u->device_bytes[c->device];
      *d -= *d < c->device_bytes ? *d : c->device_bytes;
    }
    if (u->objects == 0) {
      *p = u->next;
      free(u);
    }
    return;
  }
}

void quota_host_add(struct quota *q, uint64_t host)
{
  q->host_bytes += host;
}

void quota_host_sub(struct quota *q, uint64_t host)
{
  q->host_bytes -= q->host_bytes < host ? q->host_bytes : host;
}

void quota_of(const struct quota *q, uid_t uid, uint32_t *objects, uint64_t *bytes,
              uint64_t *host_bytes)
{
  const struct quota_usage *u = q->usage;

  while (u && u->uid != uid)
    u = u->next;
  *objects = u ? u->objects : 0;
  *bytes = u ? u->bytes : 0;
  *host_bytes = u ? u->host_bytes : 0;
}

uint64_t quota_device_of(const struct quota *q, uid_t uid, int device)
{
  const struct quota_usage *u = q->usage;

  while (u && u->uid != uid)
    u = u->next;
  return u && device >= 0 && (unsigned)device < GPUSHM_LIMIT_DEVICES ? u->device_bytes[device] : 0;
}

int quota_check(const struct quota *q, const struct quota_limits *lim, uid_t uid,
                const struct quota_cost *c, char *err, size_t errlen)
{
  const uint64_t bytes = c->bytes, host = c->host;
  uint32_t objects;
  uint64_t used, host_used;

  quota_of(q, uid, &objects, &used, &host_used);
  if (objects >= lim->max_objects_per_uid) {
    snprintf(err, errlen, "uid %u already has %u buffers (limit %u)", (unsigned)uid, objects,
             lim->max_objects_per_uid);
    return GPUSHM_E_LIMIT;
  }
  if (lim->max_bytes_per_uid && bytes > lim->max_bytes_per_uid - used) {
    snprintf(err, errlen, "uid %u would hold %llu bytes (limit %llu)", (unsigned)uid,
             (unsigned long long)(used + bytes), (unsigned long long)lim->max_bytes_per_uid);
    return GPUSHM_E_LIMIT;
  }
  if (lim->max_host_bytes_per_uid && host > lim->max_host_bytes_per_uid - host_used) {
    snprintf(err, errlen, "uid %u would hold %llu bytes of host memory (limit %llu)",
             (unsigned)uid, (unsigned long long)(host_used + host),
             (unsigned long long)lim->max_host_bytes_per_uid);
    return GPUSHM_E_LIMIT;
  }
  if (on_a_device(c) && lim->max_device_bytes_per_uid &&
      lim->max_device_bytes_per_uid[c->device]) {
    uint64_t max = lim->max_device_bytes_per_uid[c->device];
    uint64_t dev_used = quota_device_of(q, uid, c->device);
    if (c->device_bytes > (max > dev_used ? max - dev_used : 0)) {
      snprintf(err, errlen, "uid %u would hold %llu bytes of device %d's memory (limit %llu: "
               "max-device-bytes-per-uid)", (unsigned)uid,
               (unsigned long long)(dev_used + c->device_bytes), c->device,
               (unsigned long long)max);
      return GPUSHM_E_LIMIT;
    }
  }
  if (lim->host_budget && host > (lim->host_budget > q->host_bytes
                                    ? lim->host_budget - q->host_bytes : 0)) {
    snprintf(err, errlen, "gpushmd's host-memory budget is used up: %llu of %llu bytes "
             "allocated, %llu more asked for", (unsigned long long)q->host_bytes,
             (unsigned long long)lim->host_budget, (unsigned long long)host);
    return GPUSHM_E_NOMEM;
  }
  return 0;
}
