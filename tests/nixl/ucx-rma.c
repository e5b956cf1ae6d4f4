/* SPDX-License-Identifier: MIT */
/* UCX's own RMA API (ucp_mem_map, ucp_get_nbx, ucp_put_nbx) between the gpushm buffers
 * of two processes: what NIXL's UCX backend does beneath it, with a UCX of one's own
 * choosing (libucx-cu13, whose cuda_ipc shares VMM memory by POSIX fd: docs/multinode.md).
 *
 *   ucx-rma target SOCKET NAME SIZE BACKEND SEED
 *     creates gpushm buffer NAME (BACKEND: host or cuda-fd), fills it with SEED's
 *     pattern, maps it for UCX and serves its worker address and rkey on the Unix socket
 *     SOCKET; when the initiator is done, checks that the buffer holds what it wrote.
 *   ucx-rma initiator SOCKET NAME SIZE BACKEND RUNS
 *     creates its own buffer NAME, GETs the target's whole buffer RUNS times (the bytes
 *     checked), PUTs its own into it RUNS times, and prints each operation's median.
 *
 * tests/nixl/ucx-check.py runs the pair and reads which transports UCX took from its
 * UCX_PROTO_INFO log.  Exit 0: the data arrived both ways. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <gpushm.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define MAX_RUNS 64

static void die(const char *what, const char *detail)
{
  fprintf(stderr, "ucx-rma: %s: %s\n", what, detail);
  exit(1);
}

/* --- the CUDA driver, for the pattern in device memory (dlopen: no link-time CUDA) --- */
static struct {
  int (*init)(unsigned);
  int (*device_get)(int *, int);
  int (*primary_ctx_retain)(void **, int);
  int (*ctx_set_current)(void *);
  int (*memcpy_htod)(uint64_t, const void *, size_t);
  int (*memcpy_dtoh)(void *, uint64_t, size_t);
} cu;

static void cuda_start(void)
{
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  void *ctx;
  int dev;
  if (!lib)
    die("dlopen libcuda.so.1", dlerror());
  *(void **)&cu.init = dlsym(lib, "cuInit");
  *(void **)&cu.device_get = dlsym(lib, "cuDeviceGet");
  *(void **)&cu.primary_ctx_retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.ctx_set_current = dlsym(lib, "cuCtxSetCurrent");
  *(void **)&cu.memcpy_htod = dlsym(lib, "cuMemcpyHtoD_v2");
  *(void **)&cu.memcpy_dtoh = dlsym(lib, "cuMemcpyDtoH_v2");
  if (!cu.init || !cu.memcpy_dtoh || cu.init(0) || cu.device_get(&dev, 0) ||
      cu.primary_ctx_retain(&ctx, dev) || cu.ctx_set_current(ctx))
    die("CUDA", "cannot make device 0's primary context current");
}

/* byte i of seed's pattern: (i * 131 + seed) mod 251, so that a shifted copy or another
 * seed differs */
static void pattern(uint8_t *p, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)((i * 131 + seed) % 251);
}

static void fill(void *mem, size_t n, int device, unsigned seed)
{
  uint8_t *tmp = device ? malloc(n) : mem;
  if (!tmp)
    die("fill", "out of memory");
  pattern(tmp, n, seed);
  if (device) {
    if (cu.memcpy_htod((uint64_t)(uintptr_t)mem, tmp, n))
      die("fill", "cuMemcpyHtoD failed");
    free(tmp);
  }
}

static size_t count_bad(const void *mem, size_t n, int device, unsigned seed)
{
  uint8_t *got = device ? malloc(n) : (uint8_t *)mem, *want = malloc(n);
  size_t bad = 0;
  if (!got || !want)
    die("check", "out of memory");
  if (device && cu.memcpy_dtoh(got, (uint64_t)(uintptr_t)mem, n))
    die("check", "cuMemcpyDtoH failed");
  pattern(want, n, seed);
  for (size_t i = 0; i < n; i++)
    bad += got[i] != want[i];
  if (device)
    free(got);
  free(want);
  return bad;
}

/* --- length-prefixed blobs over the Unix socket -------------------------------------- */
static void send_all(int fd, const void *p, size_t n)
{
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w <= 0)
      die("socket write", strerror(errno));
    p = (const char *)p + w;
    n -= (size_t)w;
  }
}

static void recv_all(int fd, void *p, size_t n)
{
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r <= 0)
      die("socket read", r ? strerror(errno) : "peer closed");
    p = (char *)p + r;
    n -= (size_t)r;
  }
}

static void send_blob(int fd, const void *p, uint64_t n)
{
  send_all(fd, &n, sizeof n);
  send_all(fd, p, n);
}

static void *recv_blob(int fd, uint64_t *n)
{
  void *p;
  recv_all(fd, n, sizeof *n);
  if (*n > (1u << 20) || !(p = malloc(*n ? *n : 1)))
    die("socket read", "blob too large");
  recv_all(fd, p, *n);
  return p;
}

/* --- UCX ------------------------------------------------------------------------------ */
static void check_ucs(ucs_status_t s, const char *what)
{
  if (s != UCS_OK)
    die(what, ucs_status_string(s));
}

static void wait_request(ucp_worker_h worker, ucs_status_ptr_t req, const char *what)
{
  ucs_status_t s;
  if (req == NULL)
    return;
  if (UCS_PTR_IS_ERR(req))
    die(what, ucs_status_string(UCS_PTR_STATUS(req)));
  while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS)
    ucp_worker_progress(worker);
  ucp_request_free(req);
  check_ucs(s, what);
}

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
  if (argc != 7 || (strcmp(argv[1], "target") && strcmp(argv[1], "initiator"))) {
    fprintf(stderr, "usage: ucx-rma target SOCKET NAME SIZE BACKEND SEED\n"
                    "       ucx-rma initiator SOCKET NAME SIZE BACKEND RUNS\n");
    return 2;
  }
  const int target = !strcmp(argv[1], "target");
  const uint64_t size = strtoull(argv[4], NULL, 0);
  const int device = !strcmp(argv[5], "cuda-fd");
  const unsigned arg = (unsigned)strtoul(argv[6], NULL, 0);
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  gpushm_create_opts_t opts;
  gpushm_buffer_t *buf;
  gpushm_t *conn;
  int r, fd;

  if (strlen(argv[2]) >= sizeof sa.sun_path)
    die("socket", "path too long");
  strcpy(sa.sun_path, argv[2]);
  if (device)
    cuda_start();
  if ((r = gpushm_connect(NULL, argv[1], &conn)) < 0)
    die("gpushm_connect", gpushm_last_error_message());
  gpushm_create_opts_init(&opts);
  opts.backend = device ? GPUSHM_BACKEND_CUDA_FD : GPUSHM_BACKEND_HOST;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  if ((r = gpushm_buffer_create(conn, argv[3], size, &opts, &buf)) < 0)
    die("gpushm_buffer_create", gpushm_last_error_message());
  void *mem = gpushm_buffer_ptr(buf);

  ucp_config_t *config;
  ucp_context_h ctx;
  ucp_worker_h worker;
  ucp_mem_h memh;
  ucp_params_t params = { .field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_RMA };
  ucp_worker_params_t wparams = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                  .thread_mode = UCS_THREAD_MODE_SINGLE };
  ucp_mem_map_params_t mparams = {
    .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
    .address = mem, .length = size,
    .memory_type = device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST,
  };
  check_ucs(ucp_config_read(NULL, NULL, &config), "ucp_config_read");
  check_ucs(ucp_init(&params, config, &ctx), "ucp_init");
  ucp_config_release(config);
  check_ucs(ucp_worker_create(ctx, &wparams, &worker), "ucp_worker_create");
  double t0 = now();
  ucs_status_t mapped = ucp_mem_map(ctx, &mparams, &memh);
  if (mapped != UCS_OK) {
    /* which memory domains this UCX loaded says whether its CUDA ones were there at all */
    ucp_context_print_info(ctx, stderr);
    check_ucs(mapped, "ucp_mem_map");
  }
  printf("ucx-rma: %s: ucp_mem_map of %llu bytes of %s memory: %.3f ms\n", argv[1],
         (unsigned long long)size, argv[5], (now() - t0) * 1e3);

  if (target) {
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ucp_address_t *addr;
    size_t addr_len, rkey_len;
    void *rkey_buf;
    uint64_t where[3] = { (uint64_t)(uintptr_t)mem, size, arg }, n;
    uint32_t *done;

    fill(mem, size, device, arg);
    unlink(argv[2]);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 1))
      die("listen", strerror(errno));
    printf("ucx-rma: target: listening\n");
    fflush(stdout);
    if ((fd = accept(lfd, NULL, NULL)) < 0)
      die("accept", strerror(errno));
    check_ucs(ucp_worker_get_address(worker, &addr, &addr_len), "ucp_worker_get_address");
    check_ucs(ucp_rkey_pack(ctx, memh, &rkey_buf, &rkey_len), "ucp_rkey_pack");
    send_blob(fd, addr, addr_len);
    send_blob(fd, rkey_buf, rkey_len);
    send_blob(fd, where, sizeof where);
    ucp_rkey_buffer_release(rkey_buf);
    ucp_worker_release_address(worker, addr);
    /* One-sided over cuda_ipc, cma or RDMA; UCX's software emulation (over TCP) needs
     * this side to progress too, so progress until the initiator says it is done. */
    for (struct pollfd p = { .fd = fd, .events = POLLIN }; !poll(&p, 1, 0);)
      ucp_worker_progress(worker);
    done = recv_blob(fd, &n);
    if (n != sizeof *done)
      die("done", "malformed");
    size_t bad = count_bad(mem, size, device, *done);
    printf("ucx-rma: target: %zu of %llu bytes differ from what the initiator wrote\n", bad,
           (unsigned long long)size);
    send_blob(fd, &bad, sizeof bad);
    free(done);
    close(fd);
    close(lfd);
    ucp_mem_unmap(ctx, memh);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    gpushm_buffer_close(buf);
    gpushm_disconnect(conn);
    return bad ? 1 : 0;
  }

  /* initiator */
  const unsigned runs = arg < 1 ? 1 : arg > MAX_RUNS ? MAX_RUNS : arg;
  uint64_t n, *where, *bad;
  ucp_address_t *remote;
  void *rkey_buf;
  ucp_ep_h ep;
  ucp_rkey_h rkey;
  double times[MAX_RUNS];

  fill(mem, size, device, 100);
  for (int tries = 0;; tries++) {
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && !connect(fd, (struct sockaddr *)&sa, sizeof sa))
      break;
    if (fd >= 0)
      close(fd);
    if (tries > 3000)
      die("connect", strerror(errno));
    usleep(10000);
  }
  remote = recv_blob(fd, &n);
  rkey_buf = recv_blob(fd, &n);
  where = recv_blob(fd, &n);
  if (n != 3 * sizeof *where || where[1] != size)
    die("target", "its buffer's size differs");
  ucp_ep_params_t eparams = { .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = remote };
  check_ucs(ucp_ep_create(worker, &eparams, &ep), "ucp_ep_create");
  check_ucs(ucp_ep_rkey_unpack(ep, rkey_buf, &rkey), "ucp_ep_rkey_unpack");
  ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE,
                             .memory_type = mparams.memory_type };

  for (unsigned i = 0; i < runs; i++) {
    t0 = now();
    wait_request(worker, ucp_get_nbx(ep, mem, size, where[0], rkey, &rp), "ucp_get_nbx");
    times[i] = now() - t0;
  }
  qsort(times, runs, sizeof *times, cmp_double);
  size_t got_bad = count_bad(mem, size, device, (unsigned)where[2]);
  printf("ucx-rma: GET %llu bytes: median %.3f ms, %.1f GiB/s (%u runs); %zu bytes differ\n",
         (unsigned long long)size, times[runs / 2] * 1e3,
         size / times[runs / 2] / (1u << 30), runs, got_bad);

  fill(mem, size, device, 200);
  for (unsigned i = 0; i < runs; i++) {
    t0 = now();
    wait_request(worker, ucp_put_nbx(ep, mem, size, where[0], rkey, &rp), "ucp_put_nbx");
    /* remote completion: the bytes are in the target's memory */
    wait_request(worker, ucp_ep_flush_nbx(ep, &rp), "ucp_ep_flush_nbx");
    times[i] = now() - t0;
  }
  qsort(times, runs, sizeof *times, cmp_double);
  printf("ucx-rma: PUT %llu bytes: median %.3f ms, %.1f GiB/s (%u runs)\n",
         (unsigned long long)size, times[runs / 2] * 1e3,
         size / times[runs / 2] / (1u << 30), runs);
  /* closed while the target still progresses its worker (until "done" below) */
  ucp_rkey_destroy(rkey);
  ucp_request_param_t cp = { .op_attr_mask = 0 };
  wait_request(worker, ucp_ep_close_nbx(ep, &cp), "ucp_ep_close_nbx");
  uint32_t seed = 200;
  send_blob(fd, &seed, sizeof seed);
  bad = recv_blob(fd, &n);
  printf("ucx-rma: initiator: the target found %llu bytes differing\n", (unsigned long long)*bad);
  int rc = got_bad || *bad ? 1 : 0;
  free(remote);
  free(rkey_buf);
  free(where);
  free(bad);
  close(fd);
  ucp_mem_unmap(ctx, memh);
  ucp_worker_destroy(worker);
  ucp_cleanup(ctx);
  gpushm_buffer_close(buf);
  gpushm_disconnect(conn);
  return rc;
}
