/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring fixed buffers: the guest RAM one block node registered
 *
 * A file-posix node with fixed buffers on keeps the ranges handed to
 * bdrv_register_buf() here, forwards them to the process-wide registry and
 * takes them back when it closes.  Pinned RAM must not be discarded, so
 * RAM discard is off for as long as the set exists.
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "system/memory.h"
#include "block/io_uring-fixed.h"

struct UringBufSet {
    GArray *ranges;     /* of struct iovec */
};

/* A set, or NULL with @errp set when RAM must stay discardable */
UringBufSet *uring_buf_set_new(Error **errp)
{
    UringBufSet *set;

    if (ram_block_discard_disable(true) < 0) {
        error_setg(errp, "io_uring fixed buffers pin guest RAM, but RAM "
                   "discard (virtio-mem, virtio-balloon free page "
                   "reporting) is in use");
        return NULL;
    }
    set = g_new0(UringBufSet, 1);
    set->ranges = g_array_new(false, false, sizeof(struct iovec));
    return set;
}

void uring_buf_set_add(UringBufSet *set, void *host, size_t size)
{
    struct iovec iov = { .iov_base = host, .iov_len = size };

    g_array_append_val(set->ranges, iov);
    uring_fixed_register(host, size);
}

void uring_buf_set_remove(UringBufSet *set, void *host, size_t size)
{
    unsigned i;

    for (i = 0; i < set->ranges->len; i++) {
        struct iovec *iov = &g_array_index(set->ranges, struct iovec, i);

        if (iov->iov_base == host && iov->iov_len == size) {
            g_array_remove_index_fast(set->ranges, i);
            uring_fixed_unregister(host, size);
            return;
        }
    }
}

void uring_buf_set_free(UringBufSet *set)
{
    unsigned i;

    if (!set) {
        return;
    }
    for (i = 0; i < set->ranges->len; i++) {
        struct iovec *iov = &g_array_index(set->ranges, struct iovec, i);

        uring_fixed_unregister(iov->iov_base, iov->iov_len);
    }
    g_array_free(set->ranges, true);
    g_free(set);
    ram_block_discard_disable(false);
}
