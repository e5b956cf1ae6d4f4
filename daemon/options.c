#include "config.h"
#include "options.h"
#include "log.h"
#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

/* Whole-string unsigned parse with an optional binary-unit suffix. */
static int parse_u64(const char *s, int base, bool allow_suffix, uint64_t max, uint64_t *out)
{
  char *end;
  unsigned long long v;
  unsigned shift = 0;

  if (!s[0] || s[0] == '-')
    return -1;
  errno = 0;
  v = strtoull(s, &end, base);
  if (errno || end == s)
    return -1;
  if (allow_suffix && *end) {
    const char *units = "KMGT";
    const char *u = strchr(units, *end);
    if (!u || end[1])
      return -1;
    shift = 10u * (unsigned)(u - units + 1);
    end++;
    if (v > (UINT64_MAX >> shift))
      return -1;
  }
  if (*end || (v << shift) > max)
    return -1;
  *out = v << shift;
  return 0;
}

static int set_socket(struct server *srv, const char *v)
{
  static char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  if (!*v || strlen(v) >= sizeof path)
    return -1;
  memcpy(path, v, strlen(v) + 1);
  srv->cfg.socket_path = path;
  return 0;
}

static int set_number(const char *v, int base, bool suffix, uint64_t min, uint64_t max, uint64_t *out)
{
  return parse_u64(v, base, suffix, max, out) < 0 || *out < min ? -1 : 0;
}

static int set_socket_mode(struct server *srv, const char *v)
{
  uint64_t n;
  if (set_number(v, 8, false, 0, 0777, &n) < 0)
    return -1;
  srv->cfg.socket_mode = (uint32_t)n;
  return 0;
}

static int set_default_mode(struct server *srv, const char *v)
{
  uint64_t n;
  if (set_number(v, 8, false, 1, 0777, &n) < 0)
    return -1;
  srv->reg.limits.default_mode = (uint32_t)n;
  return 0;
}

static int set_max_clients(struct server *srv, const char *v)
{
  uint64_t n;
  if (set_number(v, 10, false, 1, UINT32_MAX, &n) < 0)
    return -1;
  srv->cfg.max_clients = (uint32_t)n;
  return 0;
}

static int set_max_buffers(struct server *srv, const char *v)
{
  uint64_t n;
  if (set_number(v, 10, false, 0, UINT32_MAX, &n) < 0)
    return -1;
  srv->reg.limits.max_buffers_per_uid = (uint32_t)n;
  return 0;
}

static int set_max_bytes(struct server *srv, const char *v)
{
  return set_number(v, 10, true, 0, UINT64_MAX, &srv->reg.limits.max_bytes_per_uid);
}

static int set_max_queued(struct server *srv, const char *v)
{
  uint64_t n;
  if (set_number(v, 10, false, 1, 1u << 20, &n) < 0)
    return -1;
  srv->cfg.max_queued_frames = (uint32_t)n;
  return 0;
}

static int set_admin_group(struct server *srv, const char *v)
{
  struct group *g = getgrnam(v);
  if (!g)
    return -1;
  srv->cfg.has_admin_group = true;
  srv->cfg.admin_gid = g->gr_gid;
  return 0;
}

static int set_log_level(struct server *srv, const char *v)
{
  int level = log_parse_level(v);
  if (level < 0)
    return -1;
  log_set_level((enum log_level)level);
  return 0;
}

static const struct {
  const char *name;
  int (*set)(struct server *srv, const char *value);
  const char *expects;
} settings[] = {
  { "socket", set_socket, "a socket path of at most 107 bytes" },
  { "socket-mode", set_socket_mode, "octal permission bits, at most 0777" },
  { "default-mode", set_default_mode, "octal permission bits, 1 to 0777" },
  { "max-clients", set_max_clients, "a number of at least 1" },
  { "max-buffers-per-uid", set_max_buffers, "a number" },
  { "max-bytes-per-uid", set_max_bytes, "bytes, with an optional K, M, G or T" },
  { "max-queued-replies", set_max_queued, "a number from 1 to 1048576" },
  { "admin-group", set_admin_group, "the name of an existing group" },
  { "log-level", set_log_level, "error, warn, info or debug" },
};

bool option_known(const char *name)
{
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++)
    if (strcmp(settings[i].name, name) == 0)
      return true;
  return false;
}

int option_apply(struct server *srv, const char *name, const char *value, char *err, size_t errlen)
{
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    if (strcmp(settings[i].name, name) != 0)
      continue;
    if (settings[i].set(srv, value) == 0)
      return 0;
    snprintf(err, errlen, "invalid value '%s' (expected %s)", value, settings[i].expects);
    return -1;
  }
  snprintf(err, errlen, "unknown setting '%s'", name);
  return -1;
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

int config_load(struct server *srv, const char *path, bool must_exist, char *err, size_t errlen)
{
  FILE *f = fopen(path, "r");
  char line[1024], why[300];
  unsigned lineno = 0;

  if (!f) {
    if (errno == ENOENT && !must_exist)
      return 0;
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  while (fgets(line, sizeof line, f)) {
    char *key, *value, *eq;
    lineno++;
    if (!strchr(line, '\n') && !feof(f)) {
      snprintf(err, errlen, "%s:%u: line too long", path, lineno);
      goto fail;
    }
    key = trim(line);
    if (!*key || *key == '#')
      continue;
    if (!(eq = strchr(key, '='))) {
      snprintf(err, errlen, "%s:%u: expected 'key = value'", path, lineno);
      goto fail;
    }
    *eq = '\0';
    key = trim(key);
    value = trim(eq + 1);
    if (option_apply(srv, key, value, why, sizeof why) < 0) {
      snprintf(err, errlen, "%s:%u: %s: %s", path, lineno, key, why);
      goto fail;
    }
  }
  fclose(f);
  return 0;
fail:
  fclose(f);
  return -1;
}
