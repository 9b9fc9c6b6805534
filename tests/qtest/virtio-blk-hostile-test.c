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
#include "qobject/qdict.h"
#include "standard-headers/linux/virtio_blk.h"
#include "standard-headers/linux/virtio_config.h"
#include "standard-headers/linux/virtio_pci.h"
#include "standard-headers/linux/virtio_ring.h"
#include "virtio-blk-helpers.h"

#define DISK_SIZE (16 * MiB)

/* Our device, with @dev_opts, and QEMU arguments @extra */
static VblkDev *start_with(const char *dev_opts, const char *extra)
{
    char *image = vblk_make_image(DISK_SIZE);

    return vblk_start(256 * MiB, image, 1,
                      "-machine pc -m 256M -object iothread,id=io0 "
                      "-blockdev file,node-name=disk0,filename=%s,"
                      "aio=io_uring,cache.direct=on,aio-fixed-buffers=on "
                      "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                      "iothread=io0%s %s", image, dev_opts, extra);
}

static VblkDev *start(const char *dev_opts)
{
    return start_with(dev_opts, "");
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

/*
 * An indirect table of @n entries at TABLE: the header, @n - 2 data
 * segments of 512 bytes (readable, or device-writable for a read), the
 * status byte.
 */
static void write_long_table(VblkDev *d, int n, bool chained)
{
    g_autofree struct vring_desc *t = g_new(struct vring_desc, n);
    int i;

    t[0] = vblk_desc(HDR, 16, chained ? N : 0, 1);
    for (i = 1; i < n - 1; i++) {
        t[i] = vblk_desc(DATA + (i % 8) * 512, 512, W | (chained ? N : 0),
                         i + 1);
    }
    t[n - 1] = vblk_desc(STATUS, 1, W, 0);
    qtest_memwrite(d->qts, TABLE, t, n * sizeof(t[0]));
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
            vblk_desc(HDR, 16, N, 1), vblk_desc(DATA, 512, W | N, 1),
        };
        expect_reset(d, "descriptor loop", loop, 2);
    }
    {
        struct vring_desc oob[] = {
            vblk_desc(HDR, 16, N, 1), vblk_desc(DATA, 512, W | N, 1000),
        };
        expect_reset(d, "next beyond the queue", oob, 2);
    }
    {
        struct vring_desc zero[] = { vblk_desc(TABLE, 0, I, 0) };
        expect_reset(d, "indirect table of length 0", zero, 1);
    }
    {
        struct vring_desc odd[] = { vblk_desc(TABLE, 24, I, 0) };
        expect_reset(d, "indirect table not a multiple of 16", odd, 1);
    }
    {
        /* A table whose only entry points at another table */
        struct vring_desc nested[] = { vblk_desc(TABLE, 16, I, 0) };

        t[0] = vblk_desc(TABLE + 64, 48, I, 0);
        qtest_memwrite(d->qts, TABLE, t, 16);
        expect_reset(d, "nested indirect, alone", nested, 1);
    }
    {
        /*
         * INDIRECT on a data entry of a table: QEMU does not follow it
         * (nor check it), the entry is a data buffer like any other.
         */
        struct vring_desc nested[] = { vblk_desc(TABLE, 48, I, 0) };

        t[0] = vblk_desc(HDR, 16, N, 1);
        t[1] = vblk_desc(DATA, 512, W | I | N, 2);
        t[2] = vblk_desc(STATUS, 1, W, 0);
        qtest_memwrite(d->qts, TABLE, t, sizeof(t));
        expect_status(d, "nested indirect among data", nested, 1,
                      VIRTIO_BLK_S_OK);
    }
    {
        /*
         * INDIRECT with NEXT breaks a driver rule the device need not
         * police: QEMU follows the table and ignores the rest.
         */
        struct vring_desc both[] = {
            vblk_desc(TABLE, 48, I | N, 1), vblk_desc(STATUS, 1, W, 0),
        };

        t[0] = vblk_desc(HDR, 16, N, 1);
        t[1] = vblk_desc(DATA, 512, W | N, 2);
        t[2] = vblk_desc(STATUS, 1, W, 0);
        qtest_memwrite(d->qts, TABLE, t, sizeof(t));
        expect_status(d, "indirect descriptor chained on", both, 2,
                      VIRTIO_BLK_S_OK);
    }
    {
        /*
         * Buffers where no RAM is: a device never reads or writes
         * anything but guest memory for a request (no bounce buffer).
         */
        struct vring_desc outside[] = {
            vblk_desc(HDR, 16, N, 1), vblk_desc(16 * GiB, 4096, W | N, 2),
            vblk_desc(STATUS, 1, W, 0),
        };
        expect_reset(d, "data outside guest RAM", outside, 3);
    }
    {
        struct vring_desc mmio[] = {
            vblk_desc(HDR, 16, N, 1), vblk_desc(0xfebf0000, 4096, W | N, 2),
            vblk_desc(STATUS, 1, W, 0),
        };
        expect_reset(d, "data in MMIO space", mmio, 3);
    }
    {
        struct vring_desc short_hdr[] = {
            vblk_desc(HDR, 8, N, 1), vblk_desc(STATUS, 1, W, 0),
        };
        expect_reset(d, "header shorter than 16 bytes", short_hdr, 2);
    }
    {
        struct vring_desc no_status[] = { vblk_desc(HDR, 16, 0, 0) };
        expect_reset(d, "no status byte", no_status, 1);
    }
    {
        struct vring_desc reversed[] = {
            vblk_desc(HDR, 16, W | N, 1), vblk_desc(DATA, 512, N, 2),
            vblk_desc(STATUS, 1, 0, 0),
        };
        expect_reset(d, "writable and readable reversed", reversed, 3);
    }
    {
        struct vring_desc far[] = { vblk_desc(16 * GiB, 48, I, 0) };
        expect_reset(d, "indirect table outside guest RAM", far, 1);
    }
    {
        struct vring_desc huge[] = { vblk_desc(TABLE, 0xfffffff0, I, 0) };
        expect_reset(d, "indirect table of 4 GiB", huge, 1);
    }
    {
        /* 1100 entries: more than VIRTQUEUE_MAX_SIZE (1024) in one chain */
        struct vring_desc longer[] = { vblk_desc(TABLE, 1100 * 16, I, 0) };

        write_long_table(d, 1100, true);
        expect_reset(d, "indirect chain longer than 1024", longer, 1);
    }
    {
        /* Header and status byte where no RAM is: the same */
        struct vring_desc nohdr[] = {
            vblk_desc(16 * GiB, 16, N, 1), vblk_desc(16 * GiB + 4096, 1, W, 0),
        };
        expect_reset(d, "header and status outside guest RAM", nohdr, 2);
    }
    still_works(d, gen++);
    vblk_stop(d);
}

/*
 * Buffers in the device's own registers.  A read whose data lands on its
 * common configuration writes the disk's zeroes over it (device status 0
 * resets the device) from the device's own completion, in its IOThread:
 * QEMU 10.2.2 aborts there (aio_wait_bh_oneshot: Assertion
 * `qemu_get_current_aio_context() == qemu_get_aio_context()' failed).
 * Now the device refuses such buffers, as it does any broken chain.
 */
static void test_own_registers(void)
{
    VblkDev *d = start("");
    uint64_t common = d->pdev->bar.addr + d->pdev->common_cfg_offset;
    uint64_t notify = d->pdev->bar.addr + d->pdev->notify_cfg_offset;
    struct vring_desc in[] = {
        vblk_desc(HDR, 16, N, 1), vblk_desc(common, 64, W | N, 2),
        vblk_desc(STATUS, 1, W, 0),
    };
    struct vring_desc out[] = {
        vblk_desc(HDR, 16, N, 1), vblk_desc(notify, 512, N, 2),
        vblk_desc(STATUS, 1, W, 0),
    };

    still_works(d, 1);
    write_header(d, VIRTIO_BLK_T_IN, 0);
    expect_reset(d, "read into the device's common configuration", in, 3);
    still_works(d, 2);
    write_header(d, VIRTIO_BLK_T_OUT, 0);
    expect_reset(d, "write from the device's notification area", out, 3);
    write_header(d, VIRTIO_BLK_T_IN, 0);
    still_works(d, 3);
    vblk_stop(d);
}

/*
 * Buffers in another device's registers, in ROM and where nothing is
 * mapped: a device must never read or write MMIO on behalf of a request,
 * from whatever thread completes it (a second virtio-blk's common
 * configuration reset from our IOThread aborts QEMU).  Each is a broken
 * chain: NEEDS_RESET, and after the reset the device works.
 */
static void test_other_memory(gconstpointer opaque)
{
    const char *other_opts = opaque;
    VblkDev *d = start_with("", other_opts);
    QPCIDevice *other = qpci_device_find(d->bus, QPCI_DEVFN(5, 0));
    QPCIBar bar;
    uint64_t common;
    const uint64_t rom = 0xfffff000;        /* the top of the BIOS */
    const uint64_t unassigned = 0xc0000000; /* PCI hole, no BAR here */
    struct vring_desc into_other[] = {
        vblk_desc(HDR, 16, N, 1), vblk_desc(0, 64, W | N, 2),
        vblk_desc(STATUS, 1, W, 0),
    };
    struct vring_desc from_other[] = {
        vblk_desc(HDR, 16, N, 1), vblk_desc(0, 512, N, 2),
        vblk_desc(STATUS, 1, W, 0),
    };
    struct vring_desc into_rom[] = {
        vblk_desc(HDR, 16, N, 1), vblk_desc(rom, 512, W | N, 2),
        vblk_desc(STATUS, 1, W, 0),
    };
    struct vring_desc into_nothing[] = {
        vblk_desc(HDR, 16, N, 1), vblk_desc(unassigned, 512, W | N, 2),
        vblk_desc(STATUS, 1, W, 0),
    };
    struct vring_desc from_nothing[] = {
        vblk_desc(HDR, 16, N, 1), vblk_desc(unassigned, 512, N, 2),
        vblk_desc(STATUS, 1, W, 0),
    };

    /* The other device's modern BAR: common configuration at its start */
    g_assert_nonnull(other);
    bar = qpci_iomap(other, 4, NULL);
    qpci_device_enable(other);
    common = bar.addr;
    into_other[1] = vblk_desc(common, 64, W | N, 2);
    from_other[1] = vblk_desc(common, 512, N, 2);

    /* Sector 16 holds still_works()'s pattern: no zeroes to hide a write */
    still_works(d, 1);
    write_header(d, VIRTIO_BLK_T_IN, 16);
    expect_reset(d, "read into another device's registers", into_other, 3);
    still_works(d, 2);
    write_header(d, VIRTIO_BLK_T_OUT, 0);
    expect_reset(d, "write from another device's registers", from_other, 3);
    write_header(d, VIRTIO_BLK_T_IN, 0);
    expect_reset(d, "read into ROM", into_rom, 3);
    write_header(d, VIRTIO_BLK_T_IN, 0);
    expect_reset(d, "read into unassigned space", into_nothing, 3);
    write_header(d, VIRTIO_BLK_T_OUT, 0);
    expect_reset(d, "write from unassigned space", from_nothing, 3);
    still_works(d, 3);
    /* The other device is alive, its registers untouched by our requests */
    g_assert_cmpint(qpci_io_readb(other, bar, 0x14), ==, 0);
    g_free(other);
    vblk_stop(d);
}

/*
 * Requests after the disk was taken away with HMP drive_del, as libvirt
 * does for a -drive disk after device_del, and as a guest can race by
 * keeping I/O going until it acknowledges the unplug.  The BlockBackend
 * has no node then: every request must fail with VIRTIO_BLK_S_IOERR and
 * QEMU must stay up.  Two zero-length reads in one kick reach the merge
 * path, where QEMU 10.2.2 reads the node's limits (blk_get_max_iov())
 * and crashes; one zero-length read crashed our submission path.
 */
static void test_after_drive_del(gconstpointer opaque)
{
    const char *dev_opts = opaque;
    VblkDev *d = vblk_start(256 * MiB, NULL, 1,
                            "-machine pc -m 256M -object iothread,id=io0 "
                            "-drive if=none,id=drive0,format=raw,"
                            "file.driver=null-co,file.size=16M,"
                            "file.read-zeroes=on "
                            "-device virtio-blk-pci,id=vblk0,addr=04.0,"
                            "drive=drive0%s", dev_opts);
    /* Headers and status bytes of the four requests, 64 bytes apart */
    const uint64_t hdr = d->data_start, st = d->data_start + 1024;
    const uint64_t data = d->data_start + 8192;
    static const struct {
        uint32_t type;
        uint32_t len;       /* data bytes */
    } reqs[] = {
        { VIRTIO_BLK_T_IN, 0 }, { VIRTIO_BLK_T_IN, 0 },
        { VIRTIO_BLK_T_IN, 512 }, { VIRTIO_BLK_T_OUT, 4096 },
    };
    struct vring_desc descs[3 * ARRAY_SIZE(reqs)];
    uint16_t heads[ARRAY_SIZE(reqs)];
    struct vring_used_elem used[ARRAY_SIZE(reqs)];
    g_autofree char *out = NULL;
    int i, n = 0, got;
    bool reset;
    QDict *rsp;

    for (i = 0; i < ARRAY_SIZE(reqs); i++) {
        struct virtio_blk_outhdr h = {
            .type = cpu_to_le32(reqs[i].type),
            .sector = cpu_to_le64(reqs[i].type == VIRTIO_BLK_T_OUT ? 8 : 0),
        };
        uint16_t w = reqs[i].type == VIRTIO_BLK_T_OUT ? 0 : W;

        qtest_memwrite(d->qts, hdr + 64 * i, &h, sizeof(h));
        qtest_writeb(d->qts, st + 64 * i, 0xff);
        heads[i] = n;
        descs[n] = vblk_desc(hdr + 64 * i, 16, N, n + 1);
        n++;
        if (reqs[i].len) {
            descs[n] = vblk_desc(data + 8192 * i, reqs[i].len, w | N, n + 1);
            n++;
        }
        descs[n++] = vblk_desc(st + 64 * i, 1, W, 0);
    }

    out = qtest_hmp(d->qts, "drive_del drive0");
    g_assert_cmpstr(out, ==, "");
    got = vblk_raw_batch(d, 0, descs, n, heads, ARRAY_SIZE(reqs), used,
                         &reset);
    g_assert_false(reset);
    g_assert_cmpint(got, ==, ARRAY_SIZE(reqs));
    for (i = 0; i < ARRAY_SIZE(reqs); i++) {
        g_assert_cmpint(qtest_readb(d->qts, st + 64 * i), ==,
                        VIRTIO_BLK_S_IOERR);
    }
    rsp = qtest_qmp(d->qts, "{'execute': 'query-status'}");
    g_assert(qdict_haskey(rsp, "return"));
    qobject_unref(rsp);
    vblk_quit(d);
    g_free(d->shadow);
    g_free(d);
}

static struct vring_packed_desc pdesc(uint64_t addr, uint32_t len,
                                      uint16_t flags, uint16_t id)
{
    return (struct vring_packed_desc) {
        .addr = cpu_to_le64(addr), .len = cpu_to_le32(len),
        .id = cpu_to_le16(id), .flags = cpu_to_le16(flags),
    };
}

/* Reset the device onto a packed ring, or back onto a split ring */
static void use_packed(VblkDev *d, bool packed)
{
    d->extra_features = packed ? 1ull << VIRTIO_F_RING_PACKED : 0;
    vblk_reset(d);
}

static void expect_packed_reset(VblkDev *d, const char *what,
                                const struct vring_packed_desc *descs, int n)
{
    g_test_message("packed: %s: NEEDS_RESET", what);
    g_assert_true(vblk_packed_chain(d, 0, descs, n, NULL, 0, NULL));
}

static void expect_packed_status(VblkDev *d, const char *what,
                                 const struct vring_packed_desc *descs, int n,
                                 uint8_t expected)
{
    uint8_t status = 0xff;
    uint16_t id = 0;

    g_test_message("packed: %s: status %d", what, expected);
    g_assert_false(vblk_packed_chain(d, 0, descs, n, &status, STATUS, &id));
    g_assert_cmpint(status, ==, expected);
    /* The id is the one in the chain's last descriptor */
    g_assert_cmpint(id, ==, le16_to_cpu(descs[n - 1].id));
}

/*
 * The packed ring against the same rules as the split ring, and the
 * requests the device itself must refuse.  Descriptors of a packed ring
 * have no 'next': a chain is consecutive slots, flagged NEXT but the last.
 */
static void test_packed_chains(void)
{
    VblkDev *d = start(",packed=on");
    g_autofree struct vring_packed_desc *ring = NULL;
    struct vring_packed_desc t[3];
    uint64_t sectors = d->capacity / VBLK_SECTOR;
    unsigned gen = 1, i, size;

    still_works(d, gen++);
    use_packed(d, true);
    size = d->vqs[0]->size;

    write_header(d, VIRTIO_BLK_T_IN, 0);
    {
        struct vring_packed_desc ok[] = {
            pdesc(HDR, 16, N, 0), pdesc(DATA, 512, W | N, 0),
            pdesc(STATUS, 1, W, 7),
        };
        expect_packed_status(d, "a valid read (the driver works)", ok, 3,
                             VIRTIO_BLK_S_OK);
    }
    {
        /* Every slot flagged NEXT: the chain runs round the ring */
        ring = g_new(struct vring_packed_desc, size);
        ring[0] = pdesc(HDR, 16, N, 0);
        for (i = 1; i < size; i++) {
            ring[i] = pdesc(DATA, 512, N, 0);
        }
        expect_packed_reset(d, "chain longer than the queue", ring, size);
    }
    {
        struct vring_packed_desc odd[] = { pdesc(TABLE, 24, I, 0) };
        expect_packed_reset(d, "indirect table not a multiple of 16", odd, 1);
    }
    {
        struct vring_packed_desc far[] = { pdesc(16 * GiB, 48, I, 0) };
        expect_packed_reset(d, "indirect table outside guest RAM", far, 1);
    }
    {
        struct vring_packed_desc huge[] = { pdesc(TABLE, 0xfffffff0, I, 0) };
        expect_packed_reset(d, "indirect table of 4 GiB", huge, 1);
    }
    {
        /* The packed ring takes every entry of a table, flags or not */
        struct vring_packed_desc longer[] = { pdesc(TABLE, 1100 * 16, I, 0) };
        g_autofree struct vring_packed_desc *lt =
            g_new(struct vring_packed_desc, 1100);

        lt[0] = pdesc(HDR, 16, 0, 0);
        for (i = 1; i < 1099; i++) {
            lt[i] = pdesc(DATA + (i % 8) * 512, 512, W, 0);
        }
        lt[1099] = pdesc(STATUS, 1, W, 0);
        qtest_memwrite(d->qts, TABLE, lt, 1100 * sizeof(lt[0]));
        expect_packed_reset(d, "indirect chain longer than 1024", longer, 1);
    }
    {
        /*
         * An indirect descriptor inside a table: the packed ring does not
         * follow it, it is a data buffer like any other.
         */
        struct vring_packed_desc nested[] = { pdesc(TABLE, 48, I, 9) };

        t[0] = pdesc(HDR, 16, 0, 0);
        t[1] = pdesc(DATA, 512, W | I, 0);
        t[2] = pdesc(STATUS, 1, W, 0);
        qtest_memwrite(d->qts, TABLE, t, sizeof(t));
        expect_packed_status(d, "nested indirect", nested, 1,
                             VIRTIO_BLK_S_OK);
    }
    {
        struct vring_packed_desc short_hdr[] = {
            pdesc(HDR, 8, N, 0), pdesc(STATUS, 1, W, 0),
        };
        expect_packed_reset(d, "header shorter than 16 bytes", short_hdr, 2);
    }
    {
        struct vring_packed_desc no_status[] = { pdesc(HDR, 16, 0, 0) };
        expect_packed_reset(d, "no status byte", no_status, 1);
    }
    {
        struct vring_packed_desc reversed[] = {
            pdesc(HDR, 16, W | N, 0), pdesc(DATA, 512, N, 0),
            pdesc(STATUS, 1, 0, 0),
        };
        expect_packed_reset(d, "writable and readable reversed", reversed, 3);
    }
    {
        struct vring_packed_desc zero[] = {
            pdesc(HDR, 16, N, 0), pdesc(DATA, 0, W | N, 0),
            pdesc(STATUS, 1, W, 0),
        };
        expect_packed_reset(d, "zero-length data descriptor", zero, 3);
    }
    {
        struct vring_packed_desc outside[] = {
            pdesc(HDR, 16, N, 0), pdesc(16 * GiB, 4096, W | N, 0),
            pdesc(STATUS, 1, W, 1),
        };
        expect_packed_reset(d, "data outside guest RAM", outside, 3);
    }
    {
        struct vring_packed_desc mmio[] = {
            pdesc(HDR, 16, N, 0), pdesc(0xfebf0000, 4096, W | N, 0),
            pdesc(STATUS, 1, W, 2),
        };
        expect_packed_reset(d, "data in MMIO space", mmio, 3);
    }
    {
        /* Buffer ids are the driver's business: any value comes back */
        struct vring_packed_desc id[] = {
            pdesc(HDR, 16, N, 0), pdesc(DATA, 512, W | N, 0),
            pdesc(STATUS, 1, W, 0xffff),
        };
        expect_packed_status(d, "buffer id beyond the queue size", id, 3,
                             VIRTIO_BLK_S_OK);
    }
    {
        struct vring_packed_desc rw[] = {
            pdesc(HDR, 16, N, 0), pdesc(DATA, 512, W | N, 0),
            pdesc(STATUS, 1, W, 3),
        };

        write_header(d, VIRTIO_BLK_T_IN, sectors);
        expect_packed_status(d, "read past the end of the disk", rw, 3,
                             VIRTIO_BLK_S_IOERR);
        write_header(d, VIRTIO_BLK_T_IN, sectors - 1);
        rw[1].len = cpu_to_le32(1024);
        expect_packed_status(d, "read across the end of the disk", rw, 3,
                             VIRTIO_BLK_S_IOERR);
        write_header(d, VIRTIO_BLK_T_IN, UINT64_MAX / 256);
        expect_packed_status(d, "sector number that overflows", rw, 3,
                             VIRTIO_BLK_S_IOERR);
        write_header(d, 0x7fff, 0);
        expect_packed_status(d, "unsupported request type", rw, 3,
                             VIRTIO_BLK_S_UNSUPP);
        /* A write past the end writes nothing (the image is checked) */
        rw[1].flags = cpu_to_le16(N);
        write_header(d, VIRTIO_BLK_T_OUT, sectors - 1);
        expect_packed_status(d, "write across the end of the disk", rw, 3,
                             VIRTIO_BLK_S_IOERR);
        write_header(d, VIRTIO_BLK_T_IN, 0);
    }

    /* QEMU is alive; back on a split ring, the device works */
    use_packed(d, false);
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

/*
 * A driver that enables a queue before it writes the features, or writes
 * them again after: the virtio spec forbids it, the device must survive
 * it.  The queue's ring caches are laid out for the features of the moment
 * (the packed ring's descriptor ring is written by the device, its event
 * areas are 4 bytes).  QEMU 10.2.2 laid them out again only for
 * EVENT_IDX: a packed ring negotiated after the queue was enabled aborted
 * at the first completion (assert(cache->is_write) in
 * address_space_cache_invalidate(), found by generic-fuzz), and a split
 * ring negotiated after a packed one overran its 4-byte used "ring".
 * @opaque names the ring of the final features.
 */
static void test_features_after_queues(gconstpointer opaque)
{
    bool packed = !strcmp(opaque, "packed");
    VblkDev *d = start(",packed=on");
    const uint64_t packed_bit = 1ull << VIRTIO_F_RING_PACKED;
    uint8_t status = 0xff;
    uint16_t id = 0xffff;

    still_works(d, 1);
    d->queues_first = true;
    d->first_features = packed ? 0 : packed_bit;
    d->extra_features = packed ? packed_bit : 0;
    vblk_reset(d);
    g_assert_cmphex(d->vdev->bus->get_guest_features(d->vdev) & packed_bit,
                    ==, d->extra_features);

    /* A read of sector 16, which holds still_works()' pattern */
    write_header(d, VIRTIO_BLK_T_IN, 16);
    if (packed) {
        struct vring_packed_desc rd[] = {
            pdesc(HDR, 16, N, 0), pdesc(DATA, 512, W | N, 0),
            pdesc(STATUS, 1, W, 5),
        };

        g_assert_false(vblk_packed_chain(d, 0, rd, 3, &status, STATUS, &id));
        g_assert_cmpint(id, ==, 5);
    } else {
        struct vring_desc rd[] = {
            vblk_desc(HDR, 16, N, 1), vblk_desc(DATA, 512, W | N, 2),
            vblk_desc(STATUS, 1, W, 0),
        };

        g_assert_false(vblk_raw_chain(d, 0, rd, 3, &status, STATUS));
    }
    g_assert_cmpint(status, ==, VIRTIO_BLK_S_OK);
    {
        uint8_t want[512], got[512];

        vblk_pattern(want, sizeof(want), 16 * VBLK_SECTOR, 1);
        qtest_memread(d->qts, DATA, got, sizeof(got));
        g_assert(memcmp(want, got, sizeof(got)) == 0);
    }

    /* Brought up the usual way again, on a split ring, the device works */
    d->queues_first = false;
    d->extra_features = 0;
    vblk_reset(d);
    still_works(d, 2);
    vblk_stop(d);
}

/*
 * Two reads of zero bytes at sector 0 in one notification: valid
 * requests, which virtio-blk merges into one whose vector has no
 * element (and a NULL iov).  aio=io_uring took its first element for a
 * non-vectored read; QEMU 10.2.2 dies of SIGSEGV (found by generic-fuzz).
 * Both must complete with VIRTIO_BLK_S_OK.  @opaque: the blockdev's
 * aio-fixed-buffers setting.
 */
static void test_zero_reads(gconstpointer opaque)
{
    char *image = vblk_make_image(DISK_SIZE);
    VblkDev *d = vblk_start(256 * MiB, image, 1,
                            "-machine pc -m 256M "
                            "-blockdev file,node-name=disk0,filename=%s,"
                            "aio=io_uring,cache.direct=on,"
                            "aio-fixed-buffers=%s "
                            "-device virtio-blk-pci,id=vblk0,addr=04.0,"
                            "drive=disk0", image, (const char *)opaque);
    const uint64_t hdr = d->data_start, st = d->data_start + 1024;
    struct virtio_blk_outhdr h = { .type = cpu_to_le32(VIRTIO_BLK_T_IN) };
    struct vring_desc descs[4];
    uint16_t heads[2] = { 0, 2 };
    struct vring_used_elem used[2];
    bool reset;
    int i;

    for (i = 0; i < 2; i++) {
        qtest_memwrite(d->qts, hdr + 64 * i, &h, sizeof(h));
        qtest_writeb(d->qts, st + 64 * i, 0xff);
        descs[2 * i] = vblk_desc(hdr + 64 * i, 16, N, 2 * i + 1);
        descs[2 * i + 1] = vblk_desc(st + 64 * i, 1, W, 0);
    }
    g_assert_cmpint(vblk_raw_batch(d, 0, descs, 4, heads, 2, used, &reset),
                    ==, 2);
    g_assert_false(reset);
    for (i = 0; i < 2; i++) {
        g_assert_cmpint(qtest_readb(d->qts, st + 64 * i), ==,
                        VIRTIO_BLK_S_OK);
    }
    still_works(d, 1);
    vblk_stop(d);
}

/* Queue 0 enabled again, its rings at @desc, @avail and @used */
static void move_rings(VblkDev *d, uint64_t desc, uint64_t avail,
                       uint64_t used)
{
    QVirtioPCIDevice *dev = container_of(d->vdev, QVirtioPCIDevice, vdev);
    QVirtQueue moved = { .index = 0, .desc = desc, .avail = avail,
                         .used = used };

    d->vdev->bus->queue_select(d->vdev, 0);
    d->vdev->bus->set_queue_address(d->vdev, &moved);
    qpci_io_writew(dev->pdev, dev->bar, dev->common_cfg_offset +
                   offsetof(struct virtio_pci_common_cfg, queue_enable), 1);
}

/*
 * Rings a driver places outside guest memory: in unassigned space, or in
 * another device's registers.  The device reads and writes its rings from
 * the IOThread; over such memory each access would take the BQL for the
 * region's handlers, and a reset, which holds the BQL while it waits for
 * the IOThread, hung QEMU 10.2.2 (found by generic-fuzz).  The device
 * must refuse such rings when the queue is enabled (NEEDS_RESET), and
 * work again after a reset.  Each case is tried several times with a kick
 * and a reset, the sequence that hung.
 */
static void test_rings_elsewhere(void)
{
    VblkDev *d = start_with("", "-object iothread,id=io1 "
                            "-blockdev null-co,node-name=null0 "
                            "-device virtio-blk-pci,addr=05.0,drive=null0,"
                            "iothread=io1");
    QPCIDevice *other = qpci_device_find(d->bus, QPCI_DEVFN(5, 0));
    const uint64_t nothing = 0xc0000000;    /* PCI hole, no BAR here */
    QPCIBar bar;
    unsigned gen = 1;
    int round, i;

    g_assert_nonnull(other);
    bar = qpci_iomap(other, 4, NULL);
    qpci_device_enable(other);
    still_works(d, gen++);
    for (round = 0; round < 4; round++) {
        QVirtQueue *vq = d->vqs[0];
        const struct {
            const char *what;
            uint64_t desc, avail, used;
        } cases[] = {
            { "all rings in unassigned space",
              nothing, nothing + 0x4000, nothing + 0x8000 },
            { "descriptors in another device's registers",
              bar.addr, vq->avail, vq->used },
            { "available ring in another device's registers",
              vq->desc, bar.addr, vq->used },
            { "used ring in unassigned space", vq->desc, vq->avail, nothing },
        };

        for (i = 0; i < ARRAY_SIZE(cases); i++) {
            g_test_message("round %d: %s", round, cases[i].what);
            move_rings(d, cases[i].desc, cases[i].avail, cases[i].used);
            d->vdev->bus->virtqueue_kick(d->vdev, d->vqs[0]);
            g_assert_true(vblk_device_status(d) &
                          VIRTIO_CONFIG_S_NEEDS_RESET);
            vblk_reset(d);
        }
        still_works(d, gen++);
    }
    /* The other device's status was never written by our device */
    g_assert_cmpint(qpci_io_readb(other, bar, 0x14), ==, 0);
    g_free(other);
    vblk_stop(d);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    qtest_add_func("/virtio-blk-hostile/split-chains", test_split_chains);
    qtest_add_func("/virtio-blk-hostile/own-registers", test_own_registers);
    qtest_add_data_func("/virtio-blk-hostile/other-memory/plain",
                        "-blockdev null-co,node-name=null0 "
                        "-device virtio-blk-pci,addr=05.0,drive=null0",
                        test_other_memory);
    qtest_add_data_func("/virtio-blk-hostile/other-memory/iothread",
                        "-object iothread,id=io1 "
                        "-blockdev null-co,node-name=null0 "
                        "-device virtio-blk-pci,addr=05.0,drive=null0,"
                        "iothread=io1", test_other_memory);
    qtest_add_data_func("/virtio-blk-hostile/after-drive-del/main-loop", "",
                        test_after_drive_del);
    qtest_add_data_func("/virtio-blk-hostile/after-drive-del/iothread",
                        ",iothread=io0", test_after_drive_del);
    qtest_add_func("/virtio-blk-hostile/packed-chains", test_packed_chains);
    qtest_add_func("/virtio-blk-hostile/packed-indirect-zero",
                   test_packed_indirect_zero);
    qtest_add_data_func("/virtio-blk-hostile/features-after-queues/packed",
                        "packed", test_features_after_queues);
    qtest_add_data_func("/virtio-blk-hostile/features-after-queues/split",
                        "split", test_features_after_queues);
    qtest_add_data_func("/virtio-blk-hostile/zero-reads/io_uring", "off",
                        test_zero_reads);
    qtest_add_data_func("/virtio-blk-hostile/zero-reads/io_uring-fixed", "on",
                        test_zero_reads);
    qtest_add_func("/virtio-blk-hostile/rings-elsewhere", test_rings_elsewhere);
    return g_test_run();
}
