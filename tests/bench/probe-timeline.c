/* SPDX-License-Identifier: MIT */
/* Facts for timelines (docs/sync.md), measured on the GPU host's own driver, no gpushm:
 *  [T1] what a Vulkan device costs the process that would mint timeline semaphores
 *       (gpushmd, if it did): resident memory, device memory (cuMemGetInfo before and
 *       after, in a CUDA context made first) and the time to create it;
 *  [T2] minting: vkCreateSemaphore (timeline, exportable as OPAQUE_FD) and
 *       vkGetSemaphoreFdKHR, per timeline; whether a second export of one semaphore and
 *       a dup() of an exported fd each import into CUDA (an import consumes its fd);
 *  [T3] the cross-process round trip host signal -> CUDA wait -> CUDA signal -> host
 *       wait: this process signals value 2k+1 (vkSignalSemaphore) and waits for 2k+2; a
 *       child (its own process, exec'd) imported the semaphore into CUDA and queued, up
 *       front, for every k a wait for 2k+1 and a signal of 2k+2 on one stream, so no CPU
 *       of the child takes part.  The host side waits three ways: vkWaitSemaphores
 *       (the driver's blocking wait), a spin on vkGetSemaphoreCounterValue, and
 *       vkWaitSemaphores with a zero timeout in a spin; p50/p99/min/max each.
 *  [T4] what a gpushmd that holds a client's semaphore could do once the client is gone:
 *       a minter process (Vulkan) makes a semaphore, hands an fd and a dup of it to this
 *       process (SCM_RIGHTS), signals 3 and is SIGKILLed; this process (CUDA only, as
 *       gpushmd) imports one fd; a waiter process (Vulkan) imports the other, reads the
 *       value the dead minter left, and blocks in vkWaitSemaphores for 5, which this
 *       process then signals through its CUDA import (how long until the waiter woke);
 *       then signals 5 again (equal) and 4 (lower), the waiter reading the value after
 *       each: what a repair that cannot read the value may and may not do.
 *       GPUSHM_PROBE_ONLY=T4 runs this part alone.
 * Prints rows; not part of make check.  Needs a GPU with Vulkan (skips, 77, without). */
#define _GNU_SOURCE
#include "config.h"

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#define ROUNDS 400

static struct {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*primary_retain)(CUcontext *, CUdevice);
  CUresult (*set_current)(CUcontext);
  CUresult (*mem_get_info)(size_t *, size_t *);
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*stream_sync)(CUstream);
  CUresult (*import_sem)(CUexternalSemaphore *, const CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC *);
  CUresult (*destroy_sem)(CUexternalSemaphore);
  CUresult (*signal)(const CUexternalSemaphore *, const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS *,
                     unsigned, CUstream);
  CUresult (*wait)(const CUexternalSemaphore *, const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS *,
                   unsigned, CUstream);
} cu;

static PFN_vkGetSemaphoreFdKHR get_semaphore_fd;

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static long rss_kib(void)
{
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;

  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
      break;
  if (f)
    fclose(f);
  return kib;
}

#define CU_OK(expr)                                                                       \
  do {                                                                                    \
    CUresult r_ = (expr);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                             \
      fprintf(stderr, "probe-timeline: %s: CUresult %d\n", #expr, (int)r_);               \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)
#define VK_OK(expr)                                                                       \
  do {                                                                                    \
    VkResult r_ = (expr);                                                                 \
    if (r_ != VK_SUCCESS) {                                                               \
      fprintf(stderr, "probe-timeline: %s: VkResult %d\n", #expr, (int)r_);               \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static int load_cuda(void)
{
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h)
    return -1;
#define SYM(field, name) if (!(*(void **)&cu.field = dlsym(h, name))) return -1
  SYM(init, "cuInit");
  SYM(device_get, "cuDeviceGet");
  SYM(primary_retain, "cuDevicePrimaryCtxRetain");
  SYM(set_current, "cuCtxSetCurrent");
  SYM(mem_get_info, "cuMemGetInfo_v2");
  SYM(stream_create, "cuStreamCreate");
  SYM(stream_sync, "cuStreamSynchronize");
  SYM(import_sem, "cuImportExternalSemaphore");
  SYM(destroy_sem, "cuDestroyExternalSemaphore");
  SYM(signal, "cuSignalExternalSemaphoresAsync");
  SYM(wait, "cuWaitExternalSemaphoresAsync");
#undef SYM
  return 0;
}

static void cuda_context(void)
{
  CUcontext ctx;
  CUdevice dev;

  CU_OK(cu.init(0));
  CU_OK(cu.device_get(&dev, 0));
  CU_OK(cu.primary_retain(&ctx, dev));
  CU_OK(cu.set_current(ctx));
}

static CUexternalSemaphore import_fd(int fd)
{
  CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC desc = {
    .type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD, .handle.fd = fd };
  CUexternalSemaphore sem;
  CUresult r = cu.import_sem(&sem, &desc);

  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "probe-timeline: cuImportExternalSemaphore: CUresult %d\n", (int)r);
    return NULL;
  }
  return sem;
}

/* The child: argv fd.  Queues every round's wait and signal, then waits for the last. */
static int child(int fd)
{
  CUexternalSemaphore sem;
  CUstream s;

  cuda_context();
  if (!(sem = import_fd(fd)))
    return 1;
  CU_OK(cu.stream_create(&s, CU_STREAM_NON_BLOCKING));
  for (uint64_t k = 0; k < ROUNDS; k++) {
    CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS w = { .params.fence.value = 2 * k + 1 };
    CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS g = { .params.fence.value = 2 * k + 2 };
    CU_OK(cu.wait(&sem, &w, 1, s));
    CU_OK(cu.signal(&sem, &g, 1, s));
  }
  CU_OK(cu.stream_sync(s));
  return 0;
}

struct vk {
  VkInstance instance;
  VkPhysicalDevice phys;
  VkDevice device;
};

static int vk_open(struct vk *v)
{
  VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                            .apiVersion = VK_API_VERSION_1_2 };
  VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app };
  VkPhysicalDeviceVulkan12Features f12 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .timelineSemaphore = VK_TRUE };
  const char *exts[] = { VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME };
  float priority = 1;
  VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueCount = 1, .pQueuePriorities = &priority };
  VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f12,
                             .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci,
                             .enabledExtensionCount = 1, .ppEnabledExtensionNames = exts };
  uint32_t n = 1;

  if (vkCreateInstance(&ici, NULL, &v->instance) != VK_SUCCESS)
    return -1;
  if (vkEnumeratePhysicalDevices(v->instance, &n, &v->phys) < 0 || n == 0)
    return -1;
  VK_OK(vkCreateDevice(v->phys, &dci, NULL, &v->device));
  get_semaphore_fd = (PFN_vkGetSemaphoreFdKHR)vkGetDeviceProcAddr(v->device,
                                                                   "vkGetSemaphoreFdKHR");
  return get_semaphore_fd ? 0 : -1;
}

static VkSemaphore mint(struct vk *v)
{
  VkExportSemaphoreCreateInfo export = {
    .sType = VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO,
    .handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT };
  VkSemaphoreTypeCreateInfo type = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                     .pNext = &export,
                                     .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE };
  VkSemaphoreCreateInfo sci = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &type };
  VkSemaphore sem;

  VK_OK(vkCreateSemaphore(v->device, &sci, NULL, &sem));
  return sem;
}

static int export_fd(struct vk *v, VkSemaphore sem)
{
  VkSemaphoreGetFdInfoKHR gi = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR,
                                 .semaphore = sem,
                                 .handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT };
  int fd = -1;

  VK_OK(get_semaphore_fd(v->device, &gi, &fd));
  return fd;
}

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void row(const char *what, double *v, unsigned n)
{
  qsort(v, n, sizeof *v, cmp);
  printf("probe: [T3] %-44s p50 %8.1f us  p99 %8.1f us  min %7.1f  max %8.1f  (n %u)\n", what,
         v[n / 2], v[n * 99 / 100], v[0], v[n - 1], n);
}

enum wait_kind { WAIT_BLOCKING, WAIT_SPIN_COUNTER, WAIT_SPIN_ZERO };

static void round_trips(struct vk *v, const char *self, enum wait_kind kind, const char *what)
{
  VkSemaphore sem = mint(v);
  int fd = export_fd(v, sem), status;
  double *t = calloc(ROUNDS, sizeof *t);
  char fd_text[16];
  pid_t pid;

  snprintf(fd_text, sizeof fd_text, "%d", fd);
  fcntl(fd, F_SETFD, 0); /* the child execs */
  CU_OK((pid = fork()) < 0 ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
  if (pid == 0) {
    execl(self, self, "child", fd_text, (char *)NULL);
    _exit(127);
  }
  close(fd);
  for (uint64_t k = 0; k < ROUNDS; k++) {
    VkSemaphoreSignalInfo si = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO,
                                 .semaphore = sem, .value = 2 * k + 1 };
    uint64_t want = 2 * k + 2, got = 0;
    VkSemaphoreWaitInfo wi = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                               .semaphoreCount = 1, .pSemaphores = &sem, .pValues = &want };
    double t0;

    if (k == 0) /* the child is up and its waits queued once the first trip is done */
      usleep(1500000);
    t0 = now_us();
    VK_OK(vkSignalSemaphore(v->device, &si));
    switch (kind) {
    case WAIT_BLOCKING:
      VK_OK(vkWaitSemaphores(v->device, &wi, 10000000000ull));
      break;
    case WAIT_SPIN_COUNTER:
      while (vkGetSemaphoreCounterValue(v->device, sem, &got) == VK_SUCCESS && got < want)
        ;
      break;
    case WAIT_SPIN_ZERO:
      while (vkWaitSemaphores(v->device, &wi, 0) == VK_TIMEOUT)
        ;
      break;
    }
    t[k] = now_us() - t0;
  }
  CU_OK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0
          ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  row(what, t + 1, ROUNDS - 1);
  vkDestroySemaphore(v->device, sem, NULL);
  free(t);
}


static PFN_vkImportSemaphoreFdKHR import_semaphore_fd;

/* [T4] the minter: argv sock.  Mints, sends an fd and its dup, signals 3, says so, waits
 * to be killed. */
static int t4_minter(int sock)
{
  struct vk v;
  VkSemaphore sem;
  int fds[2];
  char byte = 'm', ctl[CMSG_SPACE(sizeof fds)];
  struct iovec iov = { &byte, 1 };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                        .msg_controllen = sizeof ctl };
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  VkSemaphoreSignalInfo si = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO, .value = 3 };

  if (vk_open(&v) < 0) {
    fprintf(stderr, "t4 minter: no Vulkan device\n");
    return 1;
  }
  sem = mint(&v);
  fds[0] = export_fd(&v, sem);
  fprintf(stderr, "t4 minter: minted\n");
  fds[1] = dup(fds[0]);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  memcpy(CMSG_DATA(c), fds, sizeof fds);
  si.semaphore = sem;
  VK_OK(vkSignalSemaphore(v.device, &si));
  if (sendmsg(sock, &msg, 0) != 1)
    return 1;
  for (;;)
    pause();
}

/* [T4] the waiter: argv fd.  Imports it, says "value N", blocks for 5, says "done T",
 * then answers each line on stdin with "value N". */
static int t4_waiter(int fd)
{
  struct vk v;
  VkSemaphore sem;
  VkSemaphoreTypeCreateInfo type = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                     .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE };
  VkSemaphoreCreateInfo sci = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &type };
  VkImportSemaphoreFdInfoKHR ii = { .sType = VK_STRUCTURE_TYPE_IMPORT_SEMAPHORE_FD_INFO_KHR,
                                    .handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT,
                                    .fd = fd };
  uint64_t want = 5, got = 0;
  VkSemaphoreWaitInfo wi = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
                             .pValues = &want };
  char line[64];
  VkResult r;

  if (vk_open(&v) < 0)
    return 1;
  import_semaphore_fd = (PFN_vkImportSemaphoreFdKHR)vkGetDeviceProcAddr(v.device,
                                                                         "vkImportSemaphoreFdKHR");
  VK_OK(vkCreateSemaphore(v.device, &sci, NULL, &sem));
  ii.semaphore = sem;
  fprintf(stderr, "t4 waiter: importing\n");
  VK_OK(import_semaphore_fd(v.device, &ii));
  fprintf(stderr, "t4 waiter: imported\n");
  VK_OK(vkGetSemaphoreCounterValue(v.device, sem, &got));
  printf("value %llu\n", (unsigned long long)got);
  fflush(stdout);
  wi.pSemaphores = &sem;
  r = vkWaitSemaphores(v.device, &wi, 5000000000ull);
  printf("done %.1f %d\n", now_us(), (int)r);
  fflush(stdout);
  while (fgets(line, sizeof line, stdin)) {
    VK_OK(vkGetSemaphoreCounterValue(v.device, sem, &got));
    printf("value %llu\n", (unsigned long long)got);
    fflush(stdout);
  }
  return 0;
}

static void t4_signal(CUexternalSemaphore sem, CUstream s, uint64_t value)
{
  CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS g = { .params.fence.value = value };
  CU_OK(cu.signal(&sem, &g, 1, s));
  CU_OK(cu.stream_sync(s));
}

static void t4_survival(const char *self)
{
  int sv[2], fds[2], to_w[2], from_w[2], status;
  char byte, ctl[CMSG_SPACE(sizeof fds)], text[32], line[128];
  struct iovec iov = { &byte, 1 };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                        .msg_controllen = sizeof ctl };
  CUexternalSemaphore sem;
  CUstream s;
  unsigned long long left = 0, v_equal = 0, v_lower = 0;
  double signalled, woke = 0;
  pid_t minter, waiter;
  FILE *in, *out;
  int r = -1;

  CU_OK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0 ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS);
  snprintf(text, sizeof text, "%d", sv[1]);
  if ((minter = fork()) == 0) {
    execl(self, self, "t4-minter", text, (char *)NULL);
    _exit(127);
  }
  close(sv[1]);
  fprintf(stderr, "t4: waiting for the minter's fds\n");
  CU_OK(recvmsg(sv[0], &msg, 0) == 1 && CMSG_FIRSTHDR(&msg) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  fprintf(stderr, "t4: got them; killing the minter\n");
  memcpy(fds, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof fds);
  if (!getenv("GPUSHM_PROBE_T4_KEEP")) { /* =1: the minter lives on (the control case) */
    kill(minter, SIGKILL);
    waitpid(minter, &status, 0);
  }
  /* the minter is gone: its semaphore lives in the two fds alone */
  CU_OK(cu.stream_create(&s, CU_STREAM_NON_BLOCKING));
  fprintf(stderr, "t4: importing into CUDA\n");
  sem = import_fd(fds[0]);
  fprintf(stderr, "t4: imported: %s\n", sem ? "yes" : "no");
  /* close-on-exec: a waiter that kept the write end of its own stdin would never see
   * its end, and this process would wait for it for ever (it did, on the H200) */
  CU_OK(pipe2(to_w, O_CLOEXEC) < 0 || pipe2(from_w, O_CLOEXEC) < 0 ? CUDA_ERROR_UNKNOWN
                                                                    : CUDA_SUCCESS);
  snprintf(text, sizeof text, "%d", fds[1]);
  if ((waiter = fork()) == 0) {
    dup2(to_w[0], 0);
    dup2(from_w[1], 1);
    execl(self, self, "t4-waiter", text, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  close(to_w[0]);
  close(from_w[1]);
  in = fdopen(from_w[0], "r");
  out = fdopen(to_w[1], "w");
  if (sem && fgets(line, sizeof line, in) && sscanf(line, "value %llu", &left) == 1) {
    fprintf(stderr, "t4: the waiter read %llu\n", left);
    usleep(500000); /* the waiter is in vkWaitSemaphores */
    signalled = now_us();
    fprintf(stderr, "t4: signalling 5 through CUDA\n");
    t4_signal(sem, s, 5);
    fprintf(stderr, "t4: signalled\n");
    if (fgets(line, sizeof line, in) && sscanf(line, "done %lf %d", &woke, &r) == 2) {
      fprintf(stderr, "t4: the waiter returned (VkResult %d) %.1f us after the signal; "
              "signalling 5 again\n", r, woke - signalled);
      t4_signal(sem, s, 5);
      fputs("read\n", out);
      fflush(out);
      if (fgets(line, sizeof line, in))
        sscanf(line, "value %llu", &v_equal);
      fprintf(stderr, "t4: after the equal signal the waiter read %llu; signalling 4\n",
              v_equal);
      t4_signal(sem, s, 4);
      fprintf(stderr, "t4: the lower signal completed\n");
      fputs("read\n", out);
      fflush(out);
      if (fgets(line, sizeof line, in))
        sscanf(line, "value %llu", &v_lower);
    }
    printf("probe: [T4] minter SIGKILLed after signalling 3: the semaphore %s (a second "
           "process's import read %llu); CUDA here signalled 5 through its import: the "
           "Vulkan waiter %s %.1f us later; then 5 again: it read %llu; then 4: it read "
           "%llu\n", sem ? "imported into CUDA here" : "did NOT import into CUDA", left,
           r == 0 ? "woke" : "did NOT wake (VkResult)", woke - signalled, v_equal, v_lower);
  } else {
    printf("probe: [T4] minter SIGKILLed: %s\n", sem ? "the waiter did not start"
                                                   : "its fd did not import into CUDA");
  }
  fclose(out);
  fclose(in);
  waitpid(waiter, &status, 0);
}

int main(int argc, char **argv)
{
  char self[4096];
  size_t free0, free1, total;
  long rss0, rss1;
  struct vk v;
  double t0, mint_us[100], export_us[100];
  VkSemaphore sem;
  int fd, fd2, fd3;
  CUexternalSemaphore a, b, c;

  /* line by line: a run cut short by a timeout keeps every row printed so far */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (load_cuda() < 0) {
    printf("probe-timeline: no CUDA driver here\n");
    return 77;
  }
  if (argc == 3 && strcmp(argv[1], "child") == 0)
    return child(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "t4-minter") == 0)
    return t4_minter(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "t4-waiter") == 0)
    return t4_waiter(atoi(argv[2]));
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0)
    return 1;
  self[sizeof self - 1] = '\0';
  cuda_context();
  if (getenv("GPUSHM_PROBE_ONLY") && strcmp(getenv("GPUSHM_PROBE_ONLY"), "T4") == 0) {
    t4_survival(self);
    return 0;
  }
  CU_OK(cu.mem_get_info(&free0, &total));
  rss0 = rss_kib();
  t0 = now_us();
  if (vk_open(&v) < 0) {
    printf("probe-timeline: no Vulkan device with timeline semaphores and OPAQUE_FD export\n");
    return 77;
  }
  t0 = now_us() - t0;
  CU_OK(cu.mem_get_info(&free1, &total));
  rss1 = rss_kib();
  printf("probe: [T1] a Vulkan instance + device (timelines, external semaphore fd): "
         "%.1f ms to create, resident +%.1f MiB, device memory +%.1f MiB\n", t0 / 1e3,
         (rss1 - rss0) / 1024.0, ((double)free0 - (double)free1) / (1 << 20));
  for (int i = 0; i < 100; i++) {
    double t = now_us();
    sem = mint(&v);
    mint_us[i] = now_us() - t;
    t = now_us();
    fd = export_fd(&v, sem);
    export_us[i] = now_us() - t;
    close(fd);
    vkDestroySemaphore(v.device, sem, NULL);
  }
  qsort(mint_us, 100, sizeof(double), cmp);
  qsort(export_us, 100, sizeof(double), cmp);
  printf("probe: [T2] vkCreateSemaphore (timeline, exportable) p50 %.1f us; "
         "vkGetSemaphoreFdKHR p50 %.1f us (n 100)\n", mint_us[50], export_us[50]);
  sem = mint(&v);
  fd = export_fd(&v, sem);
  fd2 = export_fd(&v, sem);
  fd3 = dup(fd);
  a = import_fd(fd);
  b = import_fd(fd2);
  c = import_fd(fd3);
  printf("probe: [T2] one semaphore into CUDA: first export %s, second export %s, dup of "
         "the first %s; fcntl on the first after its import: %s\n",
         a ? "imported" : "refused", b ? "imported" : "refused", c ? "imported" : "refused",
         fcntl(fd, F_GETFD) < 0 ? "closed (the import took it)" : "still open");
  if (a) {
    CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS g = { .params.fence.value = 7 };
    CUstream s;
    uint64_t got = 0;
    CU_OK(cu.stream_create(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cu.signal(&a, &g, 1, s));
    CU_OK(cu.stream_sync(s));
    VK_OK(vkGetSemaphoreCounterValue(v.device, sem, &got));
    printf("probe: [T2] CUDA signalled 7 through the first import: Vulkan reads %llu\n",
           (unsigned long long)got);
  }
  round_trips(&v, self, WAIT_BLOCKING, "vkWaitSemaphores (blocking)");
  round_trips(&v, self, WAIT_SPIN_COUNTER, "spin on vkGetSemaphoreCounterValue");
  round_trips(&v, self, WAIT_SPIN_ZERO, "spin on vkWaitSemaphores(timeout 0)");
  t4_survival(self);
  return 0;
}
