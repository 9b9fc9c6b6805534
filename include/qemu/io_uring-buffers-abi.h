/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Buffer tables for older liburing
 *
 * io_uring_register_buffers_sparse() and io_uring_register_buffers_update_tag()
 * came with liburing 2.2, __io_uring_clone_buffers() with 2.9; QEMU builds
 * with liburing 0.3 and later (Ubuntu 22.04 has 2.1, Debian 12 2.3).  The
 * kernel ABI under them, IORING_REGISTER_BUFFERS2 and
 * IORING_REGISTER_BUFFERS_UPDATE (Linux 5.13; a sparse table 5.19) and
 * IORING_REGISTER_CLONE_BUFFERS (6.12), is written here by hand, with the
 * raw system call, and used where liburing lacks the functions.
 */

#ifndef QEMU_IO_URING_BUFFERS_ABI_H
#define QEMU_IO_URING_BUFFERS_ABI_H

#include <sys/syscall.h>
#include <liburing.h>

#define URING_REGISTER_BUFFERS2         15
#define URING_REGISTER_BUFFERS_UPDATE   16
#define URING_RSRC_REGISTER_SPARSE      (1U << 0)
#define URING_REGISTER_CLONE_BUFFERS    30
#define URING_CLONE_DST_REPLACE         (1U << 1)

struct uring_rsrc_register {
    uint32_t nr;
    uint32_t flags;
    uint64_t resv2;
    uint64_t data;
    uint64_t tags;
};

struct uring_rsrc_update2 {
    uint32_t offset;
    uint32_t resv;
    uint64_t data;
    uint64_t tags;
    uint32_t nr;
    uint32_t resv2;
};

struct uring_clone_buffers {
    uint32_t src_fd;
    uint32_t flags;
    uint32_t src_off;
    uint32_t dst_off;
    uint32_t nr;
    uint32_t pad[3];
};

static inline int uring_abi_register(struct io_uring *ring, unsigned opcode,
                                     const void *arg, unsigned size)
{
    int ret = syscall(__NR_io_uring_register, ring->ring_fd, opcode, arg,
                      size);

    return ret < 0 ? -errno : ret;
}

/* A table of @nr empty slots; 0 or -errno */
static inline int uring_abi_register_buffers_sparse(struct io_uring *ring,
                                                    unsigned nr)
{
    struct uring_rsrc_register reg = {
        .nr = nr,
        .flags = URING_RSRC_REGISTER_SPARSE,
    };

    return uring_abi_register(ring, URING_REGISTER_BUFFERS2, &reg,
                              sizeof(reg));
}

/* Slots @off to @off + @nr - 1 become @iov; how many changed, or -errno */
static inline int uring_abi_register_buffers_update_tag(struct io_uring *ring,
                                                        unsigned off,
                                                        const struct iovec *iov,
                                                        const uint64_t *tags,
                                                        unsigned nr)
{
    struct uring_rsrc_update2 up = {
        .offset = off,
        .data = (uintptr_t)iov,
        .tags = (uintptr_t)tags,
        .nr = nr,
    };

    return uring_abi_register(ring, URING_REGISTER_BUFFERS_UPDATE, &up,
                              sizeof(up));
}

/* @dst's table becomes a clone of @src's whole table; 0 or -errno */
static inline int uring_abi_clone_buffers(struct io_uring *dst,
                                          struct io_uring *src)
{
    struct uring_clone_buffers arg = {
        .src_fd = src->ring_fd,
        .flags = URING_CLONE_DST_REPLACE,
    };

    return uring_abi_register(dst, URING_REGISTER_CLONE_BUFFERS, &arg, 1);
}

#ifndef HAVE_IO_URING_REGISTER_BUFFERS_SPARSE
#define io_uring_register_buffers_sparse uring_abi_register_buffers_sparse
#define io_uring_register_buffers_update_tag \
    uring_abi_register_buffers_update_tag
#endif

#endif
