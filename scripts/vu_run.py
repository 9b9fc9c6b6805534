#!/usr/bin/env python3
"""Boot the test guest on vhost-user-blk-pci, served by qemu-storage-daemon's
vhost-user-blk export (io_uring, fixed buffers over the frontend's memory),
let the guest's fio write and verify, and report what the daemon saw.

Scenarios:
  plain         one VM, start to power off;
  kill-restart  a VM is killed (SIGKILL) in the middle of its I/O, then a
                second VM runs on the same daemon;
  hotplug       a DIMM is plugged into the VM while its fio runs: the
                frontend sends a new memory table mid-I/O;
  migrate       the VM migrates while its fio runs, to a second QEMU on a
                second export of the same image in the same daemon;
  balloon       a VM on 4 KiB pages with a virtio-balloon: QMP inflates the
                balloon to a quarter of its memory (QEMU punches the pages
                out of its memfd) and deflates it, then the guest writes
                through its page cache, drops it and verifies with direct
                reads.  A back-end that kept the old pages pinned writes
                stale data;
  daemon-restart  the daemon is killed (SIGKILL) three times in the
                middle of the guest's write-then-verify and started again on
                the same socket; the frontend reconnects (reconnect-ms) and
                hands the new daemon the table of requests in flight
                (VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD), which it submits
                again: the verify passes and the guest logs no I/O error;
  limits        no guest: vhost-user-blk-pci takes queue-size 32768 and
                refuses more; the daemon refuses an IOThread list with
                fixed-iothread, for an export type that runs in one
                IOThread (nbd), and with an IOThread that does not exist;
  virtio-mem    no guest: a QEMU with a virtio-mem device, whose RAM
                discard is in use, does not accept the daemon's pinning
                and says so once; with the virtio-mem device after the
                vhost-user-blk device, QEMU refuses to start, since RAM
                discard is disabled by then.
The daemon must stay up throughout, count fixed reads and writes and no
fallback, and hold registered exactly the memory of the VM it serves.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmp import QMP  # noqa: E402
from vm_run import (Console, guest_args, pick_accel, quit_qemu,  # noqa: E402
                    size_bytes)

MIB = 1 << 20


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--qemu", required=True)
    ap.add_argument("--qsd", required=True, help="qemu-storage-daemon")
    ap.add_argument("--qemu-img", required=True)
    ap.add_argument("--guest", required=True, help="vmlinuz/initramfs dir")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--scenario", default="plain",
                    choices=["plain", "kill-restart", "hotplug", "migrate",
                             "balloon", "virtio-mem", "daemon-restart",
                             "limits"])
    ap.add_argument("--smp", type=int, default=4)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--queue-size", type=int, default=256)
    ap.add_argument("--iothreads", type=int, default=1,
                    help="the export's IOThreads (a list from 2 on)")
    ap.add_argument("--mem", type=int, default=1024, help="MiB")
    ap.add_argument("--dimm", type=int, default=256, help="MiB (hotplug)")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--size", default="8m", help="fio region per job")
    ap.add_argument("--runtime", type=int, default=10, help="seconds")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a VM")
    ap.add_argument("--accel", choices=["auto", "kvm", "tcg"], default="auto")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--unpinned", action="store_true",
                    help="the frontend does not accept pinning (a stock "
                    "QEMU): the daemon must register nothing, warn once "
                    "and serve without fixed buffers")
    return ap.parse_args()


def iothread_names(a):
    return [f"io{i}" for i in range(a.iothreads)]


def qsd_command(a, disk, vu_socks, qmp_sock):
    names = iothread_names(a)
    if len(names) == 1:
        iothread = "iothread=io0"
    else:
        iothread = ",".join(f"iothread.{i}={n}" for i, n in enumerate(names))
    exports = []
    for i, sock in enumerate(vu_socks):
        exports += ["--export", f"vhost-user-blk,id=exp{i},node-name=disk0,"
                    f"writable=on,addr.type=unix,addr.path={sock},"
                    f"num-queues={a.queues},{iothread}"]
    objects = []
    for n in names:
        objects += ["--object", f"iothread,id={n}"]
    return [a.qsd] + objects + [
        "--blockdev", f"file,node-name=disk0,filename={disk},aio=io_uring,"
                      "cache.direct=on,aio-fixed-buffers=on",
    ] + exports + [
        "--chardev", f"socket,id=qmp0,path={qmp_sock},server=on,wait=off",
        "--monitor", "chardev=qmp0",
    ]


def vm_command(a, vu_sock, qmp_sock, console, runtime, hotplug, incoming):
    ram = f"memory-backend-memfd,id=ram0,size={a.mem}M,share=on"
    balloon = a.scenario == "balloon"
    if not balloon:
        ram += ",hugetlb=on,hugetlbsize=2M"
    mem = f"{a.mem}M"
    if hotplug:
        mem += f",slots=2,maxmem={a.mem + 2 * a.dimm}M"
    accel = "kvm" if pick_accel(a.accel) == "kvm" else "tcg,thread=multi"
    return [
        a.qemu, "-machine", "q35,memory-backend=ram0",
        "-accel", accel, "-cpu", "max", "-smp", str(a.smp),
        "-m", mem, "-object", ram,
        "-chardev", f"socket,id=vu0,path={vu_sock}" +
        (",reconnect-ms=500" if a.scenario == "daemon-restart" else ""),
        "-device", f"vhost-user-blk-pci,id=vblk0,chardev=vu0,"
                   f"num-queues={a.queues},queue-size={a.queue_size}",
    ] + (["-device", "virtio-balloon-pci,id=balloon0"] if balloon else []) + \
        guest_args(a, runtime, console, qmp_sock,
                   "balloon" if balloon else "verify") + \
        (["-incoming", "defer"] if incoming else [])


class Daemon:
    """qemu-storage-daemon and what its QMP says of fixed buffers."""

    def __init__(self, a, disk):
        """Two exports for a migration (vu_sock and vu_sock2), else one"""
        self.vu_sock = os.path.join(a.workdir, "vhost-user.sock")
        self.vu_sock2 = os.path.join(a.workdir, "vhost-user2.sock")
        socks = [self.vu_sock] + ([self.vu_sock2]
                                  if a.scenario == "migrate" else [])
        qmp_sock = os.path.join(a.workdir, "qsd-qmp.sock")
        for path in socks + [self.vu_sock2, qmp_sock]:
            if os.path.exists(path):
                os.unlink(path)
        cmd = qsd_command(a, disk, socks, qmp_sock)
        print("$ " + " ".join(cmd), flush=True)
        self.err_path = os.path.join(a.workdir, "qsd.err")
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stderr=err)
        self.max_registered = 0
        self.qmp = QMP(qmp_sock)
        deadline = time.monotonic() + 30
        while not all(os.path.exists(s) for s in socks):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the daemon did not listen")
            time.sleep(0.05)

    def fixed_by_ring(self):
        info = self.qmp.cmd("x-query-io-uring-buffers")
        return {r["name"]: r["fixed-reads"] + r["fixed-writes"]
                for r in info["rings"]}

    def stats(self):
        info = self.qmp.cmd("x-query-io-uring-buffers")
        self.max_registered = max(self.max_registered,
                                  info["registered-bytes"])
        fixed = sum(r["fixed-reads"] + r["fixed-writes"]
                    for r in info["rings"])
        fallbacks = {}
        for ring in info["rings"]:
            for f in ring["fallbacks"]:
                if f["count"]:
                    fallbacks[f["reason"]] = (fallbacks.get(f["reason"], 0) +
                                              f["count"])
        return info["registered-bytes"], fixed, fallbacks

    def report(self, when):
        reg, fixed, fb = self.stats()
        fbs = ", ".join(f"{k} {v}" for k, v in fb.items()) or "none"
        print(f"daemon {when}: registered {reg // MIB} MiB, fixed "
              f"operations {fixed}, fallbacks: {fbs}", flush=True)
        return reg, fixed, fb

    def wait_registered(self, pred, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reg = self.stats()[0]
            if pred(reg):
                return reg
            time.sleep(0.1)
        return self.stats()[0]

    def stop(self):
        rc = quit_qemu(self.proc, self.qmp)
        with open(self.err_path) as f:
            self.stderr = f.read()
        for line in self.stderr.splitlines():
            print(f"qsd| {line}", flush=True)
        return rc


class VM:
    def __init__(self, a, name, vu_sock, runtime, hotplug=False,
                 incoming=False):
        self.a = a
        self.name = name
        qmp_sock = os.path.join(a.workdir, f"{name}-qmp.sock")
        console = os.path.join(a.workdir, f"{name}-console.log")
        for path in (qmp_sock, console):
            if os.path.exists(path):
                os.unlink(path)
        cmd = vm_command(a, vu_sock, qmp_sock, console, runtime, hotplug,
                         incoming)
        print(f"{name}: $ " + " ".join(cmd), flush=True)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd)
        self.con = Console(console, a.quiet)
        self.con.start()
        self.qmp = QMP(qmp_sock)

    def wait_shutdown(self):
        """The guest's verdict line, or a reason it has none."""
        deadline = self.started + self.a.timeout
        reason = None
        while time.monotonic() < deadline and reason is None:
            try:
                ev = self.qmp.wait_event("SHUTDOWN", 0.25)
            except EOFError:
                break
            if ev:
                reason = ev["data"].get("reason", "unknown")
            if self.proc.poll() is not None:
                break
        self.con.stop.set()
        self.con.join(timeout=5)
        for line in self.con.find("VBLK-GUEST:"):
            print(line.replace("VBLK-GUEST: ", "guest: "), flush=True)
        if reason is None:
            return "FAIL: " + ("QEMU died" if self.proc.poll() is not None
                               else "no shutdown in time (watchdog)") + \
                f": {self.progress()}"
        verdict = self.con.find("VBLK-RESULT:")
        if reason != "guest-shutdown":
            return f"FAIL: the guest did not power off ({reason})"
        return verdict[-1] if verdict else "FAIL: no verdict"

    def progress(self, d=None):
        """Where the guest (and daemon @d) got to, for a failure's message"""
        state = (f"QEMU exited (status {self.proc.returncode})"
                 if self.proc.poll() is not None else "QEMU running")
        said = [line for line in self.con.lines if line.startswith("VBLK-")]
        # The kernel's hung task detector names a task stuck for 120 s
        hung = [line.split("INFO: task ")[1].split(" blocked")[0]
                for line in self.con.lines if "INFO: task " in line]
        served = ""
        try:
            if d:
                _, fixed, fb = d.stats()
                served = (f"; the daemon served "
                          f"{fixed + sum(fb.values())} requests")
        except Exception as e:
            served = f"; the daemon did not answer ({type(e).__name__})"
        # Where the first vCPU is: in the firmware, the kernel or user space
        try:
            regs = self.qmp.cmd("human-monitor-command",
                                **{"command-line": "info registers"})
            rip = re.search(r"RIP=([0-9a-f]+)", regs)
            state += f", vCPU 0 at {rip.group(1) if rip else '?'}"
        except Exception as e:
            state += f", no registers ({type(e).__name__})"
        with open("/proc/meminfo") as f:
            meminfo = dict(line.split(":", 1) for line in f)
        avail = int(meminfo["MemAvailable"].split()[0]) >> 10
        state += f", host MemAvailable {avail} MiB"
        for line in self.con.lines[-40:]:
            print(f"guest| {line}", flush=True)
        return (f"{state} after {time.monotonic() - self.started:.0f} s; "
                f"the guest's last word: {said[-1] if said else 'none'} "
                f"({len(self.con.lines)} console lines); "
                f"hung tasks: {', '.join(hung) or 'none'}{served}")

    def quit(self):
        if self.proc.poll() is not None:
            print(f"{self.name}: QEMU had exited (status "
                  f"{self.proc.returncode})", flush=True)
        quit_qemu(self.proc, self.qmp)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def passed(verdict):
    """Whether wait_shutdown()'s @verdict is the guest's PASS, not a failure
    whose description quotes the guest"""
    return verdict.startswith("VBLK-RESULT: PASS")


def wait_fixed(d, above, timeout):
    """Wait until the daemon counted more than @above fixed operations."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if d.stats()[1] > above:
            return True
        time.sleep(0.2)
    return False


def run_vm(a, d, name, results):
    vm = VM(a, name, d.vu_sock, a.runtime)
    try:
        verdict = vm.wait_shutdown()
        print(f"{name}: {verdict}", flush=True)
        results.append((passed(verdict), f"{name}: fio verified every "
                        "block it wrote"))
        reg, _, _ = d.report(f"with {name}")
        ram = 0 if a.unpinned else a.mem * MIB
        results.append((ram * 0.9 <= reg <= ram, f"{name}: the daemon "
                        f"registered the VM's memory ({reg // MIB} MiB of "
                        f"{ram // MIB} MiB)"))
    finally:
        vm.quit()


def verify_across(d, vm, name, fixed_before, what, results):
    """The guest's verdict once it powered off, and fixed I/O after @what"""
    verdict = vm.wait_shutdown()
    print(f"{name}: {verdict}", flush=True)
    results.append((passed(verdict), f"{name}: fio verified every block "
                    f"written before and after {what}"))
    _, fixed_after, _ = d.report(f"after {what}")
    results.append((fixed_after > fixed_before, "fixed I/O went on after "
                    f"{what}"))


def scenario_plain(a, d, results):
    run_vm(a, d, "vm1", results)


def scenario_kill_restart(a, d, results):
    vm = VM(a, "vm1", d.vu_sock, 300)
    try:
        ok = wait_fixed(d, 1000, a.timeout)
        results.append((ok, "vm1: fixed I/O ran before the kill"))
        time.sleep(1)
    finally:
        vm.kill()
    print("vm1: killed (SIGKILL) in the middle of its I/O", flush=True)
    reg = d.wait_registered(lambda r: r == 0)
    results.append((reg == 0, "the daemon released vm1's memory after the "
                    f"kill ({reg // MIB} MiB left)"))
    results.append((d.proc.poll() is None, "the daemon survived the kill"))
    run_vm(a, d, "vm2", results)


def scenario_hotplug(a, d, results):
    vm = VM(a, "vm1", d.vu_sock, a.runtime * 3, hotplug=True)
    try:
        ok = wait_fixed(d, 1000, a.timeout)
        results.append((ok, "vm1: fixed I/O ran before the hot-plug"))
        before, fixed_before, _ = d.report("before the hot-plug")
        vm.qmp.cmd("object-add", **{
            "qom-type": "memory-backend-memfd", "id": "dimm0",
            "size": a.dimm * MIB, "share": True, "hugetlb": True,
            "hugetlbsize": 2 * MIB})
        vm.qmp.cmd("device_add", driver="pc-dimm", id="d0", memdev="dimm0")
        print(f"vm1: plugged a DIMM of {a.dimm} MiB", flush=True)
        reg = d.wait_registered(lambda r: r >= before + a.dimm * MIB)
        results.append((reg >= before + a.dimm * MIB, "the daemon registered "
                        f"the DIMM ({before // MIB} -> {reg // MIB} MiB)"))
        verify_across(d, vm, "vm1", fixed_before, "the hot-plug", results)
    finally:
        vm.quit()


def migrate(src, dst, uri, timeout=180):
    """Migrate @src to @dst; the final status"""
    dst.qmp.cmd("migrate-incoming", uri=uri)
    src.qmp.cmd("migrate-set-parameters", **{"max-bandwidth": 8 << 30})
    src.qmp.cmd("migrate", uri=uri)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = src.qmp.cmd("query-migrate").get("status")
        if status in ("completed", "failed", "cancelled"):
            return status
        time.sleep(0.2)
    return "timed out"


def scenario_migrate(a, d, results):
    runtime = a.runtime * 3
    vm1 = VM(a, "vm1", d.vu_sock, runtime)
    vm2 = None
    try:
        ok = wait_fixed(d, 1000, a.timeout)
        results.append((ok, "vm1: fixed I/O ran before the migration"))
        vm2 = VM(a, "vm2", d.vu_sock2, runtime, incoming=True)
        _, fixed_before, _ = d.report("before the migration")
        status = migrate(vm1, vm2, "unix:" + os.path.join(a.workdir,
                                                          "migration.sock"))
        print(f"migration: {status}", flush=True)
        results.append((status == "completed", "vm1 migrated to vm2 in the "
                        f"middle of its I/O ({status})"))
        vm1.quit()
        ram = a.mem * MIB
        reg = d.wait_registered(lambda r: r <= ram)
        results.append((ram * 0.9 <= reg <= ram, "the daemon released vm1's "
                        f"memory and holds vm2's ({reg // MIB} MiB)"))
        verify_across(d, vm2, "vm2", fixed_before, "the migration", results)
    finally:
        vm1.quit()
        if vm2:
            vm2.quit()


def wait_balloon(vm, pred, timeout=120):
    """Wait until the balloon's size satisfies @pred; the last size"""
    deadline = time.monotonic() + timeout
    while True:
        actual = vm.qmp.cmd("query-balloon")["actual"]
        if pred(actual) or time.monotonic() > deadline:
            return actual
        time.sleep(0.2)


def scenario_balloon(a, d, results):
    vm = VM(a, "vm1", d.vu_sock, a.runtime)
    try:
        deadline = time.monotonic() + a.timeout
        while (not vm.con.find("VBLK-GUEST: balloon: waiting") and
               not vm.con.find("VBLK-RESULT:") and
               vm.proc.poll() is None and time.monotonic() < deadline):
            time.sleep(0.2)
        if not vm.con.find("VBLK-GUEST: balloon: waiting"):
            raise RuntimeError("the guest did not wait for its balloon: "
                               f"{vm.progress(d)}")
        ram = a.mem * MIB
        d.report("before the balloon")
        vm.qmp.cmd("balloon", value=ram // 4)
        low = wait_balloon(vm, lambda v: v <= ram // 4 + 16 * MIB)
        print(f"vm1: balloon inflated, the guest has {low // MIB} MiB",
              flush=True)
        results.append((low <= ram // 4 + 16 * MIB, "vm1: the guest gave "
                        f"back {(ram - low) // MIB} MiB to its balloon"))
        vm.qmp.cmd("balloon", value=ram)
        high = wait_balloon(vm, lambda v: v == ram)
        print(f"vm1: balloon deflated, the guest has {high // MIB} MiB",
              flush=True)
        verdict = vm.wait_shutdown()
        print(f"vm1: {verdict}", flush=True)
        results.append((passed(verdict), "vm1: what the guest wrote through "
                        "its page cache after the balloon is on the disk"))
        d.report("after the balloon")
    finally:
        vm.quit()


def scenario_daemon_restart(a, ds, disk, results, restarts=3):
    """ds[0] is the daemon, replaced by each restart"""
    d = ds[0]
    vm = VM(a, "vm1", d.vu_sock, a.runtime * 4)
    try:
        for i in range(restarts):
            ok = wait_fixed(d, 1000, a.timeout)
            results.append((ok, f"restart {i + 1}: fixed I/O ran before the "
                            "kill"))
            reg = d.stats()[0]
            results.append((reg >= a.mem * MIB * 0.9, f"restart {i + 1}: the "
                            f"daemon registered the VM's memory "
                            f"({reg // MIB} MiB)"))
            time.sleep(1)
            d.proc.kill()
            d.proc.wait()
            print(f"daemon killed (SIGKILL) under I/O, restart {i + 1}",
                  flush=True)
            time.sleep(1)
            d = ds[0] = Daemon(a, disk)
        verdict = vm.wait_shutdown()
        print(f"vm1: {verdict}", flush=True)
        results.append((passed(verdict), "vm1: fio verified every block "
                        f"it wrote across {restarts} restarts of the daemon"))
        errors = [line for line in vm.con.lines
                  if "I/O error" in line or "is not a head" in line or
                  "blk_update_request" in line]
        for line in errors[:10]:
            print(f"guest| {line}", flush=True)
        results.append((not errors, "the guest logged no I/O error "
                        f"({len(errors)} lines)"))
        _, fixed, _ = d.report("the last daemon")
        results.append((fixed > 0, "the last daemon read and wrote through "
                        "fixed buffers"))
    finally:
        vm.quit()


def qtest_qemu(a, args, timeout=5):
    """QEMU without a guest: (exit status, or None if it ran, stderr)"""
    cmd = [a.qemu, "-machine", "q35", "-accel", "qtest", "-qtest", "null",
           "-display", "none", "-nodefaults"] + args
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        _, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        rc = None
    print(err, end="", flush=True)
    return rc, err


def scenario_limits(a, d, results):
    mem = ["-m", "512M", "-object",
           "memory-backend-memfd,id=ram0,size=512M,share=on",
           "-machine", "memory-backend=ram0",
           "-chardev", f"socket,id=vu0,path={d.vu_sock}"]
    for size, ok in ((32768, True), (65536, False)):
        rc, err = qtest_qemu(a, mem + [
            "-device", f"vhost-user-blk-pci,chardev=vu0,queue-size={size}"])
        results.append(((rc is None) == ok, f"vhost-user-blk-pci queue-size="
                        f"{size}: {'runs' if ok else 'refused'} (exit status "
                        f"{rc}{': ' + err.strip() if err.strip() else ''})"))
    addr = {"type": "unix",
            "path": os.path.join(a.workdir, "refused.sock")}
    for what, args, want in (
            ("a list with fixed-iothread",
             {"type": "vhost-user-blk", "fixed-iothread": True,
              "iothread": ["io0", "io0"], "addr": addr},
             "fixed-iothread needs a single iothread"),
            ("a list for an nbd export",
             {"type": "nbd", "iothread": ["io0", "io0"]},
             "runs in one iothread only"),
            ("a list naming no IOThread",
             {"type": "vhost-user-blk", "iothread": ["io0", "nothere"],
              "addr": addr}, "nothere")):
        try:
            d.qmp.cmd("block-export-add", id="refused", **{"node-name":
                                                           "disk0"}, **args)
            err = None
        except RuntimeError as e:
            err = str(e)
        print(f"block-export-add with {what}: {err}", flush=True)
        results.append((err is not None and want in err, "the daemon refuses "
                        f"{what} ({err})"))


def scenario_virtio_mem(a, d, results):
    """QEMU without a guest, with a virtio-mem device before or after
    vhost-user-blk-pci"""
    def qemu(mem_first):
        mem = ["-object", "memory-backend-memfd,id=vmem0,size=128M,share=on",
               "-device", "virtio-mem-pci,id=vm0,memdev=vmem0"]
        blk = ["-chardev", f"socket,id=vu0,path={d.vu_sock}",
               "-device", f"vhost-user-blk-pci,id=vblk0,chardev=vu0,"
                          f"num-queues={a.queues}"]
        return qtest_qemu(a, ["-machine", "memory-backend=ram0",
                              "-m", "512M,maxmem=1G", "-object",
                              "memory-backend-memfd,id=ram0,size=512M,"
                              "share=on"] +
                          (mem + blk if mem_first else blk + mem))

    rc, err = qemu(True)
    warned = err.count("offers to pin guest memory, but RAM discard is in use")
    results.append((rc is None and warned == 1, "QEMU with virtio-mem runs "
                    "and does not accept pinning, with one warning "
                    f"({warned} times)"))
    rc, err = qemu(False)
    results.append((rc not in (None, 0) and "discard" in err.lower(),
                    "virtio-mem after a pinning vhost-user back-end: QEMU "
                    f"refuses to start (exit status {rc})"))


def main():
    a = parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    disk = os.path.join(a.workdir, "vu-disk.img")
    subprocess.run([a.qemu_img, "create", "-q", "-f", "raw", disk,
                    str(max(size_bytes(a.size) * a.jobs, 64 << 20))],
                   check=True)
    print(f"accelerator: {pick_accel(a.accel)}", flush=True)
    results = []
    try:
        ds = [Daemon(a, disk)]
    except Exception as e:
        traceback.print_exc()
        print(f"FAIL: the daemon started ({type(e).__name__}: {e})")
        return 1
    error = None
    try:
        if a.scenario == "daemon-restart":
            scenario_daemon_restart(a, ds, disk, results)
        else:
            {"plain": scenario_plain, "kill-restart": scenario_kill_restart,
             "hotplug": scenario_hotplug,
             "migrate": scenario_migrate,
             "balloon": scenario_balloon,
             "virtio-mem": scenario_virtio_mem,
             "limits": scenario_limits}[a.scenario](a, ds[0],
                                                             results)
        d = ds[0]
        reg = d.wait_registered(lambda r: r == 0)
        results.append((reg == 0, "the daemon released all memory once the "
                        f"last VM left ({reg // MIB} MiB left)"))
        _, fixed, fb = d.report("at the end")
        if a.scenario in ("virtio-mem", "limits"):
            pass    # no guest, no I/O
        elif a.unpinned:
            results.append((d.max_registered == 0 and fixed == 0,
                            "the daemon registered none of the frontend's "
                            f"memory (at most {d.max_registered // MIB} MiB) "
                            f"and did no fixed I/O ({fixed})"))
        else:
            results.append((fixed > 0, "the daemon read and wrote through "
                            "fixed buffers"))
            # Requests go without fixed buffers while new memory is being
            # pinned (the queues do not wait for it): a few not-pinned
            # ones, and no other reason
            early = fb.get("not-pinned", 0)
            other = {k: v for k, v in fb.items() if k != "not-pinned"}
            results.append((not other and early <= fixed // 100,
                            "no request fell back from fixed buffers but "
                            f"while memory was being pinned ({early} of "
                            f"{fixed + early}; other reasons: "
                            f"{other or 'none'})"))
        if a.iothreads > 1 and not a.unpinned:
            by_ring = d.fixed_by_ring()
            print(f"fixed operations by ring: {by_ring}", flush=True)
            results.append((all(by_ring.get(n, 0) > 0
                                for n in iothread_names(a)),
                            f"each of the export's {a.iothreads} IOThreads "
                            "read and wrote through fixed buffers"))
    except Exception as e:  # a QMP error, a QEMU or daemon gone: say which
        traceback.print_exc()
        error = e
    finally:
        d = ds[0]
        rc = d.stop()
    if error is not None:
        results.append((False, "the scenario ran to its end "
                        f"({type(error).__name__}: {error})"))
    results.append((rc == 0, f"the daemon quit cleanly (exit status {rc})"))
    warned = d.stderr.count("did not accept VHOST_USER_PROTOCOL_F_PINNED_MEMORY")
    if a.scenario in ("virtio-mem", "limits"):
        pass    # no guest: no memory table
    elif a.unpinned:
        results.append((warned == 1, "the daemon warned once that the "
                        f"frontend did not accept pinning ({warned} times)"))
    else:
        results.append((warned == 0, "the daemon did not warn of pinning "
                        f"refused ({warned} times)"))
    for ok, what in results:
        print(f"{'PASS' if ok else 'FAIL'}: {what}")
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
