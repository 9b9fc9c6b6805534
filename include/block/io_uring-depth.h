/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring: no more requests in the kernel than the device takes
 */
#ifndef BLOCK_IO_URING_DEPTH_H
#define BLOCK_IO_URING_DEPTH_H

#include "qemu/coroutine.h"

typedef struct LuringDepth LuringDepth;

/*
 * The requests the block device holding @fd takes at once without
 * waiting for a tag: its nr_requests, less a few tags left for requests
 * that completed and have not given theirs back yet (120 of 128), times
 * its hardware queues, when it is a blk-mq device (or the file lies on
 * one); 0 when there is no such bound.
 */
unsigned luring_device_depth(int fd);

/* A gate that lets at most @limit requests through; NULL for no limit */
LuringDepth *luring_depth_new(unsigned limit);
void luring_depth_free(LuringDepth *depth);
unsigned luring_depth_limit(const LuringDepth *depth);

/* Wait until one more request may go to the kernel; @depth may be NULL */
void coroutine_fn luring_depth_enter(LuringDepth *depth);
/* That request has completed: let the next waiter through */
void coroutine_fn luring_depth_leave(LuringDepth *depth);

#endif
