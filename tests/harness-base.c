/* SPDX-License-Identifier: MIT */
/* What every test program may use without libgpushm: its own path, logging, the
 * open-file limit, a thread's CPU time, the clock, and a crash report (the objects of
 * libharness are linked one by one, so a unit test that links no client library pulls in
 * this file alone). */
#include "config.h"
#include "harness.h"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

void test_sleep_ms(unsigned ms)
{
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
}

uint64_t test_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

double test_clock_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

const char *test_self_path(void)
{
  static char path[4096];

  if (!path[0]) {
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    CHECK(n > 0);
    path[n] = '\0';
  }
  return path;
}

double test_thread_cpu_ms(const char *name)
{
  DIR *tasks = opendir("/proc/self/task");
  struct dirent *e;
  double ms = -1;

  CHECK(tasks != NULL);
  while ((e = readdir(tasks)) != NULL && ms < 0) {
    char path[320], comm[32] = { 0 };
    unsigned long long ns;
    FILE *f;

    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    if (!(f = fopen(path, "r")))
      continue;
    CHECK(fgets(comm, sizeof comm, f) != NULL || feof(f));
    fclose(f);
    comm[strcspn(comm, "\n")] = 0;
    if (strcmp(comm, name) != 0)
      continue;
    /* its first field: time on a CPU, in ns */
    snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
    CHECK((f = fopen(path, "r")) != NULL);
    CHECK(fscanf(f, "%llu", &ns) == 1);
    fclose(f);
    ms = ns / 1e6;
  }
  closedir(tasks);
  CHECK(ms >= 0); /* the thread runs, by its name */
  return ms;
}

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_SANITIZER_REPORT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_SANITIZER_REPORT 1
#endif
#endif

#ifndef HAVE_SANITIZER_REPORT /* AddressSanitizer's own report says more */
/* A test process that crashes prints where (GPU hosts have no debugger): the frames,
 * then the mappings they lie in, so `addr2line -e FILE OFFSET` can name each line.
 * Then it dies of the same signal, so its parent sees what it always saw.  SIGQUIT is
 * how a test's watchdog asks a stuck child the same (tests/gpu/test-cuda-kill-storm). */
static void crash_report(int sig)
{
  static const char head[] = "\n*** crashed; backtrace (then /proc/self/maps):\n";
  void *frames[64];
  char buf[4096];
  ssize_t n;
  int fd;

  (void)!write(STDERR_FILENO, head, sizeof head - 1);
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  if ((fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)) >= 0) {
    while ((n = read(fd, buf, sizeof buf)) > 0)
      (void)!write(STDERR_FILENO, buf, (size_t)n);
    close(fd);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install_crash_report(void)
{
  static char alt_stack[64 * 1024];
  stack_t ss = { .ss_sp = alt_stack, .ss_size = sizeof alt_stack };
  struct sigaction sa = { .sa_handler = crash_report, .sa_flags = SA_ONSTACK | SA_RESETHAND };
  void *warm[1];

  /* backtrace() loads libgcc on first use: not in a signal handler */
  backtrace(warm, 1);
  sigaltstack(&ss, NULL);
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGILL, &sa, NULL);
  sigaction(SIGFPE, &sa, NULL);
  sigaction(SIGQUIT, &sa, NULL);
}
#endif

bool test_raise_nofile(unsigned long need, char *why, size_t why_len)
{
  struct rlimit rl;

  CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= need)
    return true;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
    snprintf(why, why_len, "it needs %lu open files and the hard limit (ulimit -Hn) is %llu",
             need, (unsigned long long)rl.rlim_max);
    return false;
  }
  rl.rlim_cur = need;
  CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
  return true;
}

void test_log(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "# ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

