/* SPDX-License-Identifier: MIT */
/* Why gpushm_connect() could not reach gpushmd, in one message per cause with its fix. */
#ifndef GPUSHM_CLIENT_CONNECT_ERROR_H
#define GPUSHM_CLIENT_CONNECT_ERROR_H

/* Where the socket path came from, for the message: the caller, $GPUSHM_SOCKET or the
 * default. */
enum socket_source { SOCKET_GIVEN, SOCKET_FROM_ENV, SOCKET_DEFAULT };

/* Records the reason connect(2) on path failed with errno err (the library's last error,
 * with err as its errno) and returns GPUSHM_E_CONNECT. */
int client_connect_error(const char *path, enum socket_source source, int err);

#endif
