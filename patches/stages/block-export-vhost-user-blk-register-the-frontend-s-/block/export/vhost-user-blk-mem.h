/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-user-blk export: the frontend's memory as registered buffers
 */
#ifndef VHOST_USER_BLK_MEM_H
#define VHOST_USER_BLK_MEM_H

#include "qemu/coroutine.h"
#include "block/export.h"
#include "qemu/vhost-user-server.h"

typedef struct VuBlkMem {
    VuServer *server;
    BlockExport *exp;
    GArray *regs;           /* struct iovec: what blk_register_buf() has */
    bool may_pin;           /* the node pins registered memory */
    bool warned;            /* that a frontend did not accept pinning */
    bool postcopy;          /* from POSTCOPY_ADVISE to POSTCOPY_END */
    bool stopped;           /* pop nothing, the memory changes */
    bool releasing;         /* vu_blk_mem_unregister() runs */
    bool register_scheduled;
    bool register_running;
    bool register_again;    /* the table changed while it ran */
    bool restart_pending;   /* for the end of a drain */
} VuBlkMem;

void vu_blk_mem_init(VuBlkMem *mem, VuServer *server, BlockExport *exp);
void vu_blk_mem_cleanup(VuBlkMem *mem);

/* What the export offers of VHOST_USER_PROTOCOL_F_PINNED_MEMORY */
uint64_t vu_blk_mem_protocol_features(VuBlkMem *mem);

/* Whether a queue may pop requests now (else it is kicked again later) */
static inline bool vu_blk_mem_may_pop(VuBlkMem *mem)
{
    return !mem->stopped;
}

/* Before a vhost-user message: the memory table messages change memory */
void coroutine_fn vu_blk_mem_before_msg(VuBlkMem *mem, VhostUserMsg *vmsg);

/* The connection ends: before the frontend's memory is unmapped */
void coroutine_fn vu_blk_mem_release(VuBlkMem *mem);

/* The export's drain ended, in its AioContext */
void vu_blk_mem_drained_end(VuBlkMem *mem);

#endif
