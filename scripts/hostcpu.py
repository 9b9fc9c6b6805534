"""Host CPU of a benchmark run, counted from outside the contenders.

scripts/bench takes a Snapshot just inside the start and the end of each
run's measured time and hands the pair to account().  A snapshot holds,
for every task on the machine, its CPU time so far, plus the machine's
total from /proc/stat.  account() splits the difference between:

  device     the contender's threads that serve I/O: for QEMU every thread
             but the main loop's (the iothread, io-wq workers, the thread
             pool), and every thread of a storage daemon that serves it
             (qemu-storage-daemon behind vhost-user-blk, its main loop
             too); for fio the kernel time of its processes and their
             io-wq workers
  harness    what only the guest-less set-up costs: QEMU's main loop
             parsing the load generator's qtest doorbells (a KVM guest's
             doorbell is an ioeventfd the kernel signals) and the load
             generator itself (vblk-bench, fio's userspace)
  kernel     kernel threads (kworkers of the loop device, ksoftirqd, ...),
             wherever the work comes from
  other      the threads of every other process: how quiet the machine was
  unattributed  the machine's busy time less all of the above: interrupts
             taken on idle CPUs (cross-CPU wake-ups among them), tasks
             that came and went inside the window ("forks" counts them)

and host = device + kernel, the figure per I/O the report leads with.

Precision.  A live thread's time comes from /proc/.../schedstat (the
scheduler's nanoseconds).  Threads that exit inside the window (io-wq
workers do) are only in their process's total, /proc/PID/stat, in clock
ticks: their share is that total less the live threads', so a process's
total is exact to one tick.  /proc/stat counts the machine by sampling
ticks (CONFIG_TICK_CPU_ACCOUNTING) but its idle time is measured, so the
machine's busy time is taken as elapsed time less idle, exact to a tick
of /proc/stat (10 ms) per CPU; "unattributed" may come out slightly below zero.

Reading: one pass over /proc/*/task/* takes a few milliseconds, on the
CPU of the caller; the snapshot records when it started and ended.
"""

import os
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PF_KTHREAD = 0x00200000


class Task:
    __slots__ = ("tid", "tgid", "comm", "kthread", "run_ns", "user_ticks", "sys_ticks")

    def __init__(self, tid, tgid, comm, kthread, run_ns, user_ticks, sys_ticks):
        self.tid, self.tgid, self.comm, self.kthread = tid, tgid, comm, kthread
        self.run_ns, self.user_ticks, self.sys_ticks = run_ns, user_ticks, sys_ticks


def parse_stat(text):
    """(comm, ppid, flags, utime, stime) of a /proc/.../stat line (ticks)."""
    lparen, rparen = text.index("("), text.rindex(")")
    comm = text[lparen + 1:rparen]
    fields = text[rparen + 2:].split()
    # fields[0] is the state, the third field of the line
    return comm, int(fields[1]), int(fields[6]), int(fields[11]), int(fields[12])


def parse_machine(text):
    """Idle ticks of all CPUs (idle and iowait) and the number of CPUs,
    from the text of /proc/stat."""
    idle, cpus, forks = None, 0, 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            idle = v[3] + v[4]
        elif line.startswith("cpu"):
            cpus += 1
        elif line.startswith("processes "):
            forks = int(line.split()[1])
    if idle is None:
        raise ValueError("no cpu line in /proc/stat")
    return {"idle": idle, "cpus": cpus, "forks": forks}


def read(path):
    with open(path) as f:
        return f.read()


class Snapshot:
    def __init__(self):
        self.started = time.monotonic()
        self.machine = parse_machine(read("/proc/stat"))
        self.machine["at"] = self.started
        self.tasks = {}         # tid -> Task
        self.process_ticks = {}  # tgid -> utime + stime of the whole group
        self.ppid = {}          # tgid -> parent
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                self._read_process(int(pid))
        self.ended = time.monotonic()

    def _read_process(self, pid):
        base = f"/proc/{pid}"
        try:
            comm, ppid, flags, ut, st = parse_stat(read(f"{base}/stat"))
            self.process_ticks[pid] = ut + st
            self.ppid[pid] = ppid
            tids = os.listdir(f"{base}/task")
        except (FileNotFoundError, ProcessLookupError):
            return      # gone meanwhile
        for tid in map(int, tids):
            try:
                comm, _, flags, ut, st = parse_stat(read(f"{base}/task/{tid}/stat"))
                run_ns = int(read(f"{base}/task/{tid}/schedstat").split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue
            self.tasks[tid] = Task(tid, pid, comm, bool(flags & PF_KTHREAD),
                                   run_ns, ut, st)

    def descendants(self, pid):
        """@pid and its descendant processes."""
        found, todo = [], [pid]
        while todo:
            p = todo.pop()
            found.append(p)
            todo += [c for c, parent in self.ppid.items() if parent == p and c not in found]
        return found


def thread_role_qemu(task):
    if task.tid == task.tgid:
        return "main loop"
    if task.comm.startswith("IO "):
        return "iothread"
    if task.comm.startswith("iou-wrk") or task.comm.startswith("iou-sqp"):
        return "io-wq"
    return "other threads"


def thread_role_daemon(task):
    """qemu-storage-daemon names no thread: its iothreads are among the
    "daemon threads" (with its RCU thread)."""
    if task.tid == task.tgid:
        return "daemon main loop"
    if task.comm.startswith("iou-wrk") or task.comm.startswith("iou-sqp"):
        return "io-wq"
    return "daemon threads"


def process_time(a, b, pid, split_user=False, role_of=thread_role_qemu):
    """CPU seconds of process @pid between snapshots @a and @b by role.

    Returns {role: seconds}; role "exited" is the time of threads that
    ended inside the window.  With @split_user, each live thread's time
    is split into "<role> user" and "<role> kernel" by its tick counts.
    @role_of(task) names a live thread's role."""
    roles = {}

    def add(role, seconds):
        roles[role] = roles.get(role, 0.0) + seconds

    live_ticks = 0.0
    for tid, t in b.tasks.items():
        if t.tgid != pid:
            continue
        before = a.tasks.get(tid)
        ns = t.run_ns - (before.run_ns if before and before.tgid == pid else 0)
        role = role_of(t) if not split_user else ("io-wq" if t.comm.startswith("iou-")
                                                    else "process")
        if split_user and role == "process":
            du = t.user_ticks - (before.user_ticks if before else 0)
            ds = t.sys_ticks - (before.sys_ticks if before else 0)
            user_share = du / (du + ds) if du + ds > 0 else 0.5
            add("user", ns / 1e9 * user_share)
            add("kernel", ns / 1e9 * (1 - user_share))
        else:
            add(role, ns / 1e9)
        live_ticks += ns / 1e9 * CLK_TCK
    total_ticks = b.process_ticks.get(pid, 0) - a.process_ticks.get(pid, 0)
    # Threads that ended in the window: only the group's total has them.
    exited = (total_ticks - live_ticks) / CLK_TCK
    if exited > 1.0 / CLK_TCK:
        add("exited threads", exited)
    return roles


def machine_busy(a, b):
    """CPU seconds the machine was not idle between two snapshots.

    The busy fields of /proc/stat are sampled at each tick; idle time is
    measured (NO_HZ keeps the time each CPU enters and leaves idle), so
    busy = elapsed time of every CPU less idle."""
    elapsed = (b.machine["at"] - a.machine["at"]) * b.machine["cpus"]
    return elapsed - (b.machine["idle"] - a.machine["idle"]) / CLK_TCK


def threads_time(a, b, chosen):
    """CPU seconds of the live threads for which chosen(task) is true."""
    total = 0.0
    for tid, t in b.tasks.items():
        if chosen(t):
            before = a.tasks.get(tid)
            total += (t.run_ns - (before.run_ns if before else 0)) / 1e9
    return total


def kernel_threads(a, b):
    return threads_time(a, b, lambda t: t.kthread)


def account(a, b, kind, device_pids, loadgen_pids, observer_pids=(), daemon_pids=()):
    """The window between snapshots @a and @b.

    @kind is "qemu" (@device_pids: QEMU's pid) or "fio" (@device_pids:
    fio's processes, its userspace counted as the load generator's).
    @loadgen_pids: vblk-bench for QEMU; none for fio.  @observer_pids:
    whoever takes the snapshots, set apart from other work.
    @daemon_pids: storage daemons serving QEMU's device (vhost-user-blk),
    every thread of theirs the device's.  Returns a dict of CPU seconds
    with the breakdown, and the window's length."""
    window = ((b.started + b.ended) - (a.started + a.ended)) / 2
    r = {"window_s": window, "roles": {}}
    device = harness = loadgen = 0.0
    for pid in device_pids:
        roles = process_time(a, b, pid, split_user=(kind == "fio"))
        for role, s in roles.items():
            r["roles"][role] = r["roles"].get(role, 0.0) + s
            if role == "main loop":
                harness += s
            elif role == "user":
                loadgen += s
            else:
                device += s
    for pid in daemon_pids:
        roles = process_time(a, b, pid, role_of=thread_role_daemon)
        for role, s in roles.items():
            r["roles"][role] = r["roles"].get(role, 0.0) + s
            device += s
    for pid in loadgen_pids:
        loadgen += sum(process_time(a, b, pid).values())
    harness += loadgen
    observer = sum(sum(process_time(a, b, pid).values()) for pid in observer_pids)
    kernel = kernel_threads(a, b)
    ours = set(device_pids) | set(loadgen_pids) | set(observer_pids) | set(daemon_pids)
    other = threads_time(a, b, lambda t: not t.kthread and t.tgid not in ours)
    machine = machine_busy(a, b)
    r.update(device_s=device, harness_s=harness, loadgen_s=loadgen, kernel_s=kernel,
             host_s=device + kernel, machine_s=machine, observer_s=observer, other_s=other,
             forks=b.machine["forks"] - a.machine["forks"],
             unattributed_s=machine - device - harness - kernel - observer - other)
    return r
