/* gpushmd: owns shared GPU/host buffers on behalf of cooperating processes. */
#include "config.h"
#include "gpushm.h"
#include "log.h"
#include "options.h"
#include "sd.h"
#include "server.h"
#ifdef HAVE_CUDA
#include "backend_cuda.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void usage(FILE *out)
{
  fprintf(out,
    "Usage: gpushmd [OPTION]...\n"
    "Share GPU and host memory between processes: gpushmd owns each buffer and frees it\n"
    "only when no process holds it.\n\n"
    "  -c, --config=FILE             settings file (default " GPUSHMD_DEFAULT_CONFIG " if it\n"
    "                                exists); each option below is also a key there\n"
    "  -s, --socket=PATH             listen on PATH (default $GPUSHM_SOCKET, else %s)\n"
    "      --socket-mode=MODE        permission bits of the socket file (default 0666)\n"
    "      --default-mode=MODE       buffer mode when a client gives none (default 0600)\n"
    "      --max-clients=N           refuse connections beyond N (default %u)\n"
    "      --max-buffers-per-uid=N   buffers one uid may own (default %u)\n"
    "      --max-bytes-per-uid=SIZE  bytes one uid may own, K/M/G/T suffixes, 0 = no limit\n"
    "      --max-queued-replies=N    drop a client with more unsent replies (default %u)\n"
    "      --admin-group=GROUP       members may list and destroy every user's buffers\n"
    "  -l, --log-level=LEVEL         error, warn, info (default) or debug\n"
    "  -h, --help                    show this help\n"
    "  -V, --version                 show the version\n",
    GPUSHM_DEFAULT_SOCKET, GPUSHM_DEFAULT_MAX_CLIENTS, GPUSHM_DEFAULT_MAX_BUFFERS_PER_UID,
    GPUSHM_DEFAULT_MAX_QUEUED_FRAMES);
}

static const struct option long_options[] = {
  { "config", required_argument, NULL, 'c' },
  { "socket", required_argument, NULL, 's' },
  { "socket-mode", required_argument, NULL, 0 },
  { "default-mode", required_argument, NULL, 0 },
  { "max-clients", required_argument, NULL, 0 },
  { "max-buffers-per-uid", required_argument, NULL, 0 },
  { "max-bytes-per-uid", required_argument, NULL, 0 },
  { "max-queued-replies", required_argument, NULL, 0 },
  { "admin-group", required_argument, NULL, 0 },
  { "log-level", required_argument, NULL, 'l' },
  { "help", no_argument, NULL, 'h' },
  { "version", no_argument, NULL, 'V' },
  { NULL, 0, NULL, 0 },
};

static int option_index(const char *name)
{
  int i = 0;
  while (strcmp(long_options[i].name, name) != 0)
    i++;
  return i;
}

/* The config file first, then the command line over it. */
static int parse_args(int argc, char **argv, struct server *srv)
{
  struct { const char *name, *value; } given[64];
  const char *config = NULL;
  size_t n = 0;
  char err[512];
  int opt, index;

  while ((opt = getopt_long(argc, argv, "c:s:l:hV", long_options, &index)) != -1) {
    switch (opt) {
    case 'c':
      config = optarg;
      continue;
    case 'h':
      usage(stdout);
      exit(0);
    case 'V':
      printf("gpushmd %s (protocol %u)\n", PACKAGE_VERSION, GPUSHM_PROTOCOL_VERSION);
      exit(0);
    case 's':
    case 'l':
      index = option_index(opt == 's' ? "socket" : "log-level");
      break;
    case 0:
      break;
    default:
      usage(stderr);
      return -1;
    }
    if (n == sizeof given / sizeof given[0]) {
      fprintf(stderr, "gpushmd: too many options\n");
      return -1;
    }
    given[n].name = long_options[index].name;
    given[n++].value = optarg;
  }
  if (optind < argc) {
    fprintf(stderr, "gpushmd: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (config_load(srv, config ? config : GPUSHMD_DEFAULT_CONFIG, config != NULL, err,
                  sizeof err) < 0) {
    fprintf(stderr, "gpushmd: %s\n", err);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    if (option_apply(srv, given[i].name, given[i].value, err, sizeof err) < 0) {
      fprintf(stderr, "gpushmd: --%s: %s\n", given[i].name, err);
      return -1;
    }
  }
  return 0;
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

static uv_signal_t stop_signals[2];
static uv_timer_t fatal_timer;
static uv_timer_t watchdog_timer;
/* EX_SOFTWARE: the service manager restarts a daemon that exits with it. */
static int exit_status;

static void stop_daemon(struct server *srv)
{
  sd_notify_stopping();
  server_shutdown(srv);
  if (!uv_is_closing((uv_handle_t *)&watchdog_timer))
    uv_close((uv_handle_t *)&watchdog_timer, NULL);
  /* With every handle closed the loop runs dry and main() cleans up. */
  for (size_t i = 0; i < sizeof stop_signals / sizeof stop_signals[0]; i++)
    if (!uv_is_closing((uv_handle_t *)&stop_signals[i]))
      uv_close((uv_handle_t *)&stop_signals[i], NULL);
  if (!uv_is_closing((uv_handle_t *)&fatal_timer))
    uv_close((uv_handle_t *)&fatal_timer, NULL);
}

/* Fed from the loop itself: a wedged loop stops the pings and systemd restarts us. */
static void on_watchdog(uv_timer_t *timer)
{
  struct server *srv = timer->data;
  char status[128];
  snprintf(status, sizeof status, "%u clients, %u buffers, %llu bytes", srv->n_clients,
           (unsigned)srv->reg.n_buffers, (unsigned long long)srv->reg.bytes_allocated);
  sd_notify_status(status);
  sd_notify_watchdog();
}

static void on_signal(uv_signal_t *handle, int signum)
{
  log_info("signal %d: shutting down", signum);
  stop_daemon(handle->data);
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

int main(int argc, char **argv)
{
  static struct server srv; /* large receive buffers: keep them off the stack */
  uv_loop_t loop;
  char err[256];
  uint64_t watchdog_usec;
  int fd;
  const char *env_socket = getenv("GPUSHM_SOCKET");

  srv.cfg = (struct server_config){
    .socket_path = env_socket && *env_socket ? env_socket : GPUSHM_DEFAULT_SOCKET,
    .socket_mode = 0666,
    .max_clients = GPUSHM_DEFAULT_MAX_CLIENTS,
    .max_queued_frames = GPUSHM_DEFAULT_MAX_QUEUED_FRAMES,
    .max_queued_bytes = GPUSHM_DEFAULT_MAX_QUEUED_BYTES,
  };
  if (registry_init(&srv.reg, &(struct reg_limits){
        .max_buffers_per_uid = GPUSHM_DEFAULT_MAX_BUFFERS_PER_UID,
        .max_bytes_per_uid = GPUSHM_DEFAULT_MAX_BYTES_PER_UID,
        .default_mode = 0600,
      }) < 0) {
    fprintf(stderr, "gpushmd: out of memory\n");
    return 1;
  }
  if (parse_args(argc, argv, &srv) < 0)
    return 2;

  signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  fd = sd_inherited_socket(err, sizeof err);
  if (fd == -2) {
    log_error("%s", err);
    registry_destroy(&srv.reg);
    return 1;
  }
  if (fd >= 0) {
    server_adopt_socket(&srv, fd);
    log_info("serving on the socket from systemd");
  } else if (server_listen(&srv, err, sizeof err) < 0) {
    log_error("%s", err);
    registry_destroy(&srv.reg);
    return 1;
  }
  uv_loop_init(&loop);
  uv_timer_init(&loop, &fatal_timer);
  fatal_timer.data = &srv;
  uv_timer_init(&loop, &watchdog_timer);
  watchdog_timer.data = &srv;
#ifdef HAVE_CUDA
  /* CUDA does not survive fork() without exec(): initialise it in the process that
   * serves, never before any forking. */
  backend_cuda_set_fatal_hook(on_fatal, &srv);
  backend_cuda_init();
#endif
  if (server_start(&srv, &loop, err, sizeof err) < 0) {
    log_error("%s", err);
    registry_destroy(&srv.reg);
#ifdef HAVE_CUDA
    backend_cuda_shutdown();
#endif
    uv_close((uv_handle_t *)&fatal_timer, NULL);
    uv_close((uv_handle_t *)&watchdog_timer, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return 1;
  }
  for (size_t i = 0; i < 2; i++) {
    uv_signal_init(&loop, &stop_signals[i]);
    stop_signals[i].data = &srv;
    uv_signal_start(&stop_signals[i], on_signal, i == 0 ? SIGTERM : SIGINT);
  }
  log_info("gpushmd %s listening on %s (instance %016" PRIx64 ")", PACKAGE_VERSION,
           srv.socket_inherited ? "the socket from systemd" : srv.cfg.socket_path, srv.instance_id);
  /* Ready only now: listening, devices probed. */
  sd_notify_ready("serving");
  if ((watchdog_usec = sd_watchdog_usec()) > 0) {
    uint64_t every_ms = watchdog_usec / 2000 ? watchdog_usec / 2000 : 1;
    uv_timer_start(&watchdog_timer, on_watchdog, 0, every_ms);
  }

  uv_run(&loop, UV_RUN_DEFAULT);

  registry_destroy(&srv.reg);
#ifdef HAVE_CUDA
  backend_cuda_shutdown();
#endif
  status_page_destroy(&srv.status);
  uv_loop_close(&loop);
  log_info("stopped");
  return exit_status;
}
