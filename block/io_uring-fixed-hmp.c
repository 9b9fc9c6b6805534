/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring fixed buffers: info io-uring-buffers, in the system emulator
 * (the tools that link x-query-io-uring-buffers have no HMP)
 */

#include "qemu/osdep.h"
#include "monitor/hmp.h"
#include "monitor/monitor.h"
#include "qapi/qapi-commands-io-uring.h"

void hmp_info_io_uring_buffers(Monitor *mon, const QDict *qdict)
{
    g_autoptr(IoUringBuffersInfo) info = qmp_x_query_io_uring_buffers(NULL);
    IoUringBufferChunkList *c;
    IoUringRingInfoList *r;

    monitor_printf(mon, "registered %" PRIu64 " bytes, pinned %" PRIu64
                   " bytes%s (%s; vectored fixed ops: %s)\n",
                   info->registered_bytes, info->pinned_bytes,
                   info->pinning ? ", pinning" : "",
                   info->clone_buffers ? "pinned once, cloned into rings" :
                   "pinned by each ring",
                   info->vectored_fixed ? "yes" : "no");
    for (c = info->chunks; c; c = c->next) {
        monitor_printf(mon, "  chunk %u: %s +0x%" PRIx64 " size %" PRIu64
                       " page %" PRIu64 "%s%s\n",
                       c->value->slot, c->value->ram_block, c->value->offset,
                       c->value->size, c->value->page_size,
                       c->value->hugepages ? " hugepages" : "",
                       c->value->pinned ? "" : " (not pinned)");
    }
    for (r = info->rings; r; r = r->next) {
        IoUringRingInfo *ring = r->value;
        IoUringFallbackCountList *f;

        monitor_printf(mon, "ring %s: %u chunks, %" PRIu64 " bytes%s%s%s\n"
                       "  fixed reads %" PRIu64 " writes %" PRIu64 "\n"
                       "  fallbacks:",
                       ring->name, ring->chunks, ring->bytes,
                       ring->cloned ? ", cloned" : "",
                       ring->synced ? "" : ", not synced",
                       ring->disabled_reason ? ", disabled" : "",
                       ring->fixed_reads, ring->fixed_writes);
        for (f = ring->fallbacks; f; f = f->next) {
            monitor_printf(mon, " %s %" PRIu64,
                           IoUringFallbackReason_str(f->value->reason),
                           f->value->count);
        }
        monitor_printf(mon, "\n");
    }
}
