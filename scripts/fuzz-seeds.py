#!/usr/bin/env python3
"""Hand-made seed inputs for QEMU's generic-fuzz target (scripts/fuzz).

A fuzzer that starts from nothing spends its first minutes finding the
virtio-pci registers; in a bounded run of a minute it never brings a queue
up, so it never reaches a request.  These inputs do what a driver does:
reset, features, one queue's rings, DRIVER_OK, a doorbell; then they answer
the device's DMA reads (the descriptors, the request header) with DMA
patterns in the order the device makes them.  The fuzzer mutates from
there.

    fuzz-seeds.py [--list] CONFIG OUTDIR

The input format is generic_fuzz.c's: commands separated by "FUZZ", the
first byte of each an opcode (modulo 10), then the operands of that op in
the layout of its C struct (padding included).  An MMIO region is chosen
by its index among the matched regions in the flat view, by address: for
one virtio-blk-pci on q35 with QEMU_FUZZ_OBJECTS='virtio*', 0 is the MSI-X
table, 1 its PBA, 2 the common configuration, 3 the ISR, 4 the device
configuration, 5 the notify region (FUZZ_SERIALIZE_QTEST=1 QTEST_LOG=1
shows the accesses).  Each DMA read of the device takes the next pattern,
round robin, whatever its address, and the first read of an address in
a command only (scripts/fuzz sets QEMU_AVOID_DOUBLE_FETCH, as upstream's
predefined configurations do; with --double-fetch, the packed seeds are
out of step).  scripts/fuzz --reproduce with
VBLK_FUZZ_EXTRA_ARGS='-trace virtqueue_pop -trace virtio_blk_req_complete'
shows that each seed completes one request.  With an iothread the order
of the reads is not fixed and a seed may miss.
"""

import os
import struct
import sys

SEP = b"FUZZ"
OP_READ, OP_WRITE, OP_ADD_DMA_PATTERN, OP_CLEAR_DMA_PATTERNS = 2, 3, 7, 8
SIZE_B, SIZE_W, SIZE_L = 0, 1, 2

MMIO_COMMON, MMIO_DEVICE, MMIO_NOTIFY = 2, 4, 5
NOTIFY_MULT = 4

# virtio_pci_common_cfg
DFSELECT, GFSELECT, GF = 0x00, 0x08, 0x0C
STATUS, Q_SELECT, Q_SIZE, Q_ENABLE = 0x14, 0x16, 0x18, 0x1C
Q_DESCLO, Q_DESCHI, Q_AVAILLO, Q_AVAILHI, Q_USEDLO, Q_USEDHI = (
    0x20, 0x24, 0x28, 0x2C, 0x30, 0x34)

S_ACK, S_DRIVER, S_DRIVER_OK, S_FEATURES_OK = 1, 2, 4, 8

F_SEG_MAX, F_BLK_SIZE, F_FLUSH, F_MQ, F_DISCARD, F_WRITE_ZEROES = (
    2, 6, 9, 12, 13, 14)
F_INDIRECT, F_EVENT_IDX = 28, 29
F_VERSION_1, F_PACKED, F_IN_ORDER = 32, 34, 35

T_IN, T_OUT, T_FLUSH, T_GET_ID = 0, 1, 4, 8
DESC_NEXT, DESC_WRITE = 1, 2
PACKED_AVAIL, PACKED_USED = 1 << 7, 1 << 15

# Guest-physical layout (the fuzzer gives the machine 512 MiB): room for
# rings of 32768 entries.
DESC, AVAIL, USED = 0x1000000, 0x1100000, 0x1200000
HDR, DATA, STATUS_BUF = 0x2000000, 0x2100000, 0x2200000

MIB = 1 << 20
CONFIGS = {
    # name: (features, queue index, guest RAM; scripts/fuzz gives the
    # io_uring configurations 2 GiB, three fixed-buffer chunks)
    "split": ([], 0, 512 * MIB),
    "split-32k": ([], 63, 512 * MIB),
    "packed": ([F_PACKED], 0, 512 * MIB),
    "packed-32k": ([F_PACKED], 63, 512 * MIB),
    "in-order": ([F_IN_ORDER], 0, 512 * MIB),
    "in-order-packed": ([F_PACKED, F_IN_ORDER], 0, 512 * MIB),
    "iothread": ([], 0, 512 * MIB),
    "uring-fixed": ([], 0, 2048 * MIB),
    "uring-fixed-iothread": ([], 0, 2048 * MIB),
}


def write(base, offset, value, size=SIZE_L):
    return bytes([OP_WRITE]) + struct.pack("<BBxxIQ", size, base, offset,
                                           value)


def read(base, offset, size=SIZE_L):
    return bytes([OP_READ]) + struct.pack("<BBxxI", size, base, offset)


def pattern(data, index=0, stride=0):
    return bytes([OP_ADD_DMA_PATTERN, index, stride]) + data


def common(offset, value, size=SIZE_L):
    return write(MMIO_COMMON, offset, value, size)


def bring_up(features, queue):
    """Reset, negotiate, set one queue's rings at its full size, DRIVER_OK"""
    bits = 0
    for f in [F_VERSION_1] + features:
        bits |= 1 << f
    status = S_ACK | S_DRIVER
    return [
        common(STATUS, 0, SIZE_B),
        common(STATUS, S_ACK, SIZE_B),
        common(STATUS, status, SIZE_B),
        common(GFSELECT, 0),
        common(GF, bits & 0xffffffff),
        common(GFSELECT, 1),
        common(GF, bits >> 32),
        common(STATUS, status | S_FEATURES_OK, SIZE_B),
        common(Q_SELECT, queue, SIZE_W),
        common(Q_DESCLO, DESC),
        common(Q_DESCHI, 0),
        common(Q_AVAILLO, AVAIL),
        common(Q_AVAILHI, 0),
        common(Q_USEDLO, USED),
        common(Q_USEDHI, 0),
        common(Q_ENABLE, 1, SIZE_W),
        common(STATUS, status | S_FEATURES_OK | S_DRIVER_OK, SIZE_B),
    ]


def split_desc(addr, length, flags, nxt):
    return struct.pack("<QIHH", addr, length, flags, nxt)


def request(packed, rtype, sector, segments):
    """DMA patterns answering, in order, the reads one request makes"""
    hdr = struct.pack("<IIQ", rtype, 0, sector)
    if rtype in (T_IN, T_GET_ID):
        data_flags = DESC_WRITE
    else:
        data_flags = 0
    chain = [(HDR, 16, 0)]
    chain += [(addr, ln, data_flags) for addr, ln in segments]
    chain.append((STATUS_BUF, 1, DESC_WRITE))
    pats = []
    if not packed:
        # used->flags (notifications off), avail->idx, avail->ring[0]
        pats += [pattern(b"\x00\x00"), pattern(b"\x01\x00"),
                 pattern(b"\x00\x00")]
        for n, (addr, ln, fl) in enumerate(chain):
            last = n == len(chain) - 1
            pats.append(pattern(split_desc(addr, ln,
                                           fl | (0 if last else DESC_NEXT),
                                           n + 1)))
            pats.append(pattern(hdr if n == 0 else b"\x00"))
        # avail->idx once more: nothing new (the queue is empty)
        pats.append(pattern(b"\x01\x00"))
    else:
        # the device event's flags and off_wrap (notifications off), then
        # each descriptor field by field (flags, addr, id, len) and its
        # buffer; descriptor 0's flags say available in wrap 1 (read three
        # times, by virtio-blk's and virtqueue_pop's "is it empty?" and by
        # the descriptor's read, filled once).  The next descriptor's
        # flags, read with the first pattern again, say empty.
        pats += [pattern(b"\x00\x00"), pattern(b"\x00\x00")]
        for n, (addr, ln, fl) in enumerate(chain):
            last = n == len(chain) - 1
            fl |= PACKED_AVAIL | (0 if last else DESC_NEXT)
            pats += [pattern(struct.pack("<H", fl)),
                     pattern(struct.pack("<Q", addr)),
                     pattern(struct.pack("<H", 0)),
                     pattern(struct.pack("<I", ln)),
                     pattern(hdr if n == 0 else b"\x00")]
    return pats


def notify(queue):
    return write(MMIO_NOTIFY, queue * NOTIFY_MULT, queue, SIZE_W)


SEEDS = {
    # name: (request type, sector, data segments)
    "read": (T_IN, 8, 1),
    "write": (T_OUT, 16, 1),
    "flush": (T_FLUSH, 0, 0),
    # more segments than a request's inline room (8), spread over guest
    # RAM: on 2 GiB, pieces in every fixed-buffer chunk
    "read-sg16": (T_IN, 64, 16),
}


def seed(config, kind):
    features, queue, ram = CONFIGS[config]
    packed = F_PACKED in features
    rtype, sector, nseg = SEEDS[kind]
    step = (ram - DATA) // max(nseg, 1) & ~0xfff
    segments = [(DATA + i * step, 4096) for i in range(nseg)]
    cmds = bring_up(features, queue)
    cmds += [bytes([OP_CLEAR_DMA_PATTERNS])]
    cmds += request(packed, rtype, sector, segments)
    cmds += [notify(queue)]
    cmds += [read(MMIO_COMMON, STATUS, SIZE_B)]
    return SEP.join(cmds)


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--list":
        print("\n".join(CONFIGS))
        return
    if len(sys.argv) != 3 or sys.argv[1] not in CONFIGS:
        sys.exit(__doc__)
    config, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for kind in SEEDS:
        with open(os.path.join(out, "bringup-" + kind), "wb") as f:
            f.write(seed(config, kind))


if __name__ == "__main__":
    main()
