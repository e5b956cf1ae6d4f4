/* SPDX-License-Identifier: MIT */
/* What the GPU tests that pair CUDA and Vulkan processes share (test-cuda-graphics,
 * test-cuda-vulkan-sync, test-cuda-vulkan-ring): roles run in fresh processes (CUDA and
 * Vulkan each initialise there, consumers as uid 65534), a report pipe on fd 3, and the
 * Vulkan submission of a timeline wait and signal. */
#ifndef GPUSHM_TESTS_GPU_CUDA_VK_ROLES_H
#define GPUSHM_TESTS_GPU_CUDA_VK_ROLES_H

#include "cuda-test.h"
#include "vk-context.h"

#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern const char test_kernels_ptx[];

static inline double roles_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A role's connection, to the daemon its parent named in GPUSHM_SOCKET. */
static inline gpushm_t *roles_connect(const char *role)
{
  gpushm_t *conn;
  CHECK_OK(gpushm_connect(getenv("GPUSHM_SOCKET"), role, &conn));
  return conn;
}

static inline CUfunction roles_kernel(const char *name)
{
  static CUmodule mod;
  CUfunction f;
  if (!mod)
    CU_CHECK(cuda_test_load_module(test_kernels_ptx, &mod));
  CU_CHECK(CU_CALL(&drv, cuModuleGetFunction, &f, mod, name));
  return f;
}

/* A timeline another role makes, waited for (10 s at most: the test fails). */
static inline gpushm_timeline_t *roles_open_timeline(gpushm_t *conn, const char *name,
                                                     unsigned flags)
{
  gpushm_timeline_t *tl;
  for (int i = 0; i < 1000; i++) {
    if (gpushm_timeline_open(conn, name, flags, &tl) == 0)
      return tl;
    usleep(10000);
  }
  fprintf(stderr, "no timeline '%s' within 10 s\n", name);
  exit(1);
}

/* A timeline of this role's session, readable by every uid (consumers run as 65534). */
static inline gpushm_timeline_t *roles_create_timeline(gpushm_t *conn, const char *name)
{
  gpushm_create_opts_t opts;
  gpushm_timeline_t *tl;

  gpushm_create_opts_init(&opts);
  opts.mode = 0644;
  opts.lifetime = GPUSHM_LIFETIME_SESSION;
  CHECK_OK(gpushm_timeline_create(conn, name, &opts, &tl));
  return tl;
}

/* Vulkan on the GPU host, where it must work: a failure fails the test.  sync: with
 * external semaphores and host memory imports too. */
static inline void roles_open_vk(struct vkc *c, bool sync)
{
  char why[256];
  if (vkc_open(c, NULL, why, sizeof why) < 0) {
    fprintf(stderr, "Vulkan on a GPU host: %s\n", why);
    exit(1);
  }
  if (sync && (!c->has_semaphore_fd || !c->has_host_import)) {
    fprintf(stderr, "Vulkan on a GPU host: %s lacks external semaphores or host memory\n",
            c->props.deviceName);
    exit(1);
  }
}

/* Starts self with argv (NULL-terminated, as main() gets it) in a fresh process, as uid
 * 65534 if asked, connecting to socket; fd 3 its report pipe (*report_fd the read end;
 * NULL: none). */
static inline pid_t roles_start(const char *self, const char *socket, char *const argv[],
                                bool as_nobody, int *report_fd)
{
  int p[2] = { -1, -1 };
  pid_t pid;

  CHECK(!report_fd || pipe(p) == 0);
  CHECK((pid = fork()) >= 0);
  if (pid == 0) {
    if (report_fd) {
      close(p[0]);
      if (p[1] != 3) {
        CHECK(dup2(p[1], 3) == 3);
        close(p[1]);
      }
    }
    setenv("GPUSHM_SOCKET", socket, 1);
    if (as_nobody)
      CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
    cuda_test_child_env();
    execv(self, argv);
    _exit(127);
  }
  if (report_fd) {
    close(p[1]);
    *report_fd = p[0];
  }
  return pid;
}

/* Its exit status (128 + signal for a signal); report_fd (-1: none) closed. */
static inline int roles_finish(pid_t pid, int report_fd)
{
  int status;
  if (report_fd >= 0)
    close(report_fd);
  CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A role's report on fd 3. */
static inline void roles_report(const char *word)
{
  CHECK(write(3, word, strlen(word)) == (ssize_t)strlen(word));
}

static inline void roles_expect(int fd, char want)
{
  char got = 0;
  CHECK(read(fd, &got, 1) == 1 && got == want);
}

/* A number a role reported, read to the pipe's end. */
static inline double roles_read_number(int fd)
{
  char buf[64] = { 0 };
  ssize_t n = 0, r;
  while ((r = read(fd, buf + n, sizeof buf - 1 - (size_t)n)) > 0)
    n += r;
  return atof(buf);
}

/* One submission: cb (may be NULL) waiting for wait_sem >= wait_v, signalling
 * signal_sem to signal_v (either may be VK_NULL_HANDLE), and fence. */
static inline void roles_submit(struct vkc *c, VkCommandBuffer cb, VkSemaphore wait_sem,
                                uint64_t wait_v, VkSemaphore signal_sem, uint64_t signal_v,
                                VkFence fence)
{
  VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
  VkTimelineSemaphoreSubmitInfo ts = { .sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                       .waitSemaphoreValueCount = wait_sem ? 1 : 0,
                                       .pWaitSemaphoreValues = &wait_v,
                                       .signalSemaphoreValueCount = signal_sem ? 1 : 0,
                                       .pSignalSemaphoreValues = &signal_v };
  VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &ts,
                      .waitSemaphoreCount = wait_sem ? 1 : 0, .pWaitSemaphores = &wait_sem,
                      .pWaitDstStageMask = &stage, .commandBufferCount = cb ? 1 : 0,
                      .pCommandBuffers = &cb, .signalSemaphoreCount = signal_sem ? 1 : 0,
                      .pSignalSemaphores = &signal_sem };
  VkResult r = vkQueueSubmit(c->queue, 1, &si, fence);

  if (r != VK_SUCCESS) {
    fprintf(stderr, "vkQueueSubmit: VkResult %d\n", (int)r);
    exit(1);
  }
}

#endif
