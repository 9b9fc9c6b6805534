/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Buffers registered with block nodes (bdrv_register_buf()): whatever the
 * graph does between a registration and its end, a driver is told of each
 * buffer once and takes each back once, at the latest when its node
 * closes.
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qemu/main-loop.h"
#include "block/block_int.h"
#include "system/block-backend.h"

/* What a driver holds: its node's registrations, and what it closed with */
typedef struct {
    int live;
} CountingState;

static int closed_with_live = -1;
/* Registrations over all counting nodes, and whether they ever hit 0 */
static int live_anywhere;
static bool dropped_to_none;

static bool counting_register_buf(BlockDriverState *bs, void *host,
                                  size_t size, Error **errp)
{
    CountingState *s = bs->opaque;

    s->live++;
    live_anywhere++;
    return true;
}

static void counting_unregister_buf(BlockDriverState *bs, void *host,
                                    size_t size)
{
    CountingState *s = bs->opaque;

    g_assert_cmpint(s->live, >, 0);
    s->live--;
    if (!--live_anywhere) {
        dropped_to_none = true;
    }
}

static void counting_close(BlockDriverState *bs)
{
    CountingState *s = bs->opaque;

    closed_with_live = s->live;
}

static BlockDriver bdrv_counting = {
    .format_name = "counting",
    .instance_size = sizeof(CountingState),
    .bdrv_register_buf = counting_register_buf,
    .bdrv_unregister_buf = counting_unregister_buf,
    .bdrv_close = counting_close,
};

static BlockDriver bdrv_filter = {
    .format_name = "filter",
    .is_filter = true,
    .filtered_child_is_backing = true,
    .bdrv_child_perm = bdrv_default_perms,
};

static uint8_t ram[3][4096];

static BlockDriverState *counting_node(const char *name)
{
    return bdrv_new_open_driver(&bdrv_counting, name, BDRV_O_RDWR,
                                &error_abort);
}

static int live(BlockDriverState *bs)
{
    return ((CountingState *)bs->opaque)->live;
}

/*
 * A node nobody uses any more closes with buffers still registered (its
 * user never took them back): its driver gets every one back before it
 * closes, as it would from bdrv_unregister_buf().
 */
static void test_close_gives_back(void)
{
    BlockDriverState *bs = counting_node("leaf");

    bdrv_register_buf(bs, ram[0], sizeof(ram[0]), &error_abort);
    bdrv_register_buf(bs, ram[0], sizeof(ram[0]), &error_abort);
    bdrv_register_buf(bs, ram[1], sizeof(ram[1]), &error_abort);
    bdrv_unregister_buf(bs, ram[1], sizeof(ram[1]));
    g_assert_cmpint(live(bs), ==, 2);

    closed_with_live = -1;
    bdrv_unref(bs);
    g_assert_cmpint(closed_with_live, ==, 0);
}

/*
 * The same through a filter: the buffers reached the child through its
 * edge; when the filter closes, the child gets them back, once, and
 * closes with none.
 */
static void test_close_through_filter(void)
{
    BlockDriverState *top = bdrv_new_open_driver(&bdrv_filter, "top",
                                                 BDRV_O_RDWR, &error_abort);
    BlockDriverState *leaf = counting_node("leaf");

    bdrv_graph_wrlock_drained();
    bdrv_attach_child(top, leaf, "backing", &child_of_bds,
                      BDRV_CHILD_FILTERED | BDRV_CHILD_PRIMARY, &error_abort);
    bdrv_graph_wrunlock();

    bdrv_register_buf(top, ram[2], sizeof(ram[2]), &error_abort);
    g_assert_cmpint(live(leaf), ==, 1);

    closed_with_live = -1;
    bdrv_unref(top);
    g_assert_cmpint(closed_with_live, ==, 0);
}

/*
 * A node that replaces another under a filter (as a mirror's completion
 * does) has the buffers before the old one gives them back, after the
 * graph is unlocked: a driver that pins them (io_uring fixed buffers)
 * never drops the last registration to pin it all again, and never
 * polls with the graph write-locked.
 */
static void test_replace_keeps_registered(void)
{
    BlockDriverState *top = bdrv_new_open_driver(&bdrv_filter, "top",
                                                 BDRV_O_RDWR, &error_abort);
    BlockDriverState *old = counting_node("old");
    BlockDriverState *new = counting_node("new");

    bdrv_graph_wrlock_drained();
    bdrv_attach_child(top, old, "backing", &child_of_bds,
                      BDRV_CHILD_FILTERED | BDRV_CHILD_PRIMARY, &error_abort);
    bdrv_graph_wrunlock();
    bdrv_register_buf(top, ram[0], sizeof(ram[0]), &error_abort);
    g_assert_cmpint(live(old), ==, 1);

    live_anywhere = 1;
    dropped_to_none = false;
    bdrv_ref(old);          /* the edge that leaves drops its own */
    bdrv_graph_wrlock_drained();
    bdrv_replace_node(old, new, &error_abort);
    bdrv_graph_wrunlock();
    g_assert_false(dropped_to_none);
    g_assert_cmpint(live(old), ==, 0);
    g_assert_cmpint(live(new), ==, 1);

    bdrv_unref(old);
    closed_with_live = -1;
    bdrv_unref(top);
    g_assert_cmpint(live(new), ==, 0);
    bdrv_unref(new);
    g_assert_cmpint(closed_with_live, ==, 0);
}

/*
 * A BlockBackend whose insertion of a node fails (here, it needs write
 * permission on a read-only node) leaves no registration on that node,
 * and nothing that points at it: the node can go away, and the next node
 * inserted gets the buffers.
 */
static void test_failed_insert(void)
{
    BlockBackend *blk = blk_new(qemu_get_aio_context(),
                                BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE,
                                BLK_PERM_ALL);
    BlockDriverState *ro = bdrv_new_open_driver(&bdrv_counting, "ro", 0,
                                                &error_abort);
    BlockDriverState *rw = counting_node("rw");
    Error *local_err = NULL;

    g_assert_true(blk_register_buf(blk, ram[1], sizeof(ram[1]),
                                   &error_abort));
    g_assert_cmpint(blk_insert_bs(blk, ro, &local_err), <, 0);
    error_free(local_err);
    g_assert_cmpint(live(ro), ==, 0);
    closed_with_live = -1;
    bdrv_unref(ro);
    g_assert_cmpint(closed_with_live, ==, 0);

    g_assert_cmpint(blk_insert_bs(blk, rw, &error_abort), ==, 0);
    g_assert_cmpint(live(rw), ==, 1);
    blk_unregister_buf(blk, ram[1], sizeof(ram[1]));
    g_assert_cmpint(live(rw), ==, 0);
    blk_unref(blk);
    bdrv_unref(rw);
}

int main(int argc, char *argv[])
{
    bdrv_init();
    qemu_init_main_loop(&error_abort);
    g_test_init(&argc, &argv, NULL);

    g_test_add_func("/block-registered-bufs/close-gives-back",
                    test_close_gives_back);
    g_test_add_func("/block-registered-bufs/close-through-filter",
                    test_close_through_filter);
    g_test_add_func("/block-registered-bufs/replace-keeps-registered",
                    test_replace_keeps_registered);
    g_test_add_func("/block-registered-bufs/failed-insert",
                    test_failed_insert);
    return g_test_run();
}
