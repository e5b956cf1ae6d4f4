/* SPDX-License-Identifier: MIT */
/* Images and registered memory without a graphics API (tests/graphics/ has Vulkan and
 * GL): linear images gpushmd allocates and their refusals; memory a process registers
 * (a memfd stands for what Mesa's lavapipe exports as an OPAQUE_FD), kept after the
 * registrar exits, imported by another uid's CUDA (the fake driver) or handed on as an
 * fd to a graphics importer; every fd that is not such memory refused without harm;
 * quotas and modes as for any buffer, attacked as uid 65534. */
#define _GNU_SOURCE
#include "config.h"
#include "harness.h"
#include "raw.h"
#include "gpushm.h"
#include "gpushm-graphics.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PATTERN 0x5eed0000u
#define MEM_BYTES (1u << 20)

static void fill(uint32_t *words, size_t n, uint32_t seed)
{
  for (size_t i = 0; i < n; i++)
    words[i] = seed + (uint32_t)i;
}

static int check_words(const uint32_t *words, size_t n, uint32_t seed)
{
  for (size_t i = 0; i < n; i++)
    if (words[i] != seed + (uint32_t)i)
      return 0;
  return 1;
}

/* A memfd of MEM_BYTES holding the pattern: what a graphics API exported. */
static int exported_memory(uint32_t seed)
{
  int fd = memfd_create("graphics-export", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  uint32_t *p;

  CHECK(fd >= 0 && ftruncate(fd, MEM_BYTES) == 0);
  p = mmap(NULL, MEM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(p != MAP_FAILED);
  fill(p, MEM_BYTES / 4, seed);
  munmap(p, MEM_BYTES);
  return fd;
}

static void first_device_uuid(uint8_t uuid[16])
{
  gpushm_local_device_list_t *list;
  CHECK_OK(gpushm_local_devices(&list));
  CHECK(gpushm_local_device_list_count(list) >= 1);
  CHECK_OK(gpushm_local_device_uuid(gpushm_local_device_list_get(list, 0), uuid));
  gpushm_local_device_list_free(list);
}

static void test_linear_images(gpushm_t *conn)
{
  gpushm_image_desc_t d, got;
  gpushm_create_opts_t opts;
  const gpushm_buffer_info_t *info;
  gpushm_buffer_t *img, *again;

  gpushm_image_desc_init(&d);
  CHECK(d.size == sizeof d && d.depth == 1 && d.mip_levels == 1 &&
        d.tiling == GPUSHM_TILING_LINEAR);
  d.width = 100;
  d.height = 30;
  CHECK_OK(gpushm_image_create(conn, "frame", &d, NULL, &img));
  CHECK(gpushm_buffer_kind(img) == GPUSHM_KIND_IMAGE);
  CHECK_OK(gpushm_buffer_image_desc(img, &got));
  /* 400 bytes of texels a row, rounded up to 256: what CUDA and Vulkan both take */
  CHECK(got.width == 100 && got.height == 30 && got.row_pitch == 512 &&
        got.format == GPUSHM_FORMAT_RGBA8_UNORM);
  CHECK(gpushm_buffer_size(img) == 512 * 30);
  memset(gpushm_buffer_ptr(img), 0x7f, gpushm_buffer_size(img)); /* host memory: mapped */
  CHECK((info = find_buffer(conn, "frame")) && gpushm_buffer_info_kind(info) == GPUSHM_KIND_IMAGE);
  CHECK_OK(gpushm_buffer_info_image(info, &got));
  CHECK(got.row_pitch == 512 && got.width == 100);
  /* opened again by name: the same image */
  CHECK_OK(gpushm_buffer_open(conn, "frame", 0, &again));
  CHECK(again == img);
  CHECK_OK(gpushm_buffer_close(again));
  CHECK_ERR(gpushm_buffer_image_desc(NULL, &got), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_close(img));
  CHECK_OK(gpushm_unlink(conn, "frame"));

  /* an explicit pitch, kept */
  d.row_pitch = 1024;
  CHECK_OK(gpushm_image_create(conn, "pitched", &d, NULL, &img));
  CHECK_OK(gpushm_buffer_image_desc(img, &got));
  CHECK(got.row_pitch == 1024 && gpushm_buffer_size(img) == 1024 * 30);
  CHECK_OK(gpushm_buffer_close(img));
  CHECK_OK(gpushm_unlink(conn, "pitched"));

  /* refusals, each before anything is made */
#define REFUSED(field, value, err)                                                         \
  do {                                                                                     \
    gpushm_image_desc_init(&d);                                                            \
    d.width = d.height = 16;                                                               \
    d.field = (value);                                                                     \
    CHECK_ERR(gpushm_image_create(conn, "bad", &d, NULL, &img), (err));                    \
  } while (0)
  REFUSED(format, 0, GPUSHM_E_INVAL);
  REFUSED(format, 999, GPUSHM_E_INVAL);
  REFUSED(width, 0, GPUSHM_E_INVAL);
  REFUSED(height, 16385, GPUSHM_E_LIMIT);   /* GPUSHM_LIMIT_IMAGE_DIM + 1 */
  REFUSED(array_layers, 2049, GPUSHM_E_LIMIT);
  REFUSED(mip_levels, 2, GPUSHM_E_INVAL);    /* linear: one level */
  REFUSED(usage, 0, GPUSHM_E_INVAL);
  REFUSED(usage, 0x100, GPUSHM_E_INVAL);
  REFUSED(row_pitch, 60, GPUSHM_E_INVAL);    /* below 16 × 4 */
  REFUSED(row_pitch, 66, GPUSHM_E_INVAL);    /* not a multiple of the texel */
  REFUSED(row_pitch, 16384u * 16u + 4, GPUSHM_E_LIMIT);
  REFUSED(format, GPUSHM_FORMAT_D32_SFLOAT, GPUSHM_E_INVAL); /* depth: optimal only */
  REFUSED(tiling, GPUSHM_TILING_OPTIMAL, GPUSHM_E_UNSUPPORTED); /* a Vulkan process makes those */
  REFUSED(tiling, 7, GPUSHM_E_INVAL);
  REFUSED(reserved, 1, GPUSHM_E_INVAL);
#undef REFUSED
  gpushm_image_desc_init(&d);
  d.width = d.height = 16;
  gpushm_create_opts_init(&opts);
  opts.flags = GPUSHM_CREATE_SYNC;
  CHECK_ERR(gpushm_image_create(conn, "bad", &d, &opts, &img), GPUSHM_E_INVAL);
  opts.flags = 0;
  opts.backend = GPUSHM_BACKEND_CUDA_IPC;
  CHECK_ERR(gpushm_image_create(conn, "bad", &d, &opts, &img), GPUSHM_E_INVAL);
  CHECK(find_buffer(conn, "bad") == NULL);
  /* the same image made twice is a name taken, and a buffer never joins an image */
  CHECK_OK(gpushm_image_create(conn, "taken", &d, NULL, &img));
  CHECK_ERR(gpushm_image_create(conn, "taken", &d, NULL, &again), GPUSHM_E_EXIST);
  gpushm_create_opts_init(&opts);
  opts.flags = GPUSHM_CREATE_OPEN_EXISTING;
  CHECK_ERR(gpushm_buffer_create(conn, "taken", 16 * 16 * 4, &opts, &again), GPUSHM_E_EXIST);
  CHECK_OK(gpushm_buffer_close(img));
  CHECK_OK(gpushm_unlink(conn, "taken"));
  test_log("linear images: made, described, listed; 17 refusals");
}

static gpushm_external_memory_t memory_of(int fd, const uint8_t uuid[16])
{
  gpushm_external_memory_t m;
  gpushm_external_memory_init(&m);
  m.fd = fd;
  m.allocation_size = MEM_BYTES;
  m.memory_type_index = 2;
  memcpy(m.device_uuid, uuid, 16);
  memset(m.driver_uuid, 0xd1, 16);
  snprintf(m.driver_info, sizeof m.driver_info, "test driver 1.0");
  return m;
}

/* What the registrar leaves behind, as another uid finds it: importable as an fd with
 * every parameter intact, and in CUDA (the fake maps the memfd) with the data. */
static void consume_registered(const char *socket, const uint8_t uuid[16])
{
  gpushm_open_opts_t o;
  gpushm_memory_info_t info = { .size = sizeof info };
  gpushm_buffer_t *b, *cuda, *again;
  gpushm_t *conn;
  char path[64];
  uint32_t *p;
  int fd;

  CHECK_OK(gpushm_connect(socket, "graphics-consumer", &conn));
  b = open_unmapped(conn, "exported", GPUSHM_OPEN_READONLY);
  CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_EXTERNAL && gpushm_buffer_ptr(b) == NULL);
  CHECK_OK(gpushm_buffer_memory_info(b, &info));
  CHECK(info.handle_type == GPUSHM_EXTERNAL_OPAQUE_FD && info.allocation_size == MEM_BYTES &&
        info.data_size == MEM_BYTES && info.memory_type_index == 2 && info.offset == 0 &&
        memcmp(info.device_uuid, uuid, 16) == 0 && info.driver_uuid[0] == 0xd1 &&
        strcmp(info.driver_info, "test driver 1.0") == 0 &&
        info.access == GPUSHM_OPEN_READONLY);
  /* each call a new fd (an import consumes its own), on the same memory */
  CHECK_OK(gpushm_buffer_memory_fd(b, &fd));
  p = mmap(NULL, MEM_BYTES, PROT_READ, MAP_SHARED, fd, 0);
  CHECK(p != MAP_FAILED && check_words(p, MEM_BYTES / 4, PATTERN));
  /* issue 36, item 2: root registered it 0644, so this uid reads it and may not write
   * it, by any road: the fd is a read-only reopen of an inode gpushmd made 0400 */
  CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY &&
        (info.flags & GPUSHM_EXTERNAL_READ_ONLY_FD));
  CHECK(mmap(NULL, MEM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED &&
        errno == EACCES);
  CHECK(mprotect(p, MEM_BYTES, PROT_READ | PROT_WRITE) < 0 && errno == EACCES);
  CHECK(pwrite(fd, "x", 1, 0) < 0 && errno == EBADF);
  CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) < 0 &&
        errno == EBADF);
  CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) < 0);
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  CHECK(open(path, O_RDWR | O_CLOEXEC) < 0 && errno == EACCES);
  CHECK(fchmod(fd, 0666) < 0 && errno == EPERM);
  CHECK(ftruncate(fd, 4096) < 0);
  CHECK(check_words(p, MEM_BYTES / 4, PATTERN));
  munmap(p, MEM_BYTES);
  close(fd);
  gpushm_open_opts_init(&o);
  o.map_device = GPUSHM_DEVICE_NONE;
  CHECK_ERR(gpushm_buffer_open_ex(conn, "exported", 0, &o, &again), GPUSHM_E_PERM);
  o.flags = GPUSHM_OPEN_READONLY;
  CHECK_OK(gpushm_buffer_memory_fd(b, &fd));
  close(fd);

  /* the same object opened for CUDA is another mapping, with a pointer */
  CHECK_OK(gpushm_buffer_open(conn, "exported", GPUSHM_OPEN_READONLY, &cuda));
  CHECK(cuda != b && gpushm_buffer_ptr(cuda) != NULL);
  CHECK(check_words(gpushm_buffer_ptr(cuda), MEM_BYTES / 4, PATTERN));
  CHECK_ERR(gpushm_buffer_memory_fd(cuda, &fd), GPUSHM_E_INVAL);
  CHECK_ERR(gpushm_buffer_memory_info(cuda, &info), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_open(conn, "exported", GPUSHM_OPEN_READONLY, &again));
  CHECK(again == cuda);
  CHECK_OK(gpushm_buffer_close(again));
  CHECK_OK(gpushm_buffer_close(cuda));
  CHECK_OK(gpushm_buffer_close(b));
  gpushm_disconnect(conn);
}

/* A registered optimal image in CUDA: a mipmapped array and a CUarray per level. */
static void consume_registered_image(const char *socket)
{
  gpushm_buffer_t *img;
  gpushm_image_desc_t d;
  gpushm_t *conn;
  void *mipmap, *level0, *level2;

  CHECK_OK(gpushm_connect(socket, "graphics-image-consumer", &conn));
  CHECK_OK(gpushm_buffer_open(conn, "exported-image", GPUSHM_OPEN_READONLY, &img));
  CHECK(gpushm_buffer_kind(img) == GPUSHM_KIND_IMAGE && gpushm_buffer_ptr(img) == NULL);
  CHECK_OK(gpushm_buffer_image_desc(img, &d));
  CHECK(d.tiling == GPUSHM_TILING_OPTIMAL && d.mip_levels == 3 && d.width == 64);
  CHECK_OK(gpushm_image_cuda_mipmapped_array(img, &mipmap));
  CHECK_OK(gpushm_image_cuda_array(img, 0, &level0));
  CHECK_OK(gpushm_image_cuda_array(img, 2, &level2));
  CHECK(mipmap && level0 && level2 && level0 != level2);
  CHECK_ERR(gpushm_image_cuda_array(img, 3, &level0), GPUSHM_E_INVAL);
  CHECK_OK(gpushm_buffer_close(img));
  gpushm_disconnect(conn);
}

static void test_registered(struct test_daemon *daemon, gpushm_t *conn)
{
  gpushm_create_opts_t opts;
  gpushm_external_memory_t m;
  gpushm_image_desc_t d;
  const gpushm_buffer_info_t *info;
  uint8_t uuid[16];
  pid_t pid;
  int fd;

  first_device_uuid(uuid);
  /* The registrar: registers, then exits.  The memory stays (gpushmd keeps the fd). */
  pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    gpushm_t *c;
    gpushm_buffer_t *b, *img;
    CHECK_OK(gpushm_connect(daemon->socket, "registrar", &c));
    fd = exported_memory(PATTERN);
    m = memory_of(fd, uuid);
    gpushm_create_opts_init(&opts);
    opts.mode = 0644;
    CHECK_OK(gpushm_register_memory(c, "exported", &m, &opts, &b));
    CHECK(gpushm_buffer_backend(b) == GPUSHM_BACKEND_EXTERNAL);
    close(fd);
    /* an optimal image of three levels: 64×64 RGBA8 and its mips fit in the memfd */
    fd = exported_memory(0);
    m = memory_of(fd, uuid);
    m.flags = GPUSHM_EXTERNAL_DEDICATED;
    gpushm_image_desc_init(&d);
    d.width = d.height = 64;
    d.mip_levels = 3;
    d.tiling = GPUSHM_TILING_OPTIMAL;
    m.image = &d;
    CHECK_OK(gpushm_register_memory(c, "exported-image", &m, &opts, &img));
    CHECK(gpushm_buffer_kind(img) == GPUSHM_KIND_IMAGE);
    close(fd);
    gpushm_disconnect(conn); /* the parent's, inherited: only this copy goes */
    _exit(0); /* without closing: the daemon's references go with the connection */
  }
  check_child(pid);
  CHECK((info = find_buffer(conn, "exported")) &&
        gpushm_buffer_info_backend(info) == GPUSHM_BACKEND_EXTERNAL &&
        gpushm_buffer_info_allocated(info) == MEM_BYTES && gpushm_buffer_info_refs(info) == 0);

  /* another uid imports both */
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    gpushm_disconnect(conn);
    consume_registered(daemon->socket, uuid);
    consume_registered_image(daemon->socket);
    _exit(0);
  }
  check_child(pid);
  test_log("registered memory: kept after its registrar exited; uid 65534 imports it as an "
           "fd and in CUDA, an optimal image as a mipmapped array");
}

/* What may not be registered: each refused with the reason, nothing kept, the daemon
 * serving on. */
static void test_refusals(gpushm_t *conn)
{
  static const char *const refused_msgs[] = { "a pipe", "a socket", "a character device",
                                              "a file" };
  gpushm_external_memory_t m;
  gpushm_create_opts_t opts;
  gpushm_buffer_t *b;
  uint8_t uuid[16] = { 1 };
  char path[] = "/tmp/gpushm-graphics-file.XXXXXX";
  int pipefd[2], sv[2], fds[4], small;

  CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  fds[0] = pipefd[0];
  fds[1] = sv[0];
  fds[2] = open("/dev/null", O_RDWR | O_CLOEXEC);
  fds[3] = mkostemp(path, O_CLOEXEC);
  CHECK(fds[2] >= 0 && fds[3] >= 0 && ftruncate(fds[3], MEM_BYTES) == 0);
  unlink(path);
  for (int i = 0; i < 4; i++) {
    m = memory_of(fds[i], uuid);
    CHECK_ERR(gpushm_register_memory(conn, "foreign", &m, NULL, &b), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), refused_msgs[i]) != NULL);
  }
  /* a memfd smaller than claimed */
  small = memfd_create("small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK(small >= 0 && ftruncate(small, 4096) == 0);
  m = memory_of(small, uuid);
  CHECK_ERR(gpushm_register_memory(conn, "foreign", &m, NULL, &b), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "4096") != NULL);
  /* a memfd that could be cut short after its size was checked, and cannot be sealed */
  m.fd = memfd_create("unsealable", MFD_CLOEXEC);
  CHECK(m.fd >= 0 && ftruncate(m.fd, MEM_BYTES) == 0);
  CHECK_ERR(gpushm_register_memory(conn, "foreign", &m, NULL, &b), GPUSHM_E_INVAL);
  CHECK(strstr(gpushm_last_error_message(), "MFD_ALLOW_SEALING") != NULL);
  close(m.fd);
  /* a buffer larger than its allocation; a linear image that does not fit in it */
  m = memory_of(fds[3], uuid);
  m.fd = memfd_create("sized", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK(m.fd >= 0 && ftruncate(m.fd, MEM_BYTES) == 0);
  m.data_size = MEM_BYTES + 1;
  CHECK_ERR(gpushm_register_memory(conn, "foreign", &m, NULL, &b), GPUSHM_E_INVAL);
  m.data_size = 0;
  {
    gpushm_image_desc_t d;
    gpushm_image_desc_init(&d);
    d.width = 1024;
    d.height = 1024; /* 4 MiB of rows in 1 MiB */
    m.image = &d;
    CHECK_ERR(gpushm_register_memory(conn, "foreign", &m, NULL, &b), GPUSHM_E_INVAL);
    m.image = NULL;
  }
  /* the library's own checks */
  m.fd = -1;
  CHECK_ERR(gpushm_register_memory(conn, "foreign", &m, NULL, &b), GPUSHM_E_INVAL);
  m = memory_of(small, uuid);
  m.handle_type = 9;
  CHECK_ERR(gpushm_register_memory(conn, "foreign", &m, NULL, &b), GPUSHM_E_INVAL);
  m = memory_of(small, uuid);
  gpushm_create_opts_init(&opts);
  opts.backend = GPUSHM_BACKEND_CUDA_FD;
  CHECK_ERR(gpushm_register_memory(conn, "foreign", &m, &opts, &b), GPUSHM_E_INVAL);
  m.allocation_size = 0;
  CHECK_ERR(gpushm_register_memory(conn, "foreign", &m, NULL, &b), GPUSHM_E_INVAL);
  CHECK(find_buffer(conn, "foreign") == NULL);
  CHECK_OK(gpushm_ping(conn));
  for (int i = 0; i < 4; i++)
    close(fds[i]);
  close(pipefd[1]);
  close(sv[1]);
  close(small);
  test_log("registration refusals: a pipe, a socket, /dev/null, a file, a short memfd, an "
           "unsealable memfd, a "
           "buffer past its allocation, a linear image past it, a missing fd");
}

/* As any buffer: the owner's quota pays, the mode keeps others out, the name is the
 * owner's to remove. */
static void test_permissions_and_quota(const struct test_daemon *daemon, gpushm_t *conn)
{
  gpushm_external_memory_t m;
  gpushm_buffer_t *b, *b2;
  uint8_t uuid[16], nowhere[16] = { 2 };
  pid_t pid;
  int fd = exported_memory(1);

  first_device_uuid(uuid);
  /* memory of a device this host does not have: kept, but no CUDA here maps it */
  m = memory_of(fd, nowhere);
  CHECK_OK(gpushm_register_memory(conn, "elsewhere", &m, NULL, &b));
  CHECK_ERR(gpushm_buffer_open(conn, "elsewhere", GPUSHM_OPEN_READONLY, &b2),
            GPUSHM_E_UNSUPPORTED);
  CHECK(strstr(gpushm_last_error_message(), "not visible") != NULL);
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "elsewhere"));
  m = memory_of(fd, uuid);
  CHECK_OK(gpushm_register_memory(conn, "private", &m, NULL, &b)); /* mode 0600 */
  pid = fork_as(65534, 65534);
  if (pid == 0) {
    gpushm_t *c;
    gpushm_buffer_t *x;
    gpushm_open_opts_t o;
    int fd2 = exported_memory(2);
    gpushm_external_memory_t mine = memory_of(fd2, uuid);
    CHECK_OK(gpushm_connect(daemon->socket, "attacker", &c));
    gpushm_open_opts_init(&o);
    o.map_device = GPUSHM_DEVICE_NONE;
    CHECK_ERR(gpushm_buffer_open_ex(c, "private", 0, &o, &x), GPUSHM_E_NOENT); /* unseen */
    CHECK_ERR(gpushm_unlink(c, "private"), GPUSHM_E_NOENT);
    CHECK_ERR(gpushm_register_memory(c, "private", &mine, NULL, &x), GPUSHM_E_EXIST);
    /* its own registrations pay its quota: 2 MiB over the 1.5 MiB the daemon allows */
    CHECK_OK(gpushm_register_memory(c, "mine-1", &mine, NULL, &x));
    CHECK_ERR(gpushm_register_memory(c, "mine-2", &mine, NULL, &x), GPUSHM_E_LIMIT);
    gpushm_disconnect(conn);
    _exit(0);
  }
  check_child(pid);
  CHECK(find_buffer(conn, "mine-2") == NULL);
  CHECK_OK(gpushm_buffer_open(conn, "private", GPUSHM_OPEN_READONLY, &b2)); /* fake CUDA */
  CHECK(check_words(gpushm_buffer_ptr(b2), MEM_BYTES / 4, 1));
  CHECK_OK(gpushm_buffer_close(b2));
  CHECK_OK(gpushm_buffer_close(b));
  CHECK_OK(gpushm_unlink(conn, "private"));
  close(fd);
  test_log("registered memory as uid 65534's target: unseen, not removable, name not "
           "taken; its own registrations charged to its quota");
}

/* Issue 36, items 1 and 3: uid 65534 as a registrant that changes its memfd once gpushmd
 * has it.  Growing it would pin memory its uid is not charged for, adding
 * F_SEAL_FUTURE_WRITE would fail importers' writable mappings: gpushmd seals against
 * both (and against any further seal); a memfd sent without write access is refused;
 * a memfd larger than its claim (as lavapipe exports them) is charged whole. */
static void test_registrant_changes(const struct test_daemon *daemon)
{
  pid_t pid = fork_as(65534, 65534);

  if (pid == 0) {
    uint8_t uuid[16];
    char path[64];
    gpushm_t *c;
    gpushm_buffer_t *x;
    gpushm_external_memory_t m;
    const gpushm_buffer_info_t *info;
    int fd = memfd_create("registrant", MFD_CLOEXEC | MFD_ALLOW_SEALING), ro, wo;

    first_device_uuid(uuid);
    CHECK_OK(gpushm_connect(daemon->socket, "registrant", &c));
    /* claims 4 KiB, holds 11816 bytes (lavapipe's size for an allocationSize of 7680) */
    CHECK(fd >= 0 && ftruncate(fd, 11816) == 0);
    m = memory_of(fd, uuid);
    m.allocation_size = 4096;
    CHECK_OK(gpushm_register_memory(c, "grower", &m, NULL, &x));
    CHECK((info = find_buffer(c, "grower")) && gpushm_buffer_info_allocated(info) == 12288);
    CHECK(ftruncate(fd, 256u << 20) < 0 && errno == EPERM);
    CHECK(ftruncate(fd, 4096) < 0 && errno == EPERM);
    CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) < 0 && errno == EPERM);
    CHECK((fcntl(fd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
          (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
    CHECK_OK(gpushm_buffer_close(x));
    CHECK_OK(gpushm_unlink(c, "grower"));
    close(fd);
    /* sent open for reading only, or for writing only (nobody could map that) */
    fd = exported_memory(3);
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    CHECK((ro = open(path, O_RDONLY | O_CLOEXEC)) >= 0);
    CHECK((wo = open(path, O_WRONLY | O_CLOEXEC)) >= 0);
    m = memory_of(ro, uuid);
    CHECK_ERR(gpushm_register_memory(c, "half", &m, NULL, &x), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "for reading only"));
    m = memory_of(wo, uuid);
    CHECK_ERR(gpushm_register_memory(c, "half", &m, NULL, &x), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "for writing only"));
    /* sealed against writing: importers could not map it */
    CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0);
    m = memory_of(fd, uuid);
    CHECK_ERR(gpushm_register_memory(c, "half", &m, NULL, &x), GPUSHM_E_INVAL);
    CHECK(strstr(gpushm_last_error_message(), "sealed against writing"));
    CHECK(find_buffer(c, "half") == NULL);
    close(ro);
    close(wo);
    close(fd);
    gpushm_disconnect(c);
    _exit(0);
  }
  check_child(pid);
  test_log("registrant uid 65534: its memfd sealed against growing, shrinking and further "
           "seals once registered, charged whole (11816 bytes claimed as 4096: 12288); "
           "read-only, write-only and write-sealed memfds refused");
}

/* Issue 36, items 2 and 4, as uid 65534 speaking the protocol itself (the library sends
 * a registered image's allocation as its size): a 64x64 RGBA8 linear image (16 KiB of
 * rows) registered with a size of 4096 or 1 is refused, and one with row pitch 0 is kept
 * completed, as a created image is; a strict-mode registration of a memfd takes 0644,
 * which its readers are held to. */
static void test_registered_image_sizes(const struct test_daemon *daemon)
{
  pid_t pid = fork_as(65534, 65534);

  if (pid == 0) {
    static const uint64_t sizes[] = { 4096, 1, 16384 };
    uint8_t uuid[16];
    int sock = raw_connect(daemon->socket), status_fd, fds[GPUSHM_LIMIT_FDS_PER_FRAME];
    int mem = exported_memory(4);
    gpushm_create_opts_t opts;
    gpushm_external_memory_t m;
    gpushm_image_desc_t got;
    gpushm_buffer_t *x;
    gpushm_t *c;

    first_device_uuid(uuid);
    CHECK(raw_hello_features(sock, "raw-registrant", GPUSHM_FEATURE_SEGMENTS |
                             GPUSHM_FEATURE_GRAPHICS, &status_fd) == 0);
    close(status_fd);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      Gpushm__Request req = GPUSHM__REQUEST__INIT;
      Gpushm__RegisterRequest body = GPUSHM__REGISTER_REQUEST__INIT;
      Gpushm__ExternalMemory em = GPUSHM__EXTERNAL_MEMORY__INIT;
      Gpushm__ImageDesc desc = GPUSHM__IMAGE_DESC__INIT;
      Gpushm__Reply *r;
      unsigned n = 0;

      em.allocation_size = MEM_BYTES;
      em.device_uuid = (ProtobufCBinaryData){ 16, uuid };
      em.driver_uuid = (ProtobufCBinaryData){ 16, uuid };
      em.driver_info = "raw";
      desc.format = GPUSHM_FORMAT_RGBA8_UNORM;
      desc.width = desc.height = 64;
      desc.depth = desc.mip_levels = desc.array_layers = 1;
      desc.usage = GPUSHM_IMAGE_USAGE_SAMPLED;
      body.name = "raw-image";
      body.size = sizes[i];
      body.memory = &em;
      body.image = &desc;
      req.body_case = GPUSHM__REQUEST__BODY_REGISTER_MEMORY;
      req.register_memory = &body;
      CHECK((r = raw_call_fd(sock, &req, mem, fds, &n)) != NULL);
      for (unsigned k = 0; k < n; k++)
        close(fds[k]);
      if (sizes[i] < 16384)
        CHECK(r->status == -GPUSHM_E_INVAL && strstr(r->message, "covers its rows"));
      else
        CHECK(r->status == 0);
      gpushm__reply__free_unpacked(r, NULL);
    }
    CHECK_OK(gpushm_connect(daemon->socket, "reader", &c));
    x = open_unmapped(c, "raw-image", 0);
    CHECK_OK(gpushm_buffer_image_desc(x, &got));
    CHECK(got.row_pitch == 256 && gpushm_buffer_size(x) == 16384);
    CHECK_OK(gpushm_buffer_close(x));
    close(sock); /* its session's registration goes: persistent, so unlink it */
    CHECK_OK(gpushm_unlink(c, "raw-image"));
    /* strict mode: a memfd's 0644 is kept (its readers get a read-only reopen), so it is
     * taken; registered NVIDIA memory's is refused (tests/gpu/test-cuda-graphics) */
    m = memory_of(mem, uuid);
    gpushm_create_opts_init(&opts);
    opts.flags = GPUSHM_CREATE_STRICT_MODE;
    opts.mode = 0644;
    CHECK_OK(gpushm_register_memory(c, "strict", &m, &opts, &x));
    CHECK_OK(gpushm_buffer_close(x));
    CHECK_OK(gpushm_unlink(c, "strict"));
    close(mem);
    gpushm_disconnect(c);
    _exit(0);
  }
  check_child(pid);
  test_log("registered linear image as uid 65534 over the wire: sizes 4096 and 1 for 16 KiB "
           "of rows refused, row pitch 0 kept as 256; strict mode takes a memfd's 0644");
}

/* File-scope: a forked child's copy stays reachable (never leaked) when it exits. */
static gpushm_t *conn;

int main(void)
{
  struct test_daemon d = { 0 };
  const char *fake = getenv("GPUSHM_FAKE_CUDA_LIB");

  if (!fake || !*fake) {
    fprintf(stderr, "GPUSHM_FAKE_CUDA_LIB is not set (make check sets it)\n");
    return 1;
  }
  if (geteuid() != 0) {
    fprintf(stderr, "needs root: registrations are attacked as uid 65534\n");
    return TEST_SKIP;
  }
  /* The daemon and every process here use the fake driver: its devices' UUIDs are what
   * registrations name, and it maps registered memfds as CUDA would an OPAQUE_FD. */
  setenv("GPUSHM_CUDA_LIBRARY", fake, 1);
  daemon_start(&d, NULL);
  conn = daemon_connect(&d);
  CHECK(gpushm_daemon_has(conn, GPUSHM_FEATURE_GRAPHICS));
  test_linear_images(conn);
  test_registered(&d, conn);
  test_registrant_changes(&d);
  test_registered_image_sizes(&d);
  test_refusals(conn);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  /* A daemon whose per-uid quota fits one registration of each uid, not two. */
  daemon_start(&d, "--max-bytes-per-uid", "1572864", NULL);
  conn = daemon_connect(&d);
  test_permissions_and_quota(&d, conn);
  gpushm_disconnect(conn);
  daemon_stop(&d);
  return 0;
}
