/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "util/host_memory.h"
#include "gpushm_limits.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* memory.max ("max" or bytes) or memory.limit_in_bytes (v1 says "no limit" with a
 * huge page-aligned number). */
static bool read_limit(const char *path, uint64_t *out)
{
  char text[64];
  FILE *f = fopen(path, "re");
  bool ok;

  if (!f)
    return false;
  ok = fgets(text, sizeof text, f) != NULL;
  fclose(f);
  if (!ok || strncmp(text, "max", 3) == 0)
    return false;
  *out = strtoull(text, NULL, 10);
  return *out > 0 && *out < (1ull << 62);
}

/* The tightest limit from cgroup_path up to the root of one hierarchy. */
static bool tightest_limit(const char *mount, const char *cgroup_path, const char *file,
                           uint64_t *out, char *where, size_t wherelen)
{
  char dir[512], path[600];
  bool found = false;
  uint64_t limit;

  snprintf(dir, sizeof dir, "%s", cgroup_path);
  for (;;) {
    char *slash;
    snprintf(path, sizeof path, "%s%s/%s", mount, strcmp(dir, "/") == 0 ? "" : dir, file);
    if (read_limit(path, &limit) && (!found || limit < *out)) {
      *out = limit;
      found = true;
      snprintf(where, wherelen, "%s", path);
    }
    if (strcmp(dir, "/") == 0 || !(slash = strrchr(dir, '/')))
      break;
    if (slash == dir)
      slash[1] = '\0';
    else
      *slash = '\0';
  }
  return found;
}

/* Lines of /proc/self/cgroup are "id:controllers:path"; v2's is "0::path". */
static bool cgroup_limit(uint64_t *out, char *where, size_t wherelen)
{
  char line[640];
  bool found = false;
  FILE *f = fopen("/proc/self/cgroup", "re");

  if (!f)
    return false;
  while (fgets(line, sizeof line, f)) {
    char *controllers = strchr(line, ':'), *path;
    uint64_t limit;
    char here[600];
    bool got = false;

    if (!controllers || !(path = strchr(controllers + 1, ':')))
      continue;
    *path++ = '\0';
    controllers++;
    path[strcspn(path, "\n")] = '\0';
    if (*controllers == '\0')
      got = tightest_limit("/sys/fs/cgroup", path, "memory.max", &limit, here, sizeof here);
    else if (strcmp(controllers, "memory") == 0)
      got = tightest_limit("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", &limit, here,
                           sizeof here);
    if (got && (!found || limit < *out)) {
      *out = limit;
      found = true;
      snprintf(where, wherelen, "%s", here);
    }
  }
  fclose(f);
  return found;
}

uint64_t host_memory_auto_budget(char *why, size_t whylen)
{
  uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t budget = ram / 100 * GPUSHM_AUTO_BUDGET_PERCENT_OF_RAM, limit;
  char where[600];

  snprintf(why, whylen, "%u%% of %" PRIu64 " MiB of physical memory",
           GPUSHM_AUTO_BUDGET_PERCENT_OF_RAM, ram >> 20);
  if (cgroup_limit(&limit, where, sizeof where) &&
      limit / 100 * GPUSHM_AUTO_BUDGET_PERCENT_OF_CGROUP < budget) {
    budget = limit / 100 * GPUSHM_AUTO_BUDGET_PERCENT_OF_CGROUP;
    snprintf(why, whylen, "%u%% of the %" PRIu64 " MiB cgroup limit in %s",
             GPUSHM_AUTO_BUDGET_PERCENT_OF_CGROUP, limit >> 20, where);
  }
  return budget;
}
