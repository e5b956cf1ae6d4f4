/* SPDX-License-Identifier: MIT */
/* gpushmd: owns shared GPU/host buffers on behalf of cooperating processes.  The
 * composition root: settings, then the registry with the backends this build offers,
 * CUDA (in the serving process), the fd store, the server; signals; the loop. */
#include "config.h"
#include "backends/backend.h"
#include "backends/backend_cuda.h"
#include "backends/event.h"
#include "protocol.h"
#include "offer.h"
#include "options.h"
#include "protocol.h"
#include "registry/registry.h"
#include "server/persist.h"
#include "server/server.h"
#include "util/log.h"
#include "util/sd.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Flags are kept so that a reload applies them over the re-read file again: flags win
 * over the file at start-up and after every SIGHUP alike. */
struct given_flags {
  struct { const char *name, *value; } flag[64];
  size_t n;
  const char *config;
};

static int parse_args(int argc, char **argv, struct given_flags *given)
{
  const struct option *table = options_getopt();
  int opt, index;

  memset(given, 0, sizeof *given);
  while ((opt = getopt_long(argc, argv, "c:s:l:hV", table, &index)) != -1) {
    const char *name;
    switch (opt) {
    case 'c':
      given->config = optarg;
      continue;
    case 'h':
      options_usage(stdout);
      exit(0);
    case 'V':
      printf("gpushmd %s (protocol %u)\n", PACKAGE_VERSION, GPUSHM_PROTOCOL_VERSION);
      exit(0);
    case 0:
      name = table[index].name;
      break;
    default:
      if (!(name = options_short_name(opt))) {
        options_usage(stderr);
        return PROTO_E_INVAL;
      }
    }
    if (given->n == sizeof given->flag / sizeof given->flag[0]) {
      fprintf(stderr, "gpushmd: too many options\n");
      return PROTO_E_INVAL;
    }
    given->flag[given->n].name = name;
    given->flag[given->n++].value = optarg;
  }
  if (optind < argc) {
    fprintf(stderr, "gpushmd: unexpected argument '%s'\n", argv[optind]);
    return PROTO_E_INVAL;
  }
  return 0;
}

/* Defaults, then the config file, then the flags. */
static int load_settings(const struct given_flags *given, struct settings *out, char *err,
                         size_t errlen)
{
  char why[300];

  settings_init(out);
  if (config_load(out, given->config ? given->config : GPUSHMD_DEFAULT_CONFIG,
                  given->config != NULL, err, errlen) < 0)
    return PROTO_E_INVAL;
  for (size_t i = 0; i < given->n; i++) {
    if (option_apply(out, given->flag[i].name, given->flag[i].value, why, sizeof why) < 0) {
      snprintf(err, errlen, "--%s: %s", given->flag[i].name, why);
      return PROTO_E_INVAL;
    }
  }
  settings_resolve(out);
  return 0;
}

static void log_budget(const struct settings *s)
{
  if (s->limits.host_budget)
    log_info("host-memory budget %llu MiB (%s), at most %llu MiB per uid",
             (unsigned long long)(s->limits.host_budget >> 20), s->host_budget_why,
             (unsigned long long)(s->limits.max_host_bytes_per_uid >> 20));
  else
    log_warn("no host-memory budget: a large create can make the kernel's OOM killer stop "
             "gpushmd and lose every buffer");
}

/* The device-memory quota per uid from each GPU's size (after backend_cuda_init). */
static void resolve_device_quota(struct settings *s)
{
  uint64_t sizes[GPUSHM_LIMIT_DEVICES];
  struct cuda_device_info info;
  int n = backend_cuda_device_count();

  if (n > (int)GPUSHM_LIMIT_DEVICES)
    n = (int)GPUSHM_LIMIT_DEVICES;
  for (int i = 0; i < n; i++)
    sizes[i] = backend_cuda_device_info(i, &info) == 0 ? info.total_memory : 0;
  device_quota_resolve(s, sizes, n < 0 ? 0 : n);
  for (int i = 0; i < n; i++)
    log_info("device %d: at most %llu MiB of its %llu MiB per uid (%s)", i,
             (unsigned long long)(s->limits.max_device_bytes_per_uid[i] >> 20),
             (unsigned long long)(sizes[i] >> 20),
             !s->limits.max_device_bytes_per_uid[i] ? "no limit: max-device-bytes-per-uid 0"
             : s->device_quota_percent ? "max-device-bytes-per-uid, a share of it"
                                       : "max-device-bytes-per-uid");
}

/* A socket gpushmd bound itself: said once, since a hand-started daemon is where a
 * socket open to every user goes unnoticed. */
static void log_who_may_connect(const struct settings *s)
{
  const uint32_t m = s->cfg.socket_mode;

  if (m & 0006)
    /* a warning only where nobody chose it */
    log_msg(s->socket_mode_set ? LOG_LEVEL_INFO : LOG_LEVEL_WARN,
            "socket %s (mode %04o): every local user may connect%s", s->cfg.socket_path,
             (unsigned)m, s->cfg.has_socket_group ? ""
             : geteuid() == 0 ? "; create the group " GPUSHM_SOCKET_GROUP " (groupadd --system "
               GPUSHM_SOCKET_GROUP ") or pass --socket-group/--socket-mode to restrict it"
             : "; pass --socket-mode 0600 to keep it to this user");
  else if ((m & 0060) && s->cfg.has_socket_group)
    log_info("socket %s (mode %04o, group %s): root, uid %u and members of %s may connect",
             s->cfg.socket_path, (unsigned)m, s->socket_group, (unsigned)geteuid(),
             s->socket_group);
  else
    log_info("socket %s (mode %04o): root and uid %u may connect", s->cfg.socket_path,
             (unsigned)m, (unsigned)geteuid());
}

/* Every client and buffer costs fds; take what the hard limit allows. */
static void raise_fd_limit(void)
{
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* Signals whose default action would end the daemon: SIGTERM and SIGINT stop it
 * cleanly, SIGHUP reloads the settings file, SIGUSR1 logs a summary; the others are
 * logged and ignored, so that a stray kill never loses every buffer silently. */
static const int handled_signals[] = { SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM,
                                       SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGXFSZ };
#define N_SIGNALS (sizeof handled_signals / sizeof handled_signals[0])
static uv_signal_t signal_handles[N_SIGNALS];
static uv_timer_t fatal_timer;
static uv_timer_t watchdog_timer;
static struct given_flags given;
static struct server_config current_cfg; /* what the socket was bound with, and since */
/* EX_SOFTWARE: the service manager restarts a daemon that exits with it. */
static int exit_status;

/* What the daemon is made of (main() builds it; the signal handlers reach it here). */
static struct {
  struct registry *reg;
  struct persist persist;
  struct server *srv;
} d;

static void stop_daemon(struct server *srv)
{
  sdn_notify_stopping();
  server_shutdown(srv);
  if (!uv_is_closing((uv_handle_t *)&watchdog_timer))
    uv_close((uv_handle_t *)&watchdog_timer, NULL);
  /* With every handle closed the loop runs dry and main() cleans up. */
  for (size_t i = 0; i < N_SIGNALS; i++)
    if (!uv_is_closing((uv_handle_t *)&signal_handles[i]))
      uv_close((uv_handle_t *)&signal_handles[i], NULL);
  if (!uv_is_closing((uv_handle_t *)&fatal_timer))
    uv_close((uv_handle_t *)&fatal_timer, NULL);
}

/* Fed from the loop itself: a wedged loop stops the pings and systemd restarts us. */
static void on_watchdog(uv_timer_t *timer)
{
  char status[160];
  server_status_line(timer->data, status, sizeof status);
  sdn_notify_status(status);
  sdn_notify_watchdog();
}

/* A reload is all or nothing: a settings file with any error leaves every setting as
 * it was. */
static void reload(struct server *srv)
{
  struct settings next;
  char err[512];

  sdn_notify_reloading();
  if (load_settings(&given, &next, err, sizeof err) < 0) {
    log_error("reload failed, keeping the current settings: %s", err);
  } else {
    if (strcmp(next.cfg.socket_path, current_cfg.socket_path) != 0 ||
        next.cfg.socket_mode != current_cfg.socket_mode ||
        next.cfg.has_socket_group != current_cfg.has_socket_group ||
        next.cfg.socket_gid != current_cfg.socket_gid)
      log_warn("reload: socket settings take effect only when gpushmd restarts");
    server_reload(srv, &next.cfg);
    current_cfg = next.cfg;
    resolve_device_quota(&next);
    registry_set_limits(d.reg, &next.limits);
    log_set_level((enum log_level)next.log_level);
    log_info("reloaded settings from %s", given.config ? given.config : GPUSHMD_DEFAULT_CONFIG);
    log_budget(&next);
  }
  sdn_notify_ready("serving");
}

static void on_signal(uv_signal_t *handle, int signum)
{
  struct server *srv = handle->data;
  char status[160];

  switch (signum) {
  case SIGTERM:
  case SIGINT:
    log_info("signal %d (%s): shutting down", signum, strsignal(signum));
    stop_daemon(srv);
    break;
  case SIGHUP:
    reload(srv);
    break;
  case SIGUSR1:
    server_status_line(srv, status, sizeof status);
    log_info("status: %s", status);
    break;
  default:
    log_warn("ignoring signal %d (%s)", signum, strsignal(signum));
  }
}

static void on_fatal_timer(uv_timer_t *timer)
{
  stop_daemon(timer->data);
}

/* A sticky device error poisons the context for good: answer the request in hand,
 * then stop, so that the service manager starts a fresh daemon. */
static void on_fatal(void *ctx, const char *why)
{
  (void)ctx;
  if (exit_status)
    return;
  exit_status = 70;
  log_error("stopping: %s", why);
  uv_timer_start(&fatal_timer, on_fatal_timer, 0, 0);
}

/* gpushmd must never be a client of an MPS server.  MPS runs one server per uid at a
 * time: were the daemon (a root client that keeps its device contexts for its whole
 * life) inside one, clients of every other uid would queue behind it for ever.  The
 * CUDA driver joins MPS through the control pipe in CUDA_MPS_PIPE_DIRECTORY (default
 * /tmp/nvidia-mps); a directory below /dev/null can never exist, so nobody can plant
 * a control pipe there.  Set before any thread exists and before cuInit. */
#define OUTSIDE_MPS_PIPE_DIRECTORY "/dev/null/gpushmd-stays-outside-mps"

static void stay_outside_mps(void)
{
  setenv("CUDA_MPS_PIPE_DIRECTORY", OUTSIDE_MPS_PIPE_DIRECTORY, 1);
}

int main(int argc, char **argv)
{
  struct settings settings;
  struct sdn_passed passed;
  uv_loop_t loop;
  char err[512];
  uint64_t watchdog_usec;
  unsigned adopted;
  const char *why;

  stay_outside_mps();
  if (parse_args(argc, argv, &given) < 0)
    return 2;
  if (load_settings(&given, &settings, err, sizeof err) < 0) {
    fprintf(stderr, "gpushmd: %s\n", err);
    return 2;
  }
  log_set_level((enum log_level)settings.log_level);
  current_cfg = settings.cfg;
  if (sdn_claim_notify_socket(err, sizeof err) < 0)
    log_info("%s: ignored; no service manager keeps persistent buffers across restarts",
             err);
  if (!(d.reg = registry_new(&settings.limits))) {
    fprintf(stderr, "gpushmd: out of memory\n");
    return 1;
  }
  offer_backends(d.reg);

  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  /* Before anything opens an fd: what systemd passed is numbered from 3 on. */
  if (sdn_take_passed(&passed, err, sizeof err) < 0) {
    log_error("%s", err);
    registry_free(d.reg);
    return 1;
  }
  uv_loop_init(&loop);
  persist_init(&d.persist);
  if (!(d.srv = server_new(&loop, &settings.cfg, d.reg, &d.persist, err, sizeof err))) {
    log_error("%s", err);
    for (size_t i = 0; i < passed.n_stored; i++)
      close(passed.stored_fds[i]); /* still in systemd's store for the next try */
    sdn_passed_free(&passed);
    registry_free(d.reg);
    uv_loop_close(&loop);
    return 1;
  }
  /* Before the socket is bound: a stop asked for while CUDA initialises (hundreds of
   * ms on a GPU) waits for the loop and removes the socket, where the default action
   * would kill the daemon and leave it behind. */
  uv_timer_init(&loop, &fatal_timer);
  fatal_timer.data = d.srv;
  uv_timer_init(&loop, &watchdog_timer);
  watchdog_timer.data = d.srv;
  for (size_t i = 0; i < N_SIGNALS; i++) {
    uv_signal_init(&loop, &signal_handles[i]);
    signal_handles[i].data = d.srv;
    uv_signal_start(&signal_handles[i], on_signal, handled_signals[i]);
  }
  if (passed.socket_fd >= 0) {
    server_adopt_socket(d.srv, passed.socket_fd);
    log_info("serving on the socket from systemd");
  } else if (server_listen(d.srv, err, sizeof err) < 0) {
    log_error("%s", err);
    for (size_t i = 0; i < passed.n_stored; i++)
      close(passed.stored_fds[i]); /* still in systemd's store for the next try */
    sdn_passed_free(&passed);
    goto fail_early;
  } else {
    log_who_may_connect(&settings);
  }
  log_budget(&settings);
  /* CUDA does not survive fork() without exec(): initialise it in the process that
   * serves, never before any forking.  Before adoption, which imports cuda-fd buffers
   * again (a sticky error there stops the daemon through the fatal timer). */
  backend_cuda_set_fatal_hook(on_fatal, d.srv);
  backend_cuda_init();
  resolve_device_quota(&settings);
  registry_set_limits(d.reg, &settings.limits);
  registry_set_auto_backend(d.reg, backend_cuda_fd_usable(&why) ? PROTO_BACKEND_CUDA_FD
                                                                  : PROTO_BACKEND_HOST);
  if (settings.limits.default_backend == REG_DEFAULT_BACKEND_AUTO)
    log_info("default-backend auto: %s%s%s%s",
             registry_default_backend(d.reg, NULL) == PROTO_BACKEND_CUDA_FD ? "cuda-fd" : "host",
             why ? " (cuda-fd: " : "", why ? why : "", why ? ")" : "");
  registry_set_persist_dedicated(d.reg, persist_enabled(&d.persist));
  adopted = persist_adopt(&d.persist, d.reg, &passed);
  sdn_passed_free(&passed);
  if (adopted)
    log_info("%u persistent buffers are back from systemd's fd store", adopted);
  server_start(d.srv);
  log_info("gpushmd %s listening on %s (instance %016" PRIx64 ")", PACKAGE_VERSION,
           server_socket_inherited(d.srv) ? "the socket from systemd" : current_cfg.socket_path,
           server_instance_id(d.srv));
  /* Ready only now: listening, devices probed. */
  sdn_notify_ready("serving");
  if ((watchdog_usec = sdn_watchdog_usec()) > 0) {
    uint64_t every_ms = watchdog_usec / 2000 ? watchdog_usec / 2000 : 1;
    uv_timer_start(&watchdog_timer, on_watchdog, 0, every_ms);
  }

  uv_run(&loop, UV_RUN_DEFAULT);

  log_client_warnings_flush();
  persist_report_dropped(&d.persist, d.reg);
  registry_free(d.reg);
  backend_cuda_shutdown();
  server_free(d.srv);
  uv_loop_close(&loop);
  log_info("stopped");
  return exit_status;

fail_early:
  stop_daemon(d.srv);
  uv_run(&loop, UV_RUN_DEFAULT);
  server_free(d.srv);
  registry_free(d.reg);
  uv_loop_close(&loop);
  return 1;
}
