/* SPDX-License-Identifier: MIT */
/* Speaking the wire protocol directly, as a hostile client would: the fds the daemon
 * hands out can then be examined for what a receiver could do with them. */
#ifndef GPUSHM_TEST_RAW_H
#define GPUSHM_TEST_RAW_H

#include <stdbool.h>
#include <stdint.h>

#include "gpushm.pb-c.h"
#include "wire.h"

/* A connected SOCK_SEQPACKET socket to path. */
int raw_connect(const char *path);
/* Sends req (its request_id is set here) and returns the daemon's reply (free with
 * gpushm__reply__free_unpacked); the fds that came with it go to fds (room for
 * GPUSHM_LIMIT_FDS_PER_FRAME; NULL: they are closed), their count to *n_fds.  NULL if
 * the connection ended. */
Gpushm__Reply *raw_call(int sock, Gpushm__Request *req, int *fds, unsigned *n_fds);
/* raw_call with send_fd attached (register_memory; -1: none); send_fd stays the caller's. */
Gpushm__Reply *raw_call_fd(int sock, Gpushm__Request *req, int send_fd, int *fds,
                           unsigned *n_fds);
/* Hello with client_name; returns the reply's status (0 or a positive error number)
 * and, on success, the status page's fd in *status_fd. */
int raw_hello(int sock, const char *client_name, int *status_fd);
/* The same, offering features (GPUSHM_FEATURE_*). */
int raw_hello_features(int sock, const char *client_name, uint64_t features, int *status_fd);
/* Opens a buffer by name: returns the reply status; fds as for raw_call. */
int raw_open(int sock, const char *name, int read_only, int *fds, unsigned *n_fds);
/* The same of a kind, by name or (name NULL) by id; ring_attach as OpenRequest's. */
int raw_open_kind(int sock, const char *name, uint64_t id, Gpushm__Kind kind, int read_only,
                  bool ring_attach, int *fds, unsigned *n_fds);

#endif
