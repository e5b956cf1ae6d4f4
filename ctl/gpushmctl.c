/* SPDX-License-Identifier: MIT */
/* gpushmctl: the admin CLI for gpushmd, built on the public libgpushm API only.
 * Exit status: 0 ok, 1 the operation failed (the daemon's reason on stderr), 2 usage. */
#include "config.h"
#include "ctl.h"
#include "doctor.h"
#include "dump.h"
#include "escape.h"
#include "fail.h"
#include "format.h"
#include "textfile.h"
#include "gpushm-admin.h"
#include "gpushm-graphics.h"
#include "gpushm_limits.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <langinfo.h>
#include <locale.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>


static int cmd_ping(struct ctl *ctl, int argc, char **argv)
{
  struct timespec a, b;
  int r;

  clock_gettime(CLOCK_MONOTONIC, &a);
  r = gpushm_ping(ctl->conn);
  clock_gettime(CLOCK_MONOTONIC, &b);
  if (r < 0)
    return ctl_fail("ping", r);
  printf("gpushmd answered in %.1f us\n", (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3);
  return 0;
}

/* What an object of kind is, for a sentence ("NAME (id 7, a ring) is there"). */
static const char *kind_noun(gpushm_kind_t kind)
{
  switch (kind) {
  case GPUSHM_KIND_EVENT: return "an event";
  case GPUSHM_KIND_TIMELINE: return "a timeline";
  case GPUSHM_KIND_RING: return "a ring";
  case GPUSHM_KIND_WEIGHTS: return "a weight set";
  case GPUSHM_KIND_IMAGE: return "an image";
  default: return "a buffer";
  }
}

/* The kind of what name made visible to this user, where the wait's open (a buffer's)
 * was refused for it being of another kind (GPUSHM_E_INVAL, only for an object the user
 * may see, or any for an admin: the lists show no more); 0 where neither list has such a
 * name, linked, and of a kind a buffer's open refuses. */
static gpushm_kind_t made_as_another_kind(struct ctl *ctl, const char *name, uint64_t *id)
{
  gpushm_kind_t kind = 0;

  for (unsigned flags = 0; !kind && flags <= GPUSHM_LIST_ALL; flags += GPUSHM_LIST_ALL) {
    gpushm_buffer_list_t *list;
    const gpushm_buffer_info_t *b;

    if (gpushm_list(ctl->conn, flags, &list) < 0)
      break; /* (every user's: root and the admin group only) */
    if ((b = find_listed(list, name, false, 0)) && gpushm_buffer_info_linked(b) &&
        gpushm_buffer_info_kind(b) != GPUSHM_KIND_BUFFER &&
        gpushm_buffer_info_kind(b) != GPUSHM_KIND_IMAGE) {
      kind = gpushm_buffer_info_kind(b);
      *id = gpushm_buffer_info_id(b);
    }
    gpushm_buffer_list_free(list);
  }
  return kind;
}

/* Waits for NAME to be made (an open that gpushmd holds until then, unmapped: no GPU
 * driver needed here), then says so; with --timeout, gives up after that long.  The open
 * is a buffer's, and a ring, timeline, weight set or event that NAME names ends it with
 * GPUSHM_E_INVAL: then the list says what is there. */
static int cmd_wait(struct ctl *ctl, int argc, char **argv)
{
  gpushm_open_opts_t opts;
  gpushm_buffer_t *b = NULL;
  gpushm_kind_t kind = GPUSHM_KIND_BUFFER;
  struct timespec a, c;
  uint64_t id = 0;
  int r;

  (void)argc;
  gpushm_open_opts_init(&opts);
  opts.flags = GPUSHM_OPEN_READONLY;
  opts.map_device = GPUSHM_DEVICE_NONE;
  opts.wait_ms = ctl->wait_ms;
  clock_gettime(CLOCK_MONOTONIC, &a);
  if ((r = gpushm_buffer_open_ex(ctl->conn, argv[0], 0, &opts, &b)) < 0) {
    char why[1024], line[1100];
    snprintf(why, sizeof why, "%s", gpushm_last_error_message());
    if (r != GPUSHM_E_INVAL || !(kind = made_as_another_kind(ctl, argv[0], &id))) {
      fprintf(stderr, "gpushmctl: wait: %s\n", text(ctl_error_text(r, why, line, sizeof line), 0));
      return EXIT_FAILED;
    }
  } else {
    id = gpushm_buffer_id(b);
    kind = gpushm_buffer_kind(b);
    gpushm_buffer_close(b);
  }
  clock_gettime(CLOCK_MONOTONIC, &c);
  printf("%s (id %" PRIu64 ", %s) is there, after %.3f s\n", text(argv[0], 0), id, kind_noun(kind),
         (double)(c.tv_sec - a.tv_sec) + (c.tv_nsec - a.tv_nsec) / 1e9);
  return 0;
}

static void print_versions(void)
{
  printf("gpushmctl %s (libgpushm %s)\n", PACKAGE_VERSION, gpushm_version_string());
}

/* This side's versions first: they are known whether or not gpushmd answers. */
static int cmd_version(struct ctl *ctl, int argc, char **argv)
{
  gpushm_stats_t *s;
  int r;

  (void)argc;
  (void)argv;
  print_versions();
  fflush(stdout);
  if ((r = gpushm_connect(ctl->socket, "gpushmctl", &ctl->conn)) < 0)
    return ctl_fail("version: gpushmd could not be reached", r);
  if ((r = gpushm_stats(ctl->conn, &s)) < 0)
    return ctl_fail("version: gpushmd did not say its version", r);
  printf("gpushmd %s\n", text(gpushm_stats_daemon_version(s), 0));
  gpushm_stats_free(s);
  return 0;
}

static int cmd_doctor(struct ctl *ctl, int argc, char **argv)
{
  (void)argc;
  (void)argv;
  if (ctl->backend == GPUSHM_BACKEND_CUDA_FABRIC) {
    /* Its rows (cuda-fabric/...) come with every run; it is for other nodes, so no
     * verdict about this process is given for it. */
    fprintf(stderr, "gpushmctl: doctor judges host, cuda-ipc or cuda-fd; every run reports "
            "cuda-fabric in its own rows\n");
    return EXIT_USAGE;
  }
  return ctl_doctor(ctl->socket, ctl->backend);
}

static int check_dump(struct ctl *ctl, int argc, char **argv)
{
  (void)argc;
  if (ctl->dump.raw && isatty(STDOUT_FILENO)) {
    fprintf(stderr, "gpushmctl: dump: --format raw writes the bytes as they are, and standard "
            "output is a terminal: redirect it to a file or a pipe (gpushmctl dump %s --format "
            "raw > FILE), or leave out --format for hex\n", text(argv[0], 0));
    return EXIT_USAGE;
  }
  return 0;
}

static int cmd_dump(struct ctl *ctl, int argc, char **argv)
{
  gpushm_buffer_list_t *list;
  int r;

  (void)argc;
  ctl->dump.arg = argv[0];
  ctl->dump.by_id = arg_is_id(argv[0], &ctl->dump.id);
  /* the listing says what it is (events and optimal-tiling images are refused before
   * any open); the open itself decides whether this user may read it */
  if ((r = gpushm_list(ctl->conn, 0, &list)) < 0)
    return ctl_fail("dump", r);
  r = ctl_dump(ctl->conn, find_listed(list, argv[0], ctl->dump.by_id, ctl->dump.id), &ctl->dump);
  gpushm_buffer_list_free(list);
  return r;
}

static const struct cmd_entry commands[] = {
  { "list", NULL, "", "list buffers: name, id, backend, size, owner, mode, references, holders",
    "all,json,bytes", 0, 0, cmd_list, NULL, false },
  { "show", NULL, "NAME|ID", "everything known about one buffer or event", "all,json,bytes", 1, 1,
    cmd_show, NULL, false },
  { "clients", NULL, "", "connected clients and what they hold", "json,bytes", 0, 0, cmd_clients,
    NULL, false },
  { "stats", NULL, "", "daemon counters, memory by backend and device", "json,prometheus,bytes,textfile", 0, 0,
    cmd_stats, NULL, false },
  { "create", NULL, "NAME SIZE", "create a buffer (it stays until unlinked)",
    "device,mode,group,session,backend,sync,metadata,strict-mode", 2, 2, cmd_create, check_create,
    false },
  { "create-image", NULL, "NAME WIDTHxHEIGHT",
    "create a linear image (prints its name, id and row pitch)",
    "device,mode,session,backend,format", 2, 2, cmd_create_image, check_create_image, false },
  { "unlink", "destroy", "NAME", "remove a buffer's or event's name; memory goes with its last holder",
    "", 1, 1, cmd_unlink, NULL, false },
  { "disconnect", NULL, "CLIENT", "end a client's connection, releasing its references", "", 1, 1,
    cmd_disconnect, check_disconnect, false },
  { "events", NULL, "", "list inter-process events", "all,json", 0, 0, cmd_events, NULL, false },
  { "dump", NULL, "NAME|ID", "print a buffer's bytes (hex as xxd -a, or raw), read-only",
    "offset,length,format", 1, 1, cmd_dump, check_dump, false },
  { "wait", NULL, "NAME", "wait until a buffer (or image, ring, ...) named NAME is made",
    "timeout", 1, 1, cmd_wait, NULL, false },
  { "ping", NULL, "", "check that gpushmd answers", "", 0, 0, cmd_ping, NULL, false },
  { "version", NULL, "", "versions of gpushmctl, libgpushm and gpushmd", "", 0, 0, cmd_version,
    NULL, true },
  { "doctor", NULL, "", "which backends work for this process, and why the others do not",
    "backend", 0, 0, cmd_doctor, NULL, true },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const struct option long_options[] = {
  { "socket", required_argument, NULL, 's' },
  { "json", no_argument, NULL, 'j' },
  { "bytes", no_argument, NULL, 'b' },
  { "all", no_argument, NULL, 'a' },
  { "prometheus", no_argument, NULL, 'p' },
  { "device", required_argument, NULL, 'd' },
  { "mode", required_argument, NULL, 'm' },
  { "session", no_argument, NULL, 'S' },
  { "backend", required_argument, NULL, 'B' },
  { "sync", no_argument, NULL, 'y' },
  { "strict-mode", no_argument, NULL, 'X' },
  { "metadata", required_argument, NULL, 'M' },
  { "format", required_argument, NULL, 'F' },
  { "textfile", required_argument, NULL, 'T' },
  { "offset", required_argument, NULL, 'O' },
  { "length", required_argument, NULL, 'L' },
  { "timeout", required_argument, NULL, 't' },
  { "group", required_argument, NULL, 'g' },
  { "help", no_argument, NULL, 'h' },
  { "version", no_argument, NULL, 'V' },
  { NULL, 0, NULL, 0 },
};

/* A command's options, as --help lists them (and as the shell completions in
 * completion/ offer them: tests/integration/test-completion.sh holds the two together). */
static const struct option_help {
  const char *name, *arg, *text;
} option_help[] = {
  { "all", NULL, "every user's buffers (root or the daemon's admin group)" },
  { "json", NULL, "machine-readable output (stable field names)" },
  { "bytes", NULL, "exact byte counts instead of KiB/MiB/GiB" },
  { "prometheus", NULL, "Prometheus text exposition format" },
  { "device", "N", "CUDA device (daemon's ordinal), default 0" },
  { "mode", "MODE", "permission bits, octal, default 0600" },
  { "group", "GROUP", "the buffer's group (a name or gid you belong to), whose members "
    "the mode's group bits are for; default your primary group" },
  { "session", NULL, "unlinked when gpushmctl disconnects (for tests)" },
  { "backend", "B", "host, cuda-ipc, cuda-fd or cuda-fabric (default: gpushmd's default)" },
  { "sync", NULL, "with acquire/release ordering" },
  { "strict-mode", NULL, "refuse a mode the backend cannot keep (read-only for group or others "
    "on device memory: docs/security.md)" },
  { "metadata", "TEXT", "kept with the buffer, shown by show and list --json" },
  { "format", "F", "image format, default rgba8-unorm (docs/graphics.md)" },
  { "textfile", "FILE", "replace FILE whole with the output (node_exporter's textfile "
    "collector; links in its directory are not followed)" },
  { "offset", "N", "start N bytes in (K, M, G, T suffixes), default 0" },
  { "length", "N", "that many bytes (K, M, G, T suffixes), default to the end" },
  { "timeout", "SECONDS", "give up after that long (exit 1; default: wait for ever); at most "
    "3600 at a time" },
};

/* --format is an image format to create-image and an output form to dump. */
static const struct option_help dump_format_help = {
  "format", "F", "hex (default: as xxd -a) or raw (the bytes, not to a terminal)"
};

/* Whether name is an item of the comma-separated list (whole items: "mode" is not
 * "strict-mode"). */
static bool has_item(const char *list, const char *name)
{
  size_t n = strlen(name);

  for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
    if (strncmp(p, name, n) == 0 && (p[n] == ',' || !p[n]))
      return true;
  }
  return false;
}

/* Columns of NAME ARGS before the summaries: the longest that fits, others on a line
 * of their own. */
#define USAGE_COLUMN 24

static void usage(FILE *out)
{
  fprintf(out, "Usage: gpushmctl [--socket PATH] COMMAND [OPTION]... [ARG]...\n"
               "       gpushmctl --version\n"
               "Inspect and manage the buffers gpushmd shares.\n\nCommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++) {
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", commands[i].name, *commands[i].args ? " " : "",
             commands[i].args);
    if (strlen(left) > USAGE_COLUMN)
      fprintf(out, "  %s\n  %-*s %s", left, USAGE_COLUMN, "", commands[i].summary);
    else
      fprintf(out, "  %-*s %s", USAGE_COLUMN, left, commands[i].summary);
    if (commands[i].alias)
      fprintf(out, " (also '%s')", commands[i].alias);
    fputc('\n', out);
  }
  fprintf(out, "\n'gpushmctl COMMAND --help' lists a command's options.  The socket is\n"
               "$GPUSHM_SOCKET, else " GPUSHM_DEFAULT_SOCKET ".  Words after '--',\n"
               "and negative numbers anywhere, are arguments, not options.\n"
               "Exit status: 0 ok, 1 the operation failed (doctor: the backend it judges\n"
               "does not work for this process), 2 usage error.\n");
}

#define OPTION_COLUMN 17

static void command_usage(const struct cmd_entry *cmd, FILE *out)
{
  fprintf(out, "Usage: gpushmctl %s%s%s [OPTION]...\n%s\n", cmd->name, *cmd->args ? " " : "",
          cmd->args, cmd->summary);
  for (size_t i = 0; i < sizeof option_help / sizeof option_help[0]; i++) {
    const struct option_help *h = &option_help[i];
    char left[32];
    if (!has_item(cmd->options, h->name))
      continue;
    if (strcmp(h->name, "format") == 0 && strcmp(cmd->name, "dump") == 0)
      h = &dump_format_help;
    snprintf(left, sizeof left, "--%s%s%s", h->name, h->arg ? " " : "", h->arg ? h->arg : "");
    fprintf(out, "  %-*s %s\n", OPTION_COLUMN, left, h->text);
  }
}

/* Output is buffered and mostly written at exit: a full disk or a closed pipe shows
 * only there, and a caller writing a file (gpushm-textfile) must not take a cut-short
 * one for success. */
static void close_stdout(void)
{
  if (fclose(stdout) != 0) {
    fprintf(stderr, "gpushmctl: writing the output failed: %s\n", strerror(errno));
    _exit(EXIT_FAILED);
  }
}

/* Whether the option argv[i] (not of the form --name=VALUE) takes the next word as its
 * value: getopt_long's rules, unambiguous prefixes of long names included. */
static bool takes_value(const char *arg)
{
  size_t n;
  bool value = false, found = false;

  if (arg[1] != '-')
    return arg[1] == 's' && !arg[2]; /* -s PATH; "-sPATH" carries its value */
  arg += 2;
  if (strchr(arg, '='))
    return false;
  n = strlen(arg);
  for (const struct option *o = long_options; o->name; o++) {
    if (strncmp(o->name, arg, n) != 0)
      continue;
    if (!o->name[n])
      return o->has_arg == required_argument; /* an exact match wins */
    value |= o->has_arg == required_argument;
    found = true;
  }
  return found && value;
}

/* The command's words, split into options (with their values) for getopt and arguments:
 * '--' ends the options, and a word that starts with '-' and a digit is an argument
 * (a negative number: "create x -1", "disconnect -1"), so that it reaches the
 * command's own check and its error, not getopt's "invalid option -- '1'".  Options may
 * still come after arguments, as getopt_long allows. */
static void split_words(int argc, char **argv, char **opts, int *n_opts, char **args, int *n_args)
{
  int i = 1;

  *n_opts = *n_args = 0;
  opts[(*n_opts)++] = argv[0];
  for (; i < argc; i++) {
    const char *w = argv[i];
    if (strcmp(w, "--") == 0) {
      i++;
      break;
    }
    if (w[0] != '-' || !w[1] || isdigit((unsigned char)w[1])) {
      args[(*n_args)++] = argv[i];
      continue;
    }
    opts[(*n_opts)++] = argv[i];
    if (takes_value(w) && i + 1 < argc)
      opts[(*n_opts)++] = argv[++i];
  }
  for (; i < argc; i++)
    args[(*n_args)++] = argv[i];
  opts[*n_opts] = NULL;
  args[*n_args] = NULL;
}

/* The command's words, split by split_words(): its options parsed, its arguments
 * checked, then the command run.  A function of its own so that main() frees the word
 * arrays after every way out of it. */
static int run_command(struct ctl *ctl, const struct cmd_entry *cmd, int n_opts, char **opts,
                       char **args, int n_args)
{
  int opt, r;
  uint64_t size;

  optind = 0; /* 0, not 1: GNU getopt then forgets the first scan's state */
  while ((opt = getopt_long(n_opts, opts, "+s:h", long_options, NULL)) != -1) {
    const char *name = NULL;
    int b;
    char *end;
    switch (opt) {
    case 'h':
      command_usage(cmd, stdout);
      return 0;
    case 's': ctl->socket = optarg; continue;
    case 'j': name = "json"; ctl->json = true; break;
    case 'b': name = "bytes"; ctl->bytes = true; break;
    case 'a': name = "all"; ctl->all = true; break;
    case 'p': name = "prometheus"; ctl->prometheus = true; break;
    case 'S': name = "session"; ctl->session = true; break;
    case 'y': name = "sync"; ctl->sync = true; break;
    case 'X': name = "strict-mode"; ctl->strict_mode = true; break;
    case 'M': name = "metadata"; ctl->metadata = optarg; break;
    case 'T': name = "textfile"; ctl->textfile = optarg; break;
    case 'V': name = "version"; break;
    case 'F':
      name = "format";
      if (strcmp(cmd->name, "dump") == 0) {
        if (strcmp(optarg, "hex") != 0 && strcmp(optarg, "raw") != 0) {
          fprintf(stderr, "gpushmctl: dump: unknown format '%s' (hex or raw)\n", optarg);
          return EXIT_USAGE;
        }
        ctl->dump.raw = optarg[0] == 'r';
      } else if (!(ctl->format = (uint32_t)gpushm_format_from_name(optarg))) {
        fprintf(stderr, "gpushmctl: unknown format '%s' (rgba8-unorm, r32-sfloat, ...: "
                "docs/graphics.md)\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'O':
    case 'L':
      name = opt == 'O' ? "offset" : "length";
      if (parse_size(optarg, &size) < 0) {
        fprintf(stderr, "gpushmctl: bad %s '%s' (bytes, or with K, M, G, T: binary, either "
                "case)\n", name, optarg);
        return EXIT_USAGE;
      }
      if (opt == 'O')
        ctl->dump.offset = size;
      else
        ctl->dump.length = size, ctl->dump.has_length = true;
      break;
    case 't': {
      double s = strtod(optarg, &end);
      name = "timeout";
      if (*end || !*optarg || !(s >= 0) || s * 1000 > GPUSHM_LIMIT_OPEN_WAIT_MS) {
        fprintf(stderr, "gpushmctl: bad timeout '%s' (seconds, 0 to %u)\n", optarg,
                GPUSHM_LIMIT_OPEN_WAIT_MS / 1000);
        return EXIT_USAGE;
      }
      ctl->wait_ms = (int32_t)(s * 1000 + 0.5);
      break;
    }
    case 'g': {
      struct group *g = getgrnam(optarg);
      unsigned long gid = strtoul(optarg, &end, 10);
      name = "group";
      if (g)
        ctl->group = g->gr_gid;
      else if (isdigit((unsigned char)*optarg) && !*end && gid < UINT32_MAX) /* (not "-1") */
        ctl->group = (int64_t)gid;
      else {
        fprintf(stderr, "gpushmctl: no group '%s' here (a group name or gid)\n", optarg);
        return EXIT_USAGE;
      }
      break;
    }
    case 'd':
      name = "device";
      ctl->device = (int)strtol(optarg, &end, 10);
      if (*end || ctl->device < 0) {
        fprintf(stderr, "gpushmctl: bad device '%s'\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'm':
      name = "mode";
      ctl->mode = (uint32_t)strtoul(optarg, &end, 8);
      if (*end || !*optarg || ctl->mode > 0777) {
        fprintf(stderr, "gpushmctl: bad mode '%s' (octal, at most 0777)\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'B':
      name = "backend";
      b = gpushm_backend_from_name(optarg);
      /* cuda-event names what events report, not a backend to make buffers with */
      if (b > 0 && b != 4)
        ctl->backend = (gpushm_backend_t)b;
      else {
        fprintf(stderr, "gpushmctl: unknown backend '%s' (host, cuda-ipc, cuda-fd or "
                "cuda-fabric)\n", optarg);
        return EXIT_USAGE;
      }
      break;
    default:
      command_usage(cmd, stderr);
      return EXIT_USAGE;
    }
    if (!has_item(cmd->options, name)) {
      fprintf(stderr, "gpushmctl: %s takes no --%s\n", cmd->name, name);
      return EXIT_USAGE;
    }
  }
  /* what getopt left (words after an option that lacked its value) are arguments too */
  for (int i = optind; i < n_opts; i++)
    args[n_args++] = opts[i];
  if (n_args < cmd->min_args || n_args > cmd->max_args) {
    command_usage(cmd, stderr);
    return EXIT_USAGE;
  }
  if (cmd->check && (r = cmd->check(ctl, n_args, args)) != 0)
    return r;
  if (!cmd->connects_itself && (r = gpushm_connect(ctl->socket, "gpushmctl", &ctl->conn)) < 0)
    return ctl_fail("connect", r);
  r = cmd->run(ctl, n_args, args);
  gpushm_disconnect(ctl->conn);
  return r;
}

int main(int argc, char **argv)
{
  struct ctl ctl = { .mode = 0, .wait_ms = GPUSHM_TIMEOUT_INFINITE,
                     .group = GPUSHM_GROUP_OF_CREATOR };
  const struct cmd_entry *cmd = NULL;
  char **opts, **args;
  int opt, r, n_opts, n_args;

  /* LC_CTYPE only: it says whether the terminal takes UTF-8 and how wide characters are;
   * numbers and messages stay in the C locale. */
  setlocale(LC_CTYPE, "");
  escape_init();
  /* A listing of 100k rows into a pipe or file: a few large writes, not one per
   * st_blksize (a terminal keeps its line buffering, which a person reads by). */
  if (!isatty(STDOUT_FILENO))
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  atexit(close_stdout);
  /* global options come before the command, the command's after it */
  while ((opt = getopt_long(argc, argv, "+s:hV", long_options, NULL)) != -1) {
    if (opt == 's') {
      ctl.socket = optarg;
    } else if (opt == 'h') {
      usage(stdout);
      return 0;
    } else if (opt == 'V') {
      /* this side only: no daemon is asked (gpushmctl version asks it too) */
      print_versions();
      return 0;
    } else {
      usage(stderr);
      return EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return EXIT_USAGE;
  }
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(argv[optind], commands[i].name) == 0 ||
        (commands[i].alias && strcmp(argv[optind], commands[i].alias) == 0))
      cmd = &commands[i];
  if (!cmd) {
    fprintf(stderr, "gpushmctl: unknown command '%s'\n", argv[optind]);
    usage(stderr);
    return EXIT_USAGE;
  }
  argc -= optind;
  argv += optind;
  opts = xalloc(calloc((size_t)argc + 1, sizeof *opts));
  args = xalloc(calloc((size_t)argc + 1, sizeof *args));
  split_words(argc, argv, opts, &n_opts, args, &n_args);
  r = run_command(&ctl, cmd, n_opts, opts, args, n_args);
  free(opts);
  free(args);
  return r;
}

