/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "options.h"
#include "protocol.h"
#include "util/log.h"
#include "gpushm.pb-c.h"
#include "wire.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "util/host_memory.h"

/* Whole-string unsigned parse with an optional binary-unit suffix. */
static int parse_u64(const char *s, int base, bool allow_suffix, uint64_t max, uint64_t *out)
{
  char *end;
  unsigned long long v;
  unsigned shift = 0;

  if (!s[0] || s[0] == '-' || isspace((unsigned char)s[0]))
    return PROTO_E_INVAL;
  errno = 0;
  v = strtoull(s, &end, base);
  if (errno || end == s)
    return PROTO_E_INVAL;
  if (allow_suffix && *end) {
    /* binary either way: k is KiB as K is (no one means 1000 bytes to a buffer) */
    const char *units = "KMGT";
    const char *u = strchr(units, toupper((unsigned char)*end));
    if (!u || end[1])
      return PROTO_E_INVAL;
    shift = 10u * (unsigned)(u - units + 1);
    end++;
    if (v > (UINT64_MAX >> shift))
      return PROTO_E_INVAL;
  }
  if (*end || (v << shift) > max)
    return PROTO_E_INVAL;
  *out = v << shift;
  return 0;
}

static int number(const char *v, int base, bool suffix, uint64_t min, uint64_t max, uint64_t *out)
{
  return parse_u64(v, base, suffix, max, out) < 0 || *out < min ? PROTO_E_INVAL : 0;
}

static int u32(const char *v, int base, uint64_t min, uint64_t max, uint32_t *out)
{
  uint64_t n;
  if (number(v, base, false, min, max, &n) < 0)
    return PROTO_E_INVAL;
  *out = (uint32_t)n;
  return 0;
}

static int set_socket(struct settings *s, const char *v)
{
  if (!*v || strlen(v) >= sizeof s->cfg.socket_path)
    return PROTO_E_INVAL;
  memcpy(s->cfg.socket_path, v, strlen(v) + 1);
  return 0;
}

static int set_socket_mode(struct settings *s, const char *v)
{
  s->socket_mode_set = true;
  return u32(v, 8, 0, 0777, &s->cfg.socket_mode);
}

static int set_socket_group(struct settings *s, const char *v)
{
  struct group *g;

  s->socket_group_auto = strcmp(v, "auto") == 0;
  s->cfg.has_socket_group = false;
  s->socket_group[0] = '\0';
  if (s->socket_group_auto || strcmp(v, "none") == 0)
    return 0;
  if (!(g = getgrnam(v)) || strlen(v) >= sizeof s->socket_group)
    return PROTO_E_INVAL;
  s->cfg.has_socket_group = true;
  s->cfg.socket_gid = g->gr_gid;
  snprintf(s->socket_group, sizeof s->socket_group, "%s", v);
  return 0;
}

static int set_default_mode(struct settings *s, const char *v)
{
  return u32(v, 8, 1, 0777, &s->limits.default_mode);
}

static int set_max_clients(struct settings *s, const char *v)
{
  return u32(v, 10, 1, UINT32_MAX - GPUSHM_LIMIT_ADMIN_RESERVED_CLIENTS, &s->cfg.max_clients);
}

static int set_max_clients_per_uid(struct settings *s, const char *v)
{
  return u32(v, 10, 1, UINT32_MAX, &s->cfg.max_clients_per_uid);
}

static int set_hello_timeout(struct settings *s, const char *v)
{
  return u32(v, 10, 10, 3600000, &s->cfg.hello_timeout_ms);
}

static int set_max_buffers(struct settings *s, const char *v)
{
  return u32(v, 10, 0, UINT32_MAX, &s->limits.max_buffers_per_uid);
}

static int set_max_bytes(struct settings *s, const char *v)
{
  return number(v, 10, true, 0, UINT64_MAX, &s->limits.max_bytes_per_uid);
}

static int set_pool_bytes(struct settings *s, const char *v)
{
  return number(v, 10, true, 0, UINT64_MAX, &s->limits.pool_bytes);
}

static int set_host_budget(struct settings *s, const char *v)
{
  s->host_budget_auto = strcmp(v, "auto") == 0;
  return s->host_budget_auto ? 0 : number(v, 10, true, 0, UINT64_MAX, &s->limits.host_budget);
}

static int set_max_host_bytes(struct settings *s, const char *v)
{
  s->host_bytes_per_uid_auto = strcmp(v, "auto") == 0;
  return s->host_bytes_per_uid_auto
           ? 0 : number(v, 10, true, 0, UINT64_MAX, &s->limits.max_host_bytes_per_uid);
}

/* SIZE (of every device), N% (of each device's memory), auto or 0 (none). */
static int set_max_device_bytes(struct settings *s, const char *v)
{
  size_t len = strlen(v);
  uint64_t n;

  s->device_quota_percent = 0;
  s->device_quota_bytes = 0;
  if (strcmp(v, "auto") == 0) {
    s->device_quota_percent = GPUSHM_AUTO_DEVICE_BYTES_PER_UID_PERCENT;
    return 0;
  }
  if (len > 1 && v[len - 1] == '%') {
    char digits[8];
    if (len - 1 >= sizeof digits)
      return PROTO_E_INVAL;
    memcpy(digits, v, len - 1);
    digits[len - 1] = '\0';
    if (number(digits, 10, false, 1, 100, &n) < 0)
      return PROTO_E_INVAL;
    s->device_quota_percent = (uint32_t)n;
    return 0;
  }
  return number(v, 10, true, 0, UINT64_MAX, &s->device_quota_bytes);
}

static int set_max_queued(struct settings *s, const char *v)
{
  return u32(v, 10, 1, 1u << 20, &s->cfg.max_queued_frames);
}

static int set_busy_poll(struct settings *s, const char *v)
{
  return u32(v, 10, 0, GPUSHM_LIMIT_POLL_US, &s->cfg.busy_poll_us);
}

static int set_default_backend(struct settings *s, const char *v)
{
  int backend = wire_backend_value(v);

  if (strcmp(v, "auto") == 0) {
    s->limits.default_backend = REG_DEFAULT_BACKEND_AUTO;
    return 0;
  }
  /* cuda-event is what events report, not where buffers come from */
  if (backend < 1 || backend == GPUSHM__BACKEND__BACKEND_CUDA_EVENT)
    return PROTO_E_INVAL;
  s->limits.default_backend = backend;
  return 0;
}

static int set_allow_legacy_ipc(struct settings *s, const char *v)
{
  if (strcmp(v, "auto") == 0)
    s->legacy_ipc_auto = true;
  else if (strcmp(v, "yes") == 0 || strcmp(v, "no") == 0)
    s->legacy_ipc_auto = false, s->limits.allow_legacy_ipc = v[0] == 'y';
  else
    return PROTO_E_INVAL;
  return 0;
}

static int set_strict_modes(struct settings *s, const char *v)
{
  if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0)
    return PROTO_E_INVAL;
  s->limits.strict_modes = v[0] == 'y';
  return 0;
}

static int set_admin_group(struct settings *s, const char *v)
{
  struct group *g = getgrnam(v);
  if (!g)
    return PROTO_E_INVAL;
  s->cfg.has_admin_group = true;
  s->cfg.admin_gid = g->gr_gid;
  return 0;
}

static int set_log_level(struct settings *s, const char *v)
{
  return (s->log_level = log_parse_level(v)) < 0 ? PROTO_E_INVAL : 0;
}

static const struct setting {
  const char *name;
  char short_name;
  int (*set)(struct settings *s, const char *value);
  const char *arg;
  const char *help;    /* for --help */
  const char *expects; /* for errors */
} settings_table[] = {
  { "socket", 's', set_socket, "PATH",
    "listen on PATH (default $GPUSHM_SOCKET, else " PROTO_DEFAULT_SOCKET ")",
    "a socket path of at most 107 bytes" },
  { "socket-mode", 0, set_socket_mode, "MODE",
    "permission bits of the socket file (0660 with a socket group, else 0666)",
    "octal permission bits, at most 0777" },
  { "socket-group", 0, set_socket_group, "GROUP|auto|none",
    "the socket file's group (auto: " GPUSHM_SOCKET_GROUP " where it exists and gpushmd "
    "runs as root, as the packaged unit has it)", "auto, none or the name of an existing group" },
  { "default-mode", 0, set_default_mode, "MODE",
    "buffer mode when a client gives none (0600)", "octal permission bits, 1 to 0777" },
  { "max-clients", 0, set_max_clients, "N",
    "refuse non-admin connections beyond N (1024; admins have 16 more)", "a number of at least 1" },
  { "max-clients-per-uid", 0, set_max_clients_per_uid, "N",
    "connections one non-admin uid may hold (256)", "a number of at least 1" },
  { "hello-timeout", 0, set_hello_timeout, "MS",
    "close connections that send no hello within MS milliseconds (5000)",
    "milliseconds, 10 to 3600000" },
  { "max-buffers-per-uid", 0, set_max_buffers, "N", "buffers one uid may own (4096)",
    "a number" },
  { "max-bytes-per-uid", 0, set_max_bytes, "SIZE",
    "bytes of any memory one uid may own, K/M/G/T suffixes (0 = no limit)",
    "bytes, with an optional K, M, G or T (either case)" },
  { "host-memory-budget", 0, set_host_budget, "SIZE|auto",
    "host memory all buffers together may use (auto: 50% of RAM or 75% of the cgroup "
    "memory limit, whichever is smaller; 0 = no limit)",
    "'auto' or bytes, with an optional K, M, G or T (either case)" },
  { "max-host-bytes-per-uid", 0, set_max_host_bytes, "SIZE|auto",
    "host memory one uid may own (auto: half the budget; 0 = no limit)",
    "'auto' or bytes, with an optional K, M, G or T (either case)" },
  { "max-device-bytes-per-uid", 0, set_max_device_bytes, "SIZE|N%|auto",
    "device memory one uid may own on each GPU (auto: 50% of each GPU's memory; "
    "0 = no limit)",
    "'auto', a percentage from 1% to 100%, or bytes with an optional K, M, G or T "
    "(either case)" },
  { "pool-bytes", 0, set_pool_bytes, "SIZE",
    "empty segments each permission class keeps warm per device, K/M/G/T suffixes (256M; "
    "0 = none)", "bytes, with an optional K, M, G or T (either case)" },
  { "max-queued-replies", 0, set_max_queued, "N",
    "drop a client with more unsent replies (64)", "a number from 1 to 1048576" },
  { "busy-poll", 0, set_busy_poll, "US",
    "after each request keep polling, a CPU busy, for US microseconds before sleeping: "
    "spares a request that comes within it a wake-up (0, the default: sleep at once)",
    "microseconds, 0 to 10000" },
  { "default-backend", 0, set_default_backend, "BACKEND",
    "what clients get when they name no backend: host (default), cuda-fd, cuda-ipc, "
    "cuda-fabric or auto (cuda-fd where the first GPU can share fd memory, else host)",
    "host, cuda-fd, cuda-ipc, cuda-fabric or auto" },
  { "allow-legacy-ipc", 0, set_allow_legacy_ipc, "yes|no|auto",
    "create and export legacy CUDA IPC buffers, whose handles any local process can forge "
    "(auto: only when gpushmd does not run as root, i.e. serves one user)",
    "yes, no or auto" },
  { "strict-modes", 0, set_strict_modes, "yes|no",
    "refuse creates whose mode gives group or others read-only access to device memory, "
    "which its readers can map read-write (no: allowed, read-only stops bugs, not users)",
    "yes or no" },
  { "admin-group", 0, set_admin_group, "GROUP",
    "members may list, destroy and disconnect every user's buffers and clients",
    "the name of an existing group" },
  { "log-level", 'l', set_log_level, "LEVEL", "error, warn, info (default) or debug",
    "error, warn, info or debug" },
};
#define N_SETTINGS (sizeof settings_table / sizeof settings_table[0])

void settings_init(struct settings *s)
{
  const char *env_socket = getenv("GPUSHM_SOCKET");

  memset(s, 0, sizeof *s);
  set_socket(s, env_socket && *env_socket ? env_socket : PROTO_DEFAULT_SOCKET);
  s->cfg.socket_mode = 0666;
  s->socket_group_auto = true;
  s->cfg.max_clients = GPUSHM_DEFAULT_MAX_CLIENTS;
  s->cfg.max_clients_per_uid = GPUSHM_DEFAULT_MAX_CLIENTS_PER_UID;
  s->cfg.hello_timeout_ms = GPUSHM_DEFAULT_HELLO_TIMEOUT_MS;
  s->cfg.max_queued_frames = GPUSHM_DEFAULT_MAX_QUEUED_FRAMES;
  s->cfg.max_queued_bytes = GPUSHM_DEFAULT_MAX_QUEUED_BYTES;
  s->limits.max_buffers_per_uid = GPUSHM_DEFAULT_MAX_BUFFERS_PER_UID;
  s->limits.max_bytes_per_uid = GPUSHM_DEFAULT_MAX_BYTES_PER_UID;
  s->limits.default_mode = 0600;
  s->limits.pool_bytes = GPUSHM_DEFAULT_POOL_BYTES;
  s->host_budget_auto = true;
  s->host_bytes_per_uid_auto = true;
  s->device_quota_percent = GPUSHM_AUTO_DEVICE_BYTES_PER_UID_PERCENT;
  s->legacy_ipc_auto = true;
  s->log_level = LOG_LEVEL_INFO;
}

/* Exact for any 64-bit size (50% of 4 GiB is 2 GiB, not 2 GiB less 48 bytes). */
static uint64_t percent_of(uint64_t bytes, uint32_t percent)
{
  return bytes / 100 * percent + bytes % 100 * percent / 100;
}

void device_quota_resolve(struct settings *s, const uint64_t *device_bytes, int n)
{
  for (int i = 0; i < (int)GPUSHM_LIMIT_DEVICES; i++)
    s->limits.max_device_bytes_per_uid[i] =
      i >= n ? 0 : s->device_quota_percent ? percent_of(device_bytes[i], s->device_quota_percent)
                                           : s->device_quota_bytes;
}

void settings_resolve(struct settings *s)
{
  struct group *g;

  /* A daemon started by hand gets the packaged socket unit's policy where it can: the
   * group's members (and root) may connect, not every user. */
  if (s->socket_group_auto && geteuid() == 0 && (g = getgrnam(GPUSHM_SOCKET_GROUP))) {
    s->cfg.has_socket_group = true;
    s->cfg.socket_gid = g->gr_gid;
    snprintf(s->socket_group, sizeof s->socket_group, "%s", GPUSHM_SOCKET_GROUP);
  }
  if (!s->socket_mode_set)
    s->cfg.socket_mode = s->cfg.has_socket_group ? 0660 : 0666;
  if (s->host_budget_auto)
    s->limits.host_budget = host_memory_auto_budget(s->host_budget_why, sizeof s->host_budget_why);
  else
    snprintf(s->host_budget_why, sizeof s->host_budget_why, "set by host-memory-budget");
  /* A daemon of one user serves one trust domain; root serves everyone. */
  if (s->legacy_ipc_auto)
    s->limits.allow_legacy_ipc = geteuid() != 0;
  if (s->host_bytes_per_uid_auto)
    s->limits.max_host_bytes_per_uid =
      s->limits.host_budget / 100 * GPUSHM_AUTO_HOST_BYTES_PER_UID_PERCENT;
}

static const struct setting *find_setting(const char *name)
{
  for (size_t i = 0; i < N_SETTINGS; i++)
    if (strcmp(settings_table[i].name, name) == 0)
      return &settings_table[i];
  return NULL;
}

int option_apply(struct settings *s, const char *name, const char *value, char *err, size_t errlen)
{
  const struct setting *st = find_setting(name);

  if (!st) {
    snprintf(err, errlen, "unknown setting '%s'", name);
    return PROTO_E_INVAL;
  }
  if (st->set(s, value) == 0)
    return 0;
  snprintf(err, errlen, "invalid value '%s' (expected %s)", value, st->expects);
  return PROTO_E_INVAL;
}

const struct option *options_getopt(void)
{
  static struct option table[N_SETTINGS + 4];

  if (table[0].name)
    return table;
  for (size_t i = 0; i < N_SETTINGS; i++)
    table[i] = (struct option){ settings_table[i].name, required_argument, NULL, 0 };
  table[N_SETTINGS] = (struct option){ "config", required_argument, NULL, 'c' };
  table[N_SETTINGS + 1] = (struct option){ "help", no_argument, NULL, 'h' };
  table[N_SETTINGS + 2] = (struct option){ "version", no_argument, NULL, 'V' };
  return table;
}

/* Short options map onto their long names. */
const char *options_short_name(int c)
{
  for (size_t i = 0; i < N_SETTINGS; i++)
    if (settings_table[i].short_name && settings_table[i].short_name == c)
      return settings_table[i].name;
  return NULL;
}

/* --help: the help text of every option starts in one column and is wrapped to fit 80
 * columns; a flag too long for its column has a line of its own. */
#define HELP_COLUMN 32
#define HELP_WIDTH 79

static void help_entry(FILE *out, const char *flag, const char *help)
{
  size_t col = 2 + strlen(flag);

  fprintf(out, "  %s", flag);
  if (col + 1 > HELP_COLUMN) {
    fputc('\n', out);
    col = 0;
  }
  fprintf(out, "%*s", (int)(HELP_COLUMN - col), "");
  while (*help) {
    size_t take = strlen(help), room = HELP_WIDTH - HELP_COLUMN;
    if (take > room) {
      /* the last space that leaves the line within the width (a longer word overflows) */
      take = room;
      while (take > 0 && help[take] != ' ')
        take--;
      if (!take)
        take = strcspn(help, " ");
    }
    fprintf(out, "%.*s\n", (int)take, help);
    help += take;
    while (*help == ' ')
      help++;
    if (*help)
      fprintf(out, "%*s", HELP_COLUMN, "");
  }
}

void options_usage(FILE *out)
{
  fprintf(out,
    "Usage: gpushmd [OPTION]...\n"
    "Share GPU and host memory between processes: gpushmd owns each buffer and\n"
    "frees it only when no process holds it.\n\n");
  help_entry(out, "-c, --config=FILE", "settings file (default " GPUSHMD_DEFAULT_CONFIG " if it "
             "exists); each option below is also a key there; SIGHUP re-reads it");
  for (size_t i = 0; i < N_SETTINGS; i++) {
    const struct setting *st = &settings_table[i];
    char flag[64];
    snprintf(flag, sizeof flag, "%c%c%c --%s=%s", st->short_name ? '-' : ' ',
             st->short_name ? st->short_name : ' ', st->short_name ? ',' : ' ', st->name, st->arg);
    help_entry(out, flag, st->help);
  }
  help_entry(out, "-h, --help", "show this help");
  help_entry(out, "-V, --version", "show the version");
  fprintf(out, "\nSIZE is bytes, or with a binary K, M, G or T in either case (1k = 1024).\n");
}

static char *trim(char *s)
{
  char *end;
  while (isspace((unsigned char)*s))
    s++;
  end = s + strlen(s);
  while (end > s && isspace((unsigned char)end[-1]))
    *--end = '\0';
  return s;
}

/* Only a regular file (or /dev/null, "no settings") is a settings file: a directory
 * would read as empty and a FIFO would block start-up. */
static FILE *open_config(const char *path, bool must_exist, bool *missing, char *err, size_t errlen)
{
  struct stat st;
  FILE *f;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

  *missing = false;
  if (fd < 0) {
    if (errno == ENOENT && !must_exist) {
      *missing = true;
      return NULL;
    }
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return NULL;
  }
  if (fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) ||
                              (S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3)))) {
    snprintf(err, errlen, "%s: %s", path,
             S_ISDIR(st.st_mode) ? "is a directory, not a settings file" : "not a regular file");
    close(fd);
    return NULL;
  }
  if (!(f = fdopen(fd, "r"))) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    close(fd);
  }
  return f;
}

int config_load(struct settings *s, const char *path, bool must_exist, char *err, size_t errlen)
{
  char *line = NULL, why[300];
  size_t cap = 0;
  ssize_t len;
  unsigned lineno = 0;
  bool missing;
  int r = -1;
  FILE *f = open_config(path, must_exist, &missing, err, errlen);

  if (!f)
    return missing ? 0 : -1;
  while ((len = getline(&line, &cap, f)) >= 0) {
    char *key, *value, *eq;
    lineno++;
    if ((size_t)len > GPUSHM_LIMIT_CONFIG_LINE) {
      snprintf(err, errlen, "%s:%u: line longer than %u bytes", path, lineno,
               GPUSHM_LIMIT_CONFIG_LINE);
      goto out;
    }
    if (memchr(line, '\0', (size_t)len)) {
      snprintf(err, errlen, "%s:%u: NUL byte in the line", path, lineno);
      goto out;
    }
    key = trim(line);
    if (!*key || *key == '#')
      continue;
    if (!(eq = strchr(key, '='))) {
      snprintf(err, errlen, "%s:%u: expected 'key = value'", path, lineno);
      goto out;
    }
    *eq = '\0';
    key = trim(key);
    value = trim(eq + 1);
    if (option_apply(s, key, value, why, sizeof why) < 0) {
      snprintf(err, errlen, "%s:%u: %s: %s", path, lineno, key, why);
      goto out;
    }
  }
  if (ferror(f)) {
    snprintf(err, errlen, "%s: read error", path);
    goto out;
  }
  r = 0;
out:
  free(line);
  fclose(f);
  return r;
}
