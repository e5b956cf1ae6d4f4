/* SPDX-License-Identifier: MIT */
/* gpushmctl doctor: from the caller's own process, which backends work against this
 * gpushmd, and why the others do not.
 *
 * Everything is judged here because this is where sharing fails: the PID namespace, the
 * uid, the GPUs the driver shows, and whether MPS would hold a new context are this
 * process's, which is why a doctor inside a container says more than one on the host.
 * It changes nothing but one trial buffer of the backend it judges (session lifetime,
 * mode 0600, a unique name, unlinked before it exits) and, for a backend the daemon
 * does not offer, one probe create (session lifetime, the daemon's default mode) that
 * the daemon refuses with its reason — and, should it not refuse, unlinked at once. */
#include "config.h"
#include "doctor.h"
#include "doctor-graphics.h"
#include "escape.h"
#include "fail.h"
#include "format.h"
#include "gpushm-admin.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The kernel's fixed inode of the initial (the host's) PID namespace, PROC_PID_INIT_INO. */
#define INIT_PID_NAMESPACE 0xEFFFFFFCull
#define TRIAL_SIZE 4096u
#define EVENTS_BIT (1u << 4) /* gpushm_daemon_backends(): the daemon makes events */
/* Indexed by gpushm_backend_t; 0 is "the default".  cuda-fabric (5) is not judged for
 * this process: check_fabric() says why. */
#define N_BACKENDS 4
#define GPUSHM_LIMIT_DEVICES_LISTED 32u
/* report()'s affects: no backend, or every device backend. */
#define AFFECTS_NONE 0
#define AFFECTS_CUDA (-1)
#define AFFECTS_ALL (-2)

enum status { ST_OK, ST_FAIL, ST_NA };

enum ns_relation {
  NS_UNKNOWN,      /* /proc missing, or the daemon does not say */
  NS_SAME,
  NS_HOST_INVOLVED, /* different, one of them the host's: legacy IPC works (measured) */
  NS_SIBLINGS,     /* different, neither the host's: legacy IPC fails (measured) */
  NS_HIDDEN        /* the daemon's pid reads 0 here and it does not say where it is */
};

struct doctor {
  gpushm_t *conn;
  uint32_t offered;        /* gpushm_daemon_backends() */
  gpushm_backend_t judged; /* the backend the exit status is about */
  const char *judged_why;  /* why that one */
  bool failed[N_BACKENDS];
  char first_failure[N_BACKENDS][48];
  gpushm_local_device_list_t *local; /* NULL: no driver here */
  int trial_device;        /* the daemon's ordinal of a GPU this process sees; -1: none */
  enum ns_relation ns;
  bool mps_blocks;         /* another uid's MPS server: a context here would wait */
  uint32_t nonce;
  /* check_devices()'s findings, judged per backend by check_backend_devices() */
  bool cuda_checked;
  size_t n_daemon_devices, matched, no_vmm, no_memops;
  char lacking_vmm[128], lacking_memops[128];
};

static const char *const status_names[] = { "ok", "FAIL", "n-a" };

/* "default" for 0, else the library's name of it. */
static const char *backend_label(int backend)
{
  const char *name = gpushm_backend_name(backend);
  return backend == GPUSHM_BACKEND_DEFAULT ? "default" : name ? name : "unknown";
}

static bool affects(int what, int backend)
{
  return what == backend || what == AFFECTS_ALL ||
         (what == AFFECTS_CUDA && backend != GPUSHM_BACKEND_HOST);
}

/* One line: scope/check, ok|FAIL|n-a, why.  A FAIL decides against every backend that
 * `what` covers (AFFECTS_NONE: it informs, it does not decide). */
static void report(struct doctor *d, int what, const char *scope, const char *check,
                   enum status st, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void report(struct doctor *d, int what, const char *scope, const char *check,
                   enum status st, const char *fmt, ...)
{
  char name[48], detail[1024];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  snprintf(name, sizeof name, "%s/%s", scope, check);
  /* The detail carries the daemon's words, device names, paths: escaped like any output. */
  printf("%-24s %-6s %s\n", name, status_names[st], text(detail, 0));
  if (st != ST_FAIL)
    return;
  for (int b = 1; b < N_BACKENDS; b++) {
    if (affects(what, b) && !d->failed[b]) {
      d->failed[b] = true;
      snprintf(d->first_failure[b], sizeof d->first_failure[b], "%s", name);
    }
  }
}

static bool offers(const struct doctor *d, int backend)
{
  return d->offered & (1u << backend);
}

static const char *ns_text(uint64_t ino, char *buf, size_t len)
{
  snprintf(buf, len, "pid:[%llu]%s", (unsigned long long)ino,
           ino == INIT_PID_NAMESPACE ? " (the host's)" : "");
  return buf;
}

static uint64_t ns_of(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* ---- the daemon ------------------------------------------------------------------ */

static int check_connect(struct doctor *d, const char *socket, uint32_t requested)
{
  const char *path = socket && *socket ? socket : getenv("GPUSHM_SOCKET");
  gpushm_backend_t def;
  char list[96] = "", line[600];
  uint32_t pid, uid;
  int r;

  if (!path || !*path)
    path = GPUSHM_DEFAULT_SOCKET;
  printf("gpushmctl doctor: this process is uid %u, pid %d; gpushmd socket %s\n",
         (unsigned)geteuid(), (int)getpid(), text(path, 0));
  printf("%-24s %-6s %s\n", "CHECK", "RESULT", "DETAIL");
  if ((r = gpushm_connect(socket, "gpushmctl-doctor", &d->conn)) < 0) {
    report(d, AFFECTS_ALL, "daemon", "connect", ST_FAIL, "%s",
           ctl_error_text(r, gpushm_last_error_message(), line, sizeof line));
    d->judged = requested ? (gpushm_backend_t)requested : GPUSHM_BACKEND_DEFAULT;
    d->judged_why = requested ? "asked for" : "gpushmd's default";
    return r;
  }
  report(d, AFFECTS_NONE, "daemon", "connect", ST_OK, "gpushmd %s, protocol %u",
         gpushm_daemon_version(d->conn), gpushm_protocol_version(d->conn));

  pid = gpushm_daemon_pid(d->conn);
  uid = gpushm_daemon_uid(d->conn);
  if (pid)
    report(d, AFFECTS_NONE, "daemon", "identity", ST_OK, "gpushmd runs as uid %u%s, pid %u here",
           uid, uid == 0 ? " (root)" : "", pid);
  else
    report(d, AFFECTS_NONE, "daemon", "identity", ST_OK, "gpushmd runs as uid %u%s; its pid "
           "reads 0 here (SO_PEERCRED): it is in a PID namespace this process cannot see",
           uid, uid == 0 ? " (root)" : "");

  d->offered = gpushm_daemon_backends(d->conn);
  for (int b = 1; b < N_BACKENDS; b++)
    if (offers(d, b))
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? ", " : "",
               backend_label(b));
  if (d->offered & (1u << GPUSHM_BACKEND_CUDA_FABRIC))
    snprintf(list + strlen(list), sizeof list - strlen(list), "%scuda-fabric", *list ? ", " : "");
  if (d->offered & EVENTS_BIT)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%sevents", *list ? ", " : "");
  def = gpushm_daemon_default_backend(d->conn);
  if ((unsigned)def >= N_BACKENDS) {
    /* a backend newer than this gpushmctl: judge what it knows */
    report(d, AFFECTS_NONE, "daemon", "backends", ST_OK, "offered: %s; default: backend %d, "
           "unknown to this gpushmctl", *list ? list : "none", (int)def);
    def = 0;
  } else {
    report(d, AFFECTS_NONE, "daemon", "backends", ST_OK, "offered: %s; default: %s",
           *list ? list : "none", def ? backend_label(def) : "host (gpushmd does not say)");
  }
  d->judged = requested ? (gpushm_backend_t)requested : def ? def : GPUSHM_BACKEND_HOST;
  d->judged_why = requested ? "asked for" : "gpushmd's default";
  return 0;
}

/* ---- this process ---------------------------------------------------------------- */

static void check_pid_namespace(struct doctor *d)
{
  uint64_t mine = ns_of("/proc/self/ns/pid");
  uint64_t daemon = gpushm_daemon_pid_namespace(d->conn);
  uint32_t pid = gpushm_daemon_pid(d->conn);
  char a[48], b[48];

  /* A daemon that does not say: its /proc entry tells, where this process may look. */
  if (!daemon && pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/ns/pid", pid);
    daemon = ns_of(path);
  }
  if (mine && daemon)
    d->ns = mine == daemon ? NS_SAME
            : mine == INIT_PID_NAMESPACE || daemon == INIT_PID_NAMESPACE ? NS_HOST_INVOLVED
                                                                       : NS_SIBLINGS;
  else if (mine == INIT_PID_NAMESPACE || daemon == INIT_PID_NAMESPACE)
    d->ns = NS_HOST_INVOLVED;
  else
    d->ns = pid == 0 ? NS_HIDDEN : NS_UNKNOWN;

  switch (d->ns) {
  case NS_SAME:
    report(d, AFFECTS_NONE, "process", "pid-namespace", ST_OK, "the same as gpushmd's: %s",
           ns_text(mine, a, sizeof a));
    break;
  case NS_HOST_INVOLVED:
  case NS_SIBLINGS:
    report(d, AFFECTS_NONE, "process", "pid-namespace", ST_OK, "%s here, %s for gpushmd "
           "(fds, and so host and cuda-fd buffers, cross PID namespaces)",
           mine ? ns_text(mine, a, sizeof a) : "unknown", daemon ? ns_text(daemon, b, sizeof b)
                                                                 : "unknown");
    break;
  case NS_HIDDEN:
    report(d, AFFECTS_NONE, "process", "pid-namespace", ST_OK, "%s here; gpushmd's is another, "
           "which it does not say", ns_text(mine, a, sizeof a));
    break;
  case NS_UNKNOWN:
    report(d, AFFECTS_NONE, "process", "pid-namespace", ST_NA, "cannot tell (no /proc here, or "
           "gpushmd does not say)");
    break;
  }
}

/* The devices gpushmd uses (from its Hello) against the ones this process sees, by
 * UUID: what both device backends need. */
static void check_devices(struct doctor *d)
{
  size_t n = gpushm_daemon_device_count(d->conn), matched = 0, no_vmm = 0, no_memops = 0;
  bool local_mig = false;
  char u[64], scope_check[16], lacking[128] = "", no_fence[128] = "";
  int r, version;

  d->trial_device = -1;
  if (!n && !offers(d, GPUSHM_BACKEND_CUDA_IPC) && !offers(d, GPUSHM_BACKEND_CUDA_FD) &&
      d->judged == GPUSHM_BACKEND_HOST) {
    report(d, AFFECTS_NONE, "process", "cuda", ST_NA, "gpushmd uses no GPU");
    return;
  }
  if ((r = gpushm_local_devices(&d->local)) < 0) {
    report(d, AFFECTS_CUDA, "process", "cuda", ST_FAIL, "no CUDA here: %s",
           gpushm_last_error_message());
  } else {
    version = gpushm_local_device_list_driver_version(d->local);
    report(d, AFFECTS_NONE, "process", "cuda", ST_OK, "driver for CUDA %d.%d, %zu GPU(s) visible "
           "here", version / 1000, version % 1000 / 10, gpushm_local_device_list_count(d->local));
    for (size_t j = 0; j < gpushm_local_device_list_count(d->local); j++)
      local_mig |= (gpushm_local_device_flags(gpushm_local_device_list_get(d->local, j)) &
                    GPUSHM_DEVICE_MIG) != 0;
  }

  for (size_t i = 0; i < n; i++) {
    const gpushm_device_stats_t *dev = gpushm_daemon_device(d->conn, i);
    const gpushm_local_device_t *here = NULL;
    const char *name = gpushm_device_stats_name(dev);
    uint8_t uuid[16], lu[16];
    bool mig = ctl_is_mig(name);
    uint32_t flags;

    snprintf(scope_check, sizeof scope_check, "%d", gpushm_device_stats_ordinal(dev));
    if (gpushm_device_stats_uuid(dev, uuid) < 0) {
      report(d, AFFECTS_NONE, "device", scope_check, ST_FAIL, "%s: gpushmd sent no UUID", name);
      continue;
    }
    for (size_t j = 0; d->local && j < gpushm_local_device_list_count(d->local); j++) {
      const gpushm_local_device_t *l = gpushm_local_device_list_get(d->local, j);
      if (gpushm_local_device_uuid(l, lu) == 0 && memcmp(lu, uuid, 16) == 0)
        here = l;
    }
    ctl_uuid_text(uuid, mig, u, sizeof u);
    if (!d->local) {
      report(d, AFFECTS_NONE, "device", scope_check, ST_NA, "%s %s: no CUDA here to look", u, name);
      continue;
    }
    if (!here) {
      report(d, AFFECTS_NONE, "device", scope_check, ST_FAIL, "%s %s is not visible to this "
             "process (CUDA_VISIBLE_DEVICES, or a container without its device node)%s", u, name,
             local_mig ? "; this process sees MIG instances, and memory is shared only within "
                         "one GPU instance" : "");
      continue;
    }
    matched++;
    if (d->trial_device < 0)
      d->trial_device = gpushm_device_stats_ordinal(dev);
    flags = gpushm_local_device_flags(here);
    if ((flags & (GPUSHM_DEVICE_VMM | GPUSHM_DEVICE_POSIX_FD)) !=
        (GPUSHM_DEVICE_VMM | GPUSHM_DEVICE_POSIX_FD) && no_vmm++ < 4)
      snprintf(lacking + strlen(lacking), sizeof lacking - strlen(lacking), "%s%s",
               *lacking ? ", " : "", scope_check);
    if (!(flags & GPUSHM_DEVICE_STREAM_MEMOPS64) && no_memops++ < 4)
      snprintf(no_fence + strlen(no_fence), sizeof no_fence - strlen(no_fence), "%s%s",
               *no_fence ? ", " : "", scope_check);
    report(d, AFFECTS_NONE, "device", scope_check, ST_OK, "%s %s: ordinal %d here; VMM %s, "
           "POSIX-fd handles %s, 64-bit stream memops %s%s%s", u, name,
           gpushm_local_device_ordinal(here), flags & GPUSHM_DEVICE_VMM ? "yes" : "no",
           flags & GPUSHM_DEVICE_POSIX_FD ? "yes" : "no",
           flags & GPUSHM_DEVICE_STREAM_MEMOPS64 ? "yes" : "no",
           flags & GPUSHM_DEVICE_MIG ? "; a MIG instance: shared only within it" : "",
           flags & GPUSHM_DEVICE_MPS ? "; contexts here run through MPS" : "");
  }

  d->cuda_checked = true;
  d->n_daemon_devices = n;
  d->matched = matched;
  d->no_vmm = no_vmm;
  d->no_memops = no_memops;
  snprintf(d->lacking_vmm, sizeof d->lacking_vmm, "%s", lacking);
  snprintf(d->lacking_memops, sizeof d->lacking_memops, "%s", no_fence);
}

/* An MPS server of another uid makes a new context here wait until that server's
 * clients are done (MPS runs one uid's server at a time; measured: they hang). */
static bool find_mps_server(uint32_t *pid_out, uint32_t *uid_out, bool *other_uid)
{
  DIR *proc = opendir("/proc");
  struct dirent *e;
  bool found = false;

  *other_uid = false;
  if (!proc)
    return false;
  while ((e = readdir(proc))) {
    char path[300], argv0[256] = "", line[256];
    const char *base;
    unsigned long uid = 0;
    bool have_uid = false;
    FILE *f;

    if (!isdigit((unsigned char)e->d_name[0]))
      continue;
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    if (!(f = fopen(path, "r")))
      continue;
    /* comm is cut to 15 bytes, where the control daemon and the server look alike */
    if (!fgets(argv0, sizeof argv0, f))
      argv0[0] = '\0';
    fclose(f);
    base = strrchr(argv0, '/') ? strrchr(argv0, '/') + 1 : argv0;
    if (strcmp(base, "nvidia-cuda-mps-server") != 0)
      continue;
    snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
    if (!(f = fopen(path, "r")))
      continue;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "Uid: %*u %lu", &uid) == 1) {
        have_uid = true;
        break;
      }
    fclose(f);
    if (!have_uid)
      continue;
    if (!found || uid != geteuid()) {
      *pid_out = (uint32_t)strtoul(e->d_name, NULL, 10);
      *uid_out = (uint32_t)uid;
    }
    found = true;
    *other_uid |= uid != geteuid();
  }
  closedir(proc);
  return found;
}

static void check_mps(struct doctor *d)
{
  const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
  char control[4096];
  struct stat st;
  uint32_t pid = 0, uid = 0;
  bool other = false;

  if (!dir || !*dir)
    dir = "/tmp/nvidia-mps";
  snprintf(control, sizeof control, "%s/control", dir);
  if (stat(control, &st) < 0 || !S_ISSOCK(st.st_mode)) {
    report(d, AFFECTS_NONE, "mps", "control", ST_NA, "no MPS control daemon for this process "
           "(no socket %s)", control);
    return;
  }
  if (access(control, W_OK) < 0) {
    report(d, AFFECTS_NONE, "mps", "control", ST_NA, "%s exists but this process may not "
           "connect to it: its CUDA runs without MPS", control);
    return;
  }
  report(d, AFFECTS_NONE, "mps", "control", ST_OK, "MPS control daemon at %s: CUDA contexts of "
         "this process run through MPS", control);
  if (!find_mps_server(&pid, &uid, &other)) {
    report(d, AFFECTS_NONE, "mps", "server", ST_NA, "MPS active; servers run one uid at a time, "
           "and none is visible from here: while another uid's server runs, a CUDA context of "
           "this process waits");
  } else if (other) {
    d->mps_blocks = true;
    report(d, AFFECTS_CUDA, "mps", "server", ST_FAIL, "MPS server pid %u runs as uid %u: MPS runs "
           "one uid's server at a time, so a CUDA context of this process (uid %u) waits until "
           "that server's clients are done", pid, uid, (unsigned)geteuid());
  } else {
    report(d, AFFECTS_NONE, "mps", "server", ST_OK, "MPS server pid %u runs as uid %u, this "
           "process's: its contexts join it", pid, uid);
  }
}

/* ---- backends -------------------------------------------------------------------- */

static void trial_name(const struct doctor *d, const char *suffix, char *buf, size_t len)
{
  snprintf(buf, len, "gpushmctl-doctor.%d.%08x%s", (int)getpid(), d->nonce, suffix);
}

/* For a backend the daemon does not offer, its reason: a create it refuses before it
 * allocates anything. */
static void check_offered(struct doctor *d, int b)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf;
  char name[96];
  int r;

  if (offers(d, b)) {
    report(d, b, backend_label(b), "offered", ST_OK, "gpushmd offers it%s",
           b == (int)gpushm_daemon_default_backend(d->conn) ? " (its default)" : "");
    return;
  }
  trial_name(d, ".probe", name, sizeof name);
  gpushm_create_opts_init(&opts);
  opts.backend = (uint32_t)b;
  opts.device = d->trial_device >= 0 ? d->trial_device : 0;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  if ((r = gpushm_buffer_create(d->conn, name, TRIAL_SIZE, &opts, &buf)) == 0) {
    /* Offered since Hello: say so, and leave nothing behind. */
    gpushm_unlink(d->conn, name);
    gpushm_buffer_close(buf);
    report(d, b, backend_label(b), "offered", ST_OK, "gpushmd offers it now");
    d->offered |= 1u << b;
    return;
  }
  report(d, b, backend_label(b), "offered", ST_FAIL, "gpushmd does not offer it: %s",
         gpushm_last_error_message());
}

/* What check_devices() found, for one device backend. */
static void check_backend_devices(struct doctor *d, int b)
{
  if (!d->cuda_checked)
    return;
  if (!d->local)
    report(d, b, backend_label(b), "devices", ST_NA, "no CUDA in this process (see process/cuda)");
  else if (d->n_daemon_devices == 0)
    report(d, b, backend_label(b), "devices", ST_FAIL, "gpushmd lists no GPU");
  else if (d->matched == 0)
    report(d, b, backend_label(b), "devices", ST_FAIL, "none of gpushmd's %zu GPU(s) is visible "
           "to this process", d->n_daemon_devices);
  else
    report(d, b, backend_label(b), "devices", ST_OK, "%zu of gpushmd's %zu GPU(s) visible here "
           "(matched by UUID)", d->matched, d->n_daemon_devices);
  if (b != GPUSHM_BACKEND_CUDA_FD || d->matched == 0)
    return;
  if (d->no_vmm)
    report(d, b, "cuda-fd", "vmm", ST_FAIL, "GPU %s lack%s virtual memory management or "
           "POSIX-fd handles, which importing a cuda-fd buffer needs", d->lacking_vmm,
           d->no_vmm == 1 ? "s" : "");
  else
    report(d, b, "cuda-fd", "vmm", ST_OK, "virtual memory management and POSIX-fd handles on "
           "every GPU shared with gpushmd");
}

static void check_ipc_namespace(struct doctor *d)
{
  const char *why = "legacy CUDA IPC handles fail between sibling PID namespaces "
                    "(CUDA_ERROR_INVALID_CONTEXT), as between two containers";

  switch (d->ns) {
  case NS_SAME:
    report(d, GPUSHM_BACKEND_CUDA_IPC, "cuda-ipc", "pid-namespace", ST_OK, "gpushmd's PID "
           "namespace: legacy CUDA IPC handles open");
    break;
  case NS_HOST_INVOLVED:
    report(d, GPUSHM_BACKEND_CUDA_IPC, "cuda-ipc", "pid-namespace", ST_OK, "another PID namespace "
           "than gpushmd's, but one of the two is the host's: legacy CUDA IPC handles open "
           "(measured)");
    break;
  case NS_SIBLINGS:
    report(d, GPUSHM_BACKEND_CUDA_IPC, "cuda-ipc", "pid-namespace", ST_FAIL, "another PID "
           "namespace than gpushmd's, and neither is the host's: %s; use cuda-fd", why);
    break;
  case NS_HIDDEN:
    report(d, GPUSHM_BACKEND_CUDA_IPC, "cuda-ipc", "pid-namespace", ST_NA, "gpushmd is in a PID "
           "namespace this process cannot see: unless it is the host's, %s; use cuda-fd", why);
    break;
  case NS_UNKNOWN:
    report(d, GPUSHM_BACKEND_CUDA_IPC, "cuda-ipc", "pid-namespace", ST_NA, "cannot tell whether "
           "this process shares gpushmd's PID namespace");
    break;
  }
}

/* Fences (cuStreamWriteValue64/cuStreamWaitValue64 on shared memory) are how device
 * buffers synchronise across uids, where IPC events cannot. */
static void check_fences(struct doctor *d)
{
  if (!d->cuda_checked || d->matched == 0)
    return;
  if (d->no_memops)
    report(d, AFFECTS_NONE, "sync", "fences", ST_FAIL, "GPU %s lack%s 64-bit stream memory "
           "operations (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS), which fences need",
           d->lacking_memops, d->no_memops == 1 ? "s" : "");
  else
    report(d, AFFECTS_NONE, "sync", "fences", ST_OK, "64-bit stream memory operations "
           "(cuStreamWaitValue64) on every GPU shared with gpushmd");
}

/* Legacy IPC events (named events; cuda-ipc sync buffers of libraries before 0.7.1) are
 * /dev/shm files of mode 0600 owned by gpushmd's uid: others are refused (measured:
 * CUDA_ERROR_MAP_FAILED). */
static void check_events(struct doctor *d)
{
  uint32_t uid = gpushm_daemon_uid(d->conn);

  if (!(d->offered & EVENTS_BIT))
    report(d, AFFECTS_NONE, "events", "uid", ST_NA, "gpushmd makes no events");
  else if (geteuid() == uid || geteuid() == 0)
    report(d, AFFECTS_NONE, "events", "uid", ST_OK, "uid %u may open gpushmd's IPC events "
           "(named events; cuda-ipc sync buffers of libraries before 0.7.1): they open for "
           "its uid (%u) or root", (unsigned)geteuid(), uid);
  else
    report(d, AFFECTS_NONE, "events", "uid", ST_FAIL, "uid %u cannot open gpushmd's IPC events "
           "(named events; cuda-ipc sync buffers of libraries before 0.7.1): they are "
           "/dev/shm files of mode 0600 of its uid (%u), so only it and root open them; run "
           "a gpushmd as this uid for them", (unsigned)geteuid(), uid);
}

/* cuda-fabric is judged apart from the verdict: it is for other nodes of an NVLink
 * domain, and whether gpushmd may make fabric memory (it needs an IMEX channel) only a
 * create tells, so one is tried (session lifetime, unlinked at once).  This process's
 * own channel is what importing a handle on a node needs: said, not judged. */
#define FABRIC_BIT (1u << GPUSHM_BACKEND_CUDA_FABRIC)
static void check_fabric(struct doctor *d)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf;
  char name[96], channel[300] = "";
  struct dirent *e;
  DIR *dir;

  if (!(d->offered & FABRIC_BIT)) {
    report(d, AFFECTS_NONE, "cuda-fabric", "offered", ST_NA, "gpushmd does not offer it (no "
           "GPU of its supports fabric handles, or it has no CUDA)");
  } else {
    trial_name(d, ".fabric", name, sizeof name);
    gpushm_create_opts_init(&opts);
    opts.backend = GPUSHM_BACKEND_CUDA_FABRIC;
    opts.device = d->trial_device >= 0 ? d->trial_device : 0;
    opts.lifetime = GPUSHM_LIFETIME_SESSION;
    if (d->mps_blocks) {
      report(d, AFFECTS_NONE, "cuda-fabric", "imex", ST_NA, "not tried: a CUDA context here "
             "would wait (see mps/server)");
    } else if (gpushm_buffer_create(d->conn, name, TRIAL_SIZE, &opts, &buf) == 0) {
      gpushm_unlink(d->conn, name);
      gpushm_buffer_close(buf);
      report(d, AFFECTS_NONE, "cuda-fabric", "imex", ST_OK, "gpushmd made fabric memory on "
             "device %d (it has an IMEX channel)", opts.device);
    } else {
      report(d, AFFECTS_NONE, "cuda-fabric", "imex", ST_FAIL, "%s",
             gpushm_last_error_message());
    }
  }
  if ((dir = opendir(GPUSHM_IMEX_CHANNELS_DIR))) {
    while ((e = readdir(dir)))
      if (strncmp(e->d_name, "channel", 7) == 0) {
        char path[300];
        snprintf(path, sizeof path, "%s/%s", GPUSHM_IMEX_CHANNELS_DIR, e->d_name);
        if (access(path, R_OK | W_OK) == 0) {
          snprintf(channel, sizeof channel, "%s", path);
          break;
        }
      }
    closedir(dir);
  }
  if (*channel)
    report(d, AFFECTS_NONE, "cuda-fabric", "channel", ST_OK, "this process may use IMEX "
           "channel %s, which importing a fabric handle needs", channel);
  else
    report(d, AFFECTS_NONE, "cuda-fabric", "channel", ST_NA, "no IMEX channel this process may "
           "use (%s/channelN): it could not import a fabric handle", GPUSHM_IMEX_CHANNELS_DIR);
}

/* The path end to end: create (which maps it here), open read-only (a second mapping
 * and daemon reference), close both, unlink.  Host memory is also written and read
 * back; device memory is not touched (that would need the caller's CUDA). */
static void trial(struct doctor *d, gpushm_backend_t b)
{
  gpushm_create_opts_t opts;
  gpushm_buffer_t *rw = NULL, *ro = NULL;
  const char *step;
  char name[96], why[600], line[700];
  int r;

  if (!offers(d, b)) {
    report(d, b, backend_label(b), "trial", ST_NA, "not tried: gpushmd does not offer %s",
           backend_label(b));
    return;
  }
  if (b != GPUSHM_BACKEND_HOST && d->mps_blocks) {
    report(d, b, backend_label(b), "trial", ST_NA, "not tried: a CUDA context here would wait "
           "for the other uid's MPS server (see mps/server)");
    return;
  }
  trial_name(d, "", name, sizeof name);
  gpushm_create_opts_init(&opts);
  opts.backend = b;
  opts.device = d->trial_device >= 0 ? d->trial_device : 0;
  opts.mode = 0600;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  step = "create";
  if ((r = gpushm_buffer_create(d->conn, name, TRIAL_SIZE, &opts, &rw)) < 0)
    goto failed;
  if (b == GPUSHM_BACKEND_HOST)
    for (unsigned i = 0; i < TRIAL_SIZE; i++)
      ((unsigned char *)gpushm_buffer_ptr(rw))[i] = (unsigned char)(i * 7 + d->nonce);
  step = "open read-only";
  if ((r = gpushm_buffer_open(d->conn, name, GPUSHM_OPEN_READONLY, &ro)) < 0)
    goto failed;
  if (b == GPUSHM_BACKEND_HOST)
    for (unsigned i = 0; i < TRIAL_SIZE; i++)
      if (((const unsigned char *)gpushm_buffer_ptr(ro))[i] != (unsigned char)(i * 7 + d->nonce)) {
        step = "read back";
        r = GPUSHM_E_IO;
        snprintf(why, sizeof why, "byte %u differs between the two mappings", i);
        goto failed_why;
      }
  step = "unlink";
  if ((r = gpushm_unlink(d->conn, name)) < 0)
    goto failed;
  step = "close";
  r = gpushm_buffer_close(ro);
  ro = NULL;
  if (r < 0)
    goto failed;
  r = gpushm_buffer_close(rw);
  rw = NULL;
  if (r < 0)
    goto failed;
  report(d, b, backend_label(b), "trial", ST_OK, "created %s (%u bytes, mode 0600, session "
         "lifetime), opened it read-only, unlinked and closed it: %s", name, TRIAL_SIZE,
         b == GPUSHM_BACKEND_HOST ? "written and read back"
                                  : "device memory mapped in this process twice");
  return;

failed:
  snprintf(why, sizeof why, "%s", gpushm_last_error_message());
failed_why:
  if (ro)
    gpushm_buffer_close(ro);
  if (rw) {
    gpushm_unlink(d->conn, name);
    gpushm_buffer_close(rw);
  }
  report(d, b, backend_label(b), "trial", ST_FAIL, "%s %s: %s", step, name,
         ctl_error_text(r, why, line, sizeof line));
}

/* The value of the stats row NAME whose labels include memory=MEMORY (and device=DEVICE
 * when given); false where gpushmd sends none (no such limit, or an older gpushmd). */
static bool stats_row(const gpushm_stats_t *st, const char *name, const char *memory,
                      const char *device, uint64_t *value)
{
  for (size_t i = 0; i < gpushm_stats_metric_count(st); i++) {
    const gpushm_metric_t *m = gpushm_stats_metric(st, i);
    bool memory_ok = !memory, device_ok = !device;
    if (strcmp(gpushm_metric_name(m), name) != 0)
      continue;
    for (size_t j = 0; j < gpushm_metric_label_count(m); j++) {
      const gpushm_metric_label_t *l = gpushm_metric_label(m, j);
      if (memory && strcmp(gpushm_metric_label_name(l), "memory") == 0)
        memory_ok = strcmp(gpushm_metric_label_value(l), memory) == 0;
      if (device && strcmp(gpushm_metric_label_name(l), "device") == 0)
        device_ok = strcmp(gpushm_metric_label_value(l), device) == 0;
    }
    if (memory_ok && device_ok) {
      *value = gpushm_metric_value(m);
      return true;
    }
  }
  return false;
}

/* One quota row: what this uid may hold, what its linked buffers take of it. */
static void report_quota(struct doctor *d, int what, const char *check, const char *of,
                         bool limited, uint64_t limit, uint64_t used, const char *setting)
{
  if (!limited) {
    report(d, AFFECTS_NONE, "quota", check, ST_OK, "no per-uid limit on %s (%s 0); this uid's "
           "buffers hold %llu MiB of it", of, setting, (unsigned long long)(used >> 20));
    return;
  }
  /* A full quota fails every create of the memory it covers: that decides. */
  report(d, used >= limit ? what : AFFECTS_NONE, "quota", check, used >= limit ? ST_FAIL : ST_OK,
         "this uid may hold %llu MiB of %s (%s); its buffers hold %llu MiB%s",
         (unsigned long long)(limit >> 20), of, setting, (unsigned long long)(used >> 20),
         used >= limit ? ": unlink some, or ask the operator to raise the limit" : "");
}

/* The per-uid memory limits gpushmd enforces (docs/security.md), against what this uid's
 * linked buffers hold: a create refused for quota reads as out-of-memory otherwise. */
static void check_quota(struct doctor *d)
{
  gpushm_stats_t *st = NULL;
  gpushm_buffer_list_t *list = NULL;
  uint64_t host_used = 0, all_used = 0, device_used[GPUSHM_LIMIT_DEVICES_LISTED] = { 0 };
  uint64_t limit = 0;
  bool limited;
  const uid_t me = getuid();

  if (gpushm_stats(d->conn, &st) < 0 || gpushm_list(d->conn, 0, &list) < 0) {
    report(d, AFFECTS_NONE, "quota", "limits", ST_NA, "gpushmd did not say: %s",
           gpushm_last_error_message());
    gpushm_stats_free(st);
    return;
  }
  for (size_t i = 0; i < gpushm_buffer_list_count(list); i++) {
    const gpushm_buffer_info_t *b = gpushm_buffer_list_get(list, i);
    int32_t dev = gpushm_buffer_info_device(b);
    if (gpushm_buffer_info_owner_uid(b) != me)
      continue;
    all_used += gpushm_buffer_info_allocated(b);
    if (gpushm_buffer_info_backend(b) == GPUSHM_BACKEND_HOST)
      host_used += gpushm_buffer_info_allocated(b);
    else if (dev >= 0 && dev < (int32_t)GPUSHM_LIMIT_DEVICES_LISTED)
      device_used[dev] += gpushm_buffer_info_allocated(b);
  }
  if (stats_row(st, "gpushm_uid_limit_bytes", "any", NULL, &limit))
    report_quota(d, AFFECTS_ALL, "memory", "memory of any kind", true, limit, all_used,
                 "max-bytes-per-uid");
  limited = stats_row(st, "gpushm_uid_limit_bytes", "host", NULL, &limit);
  report_quota(d, GPUSHM_BACKEND_HOST, "host", "host memory", limited, limit, host_used,
               "max-host-bytes-per-uid");
  for (size_t i = 0; i < gpushm_daemon_device_count(d->conn); i++) {
    int ordinal = gpushm_device_stats_ordinal(gpushm_daemon_device(d->conn, i));
    char label[16], check[24], of[40];
    if (ordinal < 0 || ordinal >= (int)GPUSHM_LIMIT_DEVICES_LISTED)
      continue;
    snprintf(label, sizeof label, "%d", ordinal);
    snprintf(check, sizeof check, "device-%d", ordinal);
    snprintf(of, sizeof of, "device %d's memory", ordinal);
    limited = stats_row(st, "gpushm_uid_limit_bytes", "device", label, &limit);
    report_quota(d, AFFECTS_CUDA, check, of, limited, limit, device_used[ordinal],
                 "max-device-bytes-per-uid");
  }
  gpushm_buffer_list_free(list);
  gpushm_stats_free(st);
}

/* What graphics programs here can import (docs/graphics.md); informs, never decides. */
static void check_graphics(struct doctor *d)
{
  static const enum status of[] = { [GRAPHICS_OK] = ST_OK, [GRAPHICS_FAIL] = ST_FAIL,
                                    [GRAPHICS_NA] = ST_NA };
  uint8_t uuids[GPUSHM_LIMIT_DEVICES_LISTED][16];
  struct graphics_finding vulkan, gl;
  size_t n = 0;

  for (size_t i = 0; d->local && i < gpushm_local_device_list_count(d->local) &&
                     n < GPUSHM_LIMIT_DEVICES_LISTED; i++)
    if (gpushm_local_device_uuid(gpushm_local_device_list_get(d->local, i), uuids[n]) == 0)
      n++;
  doctor_graphics((const uint8_t(*)[16])uuids, n, &vulkan, &gl);
  report(d, AFFECTS_NONE, "graphics", "vulkan", of[vulkan.status], "%s", vulkan.detail);
  report(d, AFFECTS_NONE, "graphics", "gl", of[gl.status], "%s", gl.detail);
}

static int verdict(struct doctor *d)
{
  int b = d->judged;

  printf("summary:");
  for (int i = 1; i < N_BACKENDS; i++) {
    printf("%s %s %s", i > 1 ? "," : "", backend_label(i), d->failed[i] ? "FAIL" : "ok");
    if (d->failed[i])
      printf(" (%s)", d->first_failure[i]);
    else if (i != b)
      printf(" (not tried)");
  }
  putchar('\n');
  if (b <= 0 || b >= N_BACKENDS) { /* gpushmd never answered */
    printf("verdict: no backend works for this process: see %s\n", d->first_failure[1]);
    return EXIT_FAILED;
  }
  if (d->failed[b]) {
    printf("verdict: %s (%s) does NOT work for this process: see %s\n", backend_label(b),
           d->judged_why, d->first_failure[b]);
    return EXIT_FAILED;
  }
  printf("verdict: %s (%s) works for this process\n", backend_label(b), d->judged_why);
  return 0;
}

int ctl_doctor(const char *socket, uint32_t backend)
{
  struct doctor d = { .trial_device = -1 };
  int rc;

  if (getrandom(&d.nonce, sizeof d.nonce, GRND_NONBLOCK) != sizeof d.nonce)
    d.nonce = (uint32_t)time(NULL) ^ (uint32_t)getpid() << 16;
  if (check_connect(&d, socket, backend) < 0)
    return verdict(&d);
  check_pid_namespace(&d);
  check_devices(&d);
  check_mps(&d);
  for (int b = 1; b < N_BACKENDS; b++) {
    check_offered(&d, b);
    if (b == GPUSHM_BACKEND_CUDA_IPC)
      check_ipc_namespace(&d);
    if (b != GPUSHM_BACKEND_HOST)
      check_backend_devices(&d, b);
    if (b == (int)d.judged)
      trial(&d, (gpushm_backend_t)b);
  }
  check_fabric(&d);
  check_events(&d);
  check_fences(&d);
  check_quota(&d);
  check_graphics(&d);
  rc = verdict(&d);
  gpushm_local_device_list_free(d.local);
  gpushm_disconnect(d.conn);
  return rc;
}
