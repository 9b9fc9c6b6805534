/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * virtio-blk against a hostile guest: malformed descriptor chains must
 * never abort QEMU.  A broken chain puts the device in NEEDS_RESET
 * (virtio_error), a bad request gets an error status, and after a reset
 * the device serves requests again, with the data intact.
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qemu/units.h"
#include "standard-headers/linux/virtio_blk.h"
#include "standard-headers/linux/virtio_config.h"
#include "standard-headers/linux/virtio_ring.h"
#include "vblk-common.h"

#define DISK_SIZE (16 * MiB)

static VblkDev *start(const char *dev_opts)
{
    char *image = vblk_make_image(DISK_SIZE);

    return vblk_start(256 * MiB, image, 1,
                      "-machine pc -m 256M -object iothread,id=io0 "
                      "-blockdev file,node-name=disk0,filename=%s,"
                      "aio=io_uring,cache.direct=on,aio-fixed-buffers=on "
                      "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                      "iothread=io0%s", image, dev_opts);
}

static struct vring_desc desc(uint64_t addr, uint32_t len, uint16_t flags,
                              uint16_t next)
{
    return (struct vring_desc) {
        .addr = cpu_to_le64(addr), .len = cpu_to_le32(len),
        .flags = cpu_to_le16(flags), .next = cpu_to_le16(next),
    };
}

/* The device still reads and writes correctly */
static void still_works(VblkDev *d, unsigned gen)
{
    VblkSeg seg = { d->data_start + 8 * MiB, 8192 };

    vblk_write_pattern(d, 0, gen * 8192, &seg, 1, gen);
    vblk_read_verify(d, 0, gen * 8192, &seg, 1);
}

typedef struct Chain {
    const char *name;
    int n;
    struct vring_desc d[4];
} Chain;

/*
 * Chains that break the virtio rules.  Guest addresses are relative to
 * HDR (a valid request header), DATA (a data buffer), STATUS and TABLE
 * (an indirect table, filled by the case).
 */
#define HDR     (d->data_start)
#define STATUS  (d->data_start + 64)
#define DATA    (d->data_start + 4096)
#define TABLE   (d->data_start + 2 * MiB)
#define W VRING_DESC_F_WRITE
#define N VRING_DESC_F_NEXT
#define I VRING_DESC_F_INDIRECT

static void write_header(VblkDev *d, uint32_t type, uint64_t sector)
{
    struct virtio_blk_outhdr hdr = {
        .type = cpu_to_le32(type), .sector = cpu_to_le64(sector),
    };

    qtest_memwrite(d->qts, HDR, &hdr, sizeof(hdr));
    qtest_writeb(d->qts, STATUS, 0xff);
}

static void expect_reset(VblkDev *d, const char *what,
                         const struct vring_desc *descs, int n)
{
    g_test_message("%s: NEEDS_RESET", what);
    g_assert_true(vblk_raw_chain(d, 0, descs, n, NULL, 0));
}

static void expect_status(VblkDev *d, const char *what,
                          const struct vring_desc *descs, int n,
                          uint8_t expected)
{
    uint8_t status = 0xff;

    g_test_message("%s: status %d", what, expected);
    g_assert_false(vblk_raw_chain(d, 0, descs, n, &status, STATUS));
    g_assert_cmpint(status, ==, expected);
}

static void test_split_chains(void)
{
    VblkDev *d = start("");
    struct vring_desc t[3];
    unsigned gen = 1;

    still_works(d, gen++);
    write_header(d, VIRTIO_BLK_T_IN, 0);
    {
        struct vring_desc loop[] = {
            desc(HDR, 16, N, 1), desc(DATA, 512, W | N, 1),
        };
        expect_reset(d, "descriptor loop", loop, 2);
    }
    {
        struct vring_desc oob[] = {
            desc(HDR, 16, N, 1), desc(DATA, 512, W | N, 1000),
        };
        expect_reset(d, "next beyond the queue", oob, 2);
    }
    {
        struct vring_desc zero[] = { desc(TABLE, 0, I, 0) };
        expect_reset(d, "indirect table of length 0", zero, 1);
    }
    {
        struct vring_desc odd[] = { desc(TABLE, 24, I, 0) };
        expect_reset(d, "indirect table not a multiple of 16", odd, 1);
    }
    {
        struct vring_desc nested[] = { desc(TABLE, 16, I, 0) };

        t[0] = desc(TABLE + 64, 48, I, 0);
        qtest_memwrite(d->qts, TABLE, t, 16);
        expect_reset(d, "nested indirect", nested, 1);
    }
    {
        /*
         * INDIRECT with NEXT breaks a driver rule the device need not
         * police: QEMU follows the table and ignores the rest.
         */
        struct vring_desc both[] = {
            desc(TABLE, 48, I | N, 1), desc(STATUS, 1, W, 0),
        };

        t[0] = desc(HDR, 16, N, 1);
        t[1] = desc(DATA, 512, W | N, 2);
        t[2] = desc(STATUS, 1, W, 0);
        qtest_memwrite(d->qts, TABLE, t, sizeof(t));
        expect_status(d, "indirect descriptor chained on", both, 2,
                      VIRTIO_BLK_S_OK);
    }
    {
        /*
         * Buffers where no RAM is: QEMU maps them through a bounce buffer
         * (reads from nothing, writes to nothing) and completes the request.
         */
        struct vring_desc outside[] = {
            desc(HDR, 16, N, 1), desc(16 * GiB, 4096, W | N, 2),
            desc(STATUS, 1, W, 0),
        };
        expect_status(d, "data outside guest RAM", outside, 3,
                      VIRTIO_BLK_S_OK);
    }
    {
        struct vring_desc mmio[] = {
            desc(HDR, 16, N, 1), desc(0xfebf0000, 4096, W | N, 2),
            desc(STATUS, 1, W, 0),
        };
        expect_status(d, "data in MMIO space", mmio, 3, VIRTIO_BLK_S_OK);
    }
    {
        struct vring_desc short_hdr[] = {
            desc(HDR, 8, N, 1), desc(STATUS, 1, W, 0),
        };
        expect_reset(d, "header shorter than 16 bytes", short_hdr, 2);
    }
    {
        struct vring_desc no_status[] = { desc(HDR, 16, 0, 0) };
        expect_reset(d, "no status byte", no_status, 1);
    }
    {
        struct vring_desc reversed[] = {
            desc(HDR, 16, W | N, 1), desc(DATA, 512, N, 2),
            desc(STATUS, 1, 0, 0),
        };
        expect_reset(d, "writable and readable reversed", reversed, 3);
    }
    still_works(d, gen++);
    vblk_stop(d);
}

/*
 * Packed ring: an indirect descriptor of length 0.  The split ring
 * refuses it; the packed ring used to pass it on to
 * address_space_cache_init(), which asserts that the length is not 0.
 */
static void test_packed_indirect_zero(void)
{
    VblkDev *d = start(",packed=on");
    QVirtQueue *vq;
    struct {
        uint64_t addr;
        uint32_t len;
        uint16_t id;
        uint16_t flags;
    } QEMU_PACKED pd = {
        .addr = cpu_to_le64(TABLE),
        .len = 0,
        .id = 0,
        .flags = cpu_to_le16(I | (1 << VRING_PACKED_DESC_F_AVAIL)),
    };
    gint64 deadline = g_get_monotonic_time() + VBLK_TIMEOUT_US;

    still_works(d, 1);

    /* Bring the device up again on a packed ring */
    d->extra_features = 1ull << VIRTIO_F_RING_PACKED;
    vblk_reset(d);
    vq = d->vqs[0];
    qtest_memwrite(d->qts, vq->desc, &pd, sizeof(pd));
    d->vdev->bus->virtqueue_kick(d->vdev, vq);
    while (!(vblk_device_status(d) & VIRTIO_CONFIG_S_NEEDS_RESET)) {
        g_assert(g_get_monotonic_time() < deadline);
        g_usleep(100);
    }

    /* QEMU is alive; back on a split ring, the device works */
    d->extra_features = 0;
    vblk_reset(d);
    still_works(d, 2);
    vblk_stop(d);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    qtest_add_func("/vblk-hostile/split-chains", test_split_chains);
    qtest_add_func("/vblk-hostile/packed-indirect-zero",
                   test_packed_indirect_zero);
    return g_test_run();
}
