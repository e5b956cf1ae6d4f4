/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "registry/quota.h"
#include "protocol.h"

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

static bool in_range(int device)
{
  return device >= 0 && (unsigned)device < GPUSHM_LIMIT_DEVICES;
}

/* uid's record, made if missing (NULL: out of memory, and the uid is merely
 * under-counted). */
static struct quota_usage *usage_of(struct quota *q, uid_t uid)
{
  struct quota_usage *u;

  for (u = q->usage; u && u->uid != uid; u = u->next)
    ;
  if (!u && (u = calloc(1, sizeof *u))) {
    u->uid = uid;
    u->next = q->usage;
    q->usage = u;
  }
  return u;
}

/* A record that counts nothing any more goes (a uid's segments count without objects). */
static void drop_if_idle(struct quota *q, struct quota_usage *u)
{
  struct quota_usage **p;

  if (u->objects)
    return;
  for (unsigned d = 0; d < GPUSHM_LIMIT_DEVICES; d++)
    if (u->device_bytes[d])
      return;
  for (p = &q->usage; *p != u; p = &(*p)->next)
    ;
  *p = u->next;
  free(u);
}

/* What is left of limit once used is taken (0 where used is over it already: a
 * holder charged without a check, or a limit lowered by a reload). */
static uint64_t room(uint64_t limit, uint64_t used)
{
  return limit > used ? limit - used : 0;
}

void quota_charge(struct quota *q, uid_t uid, const struct quota_cost *c)
{
  struct quota_usage *u = usage_of(q, uid);

  if (!u)
    return;
  u->objects++;
  u->bytes += c->bytes;
  u->host_bytes += c->host;
  if (on_a_device(c))
    u->device_bytes[c->device] += c->device_bytes;
}

void quota_release(struct quota *q, uid_t uid, const struct quota_cost *c)
{
  struct quota_usage *u;

  for (u = q->usage; u; u = u->next) {
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
    drop_if_idle(q, u);
    return;
  }
}

int quota_device_add(struct quota *q, uid_t uid, int device, uint64_t bytes)
{
  struct quota_usage *u;

  if (!in_range(device) || !bytes)
    return 0;
  if (!(u = usage_of(q, uid)))
    return PROTO_E_NOMEM;
  u->device_bytes[device] += bytes;
  return 0;
}

void quota_device_sub(struct quota *q, uid_t uid, int device, uint64_t bytes)
{
  struct quota_usage *u;

  if (!in_range(device))
    return;
  for (u = q->usage; u && u->uid != uid; u = u->next)
    ;
  if (!u)
    return;
  u->device_bytes[device] -= u->device_bytes[device] < bytes ? u->device_bytes[device] : bytes;
  drop_if_idle(q, u);
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
  return u && in_range(device) ? u->device_bytes[device] : 0;
}

/* An amount read at a glance that still says the exact figure: "5 MiB" where it is a
 * whole number of its unit, else "6319125500 bytes (5.9 GiB)". */
static const char *size_text(uint64_t bytes, char *buf, size_t len)
{
  static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
  unsigned u = 0;

  if (bytes < 1024) {
    snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
    return buf;
  }
  while (u + 1 < sizeof units / sizeof units[0] && bytes >> (10 * (u + 2)))
    u++;
  if (!(bytes & ((UINT64_C(1) << (10 * (u + 1))) - 1)))
    snprintf(buf, len, "%llu %s", (unsigned long long)(bytes >> (10 * (u + 1))), units[u]);
  else
    snprintf(buf, len, "%llu bytes (%.1f %s)", (unsigned long long)bytes,
             (double)bytes / (double)(UINT64_C(1) << (10 * (u + 1))), units[u]);
  return buf;
}

/* Whoever is refused learns which setting holds them back and who may change it: a
 * client's user cannot, the daemon's administrator can. */
#define RAISE(setting) "gpushmd's administrator may raise " setting " in gpushmd.conf"

int quota_check_device(const struct quota *q, const struct quota_limits *lim, uid_t uid,
                       int device, uint64_t bytes, char *err, size_t errlen)
{
  uint64_t max, used;
  char a[48], b[48];

  if (!in_range(device) || !lim->max_device_bytes_per_uid ||
      !(max = lim->max_device_bytes_per_uid[device]))
    return 0;
  used = quota_device_of(q, uid, device);
  if (bytes <= room(max, used))
    return 0;
  snprintf(err, errlen, "uid %u would hold %s of device %d's memory (limit %s; "
           RAISE("max-device-bytes-per-uid") ")", (unsigned)uid,
           size_text(used + bytes, a, sizeof a), device, size_text(max, b, sizeof b));
  return PROTO_E_LIMIT;
}

int quota_check(const struct quota *q, const struct quota_limits *lim, uid_t uid,
                const struct quota_cost *c, char *err, size_t errlen)
{
  const uint64_t bytes = c->bytes, host = c->host;
  uint32_t objects;
  uint64_t used, host_used;
  char a[48], b[48], n[48];
  int r;

  quota_of(q, uid, &objects, &used, &host_used);
  if (objects >= lim->max_objects_per_uid) {
    snprintf(err, errlen, "uid %u already has %u buffers (limit %u; " RAISE("max-buffers-per-uid")
             ")", (unsigned)uid, objects, lim->max_objects_per_uid);
    return PROTO_E_LIMIT;
  }
  if (lim->max_bytes_per_uid && bytes > room(lim->max_bytes_per_uid, used)) {
    snprintf(err, errlen, "uid %u would hold %s (limit %s; " RAISE("max-bytes-per-uid") ")",
             (unsigned)uid, size_text(used + bytes, a, sizeof a),
             size_text(lim->max_bytes_per_uid, b, sizeof b));
    return PROTO_E_LIMIT;
  }
  if (lim->max_host_bytes_per_uid && host > room(lim->max_host_bytes_per_uid, host_used)) {
    snprintf(err, errlen, "uid %u would hold %s of host memory (limit %s; "
             RAISE("max-host-bytes-per-uid") ")", (unsigned)uid,
             size_text(host_used + host, a, sizeof a),
             size_text(lim->max_host_bytes_per_uid, b, sizeof b));
    return PROTO_E_LIMIT;
  }
  if (on_a_device(c) &&
      (r = quota_check_device(q, lim, uid, c->device, c->device_bytes, err, errlen)) < 0)
    return r;
  if (lim->host_budget && host > room(lim->host_budget, q->host_bytes)) {
    snprintf(err, errlen, "gpushmd's host-memory budget is used up: %s of %s allocated, %s more "
             "asked for (" RAISE("host-memory-budget") ")",
             size_text(q->host_bytes, a, sizeof a), size_text(lim->host_budget, b, sizeof b),
             size_text(host, n, sizeof n));
    return PROTO_E_NOMEM;
  }
  return 0;
}
