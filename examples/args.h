/* SPDX-License-Identifier: MIT */
/* The examples' command lines, alike: --help (or -h) prints the usage to stdout and
 * exits 0; an option the program does not take, or more arguments than it takes, print
 * what is wrong and the usage to stderr and exit 2 — never a buffer named "--help". */
#ifndef GPUSHM_EXAMPLE_ARGS_H
#define GPUSHM_EXAMPLE_ARGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void example_args(const char *prog, int argc, char **argv, int max_args,
                                const char *usage)
{
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage, stdout);
      exit(0);
    }
    if (argv[i][0] == '-') {
      fprintf(stderr, "%s: unknown option '%s'\n%s", prog, argv[i], usage);
      exit(2);
    }
  }
  if (argc - 1 > max_args) {
    fprintf(stderr, "%s: at most %d argument%s\n%s", prog, max_args, max_args == 1 ? "" : "s",
            usage);
    exit(2);
  }
}

#endif
