#include "config.h"
#include "persist.h"
#include "gpushm.h"
#include "log.h"
#include "shm_layout.h"
#include "wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* FDNAME allows up to 255 printable ASCII characters but ':'.  Records use digits, dots
 * and name characters, and fit: the longest is about 220 bytes. */
#define RECORD_MAX 256
#define RECORD_FLAG_SYNC 1u

static void memory_record(const struct reg_object *b, char *out, size_t len)
{
  snprintf(out, len, SDN_FDSTORE_PREFIX "m.%" PRIu64 ".%d.%u.%u.%u.%o.%" PRIu64 ".%" PRIu64 ".%s",
           b->id, b->backend->kind, b->sync ? RECORD_FLAG_SYNC : 0u, (unsigned)b->owner_uid,
           (unsigned)b->owner_gid, b->mode, b->size, b->created_unix_ms, b->name);
}

static void control_record(uint64_t id, char *out, size_t len)
{
  snprintf(out, len, SDN_FDSTORE_PREFIX "c.%" PRIu64, id);
}

void persist_init(struct persist *p)
{
  memset(p, 0, sizeof *p);
  p->max = sdn_fdstore_max(GPUSHM_DEFAULT_FDSTORE_MAX);
  p->enabled = sdn_fdstore_reachable();
  if (!p->enabled)
    log_info("not run by systemd (no NOTIFY_SOCKET): persistent buffers will not survive a "
             "restart of gpushmd");
}

void persist_created(struct persist *p, struct reg_object *b)
{
  char name[RECORD_MAX];
  unsigned need = b->sync ? 2 : 1;
  int r;

  /* Device memory of the legacy-IPC backend and events die with the daemon's context. */
  if (!p->enabled || b->lifetime != GPUSHM_LIFETIME_PERSISTENT || b->kind != REG_BUFFER ||
      b->backend->kind != GPUSHM_BACKEND_HOST)
    return;
  if (p->stored + need > p->max) {
    if (!p->warned_full)
      log_warn("systemd's fd store is full (%u fds): newer persistent buffers will not survive "
               "a restart", p->max);
    p->warned_full = true;
    return;
  }
  memory_record(b, name, sizeof name);
  if ((r = sdn_fdstore_add(name, b->mem.fd)) < 0) {
    log_warn("could not deposit '%s' in systemd's fd store: %s", b->name, strerror(-r));
    return;
  }
  if (b->sync) {
    char control[RECORD_MAX];
    control_record(b->id, control, sizeof control);
    if ((r = sdn_fdstore_add(control, b->sync_state.control.fd)) < 0) {
      log_warn("could not deposit the control block of '%s': %s", b->name, strerror(-r));
      sdn_fdstore_remove(name);
      return;
    }
  }
  p->stored += need;
  b->persisted = true;
}

void persist_unlinked(struct persist *p, struct reg_object *b)
{
  char name[RECORD_MAX];

  if (!b->persisted)
    return;
  memory_record(b, name, sizeof name);
  sdn_fdstore_remove(name);
  if (b->sync) {
    control_record(b->id, name, sizeof name);
    sdn_fdstore_remove(name);
  }
  p->stored -= b->sync ? 2 : 1;
  b->persisted = false;
}

struct memory_entry {
  struct reg_adopt_args args;
  unsigned flags;
  char name[GPUSHM_LIMIT_NAME_LEN + 1];
};

static bool parse_memory_record(const char *record, struct memory_entry *e)
{
  unsigned long long id, size, created;
  unsigned flags, uid, gid, mode;
  int backend, used = -1;

  memset(e, 0, sizeof *e);
  if (sscanf(record, SDN_FDSTORE_PREFIX "m.%llu.%d.%u.%u.%u.%o.%llu.%llu.%n", &id, &backend,
             &flags, &uid, &gid, &mode, &size, &created, &used) != 8 || used < 0 ||
      !wire_name_valid(record + used))
    return false;
  snprintf(e->name, sizeof e->name, "%s", record + used);
  e->flags = flags;
  e->args = (struct reg_adopt_args){
    .id = id, .name = e->name, .backend = backend, .size = size, .owner_uid = uid,
    .owner_gid = gid, .mode = mode, .created_unix_ms = created,
  };
  return true;
}

static void drop(const char *record, int fd, const char *why)
{
  log_warn("dropping '%s' from systemd's fd store: %s", record, why);
  sdn_fdstore_remove(record);
  close(fd);
}

unsigned persist_adopt(struct persist *p, struct registry *reg, struct sdn_passed *passed)
{
  unsigned adopted = 0;
  char err[256];

  /* Memory records first; each sync buffer takes its control block along. */
  for (size_t i = 0; i < passed->n_stored; i++) {
    const char *record = passed->stored_names[i];
    int fd = passed->stored_fds[i], control_fd = -1;
    struct backend_mem mem, control;
    struct memory_entry e;
    size_t c = passed->n_stored;

    if (fd < 0 || strncmp(record, SDN_FDSTORE_PREFIX "m.", strlen(SDN_FDSTORE_PREFIX "m.")) != 0)
      continue;
    passed->stored_fds[i] = -1;
    if (!parse_memory_record(record, &e) || e.args.backend != GPUSHM_BACKEND_HOST) {
      drop(record, fd, "not a record this daemon understands");
      continue;
    }
    if (e.flags & RECORD_FLAG_SYNC) {
      char want[RECORD_MAX];
      control_record(e.args.id, want, sizeof want);
      for (c = 0; c < passed->n_stored; c++)
        if (passed->stored_fds[c] >= 0 && strcmp(passed->stored_names[c], want) == 0)
          break;
      if (c == passed->n_stored) {
        drop(record, fd, "its control block is missing");
        continue;
      }
      control_fd = passed->stored_fds[c];
      passed->stored_fds[c] = -1;
      if (backend_host_adopt(control_fd, SYNC_CONTROL_SIZE, &control, NULL, err, sizeof err) < 0) {
        drop(passed->stored_names[c], control_fd, err);
        drop(record, fd, "its control block is unusable");
        continue;
      }
    }
    if (backend_host_adopt(fd, e.args.size, &mem, &e.args.allocated, err, sizeof err) < 0 ||
        registry_adopt(reg, &e.args, &mem, control_fd >= 0 ? &control : NULL, err,
                       sizeof err) < 0) {
      drop(record, fd, err);
      if (control_fd >= 0)
        drop(passed->stored_names[c], control_fd, "its buffer is unusable");
      continue;
    }
    p->stored += control_fd >= 0 ? 2 : 1;
    adopted++;
    log_debug("'%s' (id %llu, %llu bytes) is back from systemd's fd store", e.name,
              (unsigned long long)e.args.id, (unsigned long long)e.args.size);
  }
  for (size_t i = 0; i < passed->n_stored; i++)
    if (passed->stored_fds[i] >= 0)
      drop(passed->stored_names[i], passed->stored_fds[i], "no buffer claims it");
  return adopted;
}
