#!/usr/bin/env python3
"""Boot the test guest on our virtio-blk, let it run fio with verification,
and report what the guest and the device saw."""

import argparse
import os
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmp import QMP  # noqa: E402

DEVICE = "/machine/peripheral/vblk0/virtio-backend"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--qemu", required=True)
    ap.add_argument("--qemu-img", required=True)
    ap.add_argument("--guest", required=True, help="vmlinuz/initramfs dir")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--smp", type=int, default=4)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--queue-size", type=int, default=256)
    ap.add_argument("--mem", type=int, default=1024, help="MiB")
    ap.add_argument("--page-size", choices=["2M", "4K", "THP"], default="2M",
                    help="guest RAM on 2 MiB hugetlbfs pages, a 4 KiB-page "
                    "memfd, or ordinary RAM (memory-backend-ram) locked "
                    "with -overcommit mem-lock=on, on transparent hugepages")
    ap.add_argument("--aio", default="io_uring")
    ap.add_argument("--fixed", choices=["on", "off"], default="on")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--size", default="32m", help="fio region per job")
    ap.add_argument("--runtime", type=int, default=30, help="seconds")
    ap.add_argument("--timeout", type=int, default=600, help="seconds")
    ap.add_argument("--accel", choices=["auto", "kvm", "tcg"], default="auto",
                    help="auto: KVM where /dev/kvm works and the CPU has "
                    "VMX or SVM, else TCG")
    ap.add_argument("--quiet", action="store_true")
    return ap.parse_args()


def hardware_virtualization():
    """Whether the CPU has VMX or SVM.  Without them a /dev/kvm can still
    work, from kvm_pvm (pagetable-based virtual machines, for nested
    guests on clouds), but it runs only guest kernels built for PVM, and
    Debian's stock kernel hangs there without a line of output."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return bool({"vmx", "svm"} & set(line.split()))
    except OSError:
        pass
    return False


def kvm_usable():
    """Whether our guest can run under KVM here: /dev/kvm is a device this
    user can open (a regular file of that name, or one without
    permission, is not KVM) and the CPU virtualizes in hardware."""
    try:
        if not stat.S_ISCHR(os.stat("/dev/kvm").st_mode):
            return False
        os.close(os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC))
    except OSError:
        return False
    return hardware_virtualization()


def pick_accel(choice):
    if choice == "auto":
        return "kvm" if kvm_usable() else "tcg"
    return choice


def size_bytes(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    if text[-1].lower() in units:
        return int(text[:-1]) * units[text[-1].lower()]
    return int(text)


def guest_args(a, runtime, console, sock, mode="verify"):
    """The test guest's kernel, its fio job, its console and QMP"""
    append = (f"console=ttyS0 panic=-1 quiet vblk.jobs={a.jobs} "
              f"vblk.size={a.size} vblk.runtime={runtime} vblk.mode={mode}")
    return [
        "-kernel", os.path.join(a.guest, "vmlinuz"),
        "-initrd", os.path.join(a.guest, "initramfs.gz"),
        "-append", append,
        "-nodefaults", "-display", "none", "-no-reboot", "-no-shutdown",
        "-serial", f"file:{console}",
        "-qmp", f"unix:{sock},server=on,wait=off",
    ]


def quit_qemu(proc, qmp):
    """Ask a QEMU (or qemu-storage-daemon) to quit, kill it if it won't"""
    if proc.poll() is None:
        try:
            qmp.cmd("quit")
            proc.wait(timeout=30)
        except Exception:
            proc.kill()
            proc.wait()
    return proc.returncode


def qemu_command(a, disk, sock, console):
    ram = f"memory-backend-memfd,id=ram0,size={a.mem}M,share=on"
    locked = []
    if a.page_size == "2M":
        ram += ",hugetlb=on,hugetlbsize=2M"
    elif a.page_size == "THP":
        # The common case: ordinary RAM, locked as libvirt's <locked/> does
        ram = f"memory-backend-ram,id=ram0,size={a.mem}M"
        locked = ["-overcommit", "mem-lock=on"]
    blockdev = (f"file,node-name=disk0,filename={disk},aio={a.aio},"
                "cache.direct=on")
    if a.fixed == "on":
        blockdev += ",aio-fixed-buffers=on"
    accel = "kvm" if pick_accel(a.accel) == "kvm" else "tcg,thread=multi"
    return [
        a.qemu, "-machine", "q35,memory-backend=ram0", *locked,
        "-accel", accel, "-cpu", "max", "-smp", str(a.smp),
        "-m", f"{a.mem}M", "-object", ram, "-object", "iothread,id=io0",
        "-blockdev", blockdev,
        "-device", f"virtio-blk-pci,id=vblk0,drive=disk0,iothread=io0,"
                   f"num-queues={a.queues},queue-size={a.queue_size}",
    ] + guest_args(a, a.runtime, console, sock)


class Console(threading.Thread):
    """Follow the guest's serial console file, echo and remember it."""

    def __init__(self, path, quiet):
        super().__init__(daemon=True)
        self.path, self.quiet = path, quiet
        self.lines = []
        self.stop = threading.Event()

    def run(self):
        while not os.path.exists(self.path) and not self.stop.is_set():
            time.sleep(0.05)
        with open(self.path, errors="replace") as f:
            buf = ""
            while True:
                chunk = f.read()
                if chunk:
                    buf += chunk
                    *done, buf = buf.split("\n")
                    for line in done:
                        line = line.rstrip("\r")
                        self.lines.append(line)
                        if not self.quiet or line.startswith("VBLK-"):
                            print(f"guest| {line}", flush=True)
                elif self.stop.is_set():
                    return
                else:
                    time.sleep(0.1)

    def find(self, prefix):
        return [line for line in self.lines if line.startswith(prefix)]


def sample_queues(q, a, seen):
    """Note which virtqueues have carried requests so far."""
    for i in range(a.queues):
        st = q.cmd("x-query-virtio-queue-status", path=DEVICE, queue=i)
        if st["used-idx"] or st["last-avail-idx"]:
            seen.add(i)


def wait_for_shutdown(q, qemu, a, deadline, seen):
    """The reason QEMU stopped the guest, or None on timeout/crash.
    Meanwhile, sample the virtqueues (the guest resets them at power off)."""
    while time.monotonic() < deadline:
        try:
            ev = q.wait_event("SHUTDOWN", 0.25)
            if ev:
                return ev["data"].get("reason", "unknown")
            sample_queues(q, a, seen)
        except EOFError:
            return None
        if qemu.poll() is not None:
            return None
    return None


def device_report(q, a, seen):
    print(f"device: {len(seen)} of {a.queues} virtqueues carried requests "
          f"(queues {', '.join(map(str, sorted(seen))) or 'none'})")
    fixed = 0
    queues_ok = len(seen) > 1
    ram_huge = None
    if a.aio == "io_uring":
        info = q.cmd("x-query-io-uring-buffers")
        ram = [c for c in info["chunks"] if c["ram-block"] == "ram0"]
        ram_huge = bool(ram) and all(c["hugepages"] for c in ram)
        print(f"io_uring fixed buffers: {info['registered-bytes'] >> 20} MiB "
              f"registered, {info['pinned-bytes'] >> 20} MiB pinned, "
              f"{len(info['chunks'])} chunks; guest RAM in "
              f"{sum(c['hugepages'] for c in ram)} of {len(ram)} on hugepages")
        for ring in info["rings"]:
            fb = ", ".join(f"{f['reason']} {f['count']}"
                           for f in ring["fallbacks"] if f["count"])
            print(f"  ring {ring['name']}: fixed reads {ring['fixed-reads']}, "
                  f"fixed writes {ring['fixed-writes']}, "
                  f"fallbacks: {fb or 'none'}")
            fixed += ring["fixed-reads"] + ring["fixed-writes"]
    return fixed, queues_ok, ram_huge


def main():
    a = parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    disk = os.path.join(a.workdir, "guest-disk.img")
    sock = os.path.join(a.workdir, "qmp.sock")
    console = os.path.join(a.workdir, "console.log")
    for path in (sock, console):
        if os.path.exists(path):
            os.unlink(path)
    disk_bytes = max(size_bytes(a.size) * a.jobs, 64 << 20)
    subprocess.run([a.qemu_img, "create", "-q", "-f", "raw", disk,
                    str(disk_bytes)], check=True)

    cmd = qemu_command(a, disk, sock, console)
    print(f"accelerator: {pick_accel(a.accel)}", flush=True)
    print("$ " + " ".join(cmd), flush=True)
    started = time.monotonic()
    qemu = subprocess.Popen(cmd)
    con = Console(console, a.quiet)
    con.start()
    ok = False
    try:
        q = QMP(sock)
        seen = set()
        reason = wait_for_shutdown(q, qemu, a, started + a.timeout, seen)
        con.stop.set()
        con.join(timeout=5)
        elapsed = time.monotonic() - started
        if reason is None:
            why = ("QEMU died" if qemu.poll() is not None
                   else f"no shutdown within {a.timeout} s (watchdog)")
            print(f"FAIL: {why}")
            return 1
        verdict = con.find("VBLK-RESULT:")
        print(f"guest stopped ({reason}) after {elapsed:.0f} s")
        for line in con.find("VBLK-GUEST:"):
            print(line.replace("VBLK-GUEST: ", "guest: "))
        for line in con.lines:
            if line.strip().startswith(("READ: bw=", "WRITE: bw=")):
                print(f"guest fio: {line.strip()}")
        fixed, queues_ok, ram_huge = device_report(q, a, seen)
        if reason != "guest-shutdown":
            print(f"FAIL: the guest did not power off ({reason}; panic?)")
        elif not verdict or "PASS" not in verdict[-1]:
            print(f"FAIL: {verdict[-1] if verdict else 'no verdict'}")
        elif a.fixed == "on" and a.aio == "io_uring" and fixed == 0:
            print("FAIL: aio-fixed-buffers=on, but no fixed-buffer I/O ran")
        elif a.queues > 1 and a.smp > 1 and not queues_ok:
            print("FAIL: the guest used only one virtqueue")
        elif (a.fixed == "on" and a.aio == "io_uring" and
              a.page_size in ("2M", "THP") and not ram_huge):
            print("FAIL: guest RAM is registered, but not all of it on "
                  "hugepages (x-query-io-uring-buffers)")
        else:
            print("PASS: fio verified every block it wrote")
            ok = True
        q.cmd("quit")
        qemu.wait(timeout=30)
    finally:
        if qemu.poll() is None:
            qemu.kill()
            qemu.wait()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
