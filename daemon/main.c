/* gpushmd: owns shared GPU/host buffers on behalf of cooperating processes. */
#include "config.h"
#include "gpushm.h"
#include "log.h"
#include "server.h"
#ifdef HAVE_CUDA
#include "backend_cuda.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <grp.h>
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

enum {
  OPT_SOCKET_MODE = 256,
  OPT_DEFAULT_MODE,
  OPT_MAX_CLIENTS,
  OPT_MAX_BUFFERS,
  OPT_MAX_BYTES,
  OPT_MAX_QUEUED,
  OPT_ADMIN_GROUP,
};

static const struct option long_options[] = {
  { "socket", required_argument, NULL, 's' },
  { "socket-mode", required_argument, NULL, OPT_SOCKET_MODE },
  { "default-mode", required_argument, NULL, OPT_DEFAULT_MODE },
  { "max-clients", required_argument, NULL, OPT_MAX_CLIENTS },
  { "max-buffers-per-uid", required_argument, NULL, OPT_MAX_BUFFERS },
  { "max-bytes-per-uid", required_argument, NULL, OPT_MAX_BYTES },
  { "max-queued-replies", required_argument, NULL, OPT_MAX_QUEUED },
  { "admin-group", required_argument, NULL, OPT_ADMIN_GROUP },
  { "log-level", required_argument, NULL, 'l' },
  { "help", no_argument, NULL, 'h' },
  { "version", no_argument, NULL, 'V' },
  { NULL, 0, NULL, 0 },
};

static int parse_args(int argc, char **argv, struct server *srv)
{
  struct server_config *cfg = &srv->cfg;
  struct reg_limits *limits = &srv->reg.limits;
  uint64_t v;
  int opt, level;

  while ((opt = getopt_long(argc, argv, "s:l:hV", long_options, NULL)) != -1) {
    const char *what = NULL;
    switch (opt) {
    case 's':
      cfg->socket_path = optarg;
      break;
    case OPT_SOCKET_MODE:
      if (parse_u64(optarg, 8, false, 0777, &v) < 0)
        what = "--socket-mode";
      cfg->socket_mode = (uint32_t)v;
      break;
    case OPT_DEFAULT_MODE:
      if (parse_u64(optarg, 8, false, 0777, &v) < 0 || v == 0)
        what = "--default-mode";
      limits->default_mode = (uint32_t)v;
      break;
    case OPT_MAX_CLIENTS:
      if (parse_u64(optarg, 10, false, UINT32_MAX, &v) < 0 || v == 0)
        what = "--max-clients";
      cfg->max_clients = (uint32_t)v;
      break;
    case OPT_MAX_BUFFERS:
      if (parse_u64(optarg, 10, false, UINT32_MAX, &v) < 0)
        what = "--max-buffers-per-uid";
      limits->max_buffers_per_uid = (uint32_t)v;
      break;
    case OPT_MAX_BYTES:
      if (parse_u64(optarg, 10, true, UINT64_MAX, &v) < 0)
        what = "--max-bytes-per-uid";
      limits->max_bytes_per_uid = v;
      break;
    case OPT_MAX_QUEUED:
      if (parse_u64(optarg, 10, false, 1u << 20, &v) < 0 || v == 0)
        what = "--max-queued-replies";
      cfg->max_queued_frames = (uint32_t)v;
      break;
    case OPT_ADMIN_GROUP: {
      struct group *g = getgrnam(optarg);
      if (!g) {
        fprintf(stderr, "gpushmd: no group '%s' for --admin-group\n", optarg);
        return -1;
      }
      cfg->has_admin_group = true;
      cfg->admin_gid = g->gr_gid;
      break;
    }
    case 'l':
      if ((level = log_parse_level(optarg)) < 0)
        what = "--log-level";
      else
        log_set_level((enum log_level)level);
      break;
    case 'h':
      usage(stdout);
      exit(0);
    case 'V':
      printf("gpushmd %s (protocol %u)\n", PACKAGE_VERSION, GPUSHM_PROTOCOL_VERSION);
      exit(0);
    default:
      usage(stderr);
      return -1;
    }
    if (what) {
      fprintf(stderr, "gpushmd: invalid value '%s' for %s\n", optarg, what);
      return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "gpushmd: unexpected argument '%s'\n", argv[optind]);
    return -1;
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
/* EX_SOFTWARE: the service manager restarts a daemon that exits with it. */
static int exit_status;

static void stop_daemon(struct server *srv)
{
  server_shutdown(srv);
  /* With every handle closed the loop runs dry and main() cleans up. */
  for (size_t i = 0; i < sizeof stop_signals / sizeof stop_signals[0]; i++)
    if (!uv_is_closing((uv_handle_t *)&stop_signals[i]))
      uv_close((uv_handle_t *)&stop_signals[i], NULL);
  if (!uv_is_closing((uv_handle_t *)&fatal_timer))
    uv_close((uv_handle_t *)&fatal_timer, NULL);
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
  if (server_listen(&srv, err, sizeof err) < 0) {
    log_error("%s", err);
    registry_destroy(&srv.reg);
    return 1;
  }
  uv_loop_init(&loop);
  uv_timer_init(&loop, &fatal_timer);
  fatal_timer.data = &srv;
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
           srv.cfg.socket_path, srv.instance_id);

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
