/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-user-blk export: the frontend's memory as registered buffers
 *
 * The frontend's memory table (SET_MEM_TABLE, ADD_MEM_REG, REM_MEM_REG)
 * says which guest memory the export maps.  The export registers each
 * region with its BlockBackend (blk_register_buf()), as a device model
 * registers guest RAM (BlockRAMRegistrar); file-posix with
 * aio-fixed-buffers then reads and writes it through io_uring fixed
 * buffers.
 *
 * Registered memory may stay pinned, and pinned memory must not be
 * discarded: a balloon or virtio-mem in the guest would punch pages out
 * of the frontend's memory while the kernel keeps reading and writing the
 * old ones.  Inside QEMU the driver that pins disables RAM discard; here
 * the frontend owns the memory, so the export registers it only with a
 * frontend that accepted VHOST_USER_PROTOCOL_F_PINNED_MEMORY, by which it
 * promises to discard none of it while connected.  The export offers the
 * feature where its node pins registered memory (decided when the export
 * is created); a frontend that does not accept it is served without
 * registration, and the export says so once.  Between POSTCOPY_ADVISE and
 * POSTCOPY_END the incoming side of a migration discards guest memory:
 * nothing is registered then.
 *
 * A registered buffer must go before its memory is unmapped: the kernel
 * keeps the pages it pinned, and a new mapping at the same address would
 * be read and written through the old pages.  So before a message that
 * unmaps memory (SET_MEM_TABLE, REM_MEM_REG), and before the connection's
 * memory goes (vu_deinit()), the export stops popping requests, waits for
 * those in flight and unregisters every region.  After each memory table
 * message it registers the regions that are not yet, and pops requests
 * again from every started queue, since kicks that came meanwhile were
 * not served.  A region added (ADD_MEM_REG, what QEMU sends for each
 * region and when a DIMM is plugged) waits for no request in flight and
 * unregisters nothing; the queues only pause until it is registered.
 * Nothing waits for the pinning, which goes on in the background: until
 * it is done, requests go without fixed buffers.
 *
 * Threads.  Everything here runs in the export's AioContext: in the
 * connection's coroutine (messages, the end of the connection), in its
 * kick handlers, and in the BH and coroutine that register a new table,
 * which count as a request in flight so that the next change, a drain
 * and the export's deletion wait for them.
 * blk_register_buf() and blk_unregister_buf() want the main loop thread
 * with the BQL: a coroutine has a main loop BH call them and waits.
 */

#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qapi/error.h"
#include "block/export.h"
#include "system/block-backend.h"
#include "subprojects/libvhost-user/libvhost-user.h"
#include "vhost-user-blk-mem.h"

void vu_blk_mem_init(VuBlkMem *mem, VuServer *server, BlockExport *exp)
{
    GLOBAL_STATE_CODE();
    *mem = (VuBlkMem) {
        .server = server,
        .exp = exp,
        .regs = g_array_new(false, false, sizeof(struct iovec)),
        .may_pin = blk_pins_registered_bufs(exp->blk),
    };
}

uint64_t vu_blk_mem_protocol_features(VuBlkMem *mem)
{
    return mem->may_pin ? 1ULL << VHOST_USER_PROTOCOL_F_PINNED_MEMORY : 0;
}

/* Whether the frontend lets the export pin its memory now */
static bool vu_blk_mem_may_register(VuBlkMem *mem)
{
    VuDev *dev = &mem->server->vu_dev;

    if (mem->postcopy) {
        return false;
    }
    if (dev->protocol_features &
        (1ULL << VHOST_USER_PROTOCOL_F_PINNED_MEMORY)) {
        return true;
    }
    if (mem->may_pin && !mem->warned) {
        warn_report("vhost-user-blk export '%s': the frontend did not "
                    "accept VHOST_USER_PROTOCOL_F_PINNED_MEMORY, so its "
                    "memory is not registered (no io_uring fixed buffers)",
                    mem->exp->id);
        mem->warned = true;
    }
    return false;
}

void vu_blk_mem_cleanup(VuBlkMem *mem)
{
    /* The connection's end released everything */
    assert(!mem->regs->len);
    g_array_free(mem->regs, true);
}

typedef struct {
    BlockBackend *blk;
    GArray *regs;
    bool add;
    Coroutine *co;
} MainLoopWork;

static void vu_blk_mem_main_bh(void *opaque)
{
    MainLoopWork *w = opaque;
    Error *local_err = NULL;
    unsigned i;

    GLOBAL_STATE_CODE();
    for (i = 0; i < w->regs->len; i++) {
        struct iovec *r = &g_array_index(w->regs, struct iovec, i);

        if (!w->add) {
            blk_unregister_buf(w->blk, r->iov_base, r->iov_len);
        } else if (!blk_register_buf(w->blk, r->iov_base, r->iov_len,
                                     &local_err)) {
            warn_reportf_err(local_err, "vhost-user-blk export: guest "
                             "memory at %p not registered: ", r->iov_base);
            local_err = NULL;
            g_array_remove_index(w->regs, i--);
        }
    }
    aio_co_wake(w->co);
}

/* (Un)register @regs in the main loop; on return, @regs is what is */
static void coroutine_fn vu_blk_mem_in_main_loop(VuBlkMem *mem, GArray *regs,
                                                 bool add)
{
    MainLoopWork w = {
        .blk = mem->exp->blk,
        .regs = regs,
        .add = add,
        .co = qemu_coroutine_self(),
    };

    aio_bh_schedule_oneshot(qemu_get_aio_context(), vu_blk_mem_main_bh, &w);
    qemu_coroutine_yield();
}

static bool vu_blk_mem_has(VuBlkMem *mem, const struct iovec *iov)
{
    unsigned i;

    for (i = 0; i < mem->regs->len; i++) {
        struct iovec *r = &g_array_index(mem->regs, struct iovec, i);

        if (r->iov_base == iov->iov_base && r->iov_len == iov->iov_len) {
            return true;
        }
    }
    return false;
}

/*
 * Register the regions of the memory table that are not yet, and serve
 * the queues again if they were stopped, unless a drain began: then
 * vu_blk_mem_drained_end() does.
 */
static void coroutine_fn vu_blk_mem_register_co(void *opaque)
{
    VuBlkMem *mem = opaque;
    VuServer *server = mem->server;
    VuDev *dev = &server->vu_dev;
    g_autoptr(GArray) add = g_array_new(false, false, sizeof(struct iovec));
    unsigned i, n;

again:
    mem->register_again = false;
    g_array_set_size(add, 0);
    n = dev->regions && vu_blk_mem_may_register(mem) ? dev->nregions : 0;
    for (i = 0; i < n; i++) {
        VuDevRegion *r = &dev->regions[i];
        struct iovec iov = {
            .iov_base = (void *)(uintptr_t)(r->mmap_addr + r->mmap_offset),
            .iov_len = r->size,
        };

        if (!vu_blk_mem_has(mem, &iov)) {
            g_array_append_val(add, iov);
        }
    }
    if (add->len) {
        vu_blk_mem_in_main_loop(mem, add, true);
        g_array_append_vals(mem->regs, add->data, add->len);
    }
    if (mem->register_again && !mem->releasing) {
        goto again;
    }
    if (mem->stopped && !mem->releasing) {
        if (server->quiescing) {
            mem->restart_pending = true;
        } else {
            mem->stopped = false;
            vhost_user_server_serve_queues(server);
        }
    }
    mem->register_running = false;
    vhost_user_server_dec_in_flight(server);    /* the BH's */
}

static void vu_blk_mem_register_bh(void *opaque)
{
    VuBlkMem *mem = opaque;

    mem->register_scheduled = false;
    if (mem->releasing) {
        /* the change schedules us again when it is done */
    } else if (mem->register_running) {
        mem->register_again = true;
    } else if (mem->server->quiescing) {
        /*
         * The drain waits for us: vu_blk_mem_drained_end() comes after
         * our decrement and sees this
         */
        mem->restart_pending = true;
    } else {
        /* The coroutine takes our count in flight over */
        mem->register_running = true;
        qemu_coroutine_enter(qemu_coroutine_create(vu_blk_mem_register_co,
                                                   mem));
        return;
    }
    vhost_user_server_dec_in_flight(mem->server);
}

/* Stop popping, wait for the requests in flight, unregister everything */
static void coroutine_fn vu_blk_mem_unregister(VuBlkMem *mem)
{
    VuServer *server = mem->server;

    mem->stopped = true;
    mem->releasing = true;
    vhost_user_server_wait_requests(server, NULL);
    if (mem->regs->len) {
        vu_blk_mem_in_main_loop(mem, mem->regs, false);
        g_array_set_size(mem->regs, 0);
    }
    mem->releasing = false;
}

void coroutine_fn vu_blk_mem_release(VuBlkMem *mem)
{
    vu_blk_mem_unregister(mem);
    mem->postcopy = false;      /* for the next connection */
}

static void vu_blk_mem_schedule_register(VuBlkMem *mem)
{
    AioContext *ctx = mem->server->ctx;

    if (!ctx) {
        mem->restart_pending = true; /* detached: a drain began */
    } else if (!mem->register_scheduled) {
        mem->register_scheduled = true;
        /*
         * Counted in flight until the BH, or the coroutine it starts, is
         * done: a drain, the next memory change, the connection's end and
         * the export's deletion wait for it
         */
        vhost_user_server_inc_in_flight(mem->server);
        aio_bh_schedule_oneshot(ctx, vu_blk_mem_register_bh, mem);
    }
}

/*
 * In the main loop thread, after the export is attached to its AioContext
 * again; nothing of the export runs in that context meanwhile.
 */
void vu_blk_mem_drained_end(VuBlkMem *mem)
{
    if (mem->restart_pending) {
        mem->restart_pending = false;
        vu_blk_mem_schedule_register(mem);
    }
}

void coroutine_fn vu_blk_mem_before_msg(VuBlkMem *mem, VhostUserMsg *vmsg)
{
    switch (vmsg->request) {
    case VHOST_USER_SET_MEM_TABLE:
    case VHOST_USER_REM_MEM_REG:
        /* Regions will be unmapped */
        vu_blk_mem_unregister(mem);
        break;
    case VHOST_USER_ADD_MEM_REG:
        /*
         * A region will be mapped: nothing to wait for, but pop nothing
         * until it is registered, as for a new table
         */
        mem->stopped = true;
        break;
    case VHOST_USER_POSTCOPY_ADVISE:
        /* Guest memory will be discarded */
        vu_blk_mem_unregister(mem);
        mem->postcopy = true;
        break;
    case VHOST_USER_POSTCOPY_END:
        mem->postcopy = false;
        break;
    default:
        return;
    }
    /*
     * From here on, libvhost-user handles the message without yielding:
     * the BH runs once the new table is in place.
     */
    vu_blk_mem_schedule_register(mem);
}
