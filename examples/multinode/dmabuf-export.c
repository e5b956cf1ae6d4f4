/* SPDX-License-Identifier: MIT */
/* The local half of sending a gpushm buffer to another node (docs/multinode.md): opens
 * a cuda-fd or cuda-fabric buffer read-write, exports it whole as a dma-buf and prints
 * what an RDMA registration of it takes, and a cuda-fabric buffer's fabric handle.  It
 * registers nothing itself, so it needs neither ibverbs nor UCX headers, and it lets go
 * of everything before it exits: an exporter that really sends keeps the open, the fd
 * and its registration until the engine says the remote side is done.
 * Usage: dmabuf-export BUFFER_NAME [SOCKET] */
#include <gpushm.h>

#include "../args.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void die(const char *what, int r)
{
  fprintf(stderr, "dmabuf-export: %s: %s: %s\n", what, gpushm_strerror(r),
          gpushm_last_error_message());
  exit(1);
}

static const char *backend_name(gpushm_backend_t backend)
{
  switch (backend) {
  case GPUSHM_BACKEND_CUDA_FD: return "cuda-fd";
  case GPUSHM_BACKEND_CUDA_FABRIC: return "cuda-fabric";
  case GPUSHM_BACKEND_CUDA_IPC: return "cuda-ipc";
  default: return "host";
  }
}

static const char usage[] =
  "usage: dmabuf-export BUFFER_NAME [SOCKET]\n"
  "  Opens the cuda-fd or cuda-fabric buffer BUFFER_NAME read-write through gpushmd\n"
  "  (SOCKET, else $GPUSHM_SOCKET, else /run/gpushm/gpushmd.sock), exports it whole as\n"
  "  a dma-buf and prints what an RDMA registration of it takes (docs/multinode.md);\n"
  "  a cuda-fabric buffer's fabric handle too.  Registers nothing; exits 0.\n";

int main(int argc, char **argv)
{
  uint8_t handle[GPUSHM_FABRIC_HANDLE_BYTES];
  uint64_t page, length, iova;
  gpushm_buffer_t *buf;
  gpushm_t *conn;
  int fd, r;

  example_args("dmabuf-export", argc, argv, 2, usage);
  if (argc < 2) {
    fprintf(stderr, "dmabuf-export: which buffer?\n%s", usage);
    return 2;
  }
  if ((r = gpushm_connect(argc > 2 ? argv[2] : NULL, "dmabuf-export", &conn)) < 0)
    die("connect", r);
  /* Read-write: whoever registers a dma-buf may write through it, so a read-only open
   * is refused one (GPUSHM_E_PERM). */
  if ((r = gpushm_buffer_open(conn, argv[1], 0, &buf)) < 0)
    die(argv[1], r);

  /* A dma-buf range is whole pages.  The page holding the buffer's last byte is the
   * buffer's own (slots and allocations are whole pages), so the rounded size is
   * allowed and covers the whole buffer. */
  page = (uint64_t)sysconf(_SC_PAGESIZE);
  length = (gpushm_buffer_size(buf) + page - 1) / page * page;
  if ((r = gpushm_buffer_export_dmabuf(buf, 0, length, &fd)) < 0)
    die("export dma-buf", r);

  /* The device pointer as the MR's iova, as libfabric's verbs provider registers GPU
   * memory: the peer then addresses the buffer by the numbers this process's kernels
   * use. */
  iova = (uint64_t)(uintptr_t)gpushm_buffer_ptr(buf);
  printf("buffer    '%s' (id %llu), %s, %llu bytes\n", gpushm_buffer_name(buf),
         (unsigned long long)gpushm_buffer_id(buf), backend_name(gpushm_buffer_backend(buf)),
         (unsigned long long)gpushm_buffer_size(buf));
  printf("dma-buf   fd %d in process %ld (close-on-exec: hand it on with SCM_RIGHTS)\n", fd,
         (long)getpid());
  printf("offset    0\n");
  printf("length    %llu\n", (unsigned long long)length);
  printf("iova      0x%llx\n", (unsigned long long)iova);
  printf("device    %d (this process's ordinal: NIXL's devId)\n", gpushm_buffer_device(buf));
  /* As narrow as the transfer: a peer that reads needs no write access. */
  printf("register  ibv_reg_dmabuf_mr(pd, 0, %llu, 0x%llx, %d, IBV_ACCESS_REMOTE_READ)\n"
         "          (a target: IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)\n",
         (unsigned long long)length, (unsigned long long)iova, fd);

  r = gpushm_buffer_fabric_handle(buf, handle);
  if (r == 0) {
    printf("fabric    ");
    for (int i = 0; i < GPUSHM_FABRIC_HANDLE_BYTES; i++)
      printf("%02x", handle[i]);
    printf("\n");
  } else if (r == GPUSHM_E_INVAL || r == GPUSHM_E_PERM) {
    printf("fabric    none: %s\n", gpushm_last_error_message());
  } else {
    die("fabric handle", r);
  }

  /* The dma-buf goes before the buffer.  It keeps the device memory allocated by itself,
   * after gpushmd has freed it and out of its books, and a carved buffer's slot is
   * handed to the next buffer of its class once closed: a registration still alive
   * would read and write that buffer's data.  A real exporter deregisters first
   * (ibv_dereg_mr, ucp_mem_unmap, nixlAgent::deregisterMem). */
  close(fd);
  if ((r = gpushm_buffer_close(buf)) < 0)
    die("close", r);
  gpushm_disconnect(conn);
  return 0;
}
