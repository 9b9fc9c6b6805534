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
    bool stopped;           /* atomic: pop nothing, the memory changes */
    bool releasing;         /* vu_blk_mem_release() runs */
    bool register_scheduled;
    bool register_running;
    bool register_again;    /* the table changed while it ran */
    bool restart_pending;   /* for the end of a drain */
} VuBlkMem;

void vu_blk_mem_init(VuBlkMem *mem, VuServer *server, BlockExport *exp);
void vu_blk_mem_cleanup(VuBlkMem *mem);

/* Whether a queue may pop requests now (else it is kicked again later) */
static inline bool vu_blk_mem_may_pop(VuBlkMem *mem)
{
    return !qatomic_read(&mem->stopped);
}

/* Before a vhost-user message: the memory table messages change memory */
void coroutine_fn vu_blk_mem_before_msg(VuBlkMem *mem, VhostUserMsg *vmsg);

/* Before the frontend's memory is unmapped */
void coroutine_fn vu_blk_mem_release(VuBlkMem *mem);

/* The export's drain ended, in its AioContext */
void vu_blk_mem_drained_end(VuBlkMem *mem);

#endif
