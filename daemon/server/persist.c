/* SPDX-License-Identifier: MIT */
/* systemd's fd store as the registry's reg_store: records are the kinds' (what a
 * persistent object leaves there, and how it comes back, is its kind's knowledge:
 * registry/kind_buffer.c), under the store's prefix; this file keeps the budget of
 * fds, says what is lost, and hands a restarted daemon's records to the registry. */
#include "config.h"
#include "server/persist.h"
#include "protocol.h"
#include "util/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* FDNAME takes up to 255 printable ASCII characters but ':': the prefix and a record. */
#define STORE_NAME_MAX (sizeof SDN_FDSTORE_PREFIX - 1 + REG_RECORD_MAX)
_Static_assert(STORE_NAME_MAX - 1 <= 255, "a record and the prefix fit FDNAME");

static void store_name(const char *record, char *out, size_t len)
{
  snprintf(out, len, SDN_FDSTORE_PREFIX "%s", record);
}

static int fdstore_add(void *ctx, const char *record, int fd)
{
  char name[STORE_NAME_MAX];

  (void)ctx;
  store_name(record, name, sizeof name);
  return sdn_fdstore_add(name, fd);
}

static void fdstore_remove(void *ctx, const char *record)
{
  char name[STORE_NAME_MAX];

  (void)ctx;
  store_name(record, name, sizeof name);
  sdn_fdstore_remove(name);
}

/* After a restart: the fd systemd passed under that record, taken out of passed. */
static int fdstore_take(void *ctx, const char *record)
{
  struct sdn_passed *passed = ctx;
  char name[STORE_NAME_MAX];

  store_name(record, name, sizeof name);
  for (size_t i = 0; i < passed->n_stored; i++)
    if (passed->stored_fds[i] >= 0 && strcmp(passed->stored_names[i], name) == 0) {
      int fd = passed->stored_fds[i];
      passed->stored_fds[i] = -1;
      return fd;
    }
  return -1;
}

static const struct reg_store fdstore = {
  .add = fdstore_add,
  .remove = fdstore_remove,
  .take = fdstore_take,
};

bool persist_enabled(const struct persist *p)
{
  return p->enabled;
}

void persist_init(struct persist *p)
{
  memset(p, 0, sizeof *p);
  p->max = sdn_fdstore_max(GPUSHM_DEFAULT_FDSTORE_MAX);
  p->enabled = sdn_fdstore_reachable();
  if (!p->enabled)
    log_info("not run by systemd (no NOTIFY_SOCKET of its own): persistent buffers will not "
             "survive a restart of gpushmd");
}

void persist_created(struct persist *p, struct registry *reg, struct reg_object *obj)
{
  char err[256];
  int r;

  if (!p->enabled || !registry_persists(reg, obj))
    return;
  if (p->stored + registry_deposit_records(reg, obj) > p->max) {
    if (!p->warned_full)
      log_warn("systemd's fd store is full (%u fds): newer persistent buffers will not survive "
               "a restart", p->max);
    p->warned_full = true;
    return;
  }
  if ((r = registry_deposit(reg, obj, &fdstore, err, sizeof err)) < 0) {
    log_warn("'%s' will not survive a restart of gpushmd: depositing it in systemd's fd "
             "store failed: %s", obj->name, err);
    return;
  }
  p->stored += (unsigned)r;
}

void persist_report_dropped(const struct persist *p, const struct registry *reg)
{
  unsigned n = 0;
  uint64_t bytes = 0;
  char amount[64];

  for (size_t i = 0; i < registry_count(reg); i++) {
    const struct reg_object *b = registry_at(reg, i);
    if ((b->kind != REG_BUFFER && b->kind != REG_RING) || !b->linked ||
        b->lifetime != PROTO_LIFETIME_PERSISTENT || b->persisted)
      continue;
    n++;
    bytes += b->size;
  }
  if (!n)
    return;
  if (bytes >= 1u << 20)
    snprintf(amount, sizeof amount, "%" PRIu64 " bytes, %.1f MiB", bytes,
             (double)bytes / (1u << 20));
  else
    snprintf(amount, sizeof amount, "%" PRIu64 " bytes", bytes);
  /* Said at the stop, where it happens: the start-up line saying that persistent buffers
   * will not survive is long gone from the terminal of a daemon started by hand. */
  if (!p->enabled)
    log_warn("stopping drops %u persistent buffer%s (%s): gpushmd was not run by systemd (no "
             "NOTIFY_SOCKET of its own), so no fd store keeps them for the next start", n,
             n == 1 ? "" : "s", amount);
  else
    log_warn("stopping drops %u persistent buffer%s (%s) that systemd's fd store does not hold "
             "(cuda-ipc or cuda-fabric memory, images, registered memory, or buffers created "
             "once the store was full)", n, n == 1 ? "" : "s", amount);
}

void persist_unlinked(struct persist *p, struct registry *reg, struct reg_object *obj)
{
  p->stored -= (unsigned)registry_withdraw(reg, obj, &fdstore);
}

unsigned persist_adopt(struct persist *p, struct registry *reg, struct sdn_passed *passed)
{
  struct reg_store store = fdstore;
  unsigned adopted = 0;
  const size_t prefix = strlen(SDN_FDSTORE_PREFIX);
  char err[256];

  store.ctx = passed;
  /* Each record a kind knows brings its object back, and takes its companions along
   * (a sync buffer's control block, metadata); what is left claims nothing. */
  for (size_t i = 0; i < passed->n_stored; i++) {
    const char *name = passed->stored_names[i];
    int fd = passed->stored_fds[i], r;
    size_t before = registry_count(reg);
    unsigned records;

    if (fd < 0 || strncmp(name, SDN_FDSTORE_PREFIX, prefix) != 0)
      continue;
    passed->stored_fds[i] = -1;
    r = registry_adopt_record(reg, name + prefix, fd, &store, &records, err, sizeof err);
    if (r == 0) {
      passed->stored_fds[i] = fd; /* a companion, or nobody's: seen below */
    } else if (r < 0) {
      log_warn("systemd's fd store: dropping %s", err);
    } else {
      log_debug("'%s' brought %zu objects back from systemd's fd store", name,
                registry_count(reg) - before);
      adopted += (unsigned)(registry_count(reg) - before);
      p->stored += records;
    }
  }
  for (size_t i = 0; i < passed->n_stored; i++)
    if (passed->stored_fds[i] >= 0) {
      log_warn("dropping '%s' from systemd's fd store: no buffer claims it",
               passed->stored_names[i]);
      sdn_fdstore_remove(passed->stored_names[i]);
      close(passed->stored_fds[i]);
      passed->stored_fds[i] = -1;
    }
  return adopted;
}
