#!/usr/bin/env python3
"""What it costs to put a new process into a cgroup, the way a sealed spawn does.

Each sealed spawn of the subprocess sandbox must land in the sandbox's cgroup. Moving a
process (`cgroup.procs`) takes the kernel's global threadgroup lock for writing and waits
out an RCU grace period; v1's `tasks` moves one thread without it; `clone3` with
`CLONE_INTO_CGROUP` creates the process inside a v2 cgroup and moves nothing. This
times each against a plain fork, pair by pair in one run, each after a pause as a run's
spawn comes after other work, and prints medians (what the host uses: `tasks` on v1,
`CLONE_INTO_CGROUP` on v2; see host/src/capabilities/process/cgroup/clone_into.rs).

    sudo bench/cgroup_join.py [ROUNDS]   (default 40; needs root, a cgroup2 mount and,
                                          for the v1 rows, a v1 pids hierarchy)
"""
import ctypes
import os
import statistics
import struct
import sys
import time

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
SYS_CLONE3 = 435  # x86_64 and aarch64
CLONE_INTO_CGROUP = 0x200000000
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def mount_point(fstype, option=None):
    for line in open("/proc/self/mountinfo"):
        left, right = line.split(" - ", 1)
        fields = right.split()
        if fields[0] == fstype and (option is None or option in fields[2].split(",")):
            return left.split()[4]
    return None


def clone3(flags=0, cgroup_fd=0, child_work=None):
    """clone3 a child that does `child_work` and exits; reap it: milliseconds."""
    # struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, stack,
    # stack_size, tls, set_tid, set_tid_size, cgroup.
    args = struct.pack("11Q", flags, 0, 0, 0, 17, 0, 0, 0, 0, 0, cgroup_fd)
    buf = ctypes.create_string_buffer(args, len(args))
    start = time.perf_counter()
    pid = libc.syscall(SYS_CLONE3, buf, len(args))
    if pid == 0:
        if child_work:
            child_work()
        os._exit(0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone3")
    os.waitpid(pid, 0)
    return (time.perf_counter() - start) * 1000


def write_zero(path):
    def work():
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, b"0")
        os.close(fd)
    return work


def main():
    v2_root = mount_point("cgroup2")
    v1_pids = mount_point("cgroup", "pids")
    if v2_root is None:
        sys.exit("no cgroup2 mount")
    name = f"agentgate-bench-{os.getpid()}"
    made = []
    try:
        v2_dir = os.path.join(v2_root, name)
        os.mkdir(v2_dir)
        made.append(v2_dir)
        v2_fd = os.open(v2_dir, os.O_RDONLY | os.O_DIRECTORY)
        rows = {
            "fork (baseline)": lambda: clone3(),
            "fork, then v2 cgroup.procs": lambda: clone3(child_work=write_zero(f"{v2_dir}/cgroup.procs")),
            "clone3 CLONE_INTO_CGROUP (v2)": lambda: clone3(CLONE_INTO_CGROUP, v2_fd),
        }
        if v1_pids:
            v1_dir = os.path.join(v1_pids, name)
            os.mkdir(v1_dir)
            made.append(v1_dir)
            rows["fork, then v1 tasks (a thread)"] = lambda: clone3(child_work=write_zero(f"{v1_dir}/tasks"))
            rows["fork, then v1 cgroup.procs"] = lambda: clone3(child_work=write_zero(f"{v1_dir}/cgroup.procs"))
        times = {label: [] for label in rows}
        for _ in range(ROUNDS):
            for label, run in rows.items():
                # A run spawns after the host was busy elsewhere: the kernel's lock has
                # gone idle, as it does after a grace period or two.
                time.sleep(0.05)
                times[label].append(run())
        base = statistics.median(times["fork (baseline)"])
        print(f"rounds: {ROUNDS}")
        for label, samples in times.items():
            median = statistics.median(samples)
            print(f"{label:32s} median {median:7.3f} ms  (+{median - base:6.3f})  max {max(samples):7.3f} ms")
    finally:
        for path in reversed(made):
            os.rmdir(path)


main()
