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

/* What a driver holds: its node's registrations, and what it closed with */
typedef struct {
    int live;
} CountingState;

static int closed_with_live = -1;

static bool counting_register_buf(BlockDriverState *bs, void *host,
                                  size_t size, Error **errp)
{
    CountingState *s = bs->opaque;

    s->live++;
    return true;
}

static void counting_unregister_buf(BlockDriverState *bs, void *host,
                                    size_t size)
{
    CountingState *s = bs->opaque;

    g_assert_cmpint(s->live, >, 0);
    s->live--;
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

int main(int argc, char *argv[])
{
    bdrv_init();
    qemu_init_main_loop(&error_abort);
    g_test_init(&argc, &argv, NULL);

    g_test_add_func("/vblk-registered-bufs/close-gives-back",
                    test_close_gives_back);
    g_test_add_func("/vblk-registered-bufs/close-through-filter",
                    test_close_through_filter);
    return g_test_run();
}
